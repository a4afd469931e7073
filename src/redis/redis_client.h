// A blocking, pipelining Redis client for one node (redis://) or a Redis Cluster
// (redis-cluster://, see redis_cluster.h): batched GET and SET NX PX with one round trip per node,
// every call bounded by a deadline. Connects lazily on the first command and, after any failure,
// drops the connection and connects again on the next call (a late reply is never matched to a
// later command). Values are binary-safe.
//
// Failures:
// - one node: a call either succeeds for every key or throws RedisError (connection lost or
//   refused, deadline passed, or an error reply to any command of the batch); failed_keys() is 0.
// - cluster: keys whose node cannot be reached (or stops answering before the deadline) fail
//   alone: get_many gives std::nullopt and set_nx_many false for them, and failed_keys() counts
//   them; the call throws only when every key failed (an empty batch never throws). An error reply
//   other than a redirect still throws, as on one node.
//
// Thread-safety: none. A client is used by one thread at a time; callers keep one per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "redis/redis_error.h"
#include "redis/redis_url.h"

namespace strata::redis {

class RedisClient {
 public:
  virtual ~RedisClient() = default;

  // A cluster client for redis-cluster:// URLs, a one-node client otherwise. Connects lazily (on the
  // first command), each connect bounded by connect_timeout and by the call's deadline.
  static std::unique_ptr<RedisClient> make(const RedisUrl& url, std::chrono::milliseconds connect_timeout);

  // Pipelined GET of every key (one round trip per node): the values in the keys' order,
  // std::nullopt for a missing key (and, on a cluster, for a key whose node failed).
  virtual std::vector<std::optional<std::string>> get_many(std::span<const std::string> keys,
                                                           std::chrono::steady_clock::time_point deadline) = 0;

  // Pipelined SET key value NX PX ttl_ms (ttl 0: no expiry) of every pair: true where the value was
  // stored, false where the key existed (and, on a cluster, where the key's node failed).
  virtual std::vector<bool> set_nx_many(std::span<const std::pair<std::string, std::string>> items,
                                        std::chrono::milliseconds ttl,
                                        std::chrono::steady_clock::time_point deadline) = 0;

  // PING (every known node of a cluster). Throws RedisError.
  virtual void ping(std::chrono::steady_clock::time_point deadline) = 0;

  // A plain command (tests, FLUSHALL, CLUSTER ...): the reply rendered as a string ("OK", an
  // integer in decimal, nil as "(nil)", an array one element per line). An error reply throws
  // RedisError kReply. On a cluster the command goes to the node of argv[1]'s slot (to the first
  // seed when argv has one element) and follows redirects.
  virtual std::string command(std::span<const std::string> argv,
                              std::chrono::steady_clock::time_point deadline) = 0;

  // Keys of the last get_many/set_nx_many that failed without failing the call (always 0 on one node).
  virtual size_t failed_keys() const = 0;

  // The URL with the credentials redacted.
  virtual std::string describe() const = 0;
};

}  // namespace strata::redis
