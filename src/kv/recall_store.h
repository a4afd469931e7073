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
// nothing reads them but a load). Tokens are demoted one at a time into a sequence's open block;
// only full blocks are recallable (at most block_size - 1 tokens per sequence wait in the open one).
//
// Thread-safety: engine thread only. demote() reads the layer views directly, so the KV memory must
// be host-visible (the CPU backend; eviction policies need it anyway).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/kv_types.h"

namespace strata {

struct RecallBlock {
  std::shared_ptr<const std::vector<uint8_t>> image;  // one hot block, all layers: [layer][K block, V block]
  std::vector<int32_t> positions;                     // [block_size] position of each token
  std::vector<float> kmin, kmax;                      // [n_layer][n_kv_heads][head_dim]
};

// Quest's bound: the largest q·k over keys k with kmin[d] <= k[d] <= kmax[d], i.e.
// sum_d max(q[d] * kmin[d], q[d] * kmax[d]), over n channels.
float quest_bound(const float* q, const float* kmin, const float* kmax, int32_t n);

class RecallStore {
 public:
  RecallStore(int32_t n_layer, int32_t block_size, int32_t n_kv_heads, int32_t head_dim, KvDtype dtype);

  // Copies the K and V rows of the sequence's slots `slots` (slot i lives in block table[i /
  // block_size] at offset i % block_size of `views`, one view per layer) into s's open block, in
  // the order given, with their positions; every block that fills up gets its summary and becomes
  // recallable. Preconditions: positions.size() == slots.size(); the slots' rows are hot blocks.
  void demote(SeqId s, std::span<const KvLayerView> views, std::span<const BlockId> table, std::span<const int32_t> slots,
              std::span<const int32_t> positions);

  int32_t num_blocks(SeqId s) const;   // recallable (full) blocks of s
  int32_t open_tokens(SeqId s) const;  // demoted tokens waiting in s's open block
  const RecallBlock& block(SeqId s, int32_t i) const;

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
  uint64_t bytes() const;  // block images held (shared ones once per holder)

 private:
  struct Seq {
    std::vector<RecallBlock> blocks;
    std::vector<uint8_t> open;  // the open block's image
    std::vector<int32_t> open_positions;
  };
  void finish_block(Seq& q);

  int32_t n_layer_, block_size_, n_kv_heads_, head_dim_;
  KvDtype dtype_;
  int64_t token_bytes_;  // one token's K (or V) row in one layer
  int64_t block_bytes_;  // one layer's K (or V) block
  std::unordered_map<SeqId, Seq> seqs_;
};

}  // namespace strata
