#include "redis/redis_client.h"

#include <fmt/format.h>

#include "redis/redis_cluster.h"
#include "redis/redis_connection.h"

namespace strata::redis {
namespace {

// The one-node client: one connection, every batch one pipeline.
class SingleNodeClient final : public RedisClient {
 public:
  SingleNodeClient(const RedisUrl& url, std::chrono::milliseconds connect_timeout)
      : describe_(url.redacted()),
        conn_(RedisConnection::Options{url.nodes.at(0), url.user, url.password, url.db, connect_timeout}) {}

  std::vector<std::optional<std::string>> get_many(std::span<const std::string> keys,
                                                   Clock::time_point deadline) override {
    std::vector<std::optional<std::string>> out(keys.size());
    if (keys.empty()) return out;
    std::vector<Argv> cmds;
    cmds.reserve(keys.size());
    for (const std::string& k : keys) cmds.push_back({"GET", k});
    std::vector<RedisReply> replies = conn_.execute(cmds, deadline);
    for (size_t i = 0; i < replies.size(); ++i) {
      RedisReply& r = replies[i];
      if (r.type == RedisReply::Type::kString) {
        out[i] = std::move(r.str);
      } else if (!r.is_nil()) {
        throw_unexpected("GET", r);
      }
    }
    return out;
  }

  std::vector<bool> set_nx_many(std::span<const std::pair<std::string, std::string>> items,
                                std::chrono::milliseconds ttl, Clock::time_point deadline) override {
    std::vector<bool> out(items.size(), false);
    if (items.empty()) return out;
    const std::string ttl_ms = std::to_string(ttl.count());
    std::vector<Argv> cmds;
    cmds.reserve(items.size());
    for (const auto& [k, v] : items) {
      if (ttl.count() > 0) {
        cmds.push_back({"SET", k, v, "NX", "PX", ttl_ms});
      } else {
        cmds.push_back({"SET", k, v, "NX"});
      }
    }
    const std::vector<RedisReply> replies = conn_.execute(cmds, deadline);
    for (size_t i = 0; i < replies.size(); ++i) {
      const RedisReply& r = replies[i];
      if (r.type == RedisReply::Type::kStatus) {
        out[i] = true;
      } else if (!r.is_nil()) {
        throw_unexpected("SET", r);
      }
    }
    return out;
  }

  void ping(Clock::time_point deadline) override {
    const std::vector<Argv> cmds{{"PING"}};
    const std::vector<RedisReply> r = conn_.execute(cmds, deadline);
    if (r[0].is_error()) throw_unexpected("PING", r[0]);
  }

  std::string command(std::span<const std::string> argv, Clock::time_point deadline) override {
    if (argv.empty()) fail("redis: empty command");
    const std::vector<Argv> cmds{Argv(argv.begin(), argv.end())};
    const std::vector<RedisReply> r = conn_.execute(cmds, deadline);
    if (r[0].is_error()) throw_unexpected(argv[0], r[0]);
    return r[0].render();
  }

  size_t failed_keys() const override { return 0; }
  std::string describe() const override { return describe_; }

 private:
  [[noreturn]] void throw_unexpected(std::string_view what, const RedisReply& r) const {
    if (r.is_error()) {
      throw RedisError(RedisError::Kind::kReply,
                       fmt::format("redis {}: {}: {}", conn_.endpoint().to_string(), what, r.str));
    }
    throw RedisError(RedisError::Kind::kProtocol,
                     fmt::format("redis {}: {}: unexpected reply '{}'", conn_.endpoint().to_string(), what,
                                 r.render().substr(0, 64)));
  }

  std::string describe_;
  RedisConnection conn_;
};

}  // namespace

std::unique_ptr<RedisClient> RedisClient::make(const RedisUrl& url, std::chrono::milliseconds connect_timeout) {
  if (url.nodes.empty()) fail("redis: the URL names no node");
  if (url.cluster) return std::make_unique<RedisCluster>(url, connect_timeout);
  return std::make_unique<SingleNodeClient>(url, connect_timeout);
}

}  // namespace strata::redis
