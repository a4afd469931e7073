#include "server/auth.h"

#include <cstdint>

#include <fmt/format.h>

#include "sched/scheduler_config.h"

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

namespace {

// The token of "Bearer <token>" (scheme case-insensitive, spaces trimmed), or nullopt.
std::optional<std::string_view> bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return std::nullopt;
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

bool valid_tenant(std::string_view t) {
  if (t.empty() || t.size() > 64) return false;
  for (char c : t) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool bearer_matches(std::string_view authorization, std::string_view key) {
  const auto token = bearer_token(authorization);
  return token && constant_time_equal(*token, key);
}

const ApiKey* match_bearer(std::string_view authorization, std::span<const ApiKey> keys) {
  const auto token = bearer_token(authorization);
  if (!token) return nullptr;
  const ApiKey* found = nullptr;
  for (const ApiKey& k : keys) {
    // No early exit: which key matched (or whether one did) does not show in the time taken.
    if (constant_time_equal(*token, k.key) && found == nullptr) found = &k;
  }
  return found;
}

std::optional<ApiKey> parse_api_key(std::string_view spec, std::string* error) {
  ApiKey k;
  const size_t c1 = spec.find(':');
  k.key = std::string(spec.substr(0, c1));
  if (k.key.empty()) {
    *error = "the key is empty (expected KEY[:QOS[:TENANT]])";
    return std::nullopt;
  }
  for (char c : k.key) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      *error = "the key holds whitespace";
      return std::nullopt;
    }
  }
  if (c1 == std::string_view::npos) return k;
  std::string_view rest = spec.substr(c1 + 1);
  const size_t c2 = rest.find(':');
  const std::string_view qos = rest.substr(0, c2);
  if (!qos.empty()) {
    k.qos = qos_class_from_name(qos);
    if (!k.qos) {
      *error = fmt::format("the QoS class '{}' is not one of interactive, batch", qos);
      return std::nullopt;
    }
  }
  if (c2 == std::string_view::npos) return k;
  const std::string_view tenant = rest.substr(c2 + 1);
  if (!valid_tenant(tenant)) {
    *error = fmt::format("the tenant '{}' is not 1-64 letters, digits, '_', '-' or '.'", tenant);
    return std::nullopt;
  }
  k.tenant = std::string(tenant);
  return k;
}

std::optional<std::vector<ApiKey>> parse_api_keys_file(std::string_view text, std::string* error) {
  std::vector<ApiKey> keys;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    std::string why;
    auto k = parse_api_key(line, &why);
    if (!k) {
      *error = fmt::format("line {}: {}", line_no, why);
      return std::nullopt;
    }
    keys.push_back(std::move(*k));
  }
  return keys;
}

bool has_duplicate_keys(std::span<const ApiKey> keys) {
  bool dup = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = i + 1; j < keys.size(); ++j) dup |= constant_time_equal(keys[i].key, keys[j].key);
  }
  return dup;
}

}  // namespace strata::server
