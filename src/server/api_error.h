// The errors the HTTP API answers with, shaped as OpenAI's error object:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p" | null,
//              "code": "..." | null}}
// Request parsing throws ApiError; the HTTP layer turns it into the status and body.
// Thread-safety: plain values.
#pragma once

#include <nlohmann/json.hpp>

#include <exception>
#include <string>
#include <string_view>

namespace strata::server {

using Json = nlohmann::ordered_json;

class ApiError : public std::exception {
 public:
  // `param`: the request field at fault ("" = none); `code`: a machine-readable reason ("" = none).
  // `type` is derived from the status unless given.
  ApiError(int status, std::string message, std::string param = "", std::string code = "", std::string type = "");

  int status() const { return status_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }
  const char* what() const noexcept override { return message_.c_str(); }

  Json body() const;

 private:
  int status_;
  std::string message_;
  std::string param_;
  std::string code_;
  std::string type_;
};

// OpenAI's error type for an HTTP status: "invalid_request_error" for most 4xx,
// "rate_limit_error" for 429, "server_error" for 5xx.
std::string_view error_type_for_status(int status);

// A 400 naming `param`.
ApiError bad_request(std::string message, std::string param = "");

// The field a SamplingParams::validate() message is about: its leading identifier
// ("top_p must be in (0, 1], got 1.5" -> "top_p", "stop[2] is empty" -> "stop").
std::string param_of_message(std::string_view message);

// Serializes for the wire. Strings that are not valid UTF-8 (a token piece holding part of a
// character) are written with U+FFFD in place of the bad bytes rather than failing.
std::string dump_json(const Json& j);

}  // namespace strata::server
