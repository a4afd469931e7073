// The remote KV tier: a pool of full prefix blocks shared by the replicas of one model (a Redis
// server or cluster), content-addressed by the blocks' chained hashes, below the local tiers.
// The engine looks up the blocks a new prompt misses locally (asynchronously, with a deadline:
// a late answer is a miss and the tokens are computed) and imports what it finds into the local
// prefix cache (KvManager::import_block); the KV storage hands committed or evicted blocks over
// for publishing (KvOp::Kind::kPublish). Nothing here may block the engine: lookups and
// publishes run on the pool's own threads, publishes go through a bounded queue that drops
// (and counts) rather than waits, and a circuit breaker stops trying for a while after failures.
//
// A stored block's key names the model (fingerprint), the KV format version, the block's format
// (hot dtype or warm encoding) and block size, and its chained hash, which names the whole prefix
// (kv/remote_block.h). A value that fails any check (header, length, checksum, hash) is a miss,
// counted, never a wrong token.
//
// Thread-safety: every method may be called from any thread (the engine thread in practice);
// `on_ready` runs on a pool thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_ops.h"

namespace strata {

struct KvConfig;
struct RemoteBlockFormat;

struct RemoteKvStats {
  int64_t lookups = 0;          // lookups issued (one per new prompt with blocks missing locally)
  int64_t hit_blocks = 0;       // blocks found (valid values)
  int64_t miss_blocks = 0;      // keys absent (the first absent key ends a lookup)
  int64_t timeouts = 0;         // lookups answered after their deadline (treated as misses)
  int64_t errors = 0;           // failed Redis operations (connection, protocol, error replies)
  int64_t corrupt = 0;          // values rejected by the codec (header, length, checksum, hash)
  int64_t skipped = 0;          // lookups and publishes not tried because the breaker was open
  int64_t published_blocks = 0; // blocks stored (SET NX succeeded)
  int64_t existing_blocks = 0;  // publishes of blocks some replica had stored already
  int64_t dropped_blocks = 0;   // publishes dropped: the queue was full or the breaker open
  int64_t deduplicated = 0;     // publishes not sent: this replica sent or fetched that block lately
  uint64_t bytes_read = 0;      // value bytes received
  uint64_t bytes_written = 0;   // value bytes sent
  int64_t queue_depth = 0;      // publishes waiting now
  bool breaker_open = false;    // now
  int64_t breaker_trips = 0;    // times the breaker opened
};

// One block found remotely, in the format it was published in.
struct RemoteBlock {
  KvTier content = KvTier::kHot;  // kHot: one hot block; kWarm: a warm slot of one block
  std::shared_ptr<const std::vector<uint8_t>> bytes;  // the payload (no header)
};

class RemoteKvPool {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~RemoteKvPool() = default;

  // Looks up the blocks of `chain` (consecutive blocks of one prompt, the first one's parent
  // being cached locally) in order, stopping at the first one absent. Returns a ticket for poll;
  // the lookup gives up at `deadline`.
  virtual uint64_t lookup(std::vector<BlockHash> chain, Clock::time_point deadline) = 0;
  // The blocks found, from the first of the chain on, once the lookup has finished (nullopt
  // while it runs); the ticket is then spent. A lookup past its deadline finishes with what it
  // had found when it gave up.
  virtual std::optional<std::vector<RemoteBlock>> poll(uint64_t ticket) = 0;
  // Stops waiting for a lookup (its answer is dropped when it comes). Counts a timeout when it
  // had not finished.
  virtual void abandon(uint64_t ticket) = 0;

  // Queues `bytes` (the block's payload in `content` format) for publishing under `hash`.
  virtual void publish(const BlockHash& hash, KvTier content, std::vector<uint8_t> bytes) = 0;

  // Called (on a pool thread) whenever a lookup finishes, so a waiting engine wakes up.
  virtual void set_on_ready(std::function<void()> fn) = 0;

  virtual RemoteKvStats stats() const = 0;
  virtual std::string describe() const = 0;  // for logs: the URL without credentials
  // Waits until queued publishes are sent or dropped (tests, shutdown), at most `timeout`.
  virtual void flush(std::chrono::milliseconds timeout) = 0;
};

// The pool cfg.remote_url names (nullptr when empty), for blocks of `format`. Connects lazily:
// an unreachable server is not an error here (the breaker handles it), a malformed URL is
// (strata::Error naming the problem, without the password).
std::unique_ptr<RemoteKvPool> make_remote_pool(const KvConfig& cfg, const RemoteBlockFormat& format);

}  // namespace strata
