// The Redis Cluster client: routes every key to the master of its slot (crc16.h), from a slot map
// fetched with CLUSTER SLOTS from any reachable seed or known node at first use, after a MOVED
// and after a node failed. One connection per node; a batch is grouped by node and pipelined per
// node: commands go out to every node first, then the replies are read, so the nodes work in
// parallel; results come back in the caller's order.
//
// Redirects: MOVED slot host:port refreshes the whole map (and takes the MOVED target for that
// slot even if the refreshed map lags) and retries the key there; ASK slot host:port sends ASKING
// and the command to that node once, leaving the map as it is. A key follows at most
// kMaxRedirects redirects, then fails.
// Node failures: when a node cannot be reached or does not answer before the deadline, the map is
// refreshed (asking other nodes first) and that node's keys are retried once; when they fail
// again they fail alone (see redis_client.h: nullopt/false and failed_keys()); the call throws
// only when every key failed.
// Thread-safety: none; one thread at a time (see RedisClient).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_client.h"
#include "redis/redis_connection.h"
#include "redis/redis_reply.h"
#include "redis/redis_url.h"

namespace strata::redis {

// A MOVED or ASK error reply, parsed.
struct ClusterRedirect {
  bool ask = false;  // ASK (one-shot) rather than MOVED (the slot's new owner)
  uint16_t slot = 0;
  RedisEndpoint endpoint;
};

// Parses "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381"; an empty host (Redis's "unknown
// endpoint") becomes default_host, the host of the node that answered. std::nullopt for any other
// error.
std::optional<ClusterRedirect> parse_redirect(std::string_view error, std::string_view default_host);

class RedisCluster final : public RedisClient {
 public:
  static constexpr int kMaxRedirects = 5;

  // url.cluster must be set; url.nodes are the seeds.
  RedisCluster(const RedisUrl& url, std::chrono::milliseconds connect_timeout);
  ~RedisCluster() override;

  std::vector<std::optional<std::string>> get_many(std::span<const std::string> keys,
                                                   Clock::time_point deadline) override;
  std::vector<bool> set_nx_many(std::span<const std::pair<std::string, std::string>> items,
                                std::chrono::milliseconds ttl, Clock::time_point deadline) override;
  // PING every node that serves slots (fetching the slot map first if there is none); throws the
  // first failure.
  void ping(Clock::time_point deadline) override;
  std::string command(std::span<const std::string> argv, Clock::time_point deadline) override;
  size_t failed_keys() const override { return failed_keys_; }
  std::string describe() const override { return describe_; }

  // For tests and stats: the node believed to own a slot ("host:port", empty when unknown),
  // redirects followed and slot maps fetched since construction.
  std::string slot_owner(uint16_t slot) const;
  size_t redirects() const { return redirects_; }
  size_t map_refreshes() const { return map_refreshes_; }

 private:
  struct Node {
    RedisEndpoint endpoint;
    std::unique_ptr<RedisConnection> conn;
  };

  // Runs one command per entry, routed by the slot in `slots` (-1: the first seed), following
  // redirects and retrying after node failures as described above. std::nullopt where the item
  // failed; throws when every item failed. Error replies other than redirects are returned.
  std::vector<std::optional<RedisReply>> run(std::span<const Argv> cmds, std::span<const int> slots,
                                             Clock::time_point deadline);
  // Fetches CLUSTER SLOTS from the first known node that answers, those not in `avoid` first.
  void refresh_slots(Clock::time_point deadline, const std::vector<bool>& avoid);
  void apply_slot_map(const RedisReply& reply, const std::string& answering_host);
  int node_index(const RedisEndpoint& endpoint);  // adds the node when new

  std::string describe_;
  std::string user_;
  std::string password_;
  std::chrono::milliseconds connect_timeout_;
  std::vector<Node> nodes_;    // seeds first, then nodes learned from slot maps and redirects
  std::vector<int> slots_;     // per slot: index in nodes_, -1 when unknown
  bool have_map_ = false;
  size_t failed_keys_ = 0;
  size_t redirects_ = 0;
  size_t map_refreshes_ = 0;
};

}  // namespace strata::redis
