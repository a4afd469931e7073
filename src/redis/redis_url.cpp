#include "redis/redis_url.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"

namespace strata::redis {
namespace {

constexpr std::string_view kSingleScheme = "redis://";
constexpr std::string_view kClusterScheme = "redis-cluster://";

// The input with everything before the last '@' (after the scheme) replaced by ***, for messages
// about a URL that did not parse.
std::string redact_raw(std::string_view url) {
  const size_t at = url.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const size_t scheme_end = url.find("://");
  const size_t start = scheme_end != std::string_view::npos && scheme_end < at ? scheme_end + 3 : 0;
  return fmt::format("{}***{}", url.substr(0, start), url.substr(at));
}

[[noreturn]] void bad(std::string_view url, std::string_view problem) {
  fail("invalid Redis URL '{}': {}", redact_raw(url), problem);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view url, std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_digit(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex_digit(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) bad(url, "bad percent-encoding in the credentials");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// Parses digits only (no sign, no spaces) into [lo, hi]; false otherwise.
bool parse_int(std::string_view s, int lo, int hi, int& out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  int v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  if (v < lo || v > hi) return false;
  out = v;
  return true;
}

RedisEndpoint parse_endpoint(std::string_view url, std::string_view s) {
  RedisEndpoint ep;
  std::string_view port_part;
  bool has_port = false;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) bad(url, "unterminated '[' in an IPv6 host");
    ep.host = std::string(s.substr(1, close - 1));
    const std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') bad(url, fmt::format("unexpected '{}' after the IPv6 host", rest));
      port_part = rest.substr(1);
      has_port = true;
    }
    if (ep.host.find(':') == std::string::npos) bad(url, "brackets are only for IPv6 addresses");
  } else {
    const size_t colon = s.find(':');
    if (colon != std::string_view::npos) {
      if (s.find(':', colon + 1) != std::string_view::npos) {
        bad(url, "an IPv6 host must be written in brackets, e.g. [::1]:6379");
      }
      port_part = s.substr(colon + 1);
      has_port = true;
      s = s.substr(0, colon);
    }
    ep.host = std::string(s);
  }
  if (ep.host.empty()) bad(url, "missing host");
  for (char c : ep.host) {
    if (c <= ' ' || c == '/' || c == '?' || c == '#' || c == '@' || c == '[' || c == ']' ||
        c == ',' || c == 0x7f) {
      bad(url, fmt::format("bad character in host '{}'", ep.host));
    }
  }
  if (has_port && !parse_int(port_part, 1, 65535, ep.port)) {
    bad(url, fmt::format("bad port '{}' (expected 1..65535)", port_part));
  }
  return ep;
}

}  // namespace

std::string RedisEndpoint::to_string() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

RedisUrl RedisUrl::parse(std::string_view url) {
  RedisUrl r;
  std::string_view rest;
  if (url.starts_with(kSingleScheme)) {
    rest = url.substr(kSingleScheme.size());
  } else if (url.starts_with(kClusterScheme)) {
    r.cluster = true;
    rest = url.substr(kClusterScheme.size());
  } else {
    bad(url, "expected redis://host[:port][/db] or redis-cluster://host:port,host:port,...");
  }
  // Credentials end at the last '@' (a password may itself hold '@' or '/').
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view creds = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = creds.find(':');
    if (colon == std::string_view::npos) {
      bad(url, "credentials must be written user:password@ or :password@");
    }
    r.user = percent_decode(url, creds.substr(0, colon));
    r.password = percent_decode(url, creds.substr(colon + 1));
    if (r.password.empty()) bad(url, "empty password");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    bad(url, "query parameters and fragments are not supported");
  }
  std::string_view hosts = rest;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    hosts = rest.substr(0, slash);
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !parse_int(db, 0, 1 << 30, r.db)) {
      bad(url, fmt::format("bad database number '{}'", db));
    }
    if (r.cluster && r.db != 0) bad(url, "a Redis Cluster has only database 0");
  }
  if (hosts.empty()) bad(url, "missing host");
  size_t pos = 0;
  while (true) {
    const size_t comma = hosts.find(',', pos);
    const std::string_view one =
        hosts.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    r.nodes.push_back(parse_endpoint(url, one));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (!r.cluster && r.nodes.size() != 1) {
    bad(url, "redis:// takes one host; use redis-cluster:// for several");
  }
  return r;
}

std::string RedisUrl::redacted() const {
  std::string out = cluster ? std::string(kClusterScheme) : std::string(kSingleScheme);
  if (!user.empty() || !password.empty()) out += "***@";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) out += ',';
    out += nodes[i].to_string();
  }
  if (!cluster) out += fmt::format("/{}", db);
  return out;
}

}  // namespace strata::redis
