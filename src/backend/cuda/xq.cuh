// The 8-bit x of the quantized GEMVs (kernels.h, gemv_xq_bytes): each run of 32 values of a row
// (cols % 32 == 0), with amax its largest |x|, becomes d = amax / 127 and q_k = round(x_k * (127 /
// amax)) in [-127, 127]; ds[g] = (d, d * sum of q) for each 16 values g. Every kernel that writes
// it (matmul.cu's quantize_xq_kernel, the decode attention's epilogue) takes these helpers, so
// the bytes are the same whoever writes them: a row's bytes depend on that row alone.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// The scale of a group from its amax, and the factor that quantizes it (0 for an all-zero group).
__device__ __forceinline__ void xq_scale(float amax, float* d, float* id) {
  *d = __fdiv_rn(amax, 127.0f);
  *id = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
}

__device__ __forceinline__ int32_t xq_quant(float v, float id) {
  return max(-127, min(127, __float2int_rn(__fmul_rn(v, id))));
}

// One group held one value per lane by a whole warp (lane l: value l of the group): q[l], and
// ds[0], ds[1] for lanes 0-15 and 16-31.
__device__ __forceinline__ void xq_store_warp(float v, int lane, int8_t* q, float2* ds) {
  float m = fabsf(v);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float d, id;
  xq_scale(m, &d, &id);
  const int32_t qi = xq_quant(v, id);
  q[lane] = static_cast<int8_t>(qi);
  int32_t sum = qi;
#pragma unroll
  for (int off = 1; off < 16; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if ((lane & 15) == 0) ds[lane >> 4] = make_float2(d, __fmul_rn(d, static_cast<float>(sum)));
}

}  // namespace strata::cuda
