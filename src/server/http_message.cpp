#include "server/http_message.h"

#include <cctype>

namespace strata::server {

bool header_name_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (header_name_equal(k, name)) return std::string_view(v);
  }
  return std::nullopt;
}

std::string HttpRequest::header_or(std::string_view name, std::string_view fallback) const {
  return std::string(header(name).value_or(fallback));
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& [k, v] : headers) {
    if (header_name_equal(k, name)) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

}  // namespace strata::server
