// One blocking connection to one Redis node, on hiredis: connects lazily (with AUTH and SELECT),
// pipelines commands (send() writes a batch, receive() reads its replies) and bounds every write
// and read by a deadline through the socket timeout. After any I/O failure (timeout included) or
// a reply that cannot be parsed, the connection is closed, so a late reply can never be matched to
// a later command; the next send() connects again. An error *reply* leaves the connection open
// (the stream is still in step).
// Thread-safety: none; one thread at a time. SIGPIPE is blocked in the calling thread while it
// writes, so a peer that went away is an error, not the death of the process.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_error.h"
#include "redis/redis_reply.h"
#include "redis/redis_url.h"

struct redisContext;

namespace strata::redis {

using Clock = std::chrono::steady_clock;
// A command and its arguments; the views must stay valid until send() returns.
using Argv = std::vector<std::string_view>;

class RedisConnection {
 public:
  struct Options {
    RedisEndpoint endpoint;
    std::string user;      // AUTH user pass when set
    std::string password;  // AUTH when set
    int db = 0;            // SELECT when not 0
    std::chrono::milliseconds connect_timeout{1000};
  };

  explicit RedisConnection(Options options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects when not connected, then appends every command and writes them all. Throws
  // RedisError (kTimeout at once when the deadline has already passed).
  void send(std::span<const Argv> commands, Clock::time_point deadline);

  // Reads the next n replies of what send() wrote, in order. Error replies are returned, not
  // thrown. Once the deadline has passed it still takes replies whose bytes have already arrived
  // (a reader of several nodes reads them one after the other), but waits no longer.
  std::vector<RedisReply> receive(size_t n, Clock::time_point deadline);

  // send() then receive().
  std::vector<RedisReply> execute(std::span<const Argv> commands, Clock::time_point deadline);

  void close();
  bool connected() const { return ctx_ != nullptr; }
  const RedisEndpoint& endpoint() const { return options_.endpoint; }

 private:
  void connect(Clock::time_point deadline);
  void flush(Clock::time_point deadline);
  RedisReply read_one(Clock::time_point deadline);
  void set_timeout(Clock::time_point deadline);
  // Closes the connection and throws the error of the last hiredis call (what: "read", "write").
  [[noreturn]] void fail_io(const char* what, int saved_errno, Clock::time_point deadline);
  [[noreturn]] void fail(RedisError::Kind kind, const std::string& message);

  Options options_;
  redisContext* ctx_ = nullptr;
  size_t pending_ = 0;  // replies sent for but not read yet
};

}  // namespace strata::redis
