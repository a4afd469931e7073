#include "kv/redis_kv_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "kv/circuit_breaker.h"
#include "kv/remote_block.h"
#include "redis/redis_client.h"
#include "redis/redis_url.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

// The hashes this replica published or fetched lately (bounded, oldest forgotten first): a block
// is not sent again while it is remembered.
class RecentHashes {
 public:
  explicit RecentHashes(size_t capacity) : capacity_(capacity) {}
  bool contains(const BlockHash& h) const { return set_.count(h) > 0; }
  void forget(const BlockHash& h) { set_.erase(h); }  // its entry in order_ goes when it comes first
  void insert(const BlockHash& h) {
    if (!set_.insert(h).second) return;
    order_.push_back(h);
    if (order_.size() > capacity_) {
      set_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  size_t capacity_;
  std::unordered_set<BlockHash, BlockHashHasher> set_;
  std::deque<BlockHash> order_;
};

class RedisKvPool final : public RemoteKvPool {
 public:
  RedisKvPool(const redis::RedisUrl& url, const RemoteBlockFormat& format, const RedisKvPoolOptions& o)
      : format_(format),
        o_(o),
        describe_(url.redacted()),
        breaker_(CircuitBreaker::Options{.threshold = 3, .backoff = o.breaker_backoff, .max_backoff = std::chrono::milliseconds(30000)}),
        reader_client_(redis::RedisClient::make(url, o.connect_timeout)),
        writer_client_(redis::RedisClient::make(url, o.connect_timeout)),
        recent_(1 << 16) {
    reader_ = std::thread([this] { read_loop(); });
    writer_ = std::thread([this] { write_loop(); });
  }

  ~RedisKvPool() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    read_cv_.notify_all();
    write_cv_.notify_all();
    reader_.join();
    writer_.join();
  }

  uint64_t lookup(std::vector<BlockHash> chain, Clock::time_point deadline) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    ++stats_.lookups;
    lookups_.push_back(Lookup{ticket, std::move(chain), deadline});
    results_.emplace(ticket, std::nullopt);
    read_cv_.notify_one();
    return ticket;
  }

  std::optional<std::vector<RemoteBlock>> poll(uint64_t ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = results_.find(ticket);
    if (it == results_.end() || !it->second) return std::nullopt;
    std::vector<RemoteBlock> out = std::move(*it->second);
    results_.erase(it);
    return out;
  }

  void abandon(uint64_t ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = results_.find(ticket);
    if (it == results_.end()) return;
    if (!it->second) {  // still running: its answer is dropped when it comes
      ++stats_.timeouts;
      abandoned_.insert(ticket);
    }
    results_.erase(it);
  }

  void publish(const BlockHash& hash, KvTier content, std::vector<uint8_t> bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (format_.payload_bytes(content) != bytes.size()) return;  // not a format we exchange
    if (recent_.contains(hash)) {
      ++stats_.deduplicated;
      return;
    }
    if (!breaker_.ready(Clock::now())) {  // open: not worth queueing (a queued one probes when the back-off has passed)
      ++stats_.skipped;
      ++stats_.dropped_blocks;
      return;
    }
    if (static_cast<int32_t>(queue_.size()) >= o_.queue_blocks) {
      ++stats_.dropped_blocks;
      return;
    }
    recent_.insert(hash);
    queue_.push_back(Publish{hash, content, std::move(bytes)});
    write_cv_.notify_one();
  }

  void set_on_ready(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mutex_);
    on_ready_ = std::move(fn);
  }

  RemoteKvStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    RemoteKvStats s = stats_;
    s.queue_depth = static_cast<int64_t>(queue_.size());
    s.breaker_open = breaker_.open();
    s.breaker_trips = breaker_.trips();
    return s;
  }

  std::string describe() const override { return describe_; }

  void flush(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    flushed_cv_.wait_for(lock, timeout, [&] { return queue_.empty() && !writing_; });
  }

 private:
  struct Lookup {
    uint64_t ticket;
    std::vector<BlockHash> chain;
    Clock::time_point deadline;
  };
  struct Publish {
    BlockHash hash;
    KvTier content;
    std::vector<uint8_t> bytes;
  };

  // The formats a lookup asks for at each position: hot first, then warm when exchanged.
  std::vector<KvTier> formats() const {
    std::vector<KvTier> f{KvTier::kHot};
    if (format_.payload_bytes(KvTier::kWarm) > 0) f.push_back(KvTier::kWarm);
    return f;
  }

  // `timed_out`: the lookup gave up at its deadline; counted here unless the engine abandoned it
  // first (abandon() counts those).
  void finish(uint64_t ticket, std::vector<RemoteBlock> found, bool timed_out) {
    std::function<void()> notify;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (abandoned_.erase(ticket) > 0) return;
      if (timed_out) ++stats_.timeouts;
      auto it = results_.find(ticket);
      if (it == results_.end()) return;
      it->second = std::move(found);
      notify = on_ready_;
    }
    if (notify) notify();
  }

  void bump(int64_t RemoteKvStats::*counter) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++(stats_.*counter);
  }

  // Runs one lookup on the reader connection: batches of positions, each asking every format.
  std::vector<RemoteBlock> run_lookup(const Lookup& l, bool* timed_out) {
    std::vector<RemoteBlock> found;
    const std::vector<KvTier> fmts = formats();
    size_t at = 0;
    while (at < l.chain.size()) {
      if (Clock::now() >= l.deadline) {
        *timed_out = true;
        breaker_.failure(Clock::now());
        return found;
      }
      const size_t n = std::min(l.chain.size() - at, static_cast<size_t>(o_.batch_blocks));
      std::vector<std::string> keys;
      keys.reserve(n * fmts.size());
      for (size_t i = 0; i < n; ++i) {
        for (KvTier f : fmts) keys.push_back(remote_block_key(format_, f, l.chain[at + i]));
      }
      std::vector<std::optional<std::string>> values;
      try {
        values = reader_client_->get_many(keys, l.deadline);
      } catch (const redis::RedisError& e) {
        if (e.kind() == redis::RedisError::Kind::kTimeout) *timed_out = true;
        else bump(&RemoteKvStats::errors);
        breaker_.failure(Clock::now());
        return found;
      }
      breaker_.success();
      if (reader_client_->failed_keys() > 0) bump(&RemoteKvStats::errors);  // a cluster node failed
      for (size_t i = 0; i < n; ++i) {
        bool hit = false, absent = true;
        for (size_t k = 0; k < fmts.size() && !hit; ++k) {
          const auto& v = values[i * fmts.size() + k];
          if (!v) continue;
          absent = false;
          std::vector<uint8_t> payload;
          const RemoteDecode d = decode_remote_block(format_, fmts[k], l.chain[at + i], *v, &payload);
          std::lock_guard<std::mutex> lock(mutex_);
          stats_.bytes_read += v->size();
          if (d != RemoteDecode::kOk) {
            ++stats_.corrupt;
            continue;
          }
          ++stats_.hit_blocks;
          recent_.insert(l.chain[at + i]);
          found.push_back(RemoteBlock{fmts[k], std::make_shared<const std::vector<uint8_t>>(std::move(payload))});
          hit = true;
        }
        if (!hit) {
          if (absent) bump(&RemoteKvStats::miss_blocks);
          return found;  // the chain ends at the first block not found (or not usable)
        }
      }
      at += n;
    }
    return found;
  }

  void read_loop() {
    for (;;) {
      Lookup l;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        read_cv_.wait(lock, [&] { return stop_ || !lookups_.empty(); });
        if (stop_) return;
        l = std::move(lookups_.front());
        lookups_.pop_front();
        if (abandoned_.erase(l.ticket) > 0) continue;
      }
      std::vector<RemoteBlock> found;
      bool timed_out = false;
      if (l.chain.empty()) {
        // nothing to ask
      } else if (breaker_.allow(Clock::now())) {
        found = run_lookup(l, &timed_out);
      } else {
        bump(&RemoteKvStats::skipped);
      }
      finish(l.ticket, std::move(found), timed_out);
    }
  }

  void write_loop() {
    for (;;) {
      std::vector<Publish> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        write_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        while (!queue_.empty() && static_cast<int32_t>(batch.size()) < o_.batch_blocks) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        writing_ = true;
      }
      write_batch(batch);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        writing_ = false;
      }
      flushed_cv_.notify_all();
    }
  }

  void write_batch(std::vector<Publish>& batch) {
    if (!breaker_.allow(Clock::now())) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.skipped += static_cast<int64_t>(batch.size());
      stats_.dropped_blocks += static_cast<int64_t>(batch.size());
      for (const Publish& p : batch) recent_.forget(p.hash);  // not sent: may be published later
      return;
    }
    std::vector<std::pair<std::string, std::string>> items;
    uint64_t bytes = 0;
    for (const Publish& p : batch) {
      items.emplace_back(remote_block_key(format_, p.content, p.hash), encode_remote_block(format_, p.content, p.hash, p.bytes));
      bytes += items.back().second.size();
    }
    try {
      const std::vector<bool> stored = writer_client_->set_nx_many(items, o_.ttl, Clock::now() + o_.write_timeout);
      breaker_.success();
      const int64_t failed = static_cast<int64_t>(writer_client_->failed_keys());  // a cluster node failed: reported as not stored
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.bytes_written += bytes;
      int64_t not_stored = 0;
      for (bool s : stored) {
        if (s) ++stats_.published_blocks;
        else ++not_stored;
      }
      stats_.existing_blocks += std::max<int64_t>(0, not_stored - failed);
      stats_.dropped_blocks += std::min(failed, not_stored);
      if (failed > 0) ++stats_.errors;
    } catch (const redis::RedisError& e) {
      breaker_.failure(Clock::now());
      std::lock_guard<std::mutex> lock(mutex_);
      if (e.kind() == redis::RedisError::Kind::kTimeout) ++stats_.timeouts;
      else ++stats_.errors;
      stats_.dropped_blocks += static_cast<int64_t>(batch.size());
      for (const Publish& p : batch) recent_.forget(p.hash);
    }
  }

  const RemoteBlockFormat format_;
  const RedisKvPoolOptions o_;
  const std::string describe_;
  CircuitBreaker breaker_;
  std::unique_ptr<redis::RedisClient> reader_client_;  // reader thread only
  std::unique_ptr<redis::RedisClient> writer_client_;  // writer thread only

  mutable std::mutex mutex_;  // everything below
  std::condition_variable read_cv_, write_cv_, flushed_cv_;
  bool stop_ = false;
  bool writing_ = false;
  uint64_t next_ticket_ = 1;
  std::deque<Lookup> lookups_;
  std::unordered_map<uint64_t, std::optional<std::vector<RemoteBlock>>> results_;
  std::unordered_set<uint64_t> abandoned_;
  std::deque<Publish> queue_;
  RecentHashes recent_;
  RemoteKvStats stats_;
  std::function<void()> on_ready_;
  std::thread reader_, writer_;  // last: they start once everything above exists
};

}  // namespace

std::unique_ptr<RemoteKvPool> make_redis_kv_pool(const redis::RedisUrl& url, const RemoteBlockFormat& format,
                                                 const RedisKvPoolOptions& options) {
  return std::make_unique<RedisKvPool>(url, format, options);
}

}  // namespace strata
