#include "redis/redis_connection.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace strata::redis {
namespace {

// Blocks SIGPIPE in this thread for its lifetime and swallows a SIGPIPE raised meanwhile (hiredis
// writes with write(2), which raises it when the peer has gone).
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlock() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&set_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t set_;
  sigset_t old_;
  bool was_pending_ = false;
};

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
      break;
  }
  return out;
}

timeval to_timeval(std::chrono::microseconds us) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us.count() / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(us.count() % 1000000);
  return tv;
}

void append(redisContext* ctx, const Argv& argv) {
  std::vector<const char*> ptrs(argv.size());
  std::vector<size_t> lens(argv.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    ptrs[i] = argv[i].data();
    lens[i] = argv[i].size();
  }
  if (redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
      REDIS_OK) {
    throw RedisError(RedisError::Kind::kProtocol, "could not format a command (out of memory)");
  }
}

}  // namespace

RedisConnection::RedisConnection(Options options) : options_(std::move(options)) {}

RedisConnection::~RedisConnection() { close(); }

void RedisConnection::close() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
  pending_ = 0;
}

void RedisConnection::fail(RedisError::Kind kind, const std::string& message) {
  close();
  throw RedisError(kind, fmt::format("redis {}: {}", options_.endpoint.to_string(), message));
}

void RedisConnection::fail_io(const char* what, int saved_errno, Clock::time_point deadline) {
  const bool timed_out = (ctx_->err == REDIS_ERR_IO &&
                          (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) ||
                         Clock::now() >= deadline;
  if (timed_out) fail(RedisError::Kind::kTimeout, fmt::format("{}: deadline passed", what));
  const RedisError::Kind kind =
      ctx_->err == REDIS_ERR_PROTOCOL || ctx_->err == REDIS_ERR_OOM || ctx_->err == REDIS_ERR_OTHER
          ? RedisError::Kind::kProtocol
          : RedisError::Kind::kConnect;
  fail(kind, fmt::format("{}: {}", what, ctx_->errstr));
}

void RedisConnection::set_timeout(Clock::time_point deadline) {
  // Never 0 (that would mean no timeout); past the deadline, 1 ms takes only what has arrived.
  const auto left = std::max(std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()),
                             std::chrono::microseconds(1000));
  if (redisSetTimeout(ctx_, to_timeval(left)) != REDIS_OK) {
    fail(RedisError::Kind::kConnect, fmt::format("setting the socket timeout: {}", ctx_->errstr));
  }
}

void RedisConnection::connect(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
  if (left.count() <= 0) fail(RedisError::Kind::kTimeout, "connect: deadline passed");
  const auto budget = std::min<std::chrono::microseconds>(left, options_.connect_timeout);
  ctx_ = redisConnectWithTimeout(options_.endpoint.host.c_str(), options_.endpoint.port,
                                 to_timeval(std::max(budget, std::chrono::microseconds(1000))));
  if (ctx_ == nullptr) fail(RedisError::Kind::kConnect, "connect: out of memory");
  if (ctx_->err != 0) {
    const std::string why = ctx_->errstr;
    fail(Clock::now() >= deadline ? RedisError::Kind::kTimeout : RedisError::Kind::kConnect,
         fmt::format("connect: {}", why));
  }
  std::vector<Argv> setup;
  const std::string db = std::to_string(options_.db);
  if (!options_.password.empty()) {
    if (options_.user.empty()) {
      setup.push_back({"AUTH", options_.password});
    } else {
      setup.push_back({"AUTH", options_.user, options_.password});
    }
  }
  if (options_.db != 0) setup.push_back({"SELECT", db});
  if (setup.empty()) return;
  for (const Argv& argv : setup) append(ctx_, argv);
  pending_ = setup.size();
  flush(deadline);
  for (const Argv& argv : setup) {
    const RedisReply r = read_one(deadline);
    if (r.is_error()) {
      // The reply names the problem (WRONGPASS, ERR DB index is out of range); no password in it.
      fail(RedisError::Kind::kReply, fmt::format("{} failed: {}", argv[0], r.str));
    }
  }
}

void RedisConnection::flush(Clock::time_point deadline) {
  SigpipeBlock no_sigpipe;
  int done = 0;
  while (done == 0) {
    set_timeout(deadline);
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) fail_io("write", errno, deadline);
  }
}

RedisReply RedisConnection::read_one(Clock::time_point deadline) {
  void* raw = nullptr;
  while (true) {
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) {
      fail(RedisError::Kind::kProtocol, fmt::format("bad reply: {}", ctx_->errstr));
    }
    if (raw != nullptr) break;
    set_timeout(deadline);
    if (redisBufferRead(ctx_) != REDIS_OK) fail_io("read", errno, deadline);
  }
  RedisReply reply = convert(static_cast<const redisReply*>(raw));
  freeReplyObject(raw);
  --pending_;
  return reply;
}

void RedisConnection::send(std::span<const Argv> commands, Clock::time_point deadline) {
  if (Clock::now() >= deadline) {
    throw RedisError(RedisError::Kind::kTimeout,
                     fmt::format("redis {}: deadline passed before sending", options_.endpoint.to_string()));
  }
  // Replies left unread (a caller that gave up between send and receive) would be taken for the
  // answers to these commands: start over on a fresh connection instead.
  if (pending_ != 0) close();
  if (ctx_ == nullptr) connect(deadline);
  try {
    for (const Argv& argv : commands) append(ctx_, argv);
  } catch (const RedisError& e) {
    fail(e.kind(), e.what());
  }
  pending_ += commands.size();
  flush(deadline);
}

std::vector<RedisReply> RedisConnection::receive(size_t n, Clock::time_point deadline) {
  if (n > pending_ || ctx_ == nullptr) {
    fail(RedisError::Kind::kProtocol, fmt::format("{} replies asked for, {} pending", n, pending_));
  }
  std::vector<RedisReply> replies;
  replies.reserve(n);
  for (size_t i = 0; i < n; ++i) replies.push_back(read_one(deadline));
  return replies;
}

std::vector<RedisReply> RedisConnection::execute(std::span<const Argv> commands,
                                                 Clock::time_point deadline) {
  send(commands, deadline);
  return receive(commands.size(), deadline);
}

}  // namespace strata::redis
