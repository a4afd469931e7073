// Per-token attention importance, kept beside the block tables: for each sequence one float per
// cached slot (slot order, like KvManager's dense slots), and the buffer the attention kernels
// add a step's attention mass into (AttentionSeq::importance, backend/op_types.h). Plain floats
// the scheduler and the KV manager's caller read; the policies (kv/evict_policy.h) turn the
// mass into scores. Thread-safety: engine thread only; the kernels write a step buffer only
// during the forward pass that was handed its pointer.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ids.h"

namespace strata {

class ImportanceStore {
 public:
  // A zeroed buffer of n floats for sequence s's attention mass of one step (slot i: the mass
  // slot i received, summed over query heads, layers and the step's counted rows). The pointer
  // stays valid until the next step_buffer, reset or erase call for s.
  float* step_buffer(SeqId s, int32_t n);
  // The last step buffer of s (empty when none was handed out since the last take).
  std::span<const float> step_mass(SeqId s) const;
  // Marks the step buffer consumed.
  void clear_step(SeqId s);

  // The scores of s, one per slot; resized to n (new slots score 0).
  std::span<float> scores(SeqId s, int32_t n);
  std::span<const float> scores(SeqId s) const;

  // After KvManager::evict: slot `to` takes slot `from`'s score for each move, then the list is
  // cut to n slots.
  void apply_moves(SeqId s, std::span<const std::pair<int32_t, int32_t>> moves, int32_t n);

  void fork(SeqId parent, SeqId child);
  void reset(SeqId s);  // forgets the scores (the sequence recomputes from scratch)
  void erase(SeqId s);
  bool has(SeqId s) const { return m_.count(s) > 0; }

 private:
  struct Entry {
    std::vector<float> scores;  // [slots]
    std::vector<float> mass;    // [slots of the step] written by the kernels
  };
  std::unordered_map<SeqId, Entry> m_;
};

}  // namespace strata
