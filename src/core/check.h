// Invariant checks that abort with file and line. Use for broken invariants (programming errors),
// never for bad user input: that is reported through strata::Error at the boundary.
// Thread-safety: callable from any thread.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace strata {

[[noreturn]] void check_failed(const char* file, int line, const char* cond, std::string_view msg = {});

}  // namespace strata

// STRATA_CHECK(cond) or STRATA_CHECK(cond, "fmt {}", args...): aborts when cond is false.
#define STRATA_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::strata::check_failed(__FILE__, __LINE__, #cond __VA_OPT__(, ::fmt::format(__VA_ARGS__))); \
  } while (0)

#ifdef NDEBUG
#define STRATA_DCHECK(cond, ...) \
  do {                           \
  } while (0)
#else
#define STRATA_DCHECK(cond, ...) STRATA_CHECK(cond __VA_OPT__(, __VA_ARGS__))
#endif
