// The errors a Jinja template can end in. All derive from strata::Error so a boundary that only
// wants "a clear message" can catch that; callers that must tell them apart (the server answers a
// template's own raise_exception with HTTP 400 and that message) catch the specific types.
// Thread-safety: plain exception types.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace strata::jinja {

// Base of every template failure. line()/column() are 1-based positions in the template
// source (0 when unknown); message() is the bare problem without the position.
class TemplateError : public Error {
 public:
  TemplateError(const std::string& what, std::string message, uint32_t line, uint32_t column)
      : Error(what), message_(std::move(message)), line_(line), column_(column) {}
  const std::string& message() const { return message_; }
  uint32_t line() const { return line_; }
  uint32_t column() const { return column_; }

 private:
  std::string message_;
  uint32_t line_;
  uint32_t column_;
};

// The template text is not valid Jinja (or uses a tag this interpreter does not support).
// what(): "template syntax error at line L, column C: <message>".
class TemplateSyntaxError : public TemplateError {
 public:
  TemplateSyntaxError(std::string message, uint32_t line, uint32_t column)
      : TemplateError(format(message, line, column), message, line, column) {}

 private:
  static std::string format(const std::string& message, uint32_t line, uint32_t column) {
    return "template syntax error at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " +
           message;
  }
};

// Rendering failed: an undefined value used strictly, a type error, a resource limit.
// what(): "template error at line L, column C: <message>".
class TemplateRuntimeError : public TemplateError {
 public:
  TemplateRuntimeError(std::string message, uint32_t line, uint32_t column)
      : TemplateError(format(message, line, column), message, line, column) {}

 private:
  static std::string format(const std::string& message, uint32_t line, uint32_t column) {
    return "template error at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message;
  }
};

// The template called raise_exception(msg); what() and message() are exactly msg.
class RaiseException : public TemplateError {
 public:
  RaiseException(std::string message, uint32_t line, uint32_t column)
      : TemplateError(message, message, line, column) {}
};

}  // namespace strata::jinja
