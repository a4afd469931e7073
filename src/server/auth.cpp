#include "server/auth.h"

#include <cstdint>

namespace strata::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of b is visited whatever a holds; a's bytes past b's length only show in the size.
  uint8_t diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    const uint8_t x = i < a.size() ? static_cast<uint8_t>(a[i]) : 0;
    diff |= static_cast<uint8_t>(x ^ static_cast<uint8_t>(b[i]));
  }
  return diff == 0;
}

bool bearer_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return false;
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return constant_time_equal(token, key);
}

}  // namespace strata::server
