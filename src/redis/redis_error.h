// The error the Redis client throws: a strata::Error with a kind, so callers can tell a node they
// could not reach from a deadline that passed or an error reply. Messages name the node
// (host:port) and never hold a password.
// Thread-safety: a plain value.
#pragma once

#include <string>

#include "core/error.h"

namespace strata::redis {

class RedisError : public strata::Error {
 public:
  enum class Kind {
    kConnect,   // could not connect, or the connection broke (reset, closed by the server)
    kTimeout,   // the deadline passed before the reply came
    kProtocol,  // a reply that could not be parsed or had an unexpected shape
    kReply,     // the server answered with an error reply (WRONGTYPE, NOAUTH, WRONGPASS, ...)
  };

  RedisError(Kind kind, const std::string& what) : strata::Error(what), kind_(kind) {}

  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

inline const char* to_string(RedisError::Kind kind) {
  switch (kind) {
    case RedisError::Kind::kConnect: return "connect";
    case RedisError::Kind::kTimeout: return "timeout";
    case RedisError::Kind::kProtocol: return "protocol";
    case RedisError::Kind::kReply: return "reply";
  }
  return "?";
}

}  // namespace strata::redis
