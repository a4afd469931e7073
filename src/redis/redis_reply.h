// One Redis reply, owned (copied out of hiredis's reply object), so it outlives the connection
// that read it.
// Thread-safety: a plain value.
#pragma once

#include <string>
#include <vector>

namespace strata::redis {

struct RedisReply {
  enum class Type { kString, kStatus, kInteger, kNil, kError, kArray };

  Type type = Type::kNil;
  std::string str;                   // kString (binary), kStatus, kError
  long long integer = 0;             // kInteger
  std::vector<RedisReply> elements;  // kArray

  bool is_error() const { return type == Type::kError; }
  bool is_nil() const { return type == Type::kNil; }

  // For people and tests: a string or status as is, an integer in decimal, nil as "(nil)", an
  // error as "(error) MESSAGE", an array as its elements rendered one per line.
  std::string render() const;
};

}  // namespace strata::redis
