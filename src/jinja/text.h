// Python-compatible text helpers for the Jinja interpreter: strings are UTF-8 bytes, but Python
// counts, indexes, strips and splits them by code point and has its own idea of whitespace, of
// repr() and of float formatting. Matching those byte for byte is what makes rendered chat
// templates identical to Hugging Face's (Python Jinja2) output.
// Invalid UTF-8 never crashes anything: a stray byte counts as one code point of its own.
// Thread-safety: all functions are pure and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::jinja::text {

// Decodes the code point starting at s[pos]; sets `len` to its byte length (>= 1). Invalid
// sequences decode as the single byte's value with len 1.
char32_t decode_at(std::string_view s, size_t pos, size_t* len);
void append_utf8(std::string& out, char32_t cp);

// Number of code points.
size_t length(std::string_view s);
bool is_ascii(std::string_view s);
// Byte offset of code point `index` (0 <= index <= length(s)).
size_t byte_offset(std::string_view s, size_t index);
// The code points of s, each as its own string.
std::vector<std::string> chars(std::string_view s);

// Python's str.isspace() for one code point.
bool is_space(char32_t cp);

enum class StripSide { kLeft, kRight, kBoth };
// str.strip()/lstrip()/rstrip(): whitespace when `chars` is nullopt, else any code point of `chars`.
std::string_view strip(std::string_view s, StripSide side, std::optional<std::string_view> chars = std::nullopt);

// str.split(sep, maxsplit) / str.rsplit; sep nullopt splits on runs of whitespace. An empty
// separator is the caller's error to report (Python raises ValueError).
std::vector<std::string> split(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit = -1);
std::vector<std::string> rsplit(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit = -1);
// str.splitlines(keepends): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029.
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);
// str.replace(old, new, count); count < 0 replaces all.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count = -1);

// Case mapping per code point (simple Unicode case mapping; ASCII fast path).
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string swapcase(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize(): first upper, rest lower
std::string py_title(std::string_view s);    // str.title()
bool is_upper(std::string_view s);           // str.isupper()
bool is_lower(std::string_view s);           // str.islower()
bool is_alpha_cp(char32_t cp);
bool is_digit_cp(char32_t cp);

// Python repr() of a str: quotes chosen like Python, escapes for control characters.
std::string repr(std::string_view s);
// repr() of a float ("1.0", "1e+16", "0.3333333333333333", "inf", "nan").
std::string float_repr(double v);
// HTML escaping the way markupsafe.escape does (& < > ' ").
std::string html_escape(std::string_view s);
// A JSON string literal the way Python's json.dumps writes it (ensure_ascii=False keeps
// non-ASCII as is; true writes \uXXXX, with surrogate pairs above the BMP).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace strata::jinja::text
