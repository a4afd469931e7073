// The remote KV tier below the KV manager and storage, without a network: a replica's committed
// (or evicted) blocks are planned as kPublish ops and reach the pool with their exact bytes; another
// replica imports them (import_block) and a new sequence then takes them as prefix hits whose bytes
// equal the publisher's. Plus the value codec (every kind of damage is caught) and the circuit
// breaker on a fake clock.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "kv/circuit_breaker.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "kv/remote_block.h"
#include "kv/remote_pool.h"

namespace strata {
namespace {

// An in-memory pool: publish stores, nothing else is used here.
class MemoryPool final : public RemoteKvPool {
 public:
  uint64_t lookup(std::vector<BlockHash>, Clock::time_point) override { return 0; }
  std::optional<std::vector<RemoteBlock>> poll(uint64_t) override { return std::nullopt; }
  void abandon(uint64_t) override {}
  void publish(const BlockHash& h, KvTier content, std::vector<uint8_t> bytes) override {
    published.push_back(h);
    blocks[{h.lo, h.hi}] = {content, std::move(bytes)};
  }
  void set_on_ready(std::function<void()>) override {}
  RemoteKvStats stats() const override { return {}; }
  std::string describe() const override { return "memory"; }
  void flush(std::chrono::milliseconds) override {}

  std::vector<BlockHash> published;
  std::map<std::pair<uint64_t, uint64_t>, std::pair<KvTier, std::vector<uint8_t>>> blocks;
};

KvGeometry geo() { return KvGeometry{2, 2, 8, 4, KvDtype::kF32}; }

KvConfig cfg(int32_t blocks, KvConfig::RemoteWrite mode = KvConfig::RemoteWrite::kAlways) {
  KvConfig c;
  c.block_size = 4;
  c.dtype = KvDtype::kF32;
  c.num_blocks = blocks;
  c.remote_url = "redis://127.0.0.1:1";  // only its presence matters to the manager
  c.remote_write = mode;
  return c;
}

struct Replica {
  explicit Replica(const KvConfig& c) : storage(geo(), c), kv(geo(), c, storage.capacity(), 99) { storage.attach_remote(&pool); }
  void apply() {
    const std::vector<KvOp> ops = kv.take_ops();
    const std::vector<KvOpStatus> st = storage.execute(ops);
    kv.complete(ops, st);
    for (KvOpStatus s : st) ASSERT_EQ(s, KvOpStatus::kOk);
  }
  // The fake forward pass: every element of block `b` of the table gets a value made of `seed`.
  void write_block(BlockId b, uint32_t seed) {
    for (const KvLayerView& v : storage.views()) {
      const int64_t bs = v.block_stride_bytes();
      for (int64_t i = 0; i < bs / 4; ++i) {
        const float x = static_cast<float>(seed * 131 + static_cast<uint32_t>(i)) * 0.25f;
        std::memcpy(v.k + b * bs + i * 4, &x, 4);
        const float y = -x;
        std::memcpy(v.v + b * bs + i * 4, &y, 4);
      }
    }
  }
  std::vector<uint8_t> block_bytes(BlockId b) const {
    std::vector<uint8_t> out;
    for (const KvLayerView& v : storage.views()) {
      const int64_t bs = v.block_stride_bytes();
      out.insert(out.end(), v.k + b * bs, v.k + (b + 1) * bs);
      out.insert(out.end(), v.v + b * bs, v.v + (b + 1) * bs);
    }
    return out;
  }
  MemoryPool pool;
  KvStorage storage;
  KvManager kv;
};

std::vector<TokenId> prompt(int n, int salt = 0) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<TokenId>((i * 7 + salt) % 50 + 1));
  return t;
}

// A computes a sequence of `tokens` (all but the last) and commits it.
void compute(Replica& r, SeqId s, const std::vector<TokenId>& tokens) {
  r.kv.add_sequence(s);
  const int32_t n = static_cast<int32_t>(tokens.size()) - 1;
  ASSERT_TRUE(r.kv.allocate(s, tokens, n));
  r.apply();
  const auto table = r.kv.block_table(s);
  for (size_t b = 0; b < table.size(); ++b) r.write_block(table[b], static_cast<uint32_t>(s * 100 + b));
  r.kv.commit(s, tokens, n);
}

TEST(KvRemote, CommittedBlocksArePublishedAndImportedBytesMatchThePublisher) {
  Replica a(cfg(32)), b(cfg(32));
  const std::vector<TokenId> p = prompt(17);  // 4 full blocks before the last token
  compute(a, 1, p);
  std::vector<std::vector<uint8_t>> a_bytes;
  for (BlockId id : a.kv.block_table(1)) a_bytes.push_back(a.block_bytes(id));
  a.apply();  // the publishes planned at commit run with the next step's ops
  const std::vector<BlockHash> chain = a.kv.prefix_chain(p);
  ASSERT_EQ(chain.size(), 4u);
  ASSERT_EQ(a.pool.published.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(a.pool.published[i], chain[i]);
  // Nothing is published twice: committing again plans nothing new.
  a.kv.commit(1, p, 16);
  a.apply();
  EXPECT_EQ(a.pool.published.size(), 4u);

  // B imports the chain; a new sequence then hits all four blocks, with A's bytes.
  EXPECT_EQ(b.kv.prefix_chain(p), chain);  // the same model fingerprint: the same hashes
  EXPECT_EQ(b.kv.cached_prefix_blocks(chain), 0);
  for (size_t i = 0; i < 4; ++i) {
    const auto& [content, bytes] = a.pool.blocks.at({chain[i].lo, chain[i].hi});
    ASSERT_EQ(content, KvTier::kHot);
    const BlockHash parent = i == 0 ? BlockHash{} : chain[i - 1];
    ASSERT_TRUE(b.kv.import_block(parent, std::span<const TokenId>(p).subspan(i * 4, 4), content,
                                  std::make_shared<const std::vector<uint8_t>>(bytes)));
  }
  b.kv.check_invariants();
  EXPECT_EQ(b.kv.cached_prefix_blocks(chain), 4);
  EXPECT_EQ(b.kv.stats().remote_imported_blocks, 4);
  b.kv.add_sequence(7);
  int32_t cached = 0;
  ASSERT_TRUE(b.kv.allocate(7, p, 17, &cached));
  EXPECT_EQ(cached, 16);
  b.apply();  // the loads, then the allocation
  b.kv.check_invariants();
  const auto table = b.kv.block_table(7);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b.block_bytes(table[i]), a_bytes[i]) << "block " << i;
}

TEST(KvRemote, ImportRefusesWhatWouldBreakTheChainOrThePool) {
  Replica b(cfg(3));
  const std::vector<TokenId> p = prompt(17);
  const std::vector<BlockHash> chain = b.kv.prefix_chain(p);
  const auto bytes = std::make_shared<const std::vector<uint8_t>>(b.storage.capacity().hot_block_bytes, 1);
  const auto tok = [&](size_t i) { return std::span<const TokenId>(p).subspan(i * 4, 4); };
  EXPECT_FALSE(b.kv.import_block(chain[0], tok(1), KvTier::kHot, bytes));  // parent not cached
  EXPECT_TRUE(b.kv.import_block({}, tok(0), KvTier::kHot, bytes));
  EXPECT_FALSE(b.kv.import_block({}, tok(0), KvTier::kHot, bytes));  // already cached
  EXPECT_TRUE(b.kv.import_block(chain[0], tok(1), KvTier::kHot, bytes));
  EXPECT_FALSE(b.kv.import_block(chain[1], tok(2), KvTier::kWarm, bytes));  // no warm tier
  // Three hot blocks, all cached now: a further import evicts the least recently used one, but
  // never its parent.
  EXPECT_TRUE(b.kv.import_block(chain[1], tok(2), KvTier::kHot, bytes));
  EXPECT_TRUE(b.kv.import_block(chain[2], tok(3), KvTier::kHot, bytes));
  EXPECT_EQ(b.kv.cached_prefix_blocks(chain), 0);  // chain[0] went first
  EXPECT_EQ(b.kv.cached_prefix_blocks(std::span<const BlockHash>(chain).subspan(2)), 2);
  b.kv.check_invariants();
  // A load of the wrong size fails its op; the block is dropped, never served.
  const auto short_bytes = std::make_shared<const std::vector<uint8_t>>(10, 1);
  Replica c(cfg(8));
  ASSERT_TRUE(c.kv.import_block({}, tok(0), KvTier::kHot, short_bytes));
  const std::vector<KvOp> ops = c.kv.take_ops();
  const std::vector<KvOpStatus> st = c.storage.execute(ops);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0], KvOpStatus::kReadFailed);
  c.kv.complete(ops, st);
  EXPECT_EQ(c.kv.cached_prefix_blocks(chain), 0);
  EXPECT_EQ(c.kv.stats().remote_load_failures, 1);
  c.kv.check_invariants();
}

TEST(KvRemote, OnEvictPublishesOnlyBlocksLeavingRam) {
  Replica a(cfg(6, KvConfig::RemoteWrite::kOnEvict));
  const std::vector<TokenId> p = prompt(17);
  compute(a, 1, p);
  a.apply();
  EXPECT_TRUE(a.pool.published.empty());
  a.kv.free_sequence(1);  // its 4 full blocks stay cached; 2 blocks are free
  // Another sequence needs 4 blocks: the 2 free ones, then 2 cached ones evicted (oldest
  // first), each published as it goes.
  compute(a, 2, prompt(17, 3));
  a.apply();
  EXPECT_EQ(a.pool.published.size(), 2u);
  const std::vector<BlockHash> chain = a.kv.prefix_chain(p);
  for (const BlockHash& h : a.pool.published) EXPECT_NE(std::find(chain.begin(), chain.end(), h), chain.end());
  a.kv.check_invariants();
}

RemoteBlockFormat format() {
  RemoteBlockFormat f;
  f.model_fingerprint = 0x1234abcd5678ef00ull;
  f.hot_dtype = KvDtype::kF16;
  f.block_size = 16;
  f.hot_bytes = 64;
  return f;
}

TEST(RemoteBlock, KeyNamesModelVersionFormatBlockSizeAndHash) {
  const BlockHash h{0x1111, 0x2222};
  EXPECT_EQ(remote_block_key(format(), KvTier::kHot, h), "strata:kv:v1:1234abcd5678ef00:f16:b16:00000000000022220000000000001111");
  RemoteBlockFormat w = format();
  w.warm_format = WarmFormat::kInt8;
  w.warm_bytes = 40;
  EXPECT_EQ(remote_block_key(w, KvTier::kWarm, h), "strata:kv:v1:1234abcd5678ef00:int8:b16:00000000000022220000000000001111");
}

TEST(RemoteBlock, RoundTripAndEveryDamageIsCaught) {
  const BlockHash h{0xabc, 0xdef};
  std::vector<uint8_t> payload(64);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 3);
  const std::string v = encode_remote_block(format(), KvTier::kHot, h, payload);
  ASSERT_EQ(v.size(), kRemoteHeaderBytes + 64);
  std::vector<uint8_t> out;
  ASSERT_EQ(decode_remote_block(format(), KvTier::kHot, h, v, &out), RemoteDecode::kOk);
  EXPECT_EQ(out, payload);

  auto check = [&](std::string bad, RemoteDecode want, const char* what) {
    std::vector<uint8_t> o;
    EXPECT_EQ(decode_remote_block(format(), KvTier::kHot, h, bad, &o), want) << what;
    EXPECT_TRUE(o.empty()) << what;
  };
  std::string x = v;
  x[kRemoteHeaderBytes + 5] ^= 1;
  check(x, RemoteDecode::kBadChecksum, "payload bit");
  check(v.substr(0, v.size() - 1), RemoteDecode::kBadLength, "truncated");
  check(v + "x", RemoteDecode::kBadLength, "extended");
  check(v.substr(0, 20), RemoteDecode::kBadHeader, "header only");
  check("", RemoteDecode::kBadHeader, "empty");
  x = v;
  x[0] = 'X';
  check(x, RemoteDecode::kBadHeader, "magic");
  x = v;
  x[4] = 2;
  check(x, RemoteDecode::kBadHeader, "format version");
  x = v;
  x[8] = 1;
  check(x, RemoteDecode::kBadHeader, "content");
  x = v;
  x[12] = 32;
  check(x, RemoteDecode::kBadHeader, "block size");
  x = v;
  x[16] ^= 1;
  check(x, RemoteDecode::kBadHeader, "hash");
  x = v;
  x[33] ^= 1;
  check(x, RemoteDecode::kBadHeader, "model");
  // Another block's value under this key.
  check(encode_remote_block(format(), KvTier::kHot, BlockHash{1, 2}, payload), RemoteDecode::kBadHeader, "other hash");
  // A warm value where a hot one is expected, or a format without warm blocks.
  EXPECT_EQ(decode_remote_block(format(), KvTier::kWarm, h, v, &out), RemoteDecode::kBadHeader);
}

TEST(CircuitBreaker, OpensAfterThresholdProbesOnceAndBacksOff) {
  using namespace std::chrono_literals;
  CircuitBreaker b(CircuitBreaker::Options{.threshold = 3, .backoff = 1000ms, .max_backoff = 4000ms});
  auto t = CircuitBreaker::Clock::time_point{} + 100s;
  EXPECT_TRUE(b.allow(t));
  b.failure(t);
  b.failure(t);
  EXPECT_FALSE(b.open());
  b.success();  // resets the count
  b.failure(t);
  b.failure(t);
  EXPECT_FALSE(b.open());
  b.failure(t);
  EXPECT_TRUE(b.open());
  EXPECT_EQ(b.trips(), 1);
  EXPECT_FALSE(b.allow(t + 999ms));
  EXPECT_FALSE(b.ready(t + 999ms));
  EXPECT_TRUE(b.ready(t + 1000ms));
  EXPECT_TRUE(b.allow(t + 1000ms));   // the probe
  EXPECT_FALSE(b.allow(t + 1000ms));  // one at a time
  b.failure(t + 1100ms);              // the probe failed: open for twice as long
  EXPECT_EQ(b.current_backoff(), 2000ms);
  EXPECT_FALSE(b.allow(t + 3000ms));
  EXPECT_TRUE(b.allow(t + 3100ms));
  b.failure(t + 3100ms);
  EXPECT_EQ(b.current_backoff(), 4000ms);
  EXPECT_TRUE(b.allow(t + 7100ms));
  b.failure(t + 7100ms);
  EXPECT_EQ(b.current_backoff(), 4000ms);  // capped
  EXPECT_TRUE(b.allow(t + 11100ms));
  b.success();
  EXPECT_FALSE(b.open());
  EXPECT_EQ(b.current_backoff(), 1000ms);
  EXPECT_TRUE(b.allow(t + 11100ms));
  EXPECT_EQ(b.trips(), 1);
}

}  // namespace
}  // namespace strata
