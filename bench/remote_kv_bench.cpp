// Remote KV tier bandwidth: the Redis pool of kv/redis_kv_pool.h (make_redis_kv_pool, the code
// `strata serve --kv-remote` runs) publishing and looking up full KV blocks against a running
// redis-server. Compare with `redis-benchmark -t set,get -d SIZE -P 16 -c 1` on the same server in
// the same run (scripts/bench/remote-kv.sh does both and prints the ratios).
//
// For each block size: N blocks with chained hashes (as a prompt's prefix blocks have) and random
// payloads, prepared before the clock starts.
//   write: all N published (queue large enough that none is dropped), timed until flush() returns;
//          the pool's stats must then show N blocks published.
//   read:  the same blocks looked up as chains of CHAIN blocks (one lookup per "prompt"), all
//          issued at once with a long deadline, timed until the last lookup has finished; every
//          block must be found and pass the codec's checks (header, length, XXH3 checksum).
// MB/s counts the value bytes that crossed the connection (payload + 56-byte header), 1 MB = 1e6 B.
// The pool uses one connection for publishes and one for lookups, pipelining batch_blocks (16)
// commands per round trip. Each run uses a fresh model fingerprint, so keys never collide with an
// earlier run's (SET NX would report them as existing), but the blocks stay in Redis: FLUSHALL
// between runs to bound its memory.
//
//   build/bin/remote_kv_bench [redis://127.0.0.1:6379] [TOTAL_MIB=256] [SIZES_KIB=2048,64] [CHAIN=16]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kv/block_hash.h"
#include "kv/redis_kv_pool.h"
#include "kv/remote_block.h"
#include "redis/redis_url.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Result {
  int64_t blocks = 0;
  uint64_t value_bytes = 0;
  double write_s = 0, read_s = 0;
  bool ok = true;
};

Result run_size(const redis::RedisUrl& url, uint64_t block_bytes, int64_t n, int32_t chain_len, uint64_t fingerprint) {
  Result r;
  r.blocks = n;
  RemoteBlockFormat f;
  f.model_fingerprint = fingerprint;
  f.block_size = 16;
  f.hot_bytes = block_bytes;

  // Chained hashes: chains of chain_len blocks, 16 token ids each.
  std::vector<BlockHash> hashes(static_cast<size_t>(n));
  std::vector<TokenId> tokens(16);
  std::mt19937_64 rng(fingerprint);
  BlockHash parent;
  for (int64_t i = 0; i < n; ++i) {
    if (i % chain_len == 0) parent = BlockHash{};
    for (auto& t : tokens) t = static_cast<TokenId>(rng() % 32000);
    hashes[i] = parent = chain_block_hash(parent, tokens, fingerprint);
  }
  std::vector<std::vector<uint8_t>> payloads(static_cast<size_t>(n));
  for (auto& p : payloads) {
    p.resize(block_bytes);
    for (size_t k = 0; k < p.size(); k += 8) {
      const uint64_t v = rng();
      for (size_t b = 0; b < 8 && k + b < p.size(); ++b) p[k + b] = static_cast<uint8_t>(v >> (8 * b));
    }
  }

  RedisKvPoolOptions o;
  o.queue_blocks = static_cast<int32_t>(n) + 16;
  o.write_timeout = std::chrono::milliseconds(30000);
  auto pool = make_redis_kv_pool(url, f, o);
  std::mutex m;
  std::condition_variable cv;
  pool->set_on_ready([&] {
    std::lock_guard<std::mutex> lock(m);
    cv.notify_all();
  });

  // Write.
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) pool->publish(hashes[i], KvTier::kHot, std::move(payloads[i]));
  pool->flush(std::chrono::milliseconds(600000));
  r.write_s = seconds_since(t0);
  RemoteKvStats s = pool->stats();
  r.value_bytes = s.bytes_written;
  if (s.published_blocks != n) {
    std::fprintf(stderr, "write: %lld of %lld blocks published (existing %lld, dropped %lld, errors %lld, timeouts %lld)\n",
                 static_cast<long long>(s.published_blocks), static_cast<long long>(n), static_cast<long long>(s.existing_blocks),
                 static_cast<long long>(s.dropped_blocks), static_cast<long long>(s.errors), static_cast<long long>(s.timeouts));
    r.ok = false;
  }

  // Read: one lookup per chain, all issued at once.
  std::vector<uint64_t> tickets;
  t0 = Clock::now();
  const auto deadline = Clock::now() + std::chrono::seconds(600);
  for (int64_t i = 0; i < n; i += chain_len) {
    std::vector<BlockHash> c(hashes.begin() + i, hashes.begin() + std::min<int64_t>(n, i + chain_len));
    tickets.push_back(pool->lookup(std::move(c), deadline));
  }
  int64_t found = 0;
  for (uint64_t t : tickets) {
    for (;;) {
      std::unique_lock<std::mutex> lock(m);
      auto got = pool->poll(t);
      if (got) {
        found += static_cast<int64_t>(got->size());
        break;
      }
      cv.wait_for(lock, std::chrono::milliseconds(5));
    }
  }
  r.read_s = seconds_since(t0);
  s = pool->stats();
  if (found != n || s.corrupt != 0) {
    std::fprintf(stderr, "read: %lld of %lld blocks found (corrupt %lld, errors %lld, timeouts %lld)\n", static_cast<long long>(found),
                 static_cast<long long>(n), static_cast<long long>(s.corrupt), static_cast<long long>(s.errors),
                 static_cast<long long>(s.timeouts));
    r.ok = false;
  }
  if (s.bytes_read != r.value_bytes) {
    std::fprintf(stderr, "read: %llu value bytes, written %llu\n", static_cast<unsigned long long>(s.bytes_read),
                 static_cast<unsigned long long>(r.value_bytes));
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string url_text = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    const double total_mib = argc > 2 ? std::atof(argv[2]) : 256;
    const std::string sizes_text = argc > 3 ? argv[3] : "2048,64";
    const int32_t chain_len = argc > 4 ? std::atoi(argv[4]) : 16;
    if (total_mib <= 0 || chain_len < 1) {
      std::fprintf(stderr, "usage: remote_kv_bench [redis://host:port] [TOTAL_MIB] [SIZES_KIB,...] [CHAIN]\n");
      return 2;
    }
    const redis::RedisUrl url = redis::RedisUrl::parse(url_text);
    std::vector<uint64_t> sizes;
    std::stringstream ss(sizes_text);
    for (std::string item; std::getline(ss, item, ',');) sizes.push_back(static_cast<uint64_t>(std::atof(item.c_str()) * 1024));

    const uint64_t run_seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    std::printf("%-10s %8s %12s %10s %12s %10s %12s\n", "block", "blocks", "value_bytes", "write_s", "write_MB/s", "read_s", "read_MB/s");
    bool ok = true;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(total_mib * 1024 * 1024 / static_cast<double>(sizes[i])));
      const Result r = run_size(url, sizes[i], n, chain_len, run_seed * 31 + i + 1);
      ok = ok && r.ok;
      // Machine-readable line for the script, then the table row.
      std::printf("%-10llu %8lld %12llu %10.3f %12.1f %10.3f %12.1f%s\n", static_cast<unsigned long long>(sizes[i]),
                  static_cast<long long>(r.blocks), static_cast<unsigned long long>(r.value_bytes), r.write_s,
                  static_cast<double>(r.value_bytes) / r.write_s / 1e6, r.read_s, static_cast<double>(r.value_bytes) / r.read_s / 1e6,
                  r.ok ? "" : "  (FAILED: see stderr)");
      std::fflush(stdout);
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remote_kv_bench: %s\n", e.what());
    return 1;
  }
}
