// Demoted tokens (--kv-recall): the tokens an eviction policy drops from a sequence are kept here
// instead of deleted, in blocks of block_size tokens laid out as one hot block of KvStorage (every
// layer, K then V: the bytes of a kLoad op), each with a Quest-style key summary: per layer, KV
// head and channel, the minimum and maximum of its keys. From the summary, q·k of any key of the
// block is bounded above by sum_d max(q_d · min_d, q_d · max_d), which ranks the blocks for a query
// without reading them (estimate()); the chosen ones are loaded back into hot blocks and attended
// (KvEvictor). Quest: Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
// Inference", ICML 2024.
//
// The bytes live in host memory owned by this store, outside the KV pool (the cold tier of recall:
// nothing reads them but a load), up to a cap (--kv-recall-memory); past it the oldest images go
// to a file of their own in --kv-spill-dir (a FileColdStore, read back synchronously when chosen)
// or, without one, are dropped (the block stays in the sequence's list but is never chosen again). Tokens are demoted one at a time into a sequence's open block;
// only full blocks are recallable (at most block_size - 1 tokens per sequence wait in the open one).
//
// Thread-safety: engine thread only. demote() reads host-visible layer views directly; on a device
// backend the evictor reads the rows out first (Backend::kv_read_rows) and calls demote_rows().
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/cold_store.h"
#include "kv/kv_config.h"
#include "kv/kv_types.h"

namespace strata {

class RecallStore;

// Where a demoted block's bytes are: host memory, a slot of the spill file, or gone (dropped past
// the memory cap without a spill file). Shared by the sequences a fork gave the block to.
class RecallImage {
 public:
  RecallImage(RecallStore* owner, std::shared_ptr<const std::vector<uint8_t>> bytes);
  ~RecallImage();  // gives its host bytes and its file slot back to the store's accounts
  RecallImage(const RecallImage&) = delete;
  RecallImage& operator=(const RecallImage&) = delete;
  bool in_memory() const { return bytes_ != nullptr; }
  bool available() const { return bytes_ != nullptr || cold_slot_ >= 0; }
  const std::vector<uint8_t>* bytes() const { return bytes_.get(); }  // null unless in memory

 private:
  friend class RecallStore;
  RecallStore* owner_;
  std::shared_ptr<const std::vector<uint8_t>> bytes_;  // one hot block, all layers: [layer][K block, V block]
  int64_t cold_slot_ = -1;
};

struct RecallBlock {
  std::shared_ptr<RecallImage> image;
  std::vector<int32_t> positions;  // [block_size] position of each token
  std::vector<float> kmin, kmax;   // [n_layer][n_kv_heads][head_dim]
};

// Quest's bound: the largest q·k over keys k with kmin[d] <= k[d] <= kmax[d], i.e.
// sum_d max(q[d] * kmin[d], q[d] * kmax[d]), over n channels.
float quest_bound(const float* q, const float* kmin, const float* kmax, int32_t n);

class RecallStore {
 public:
  // max_bytes: host memory the block images may take (KvConfig's recall_memory_bytes); past it the
  // oldest images are written to `cold` (slots of one image each) while it has free slots, else
  // dropped. cold may be null.
  RecallStore(int32_t n_layer, int32_t block_size, int32_t n_kv_heads, int32_t head_dim, KvDtype dtype,
              uint64_t max_bytes = UINT64_MAX, std::unique_ptr<ColdStore> cold = nullptr);
  ~RecallStore();

  // Copies the K and V rows of the sequence's slots `slots` (slot i lives in block table[i /
  // block_size] at offset i % block_size of `views`, one view per layer) into s's open block, in
  // the order given, with their positions; every block that fills up gets its summary and becomes
  // recallable. Preconditions: positions.size() == slots.size(); the slots' rows are hot blocks.
  void demote(SeqId s, std::span<const KvLayerView> views, std::span<const BlockId> table, std::span<const int32_t> slots,
              std::span<const int32_t> positions);
  // The same from rows already read out of the KV memory (Backend::kv_read_rows's layout: per
  // layer, the K rows of the tokens in order, then their V rows; positions.size() tokens).
  void demote_rows(SeqId s, const uint8_t* rows, std::span<const int32_t> positions);

  int32_t num_blocks(SeqId s) const;   // full blocks of s (recallable while available)
  int32_t open_tokens(SeqId s) const;  // demoted tokens waiting in s's open block
  const RecallBlock& block(SeqId s, int32_t i) const;
  // Whether block i of s can still be loaded (in memory or in the spill file).
  bool available(SeqId s, int32_t i) const { return block(s, i).image->available(); }
  // Frees the key summaries of s's blocks that can no longer be loaded (dropped past the cap).
  void forget_dropped(SeqId s);
  // Block i's bytes: from memory, or read back from the spill file (synchronously); null when the
  // block was dropped or its read failed (it is then dropped).
  std::shared_ptr<const std::vector<uint8_t>> image(SeqId s, int32_t i);

  // The votes of query q ([n_layer][n_head][head_dim], rotated like the keys) for s's recallable
  // blocks: each layer's query head ranks the blocks by the upper bound of q·k its summary gives
  // and votes for its k best (Quest's per-head choice; one block table serves every layer and
  // head here, so the blocks with the most votes are attended). Precondition: n_head is a
  // multiple of n_kv_heads.
  std::vector<float> estimate(SeqId s, std::span<const float> q, int32_t n_head, int32_t k) const;
  // The k blocks of highest value (ties: the later block), best first.
  static std::vector<int32_t> top_k(std::span<const float> estimate, int32_t k);

  void fork(SeqId parent, SeqId child);  // the child shares the parent's demoted blocks (bytes by reference)
  void erase(SeqId s);
  uint64_t bytes() const;  // host memory of the images held (each once) and of the open blocks
  struct Counters {
    int64_t spilled_blocks = 0;  // images written to the spill file
    int64_t cold_reads = 0;      // images read back from it
    int64_t dropped_blocks = 0;  // images dropped past the cap (or lost to a failed read)
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Seq {
    std::vector<RecallBlock> blocks;
    std::vector<uint8_t> open;  // the open block's image
    std::vector<int32_t> open_positions;
  };
  void finish_block(Seq& q);
  void enforce_cap();  // spills or drops the oldest images while over max_bytes_
  friend class RecallImage;

  int32_t n_layer_, block_size_, n_kv_heads_, head_dim_;
  KvDtype dtype_;
  int64_t token_bytes_;  // one token's K (or V) row in one layer
  int64_t block_bytes_;  // one layer's K (or V) block
  std::unordered_map<SeqId, Seq> seqs_;
  uint64_t max_bytes_;
  uint64_t ram_bytes_ = 0;
  std::unique_ptr<ColdStore> cold_;
  std::vector<int64_t> free_cold_;                 // free slots of cold_
  std::deque<std::weak_ptr<RecallImage>> fifo_;    // images in demotion order (oldest first)
  Counters counters_;
};

// The spill file of a recall store for this configuration: a FileColdStore of cfg.spill_bytes in
// cfg.spill_dir (a file of its own beside the KV tier's) with slots of one block image, when
// --kv-recall and --kv-spill-dir are both given; else null. Throws strata::Error as the store does.
std::unique_ptr<ColdStore> make_recall_spill(const KvConfig& cfg, const KvGeometry& geo);

}  // namespace strata
