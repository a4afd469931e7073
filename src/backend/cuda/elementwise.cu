// Elementwise kernels of the CUDA backend: embedding of float tables, RMSNorm, RoPE, SiLU-gate,
// residual add, bias, row gather, and the read-bandwidth probe. Memory-bound and small next to the
// matmuls; written for exactness against the CPU references (kernels_ref.h) first: RMSNorm sums
// squares in double, RoPE computes its angles in double, as the reference does.

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_rows.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 16 ? b : 65535 * 16);
}

template <typename T>
__device__ float widen(T v);
template <>
__device__ float widen<float>(float v) { return v; }
template <>
__device__ float widen<__half>(__half v) { return __half2float(v); }
template <>
__device__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void embed_kernel(const uint8_t* table, uint64_t row_bytes, const int32_t* tokens, int64_t n, int64_t cols,
                             float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const T* row = reinterpret_cast<const T*>(table + static_cast<uint64_t>(tokens[t]) * row_bytes);
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x) {
    out[t * cols + c] = widen<T>(row[c]);
  }
}

__device__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const double total = shared[0];
  __syncthreads();
  return total;
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int64_t cols, float eps, __half* y16) {
  pdl_wait();
  pdl_trigger();
  __shared__ double partial[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  double ss = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += static_cast<double>(xr[c]) * xr[c];
  const double total = block_sum(ss, partial);
  const float inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(cols) + static_cast<double>(eps)));
  __half* y16r = y16 != nullptr ? y16 + blockIdx.x * cols : nullptr;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = xr[c] * inv * w[c];
    yr[c] = v;
    if (y16r != nullptr) y16r[c] = __float2half_rn(v);
  }
}

// One block per token: the angles of its position into shared memory, then every (head, pair).
__global__ void rope_kernel(float* x, const int32_t* pos, int32_t n_heads, int32_t head_dim, RopeArgs a) {
  __shared__ double cs[kMaxRotPairs], sn[kMaxRotPairs];
  const int64_t t = blockIdx.x;
  const int32_t half = a.n_rot / 2;
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) rope_angle(a, pos[t], i, &cs[i], &sn[i]);
  __syncthreads();
  for (int32_t w = threadIdx.x; w < n_heads * half; w += blockDim.x) {
    const int32_t h = w / half, i = w % half;
    rope_rotate(x + (t * n_heads + h) * head_dim, i, half, a.neox, cs[i], sn[i]);
  }
}

// One block per row: x += d, then y = rms_norm(x) * w (the same arithmetic as add then rms_norm).
// Rows of up to kAddNormMax * blockDim.x floats keep their values in registers between the passes.
constexpr int kAddNormMax = 8;
__global__ void add_rms_norm_kernel(float* x, const float* d, const float* w, float* y, int64_t cols, float eps,
                                    __half* y16) {
  pdl_wait();
  pdl_trigger();
  __shared__ double partial[32];
  float* xr = x + blockIdx.x * cols;
  const float* dr = d + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float v[kAddNormMax];
  double ss = 0;
#pragma unroll
  for (int j = 0; j < kAddNormMax; ++j) {
    const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
    v[j] = 0.0f;
    if (c < cols) {
      v[j] = xr[c] + dr[c];
      xr[c] = v[j];
      ss += static_cast<double>(v[j]) * v[j];
    }
  }
  const double total = block_sum(ss, partial);
  const float inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(cols) + static_cast<double>(eps)));
#pragma unroll
  for (int j = 0; j < kAddNormMax; ++j) {
    const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
    if (c < cols) {
      const float o = v[j] * inv * w[c];
      yr[c] = o;
      if (y16 != nullptr) y16[blockIdx.x * cols + c] = __float2half_rn(o);
    }
  }
}

// One block of 128 threads per row: r of a pending lazy norm from the producer's partial sums of
// squares, with the arithmetic of matmul.cu's norm_part_sums / norm_scales (thread t sums parts
// t, t + 128, ... in double, a fixed xor butterfly per warp, the 4 warps in order), then h *= r.
constexpr int kNormResolveThreads = 128;
__global__ void __launch_bounds__(kNormResolveThreads) norm_resolve_kernel(float* h, int64_t cols, const float* parts,
                                                                           int32_t n_parts, float eps) {
  pdl_wait();
  pdl_trigger();
  __shared__ double sums[kNormResolveThreads / 32];
  const int64_t i = blockIdx.x;
  double v = 0.0;
  for (int p = static_cast<int>(threadIdx.x); p < n_parts; p += kNormResolveThreads) {
    v += static_cast<double>(parts[i * n_parts + p]);
  }
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31u) == 0) sums[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = sums[0];
  for (int w = 1; w < kNormResolveThreads / 32; ++w) t += sums[w];
  const float r = static_cast<float>(1.0 / sqrt(t / static_cast<double>(cols) + static_cast<double>(eps)));
  float* hr = h + i * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kNormResolveThreads) hr[c] = hr[c] * r;
}

// Blocks of (token, group of heads): the angles of the token's position into shared memory, RoPE
// of the group's q and k heads (as rope_kernel), then the K and V rows of its kv heads into their
// KV slot (as kv_store). Heads 0..n_head-1 are q heads, n_head.. the kv heads.
__global__ void rope_kv_store_kernel(float* q, float* k, const float* v, const int32_t* pos, int32_t n_head,
                                     int32_t n_kv, int32_t head_dim, int32_t heads_per_block, RopeArgs a,
                                     KvLayerView kv, const int32_t* slots) {
  pdl_wait();
  pdl_trigger();
  __shared__ double cs[kMaxRotPairs], sn[kMaxRotPairs];
  const int64_t t = blockIdx.x;
  const int32_t h0 = blockIdx.y * heads_per_block;
  const int32_t h1 = min(h0 + heads_per_block, n_head + n_kv);
  const int32_t half = a.n_rot / 2;
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) rope_angle(a, pos[t], i, &cs[i], &sn[i]);
  __syncthreads();
  for (int32_t w = threadIdx.x; w < (h1 - h0) * half; w += blockDim.x) {
    const int32_t h = h0 + w / half, i = w % half;
    float* row = h < n_head ? q + (t * n_head + h) * head_dim : k + (t * n_kv + (h - n_head)) * head_dim;
    rope_rotate(row, i, half, a.neox, cs[i], sn[i]);
  }
  __syncthreads();
  const int32_t s = slots[t];
  const int32_t k0 = max(h0, n_head) - n_head, k1 = h1 - n_head;  // kv heads of this block
  if (s < 0 || k1 <= k0) return;
  const int64_t width = int64_t{n_kv} * head_dim;
  const int64_t base = int64_t{k0} * head_dim, count = int64_t{k1 - k0} * head_dim;
  const float* kr = k + t * width + base;
  const float* vr = v + t * width + base;
  const int64_t dst = int64_t{s} * width + base;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) store_kv_elem(kv, dst + e, kr[e], vr[e]);
}

// hi = bf16(x), lo = bf16(x - hi): hi + lo carries ~16 significant bits of x (a bf16 product of
// W with both, summed, is as close to W.x as an f16 one).
__global__ void bf16_split_kernel(const float* src, int64_t n, uint16_t* hi, uint16_t* lo) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = src[i];
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    hi[i] = __bfloat16_as_ushort(h);
    lo[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x - __bfloat162float(h)));
  }
}

__global__ void silu_mul_kernel(float* gate, const float* up, int64_t n, __half* out16) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    const float o = g / (1.0f + expf(-g)) * up[i];
    gate[i] = o;
    if (out16 != nullptr) out16[i] = __float2half_rn(o);
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

__global__ void gather_rows_kernel(const float* src, int64_t cols, const int32_t* rows, float* dst) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.y;
  const float* s = src + static_cast<int64_t>(rows[r]) * cols;
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x) {
    dst[r * cols + c] = s[c];
  }
}

// Whether (v, i) precedes (bv, bi) in the greedy order: the larger value, then the lower index
// (NaN never precedes: its comparisons are false).
__device__ __forceinline__ bool pick_before(float v, int32_t i, float bv, int32_t bi) {
  return v > bv || (v == bv && i < bi);
}

// The first of a warp's (best, at) pairs in the greedy order, in every lane.
__device__ __forceinline__ void warp_pick(float& best, int32_t& at) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t i = __shfl_xor_sync(0xffffffffu, at, o);
    if (pick_before(v, i, best, at)) {
      best = v;
      at = i;
    }
  }
}

// One block per row, each thread over its columns, then the block reduces; every comparison by
// pick_before, so the order the values are seen in does not matter. A thread's loads are issued
// 8 at a time (one pass over 32k logits is then ~1 round trip per thread, not ~31 in a row).
// out[r]: the pick, -1 when the largest value is not finite (every value NaN or -inf, or a +inf);
// embed[r]: the same with 0 for -1 (a token the next pass can embed).
__global__ void __launch_bounds__(1024) greedy_pick_kernel(const float* __restrict__ x, int64_t cols,
                                                           int32_t* __restrict__ out, int32_t* __restrict__ embed) {
  pdl_wait();
  pdl_trigger();
  constexpr int U = 8;
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  float best = -INFINITY;
  int32_t at = INT32_MAX;
  auto see = [&](float v, int64_t c) {
    if (pick_before(v, static_cast<int32_t>(c), best, at)) {
      best = v;
      at = static_cast<int32_t>(c);
    }
  };
  const int64_t nt = blockDim.x;
  if ((cols & 3) == 0) {  // rows 16-byte aligned: float4 loads
    const auto* r4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = cols / 4;
    for (int64_t base = threadIdx.x; base < n4; base += U * nt) {
      float4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = base + u * nt;
        v[u] = j < n4 ? r4[j] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = 4 * (base + u * nt);
        see(v[u].x, c);
        see(v[u].y, c + 1);
        see(v[u].z, c + 2);
        see(v[u].w, c + 3);
      }
    }
  } else {
    for (int64_t base = threadIdx.x; base < cols; base += U * nt) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = base + u * nt;
        v[u] = c < cols ? row[c] : -INFINITY;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) see(v[u], base + u * nt);
    }
  }
  warp_pick(best, at);
  __shared__ float bvals[32];
  __shared__ int32_t bidx[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) {
    bvals[warp] = best;
    bidx[warp] = at;
  }
  __syncthreads();
  if (warp != 0) return;
  best = lane < nw ? bvals[lane] : -INFINITY;
  at = lane < nw ? bidx[lane] : INT32_MAX;
  warp_pick(best, at);
  if (lane == 0) {
    const bool finite = best > -INFINITY && best < INFINITY;
    out[blockIdx.x] = finite ? at : -1;
    embed[blockIdx.x] = finite ? at : 0;
  }
}

__global__ void read_probe_kernel(const float4* data, int64_t n4, float* sink) {
  float acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4; i += int64_t{gridDim.x} * blockDim.x) {
    const float4 v = __ldcs(data + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234.5f) *sink = acc;  // keeps the loads; practically never taken
}

}  // namespace

void embed_float_table(const WeightMatrix& table, const int32_t* tokens, int64_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>((table.cols + kThreads - 1) / kThreads), static_cast<unsigned>(n));
  switch (table.type) {
    case GgmlType::kF32: launch_pdl(embed_kernel<float>, grid, dim3(kThreads), 0, s, table.data, table.row_bytes, tokens, n, table.cols, out); break;
    case GgmlType::kF16: launch_pdl(embed_kernel<__half>, grid, dim3(kThreads), 0, s, table.data, table.row_bytes, tokens, n, table.cols, out); break;
    case GgmlType::kBF16:
      launch_pdl(embed_kernel<__nv_bfloat16>, grid, dim3(kThreads), 0, s, table.data, table.row_bytes, tokens, n, table.cols,
                 out);
      break;
    default: break;
  }
  STRATA_CUDA_LAUNCH_CHECK();
}

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps, cudaStream_t s,
              void* y16) {
  if (rows == 0) return;
  launch_pdl(rms_norm_kernel, dim3(static_cast<unsigned>(rows)), dim3(cols >= 1024 ? 512 : 128), 0, s, x, w, y, cols, eps,
             static_cast<__half*>(y16));
}

void rope(float* x, const int32_t* pos, int64_t n, int32_t n_heads, int32_t head_dim, const RopeParams& p,
          const double* inv_freq, cudaStream_t s) {
  if (n == 0 || p.n_rot == 0) return;
  const RopeArgs a{inv_freq, p.freq_factors, p.freq_scale, p.n_rot, p.neox};
  rope_kernel<<<static_cast<unsigned>(n), 128, 0, s>>>(x, pos, n_heads, head_dim, a);
  STRATA_CUDA_LAUNCH_CHECK();
}

void add_rms_norm(float* x, const float* d, const float* w, float* y, int64_t rows, int64_t cols, float eps,
                  cudaStream_t s, void* y16) {
  if (rows == 0) return;
  const int threads = cols > 4 * 256 ? 1024 : 256;
  if (cols > int64_t{kAddNormMax} * threads) {  // wider than the register path: add, then norm
    add(x, d, rows * cols, s);
    rms_norm(x, w, y, rows, cols, eps, s, y16);
    return;
  }
  launch_pdl(add_rms_norm_kernel, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, s, x, d, w, y, cols, eps,
             static_cast<__half*>(y16));
}

void norm_resolve(float* h, int64_t rows, int64_t cols, const float* parts, int32_t n_parts, float eps, cudaStream_t s) {
  if (rows == 0) return;
  launch_pdl(norm_resolve_kernel, dim3(static_cast<unsigned>(rows)), dim3(kNormResolveThreads), 0, s, h, cols, parts, n_parts,
             eps);
}

void rope_kv_store(float* q, float* k, const float* v, const int32_t* pos, int64_t n, int32_t n_head, int32_t n_kv,
                   int32_t head_dim, const RopeParams& p, const double* inv_freq, const KvLayerView& kv,
                   const int32_t* slots, cudaStream_t s) {
  if (n == 0) return;
  const RopeArgs a{inv_freq, p.freq_factors, p.freq_scale, p.n_rot, p.neox};
  const int32_t half = std::max(p.n_rot / 2, 1);
  const int32_t heads_per_block = std::max(1, 256 / half);
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((n_head + n_kv + heads_per_block - 1) / heads_per_block));
  launch_pdl(rope_kv_store_kernel, grid, dim3(256), 0, s, q, k, v, pos, n_head, n_kv, head_dim, heads_per_block, a, kv,
             slots);
}

void f32_to_bf16_split(const float* src, int64_t n, void* hi, void* lo, cudaStream_t s) {
  if (n == 0) return;
  bf16_split_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, n, static_cast<uint16_t*>(hi), static_cast<uint16_t*>(lo));
  STRATA_CUDA_LAUNCH_CHECK();
}

void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s, void* out16) {
  if (n == 0) return;
  launch_pdl(silu_mul_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, s, gate, up, n, static_cast<__half*>(out16));
}

void add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_pdl(add_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, s, y, x, n);
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  launch_pdl(add_bias_kernel, dim3(blocks_for(rows * cols)), dim3(kThreads), 0, s, y, bias, rows, cols);
}

void gather_rows(const float* src, int64_t cols, const int32_t* rows, int64_t n, float* dst, cudaStream_t s) {
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(n));
  launch_pdl(gather_rows_kernel, grid, dim3(kThreads), 0, s, src, cols, rows, dst);
}

void greedy_pick(const float* x, int64_t rows, int64_t cols, int32_t* out, int32_t* embed, cudaStream_t s) {
  if (rows == 0) return;
  launch_pdl(greedy_pick_kernel, dim3(static_cast<unsigned>(rows)), dim3(1024), 0, s, x, cols, out, embed);
}

void read_probe(const float4* data, int64_t n4, float* sink, cudaStream_t s) {
  read_probe_kernel<<<132 * 8, 512, 0, s>>>(data, n4, sink);
  STRATA_CUDA_LAUNCH_CHECK();
}

__global__ void __launch_bounds__(128) l2_prefetch_kernel(L2Ranges r, uint32_t chunk, int mode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint64_t tid = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x, nth = uint64_t{gridDim.x} * blockDim.x;
  for (int i = 0; i < r.n; ++i) {
    const uint64_t a0 = static_cast<uint64_t>(__cvta_generic_to_global(r.p[i]));
    const uint64_t unit = mode == 0 ? chunk : 128;
    const uint64_t cnt = (r.bytes[i] + unit - 1) / unit;
    for (uint64_t c = tid; c < cnt; c += nth) {
      const uint64_t a = a0 + c * unit;
      if (mode == 0) {
        const uint64_t b = (a + 15u) & ~uint64_t{15};
        const uint64_t end = a0 + r.bytes[i] < a + unit ? a0 + r.bytes[i] : a + unit;
        const uint64_t e = end & ~uint64_t{15};
        if (e > b) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b), "r"(static_cast<uint32_t>(e - b)) : "memory");
      } else {
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(a));
      }
    }
  }
#else
  (void)r;
  (void)chunk;
  (void)mode;
#endif
}

void l2_prefetch(const L2Ranges& r, int blocks, uint32_t chunk, int mode, cudaStream_t s) {
  if (r.n == 0 || blocks <= 0) return;
  l2_prefetch_kernel<<<static_cast<unsigned>(blocks), 128, 0, s>>>(r, chunk, mode);
  STRATA_CUDA_LAUNCH_CHECK();
}

#if defined(STRATA_CUDA_STEP_TRACE)
void step_trace_set_elementwise(const StepTraceDev& t, cudaStream_t s) { step_trace_set_local(t, s); }
#else
void step_trace_set_elementwise(const StepTraceDev&, cudaStream_t) {}
#endif

}  // namespace strata::cuda
