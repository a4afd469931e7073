#include "server/api_error.h"

#include <utility>

namespace strata::server {

ApiError::ApiError(int status, std::string message, std::string param, std::string code, std::string type)
    : status_(status),
      message_(std::move(message)),
      param_(std::move(param)),
      code_(std::move(code)),
      type_(type.empty() ? std::string(error_type_for_status(status)) : std::move(type)) {}

Json ApiError::body() const {
  Json e = Json::object();
  e["message"] = message_;
  e["type"] = type_;
  e["param"] = param_.empty() ? Json(nullptr) : Json(param_);
  e["code"] = code_.empty() ? Json(nullptr) : Json(code_);
  return Json{{"error", std::move(e)}};
}

std::string_view error_type_for_status(int status) {
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

ApiError bad_request(std::string message, std::string param) {
  return ApiError(400, std::move(message), std::move(param));
}

std::string param_of_message(std::string_view message) {
  size_t n = 0;
  while (n < message.size() && ((message[n] >= 'a' && message[n] <= 'z') || message[n] == '_')) ++n;
  return std::string(message.substr(0, n));
}

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace strata::server
