// Parsing and printing of byte sizes ("2GiB", "512M", "1000000"). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// Parses a size: a non-negative integer or decimal followed by an optional unit: B, K/KB, M/MB,
// G/GB, T/TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive.
// Returns nullopt on malformed input or overflow.
std::optional<uint64_t> parse_bytes(std::string_view text);

// "1.50 GiB", "512 B": for humans.
std::string format_bytes(uint64_t bytes);

}  // namespace strata
