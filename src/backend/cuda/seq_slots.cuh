// Which sequence of an attention batch owns a block's slot, for kernels whose grid gives each
// sequence a number of consecutive slots (attention.cu's FP32 kernel: its tile groups;
// attention_mma.cu: its blocks of query vectors). Device code only.
// Thread-safety: stateless.
#pragma once

#include <cstdint>

namespace strata::cuda::attn {

// Sequence i of n_seqs owns slots_of(i) consecutive slots, in sequence order. Sets *seq to the
// sequence that owns `slot` and *local to the slot's index among that sequence's slots, or *seq =
// -1 when `slot` is past the last one. A warp-wide prefix sum over 32 sequences at a time: every
// lane of the (full) warp calls it and gets the same answer.
template <class SlotsOf>
__device__ __forceinline__ void find_seq_slot(int32_t n_seqs, SlotsOf slots_of, int64_t slot, int lane, int32_t* seq,
                                              int64_t* local) {
  *seq = -1;
  *local = 0;
  int64_t cum = 0;
  for (int32_t base = 0; base < n_seqs; base += 32) {
    const int32_t si = base + lane;
    const int64_t ng = si < n_seqs ? slots_of(si) : 0;
    int64_t inc = ng;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t y = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= o) inc += y;
    }
    const int64_t total = __shfl_sync(0xffffffffu, inc, 31);
    if (slot < cum + total) {
      const unsigned mask = __ballot_sync(0xffffffffu, cum + inc > slot);
      const int L = __ffs(mask) - 1;
      const int64_t excl = __shfl_sync(0xffffffffu, inc - ng, L);
      *seq = base + L;
      *local = slot - cum - excl;
      return;
    }
    cum += total;
  }
}

}  // namespace strata::cuda::attn
