// The remote KV tier on Redis (a single server or a Redis Cluster, through src/redis/): the
// RemoteKvPool of kv/remote_pool.h. One lookup thread and one publish thread, each with its own
// connection; lookups are pipelined GETs in batches along the chain, publishes pipelined
// `SET key value NX PX ttl` in batches from a bounded queue; a CircuitBreaker shared by both.
// Thread-safety: as RemoteKvPool.
#pragma once

#include <memory>

#include "kv/remote_pool.h"

namespace strata {

namespace redis {
struct RedisUrl;
}

struct RedisKvPoolOptions {
  std::chrono::milliseconds ttl{0};  // 0: no expiry
  int32_t queue_blocks = 1024;       // publishes waiting beyond this are dropped
  int32_t batch_blocks = 16;         // keys per pipelined round trip
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds write_timeout{1000};  // one pipelined batch of SETs
  std::chrono::milliseconds breaker_backoff{1000};
};

std::unique_ptr<RemoteKvPool> make_redis_kv_pool(const redis::RedisUrl& url, const RemoteBlockFormat& format,
                                                 const RedisKvPoolOptions& options);

}  // namespace strata
