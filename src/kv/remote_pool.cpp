#include "kv/remote_pool.h"

#include "kv/kv_config.h"
#include "kv/redis_kv_pool.h"
#include "redis/redis_url.h"

namespace strata {

std::unique_ptr<RemoteKvPool> make_remote_pool(const KvConfig& cfg, const RemoteBlockFormat& format) {
  if (cfg.remote_url.empty()) return nullptr;
  const redis::RedisUrl url = redis::RedisUrl::parse(cfg.remote_url);
  RedisKvPoolOptions o;
  o.ttl = std::chrono::milliseconds(cfg.remote_ttl_s * 1000);
  o.queue_blocks = cfg.remote_queue_blocks;
  return make_redis_kv_pool(url, format, o);
}

}  // namespace strata
