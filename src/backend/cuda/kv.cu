// KV-cache kernels of the CUDA backend: kv_store (new K/V rows into their hot slots), warm_encode
// (hot blocks into one warm slot, byte for byte kv/warm_format.cpp's encoder) and warm_decode (one
// warm sub-block back to f32 rows, exactly warm_decode_row's values).
//
// Exactness: the encoder repeats the CPU's float operations in the same order. Every product that
// could be contracted with a following add is written with __fmul_rn / __fadd_rn; divisions and
// conversions are IEEE round to nearest even (no fast-math); max/min reductions are
// order-independent for finite data, so their thread order does not matter. The per-element math
// is __host__ __device__ so that it can be checked against the CPU code on the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_rows.cuh"

namespace strata::cuda {
namespace kvk {

#define KVK_HD __host__ __device__ __forceinline__

KVK_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVK_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

KVK_HD void st_f16(uint8_t* p, float v) { *reinterpret_cast<uint16_t*>(p) = f32_to_half_bits(v); }

KVK_HD float clampf(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }
KVK_HD float maxf(float a, float b) { return a < b ? b : a; }  // std::max
KVK_HD float minf(float a, float b) { return b < a ? b : a; }  // std::min

// f32_to_e4m3 of kv/warm_format.cpp, operation for operation.
KVK_HD uint8_t e4m3_encode(float x) {
  const uint8_t sign = (f32_bits(x) >> 31) ? 0x80 : 0;
  const float a = fabsf(x);
  if (x != x) return 0x7f;
  if (a >= 448.0f) return sign | 0x7e;
  int e;
  frexpf(a, &e);
  int E = e - 1;
  if (a == 0 || E < -6) {
    const float q = rintf(ldexpf(a, 9));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  float q = rintf(ldexpf(a, 3 - E));
  if (q >= 16.0f) {
    q = 8.0f;
    ++E;
  }
  int code = ((E + 7) << 3) | (static_cast<int>(q) - 8);
  if (code > 0x7e) code = 0x7e;
  return static_cast<uint8_t>(sign | code);
}

// int4_params of warm_format.cpp: scale (stored f16, returned as read back) and zero point.
KVK_HD void int4_params(float lo, float hi, uint8_t* scale_out, int8_t* zero_out, float* s_out, int* z_out) {
  float s = maxf((hi - lo) / 15.0f, fabsf(lo) / 127.0f);
  st_f16(scale_out, s);
  s = ld_f16(scale_out);
  const int z = s > 0 ? static_cast<int>(clampf(rintf(-lo / s), -128.0f, 127.0f)) : 0;
  *zero_out = static_cast<int8_t>(z);
  *s_out = s;
  *z_out = z;
}

KVK_HD uint8_t int4_q(float x, float s, int z) {
  if (s <= 0) return static_cast<uint8_t>(z < 0 ? 0 : (z > 15 ? 15 : z));
  return static_cast<uint8_t>(clampf(add_rn(rintf(x / s), static_cast<float>(z)), 0.0f, 15.0f));
}

KVK_HD int8_t int8_q(float x, float inv) { return static_cast<int8_t>(clampf(rintf(mul_rn(x, inv)), -127.0f, 127.0f)); }

// Element e of token t (0 <= t < span * block_size) of the span's hot blocks, as f32.
KVK_HD float gather_elem(const KvLayerView& hot, bool value, const int32_t* blocks, int64_t t, int64_t e) {
  const int64_t bs = hot.block_size, HD = int64_t{hot.n_kv_heads} * hot.head_dim;
  const int64_t idx = (int64_t{blocks[t / bs]} * bs + t % bs) * HD + e;
  const uint8_t* base = value ? hot.v : hot.k;
  switch (hot.dtype) {
    case KvDtype::kF32: return reinterpret_cast<const float*>(base)[idx];
    case KvDtype::kF16: return half_bits_to_f32(reinterpret_cast<const uint16_t*>(base)[idx]);
    case KvDtype::kBF16: return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(base)[idx]);
  }
  return 0.0f;
}

// --- kernels -------------------------------------------------------------------------------------

// The slot a thread block encodes: the launch's one (dst == nullptr: k_slot, v_slot, blocks as
// given), or, for a batch of slots (warm_encode_many), slot dst[blockIdx.z] from blocks
// [z * span, (z + 1) * span).
struct EncodeJob {
  const int32_t* blocks;
  uint8_t* k;
  uint8_t* v;
};
__device__ __forceinline__ EncodeJob encode_job(const KvLayerView& hot, const int32_t* blocks, int32_t span,
                                                uint8_t* k_slot, uint8_t* v_slot, const int32_t* dst) {
  if (dst == nullptr) return {blocks, k_slot, v_slot};
  const int64_t z = blockIdx.z;
  const int64_t slot = dst[z];
  return {blocks + z * span, hot.warm_k + slot * hot.warm_k_slot_bytes, hot.warm_v + slot * hot.warm_v_slot_bytes};
}

__global__ void kv_store_kernel(KvLayerView kv, const float* __restrict__ k, const float* __restrict__ v,
                                const int32_t* __restrict__ slots, int64_t n, int64_t row) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n * row) return;
  const int64_t t = i / row, e = i - t * row;
  const int32_t s = slots[t];
  if (s < 0) return;
  store_kv_elem(kv, int64_t{s} * row + e, k[i], v[i]);
}

// int8: one warp per (token, head) row; blockIdx.y = 0 keys, 1 values.
__global__ void encode_int8_kernel(KvLayerView hot, const int32_t* __restrict__ blocks, int32_t span,
                                   uint8_t* k_slot, uint8_t* v_slot, const int32_t* __restrict__ dst) {
  const EncodeJob job = encode_job(hot, blocks, span, k_slot, v_slot, dst);
  blocks = job.blocks;
  k_slot = job.k;
  v_slot = job.v;
  const bool value = blockIdx.y != 0;
  uint8_t* out = value ? v_slot : k_slot;
  const int64_t H = hot.n_kv_heads, D = hot.head_dim, T = int64_t{span} * hot.block_size;
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  if (r >= T * H) return;
  const int64_t t = r / H, h = r - t * H;
  float amax = 0;
  for (int64_t d = lane; d < D; d += 32) amax = maxf(amax, fabsf(gather_elem(hot, value, blocks, t, h * D + d)));
  for (int o = 16; o > 0; o >>= 1) amax = maxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  uint8_t* scale_p = out + align4(T * H * D) + 2 * r;
  const float s = half_bits_to_f32(f32_to_half_bits(amax / 127.0f));
  if (lane == 0) st_f16(scale_p, amax / 127.0f);
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  auto* q = reinterpret_cast<int8_t*>(out);
  for (int64_t d = lane; d < D; d += 32) q[r * D + d] = int8_q(gather_elem(hot, value, blocks, t, h * D + d), inv);
}

// fp8: one thread block per head; blockIdx.y = 0 keys, 1 values.
__global__ void encode_fp8_kernel(KvLayerView hot, const int32_t* __restrict__ blocks, int32_t span,
                                  uint8_t* k_slot, uint8_t* v_slot, const int32_t* __restrict__ dst) {
  const EncodeJob job = encode_job(hot, blocks, span, k_slot, v_slot, dst);
  blocks = job.blocks;
  k_slot = job.k;
  v_slot = job.v;
  const bool value = blockIdx.y != 0;
  uint8_t* out = value ? v_slot : k_slot;
  const int64_t H = hot.n_kv_heads, D = hot.head_dim, T = int64_t{span} * hot.block_size;
  const int64_t h = blockIdx.x;
  __shared__ float red[32];
  float amax = 0;
  for (int64_t i = threadIdx.x; i < T * D; i += blockDim.x) {
    const int64_t t = i / D, d = i - t * D;
    amax = maxf(amax, fabsf(gather_elem(hot, value, blocks, t, h * D + d)));
  }
  for (int o = 16; o > 0; o >>= 1) amax = maxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0;
  for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) amax = maxf(amax, red[i]);
  const float s = amax / 448.0f;
  if (threadIdx.x == 0) *reinterpret_cast<float*>(out + align4(T * H * D) + 4 * h) = s;
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  for (int64_t i = threadIdx.x; i < T * D; i += blockDim.x) {
    const int64_t t = i / D, d = i - t * D;
    out[(t * H + h) * D + d] = e4m3_encode(mul_rn(gather_elem(hot, value, blocks, t, h * D + d), inv));
  }
}

// int4 keys: item i = (token group, head, channel pair); writes that pair's parameters and nibbles.
KVK_HD void encode_int4_k_item(const KvLayerView& hot, const int32_t* blocks, int32_t span, uint8_t* k_slot, int64_t i) {
  const int64_t H = hot.n_kv_heads, D = hot.head_dim, T = int64_t{span} * hot.block_size;
  const int64_t gk = T % 32 == 0 ? 32 : T;
  const int64_t G = T / gk;
  const int64_t pair = i % (D / 2), gh = i / (D / 2);
  const int64_t h = gh % H, g = gh / H;
  uint8_t* data = k_slot;
  uint8_t* scales = k_slot + align4(T * H * D / 2);
  auto* zeros = reinterpret_cast<int8_t*>(scales + align4(2 * G * H * D));
  float s[2];
  int z[2];
  for (int c = 0; c < 2; ++c) {
    const int64_t d = 2 * pair + c;
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t t = g * gk; t < (g + 1) * gk; ++t) {
      const float x = gather_elem(hot, false, blocks, t, h * D + d);
      lo = minf(lo, x);
      hi = maxf(hi, x);
    }
    const int64_t m = (g * H + h) * D + d;
    int4_params(lo, hi, scales + 2 * m, zeros + m, &s[c], &z[c]);
  }
  for (int64_t t = g * gk; t < (g + 1) * gk; ++t) {
    const uint8_t q0 = int4_q(gather_elem(hot, false, blocks, t, h * D + 2 * pair), s[0], z[0]);
    const uint8_t q1 = int4_q(gather_elem(hot, false, blocks, t, h * D + 2 * pair + 1), s[1], z[1]);
    data[((t * H + h) * D + 2 * pair) / 2] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// int4 values: item i = (token, head, channel group).
KVK_HD void encode_int4_v_item(const KvLayerView& hot, const int32_t* blocks, int32_t span, uint8_t* v_slot, int64_t i) {
  const int64_t H = hot.n_kv_heads, D = hot.head_dim, T = int64_t{span} * hot.block_size;
  const int64_t gv = D % 32 == 0 ? 32 : D;
  const int64_t NG = D / gv;
  const int64_t g = i % NG, th = i / NG;
  const int64_t h = th % H, t = th / H;
  uint8_t* data = v_slot;
  uint8_t* scales = v_slot + align4(T * H * D / 2);
  auto* zeros = reinterpret_cast<int8_t*>(scales + align4(2 * T * H * NG));
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t d = g * gv; d < (g + 1) * gv; ++d) {
    const float x = gather_elem(hot, true, blocks, t, h * D + d);
    lo = minf(lo, x);
    hi = maxf(hi, x);
  }
  const int64_t m = (t * H + h) * NG + g;
  float s;
  int z;
  int4_params(lo, hi, scales + 2 * m, zeros + m, &s, &z);
  for (int64_t d = g * gv; d < (g + 1) * gv; d += 2) {
    const uint8_t q0 = int4_q(gather_elem(hot, true, blocks, t, h * D + d), s, z);
    const uint8_t q1 = int4_q(gather_elem(hot, true, blocks, t, h * D + d + 1), s, z);
    data[((t * H + h) * D + d) / 2] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

KVK_HD int64_t int4_k_items(int64_t T, int64_t H, int64_t D) { return (T / (T % 32 == 0 ? 32 : T)) * H * (D / 2); }
KVK_HD int64_t int4_v_items(int64_t T, int64_t H, int64_t D) { return T * H * (D / (D % 32 == 0 ? 32 : D)); }

// int4: blockIdx.y = 0 keys, 1 values; one thread per item.
__global__ void encode_int4_kernel(KvLayerView hot, const int32_t* __restrict__ blocks, int32_t span,
                                   uint8_t* k_slot, uint8_t* v_slot, const int32_t* __restrict__ dst) {
  const EncodeJob job = encode_job(hot, blocks, span, k_slot, v_slot, dst);
  blocks = job.blocks;
  k_slot = job.k;
  v_slot = job.v;
  const int64_t H = hot.n_kv_heads, D = hot.head_dim, T = int64_t{span} * hot.block_size;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (blockIdx.y == 0) {
    if (i < int4_k_items(T, H, D)) encode_int4_k_item(hot, blocks, span, k_slot, i);
  } else {
    if (i < int4_v_items(T, H, D)) encode_int4_v_item(hot, blocks, span, v_slot, i);
  }
}

// One warm sub-block to f32 rows k, v [block_size][n_kv_heads * head_dim]; thread per element.
__global__ void warm_decode_kernel(KvLayerView kv, BlockId id, float* __restrict__ k, float* __restrict__ v) {
  const int64_t HD = int64_t{kv.n_kv_heads} * kv.head_dim;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= kv.block_size * HD) return;
  const int32_t slot = static_cast<int32_t>(i / HD);
  const int64_t e = i - slot * HD;
  const int32_t h = static_cast<int32_t>(e / kv.head_dim), d = static_cast<int32_t>(e - int64_t{h} * kv.head_dim);
  k[i] = row_elem(row_src(kv, false, id, slot, h), d);
  v[i] = row_elem(row_src(kv, true, id, slot, h), d);
}

// One thread block per piece (grid-strided over the pieces): the widest moves the piece's
// alignment allows.
__global__ void batched_copy_kernel(const CopyPiece* __restrict__ pieces, int64_t n) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const CopyPiece c = pieces[p];
    const uint64_t align = reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) | c.bytes;
    if (align % 16 == 0) {
      const auto* s = reinterpret_cast<const uint4*>(c.src);
      auto* d = reinterpret_cast<uint4*>(c.dst);
      for (uint64_t i = threadIdx.x; i < c.bytes / 16; i += blockDim.x) d[i] = s[i];
    } else if (align % 4 == 0) {
      const auto* s = reinterpret_cast<const uint32_t*>(c.src);
      auto* d = reinterpret_cast<uint32_t*>(c.dst);
      for (uint64_t i = threadIdx.x; i < c.bytes / 4; i += blockDim.x) d[i] = s[i];
    } else {
      for (uint64_t i = threadIdx.x; i < c.bytes; i += blockDim.x) c.dst[i] = c.src[i];
    }
  }
}

#undef KVK_HD

}  // namespace kvk

void kv_store(const KvLayerView& kv, const float* k, const float* v, const int32_t* slots, int64_t n,
              cudaStream_t s) {
  const int64_t row = int64_t{kv.n_kv_heads} * kv.head_dim;
  const int64_t total = n * row;
  if (total <= 0) return;
  const int threads = 256;
  kvk::kv_store_kernel<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0, s>>>(kv, k, v, slots,
                                                                                                 n, row);
  STRATA_CUDA_LAUNCH_CHECK();
}

namespace {

// One launch: the slot (k_slot, v_slot) from `blocks` when dst is null, else n_slots slots
// (gridDim.z; slot dst[z] from blocks [z * span, (z + 1) * span)).
void launch_encode(WarmFormat f, const KvLayerView& hot, const int32_t* blocks, int32_t span, uint8_t* k_slot,
                   uint8_t* v_slot, const int32_t* dst, unsigned n_slots, cudaStream_t s) {
  const int64_t H = hot.n_kv_heads, D = hot.head_dim, T = int64_t{span} * hot.block_size;
  switch (f) {
    case WarmFormat::kNone: return;
    case WarmFormat::kInt8: {
      const int threads = 256;  // 8 rows per block
      const int64_t rows = T * H;
      const dim3 grid(static_cast<unsigned>((rows * 32 + threads - 1) / threads), 2, n_slots);
      kvk::encode_int8_kernel<<<grid, threads, 0, s>>>(hot, blocks, span, k_slot, v_slot, dst);
      break;
    }
    case WarmFormat::kFp8: {
      const dim3 grid(static_cast<unsigned>(H), 2, n_slots);
      kvk::encode_fp8_kernel<<<grid, 256, 0, s>>>(hot, blocks, span, k_slot, v_slot, dst);
      break;
    }
    case WarmFormat::kInt4: {
      const int64_t nk = kvk::int4_k_items(T, H, D), nv = kvk::int4_v_items(T, H, D);
      const int64_t n = nk > nv ? nk : nv;
      const int threads = 128;
      const dim3 grid(static_cast<unsigned>((n + threads - 1) / threads), 2, n_slots);
      kvk::encode_int4_kernel<<<grid, threads, 0, s>>>(hot, blocks, span, k_slot, v_slot, dst);
      break;
    }
  }
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace

void warm_encode(WarmFormat f, const KvLayerView& hot, const int32_t* blocks, int32_t span, uint8_t* k_slot,
                 uint8_t* v_slot, cudaStream_t s) {
  launch_encode(f, hot, blocks, span, k_slot, v_slot, nullptr, 1, s);
}

void warm_encode_many(WarmFormat f, const KvLayerView& hot, const int32_t* blocks, int32_t span,
                      const int32_t* dst_slots, int64_t n, cudaStream_t s) {
  constexpr int64_t kMaxZ = 65535;  // gridDim.z
  for (int64_t i = 0; i < n; i += kMaxZ) {
    const auto m = static_cast<unsigned>(n - i < kMaxZ ? n - i : kMaxZ);
    launch_encode(f, hot, blocks + i * span, span, nullptr, nullptr, dst_slots + i, m, s);
  }
}

void batched_copy(const CopyPiece* pieces, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(n < 65535 ? n : 65535);
  kvk::batched_copy_kernel<<<blocks, 256, 0, s>>>(pieces, n);
  STRATA_CUDA_LAUNCH_CHECK();
}

void warm_decode(const KvLayerView& kv, BlockId id, float* k, float* v, cudaStream_t s) {
  const int64_t total = int64_t{kv.block_size} * kv.n_kv_heads * kv.head_dim;
  if (total <= 0) return;
  const int threads = 256;
  kvk::warm_decode_kernel<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0, s>>>(kv, id, k, v);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata::cuda
