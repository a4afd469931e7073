// GEMV straight from GGUF weight blocks (F32, F16, BF16, Q8_0, Q4_K, Q6_K), dequantization of
// quantized rows to IEEE half for the cuBLAS path, and f32 -> 16-bit conversion.
//
// GEMV layout: a warp owns R consecutive output rows (R = 1 for n = 1, 2 or 4 for batches) and
// walks them in "pieces": a piece is a fixed group of weights of one row (4..32 of them, some
// runs of 4 consecutive columns) that one lane loads with the widest loads the format's
// alignment allows and dequantizes in registers. Lane l takes pieces l, l + 32, l + 64, ...;
// U pieces per lane are loaded before any is used, so several loads are in flight. Each x row
// is read (float4, through L1) once per piece and used for all R weight rows; each weight byte is
// read once and used for all n rows of x.
//
// Determinism: for one output element the arithmetic is fixed: per piece, s = fma chain over the
// piece's weights in run order (starting from 0), acc += s for the lane's pieces in ascending
// order, then a fixed xor-butterfly over the 32 lanes. None of it depends on n, R, U or on the
// other rows, so a row's result is the same whatever batch it is computed in.
//
// Exactness: weights are dequantized with the operations and order of gguf/quant.cpp's
// dequantize_row, written with __fmul_rn/__fsub_rn so that nvcc cannot contract them into FMAs.
//
// Alignment assumed: w.data 16-byte aligned (cudaMalloc gives 256), x 16-byte aligned, dst of
// dequantize_to_f16 8-byte aligned. Row starts are only 2-byte aligned for Q8_0 and Q6_K, so
// those use 16-bit loads; F32/F16/BF16 rows (cols % 8 == 0) and Q4_K rows (144-byte blocks) are
// 16-byte aligned and use 16-byte loads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace strata::cuda {
namespace {

#define SHD __host__ __device__ __forceinline__

// ------------------------------------------------------------------------------------------
// Exact scalar helpers (host versions exist only for the host-side tests of the decoders).

SHD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

SHD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

SHD float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

SHD float half_bits_to_float(uint32_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
#else
  // Exact decode (as core/fp16.h).
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

SHD float bf16_bits_to_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b << 16);
#else
  const uint32_t bits = b << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

SHD float bits_to_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

// ------------------------------------------------------------------------------------------
// Loads of weight bytes: read-only, streamed (not kept in L1, so x stays there).

SHD uint4 ld_w_v4(const uint8_t* p) {
  uint4 v;
#ifdef __CUDA_ARCH__
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
#else
  std::memcpy(&v, p, 16);
#endif
  return v;
}

SHD uint32_t ld_w_u16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  unsigned short v;
  asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

SHD uint32_t ld_w_u8(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
#else
  return *p;
#endif
}

// 4 bytes from a 2-byte aligned address.
SHD uint32_t ld_w_u32_a2(const uint8_t* p) { return ld_w_u16(p) | (ld_w_u16(p + 2) << 16); }

template <int K>
SHD uint32_t word(const uint4& v) {
  if constexpr (K == 0) return v.x;
  else if constexpr (K == 1) return v.y;
  else if constexpr (K == 2) return v.z;
  else return v.w;
}

// ------------------------------------------------------------------------------------------
// Formats. Each defines:
//   kPieceElems, kRuns (kPieceElems / 4), kU (pieces per lane in flight for R = 1), kMaxR (most
//   rows per warp before registers run out), Raw,
//   load(row, p) -> Raw                        (row: start of the weight row, p: piece index)
//   run_start(p, t) -> first column of run t   (t in [0, kRuns), the run is 4 columns)
//   decode<t>(raw, p, w[4])                    exact dequantized weights of run t

struct FmtF32 {
  static constexpr int kPieceElems = 4;
  static constexpr int kRuns = 1;
  static constexpr int kU = 8;
  static constexpr int kMaxR = 4;
  using Raw = uint4;
  static SHD Raw load(const uint8_t* row, int p) { return ld_w_v4(row + 16 * static_cast<int64_t>(p)); }
  static SHD int run_start(int p, int) { return 4 * p; }
  template <int T>
  static SHD void decode(const Raw& r, int, float w[4]) {
    w[0] = bits_to_float(r.x);
    w[1] = bits_to_float(r.y);
    w[2] = bits_to_float(r.z);
    w[3] = bits_to_float(r.w);
  }
};

template <bool kBf16>
struct Fmt16 {
  static constexpr int kPieceElems = 8;
  static constexpr int kRuns = 2;
  static constexpr int kU = 8;
  static constexpr int kMaxR = 4;
  using Raw = uint4;
  static SHD Raw load(const uint8_t* row, int p) { return ld_w_v4(row + 16 * static_cast<int64_t>(p)); }
  static SHD int run_start(int p, int t) { return 8 * p + 4 * t; }
  static SHD float cvt(uint32_t h) { return kBf16 ? bf16_bits_to_float(h) : half_bits_to_float(h); }
  template <int T>
  static SHD void decode(const Raw& r, int, float w[4]) {
    const uint32_t a = word<2 * T>(r);
    const uint32_t b = word<2 * T + 1>(r);
    w[0] = cvt(a & 0xffffu);
    w[1] = cvt(a >> 16);
    w[2] = cvt(b & 0xffffu);
    w[3] = cvt(b >> 16);
  }
};

// Q8_0: 34-byte blocks {fp16 d, int8 qs[32]}; piece = 8 quants (4 pieces per block).
struct FmtQ8_0 {
  static constexpr int kPieceElems = 8;
  static constexpr int kRuns = 2;
  static constexpr int kU = 8;
  static constexpr int kMaxR = 4;
  struct Raw {
    uint32_t d;
    uint32_t q0, q1;
  };
  static SHD Raw load(const uint8_t* row, int p) {
    const uint8_t* blk = row + 34 * static_cast<int64_t>(p >> 2);
    const uint8_t* q = blk + 2 + 8 * (p & 3);
    Raw r;
    r.d = ld_w_u16(blk);
    r.q0 = ld_w_u32_a2(q);
    r.q1 = ld_w_u32_a2(q + 4);
    return r;
  }
  static SHD int run_start(int p, int t) { return 8 * p + 4 * t; }
  template <int T>
  static SHD void decode(const Raw& r, int, float w[4]) {
    const float d = half_bits_to_float(r.d);
    const uint32_t q = T == 0 ? r.q0 : r.q1;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int v = static_cast<int8_t>(static_cast<uint8_t>(q >> (8 * i)));
      w[i] = mul_rn(static_cast<float>(v), d);
    }
  }
};

// Q4_K: 144-byte blocks {fp16 d, fp16 dmin, scales[12], qs[128]}; piece k (0..7) of a block =
// qs bytes 16k..16k+15 (with c = k / 2, hf = k % 2: low nibbles are columns 64c + 16hf + i of
// sub-block 2c, high nibbles columns 64c + 32 + 16hf + i of sub-block 2c + 1) plus the 16-byte
// header. Runs 0..3 are the low nibbles, 4..7 the high ones.
struct FmtQ4_K {
  static constexpr int kPieceElems = 32;
  static constexpr int kRuns = 8;
  static constexpr int kU = 4;
  static constexpr int kMaxR = 2;
  struct Raw {
    uint4 hdr;
    uint4 qs;
  };
  static SHD Raw load(const uint8_t* row, int p) {
    const uint8_t* blk = row + 144 * static_cast<int64_t>(p >> 3);
    Raw r;
    r.hdr = ld_w_v4(blk);
    r.qs = ld_w_v4(blk + 16 + 16 * (p & 7));
    return r;
  }
  static SHD int run_start(int p, int t) {
    const int k = p & 7;
    return 256 * (p >> 3) + 64 * (k >> 1) + 16 * (k & 1) + (t < 4 ? 4 * t : 32 + 4 * (t - 4));
  }
  // Scale and min of sub-block j (k4_scale_min of gguf/quant_blocks.h); sc64 = scales[0..7].
  static SHD void scale_min(int j, uint64_t sc64, uint32_t sc8, uint32_t* sc, uint32_t* m) {
    if (j < 4) {
      *sc = static_cast<uint32_t>(sc64 >> (8 * j)) & 63u;
      *m = static_cast<uint32_t>(sc64 >> (8 * (j + 4))) & 63u;
    } else {
      const uint32_t b_hi = (sc8 >> (8 * (j - 4))) & 0xffu;                        // scales[j + 4]
      const uint32_t b_sc = static_cast<uint32_t>(sc64 >> (8 * (j - 4))) & 0xffu;  // scales[j - 4]
      const uint32_t b_m = static_cast<uint32_t>(sc64 >> (8 * j)) & 0xffu;         // scales[j]
      *sc = (b_hi & 0xFu) | ((b_sc >> 6) << 4);
      *m = (b_hi >> 4) | ((b_m >> 6) << 4);
    }
  }
  template <int T>
  static SHD void decode(const Raw& r, int p, float w[4]) {
    const int j = 2 * ((p & 7) >> 1) + (T >= 4 ? 1 : 0);
    const uint64_t sc64 = static_cast<uint64_t>(r.hdr.y) | (static_cast<uint64_t>(r.hdr.z) << 32);
    uint32_t sc, m;
    scale_min(j, sc64, r.hdr.w, &sc, &m);
    const float d = half_bits_to_float(r.hdr.x & 0xffffu);
    const float dmin = half_bits_to_float(r.hdr.x >> 16);
    const float dj = mul_rn(d, static_cast<float>(sc));
    const float mj = mul_rn(dmin, static_cast<float>(m));
    const uint32_t q = word<T % 4>(r.qs);
    constexpr int kShift = T >= 4 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int v = static_cast<int>((q >> (8 * i + kShift)) & 0xFu);
      w[i] = sub_rn(mul_rn(dj, static_cast<float>(v)), mj);
    }
  }
};

// Q6_K: 210-byte blocks {ql[128], qh[64], int8 scales[16], fp16 d}; piece k (0..7) of a block:
// h = k / 4, l0 = 8 (k % 4); columns 128h + 32g + l0 + i (g = 0..3, i = 0..7). Run t: g = t / 2,
// i in 4 (t % 2) .. + 3.
struct FmtQ6_K {
  static constexpr int kPieceElems = 32;
  static constexpr int kRuns = 8;
  static constexpr int kU = 4;
  static constexpr int kMaxR = 2;
  struct Raw {
    uint32_t ql0[2];  // ql[64h + l0 ..] (g = 0, 2)
    uint32_t ql1[2];  // ql[64h + 32 + l0 ..] (g = 1, 3)
    uint32_t qh[2];   // qh[32h + l0 ..]
    uint32_t sc;      // byte g = scales[8h + 2g + l0 / 16]
    uint32_t d;
  };
  static SHD Raw load(const uint8_t* row, int p) {
    const uint8_t* blk = row + 210 * static_cast<int64_t>(p >> 3);
    const int k = p & 7;
    const int h = k >> 2;
    const int l0 = 8 * (k & 3);
    Raw r;
    const uint8_t* a = blk + 64 * h + l0;
    r.ql0[0] = ld_w_u32_a2(a);
    r.ql0[1] = ld_w_u32_a2(a + 4);
    r.ql1[0] = ld_w_u32_a2(a + 32);
    r.ql1[1] = ld_w_u32_a2(a + 36);
    const uint8_t* b = blk + 128 + 32 * h + l0;
    r.qh[0] = ld_w_u32_a2(b);
    r.qh[1] = ld_w_u32_a2(b + 4);
    const uint8_t* s = blk + 192 + 8 * h + (l0 >> 4);
    r.sc = ld_w_u8(s) | (ld_w_u8(s + 2) << 8) | (ld_w_u8(s + 4) << 16) | (ld_w_u8(s + 6) << 24);
    r.d = ld_w_u16(blk + 208);
    return r;
  }
  static SHD int run_start(int p, int t) {
    const int k = p & 7;
    return 256 * (p >> 3) + 128 * (k >> 2) + 32 * (t >> 1) + 8 * (k & 3) + 4 * (t & 1);
  }
  template <int T>
  static SHD void decode(const Raw& r, int, float w[4]) {
    constexpr int g = T >> 1;
    constexpr int sub = T & 1;
    const uint32_t lo_w = (g & 1) ? r.ql1[sub] : r.ql0[sub];
    const uint32_t hi_w = r.qh[sub];
    const int scale = static_cast<int8_t>(static_cast<uint8_t>(r.sc >> (8 * g)));
    const float dsc = mul_rn(half_bits_to_float(r.d), static_cast<float>(scale));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int lo = static_cast<int>((lo_w >> (8 * i + (g >= 2 ? 4 : 0))) & 0xFu);
      const int hi = static_cast<int>((hi_w >> (8 * i + 2 * g)) & 3u);
      const int q = (lo | (hi << 4)) - 32;
      w[i] = mul_rn(dsc, static_cast<float>(q));
    }
  }
};

#undef SHD

// ------------------------------------------------------------------------------------------
// GEMV kernel.

constexpr int kGemvWarps = 4;  // warps (output row groups) per block
constexpr int kGemvThreads = 32 * kGemvWarps;

template <class F, int N, int R, int T>
__device__ __forceinline__ void dot_run(const typename F::Raw (&raw)[R], int p, const float* __restrict__ x,
                                        int64_t cols, float (&s)[R][N]) {
  const int e = F::run_start(p, T);
  float4 xv[N];
#pragma unroll
  for (int i = 0; i < N; ++i) xv[i] = __ldg(reinterpret_cast<const float4*>(x + i * cols + e));
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float w[4];
    F::template decode<T>(raw[r], p, w);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float v = s[r][i];
      v = fma_rn(w[0], xv[i].x, v);
      v = fma_rn(w[1], xv[i].y, v);
      v = fma_rn(w[2], xv[i].z, v);
      v = fma_rn(w[3], xv[i].w, v);
      s[r][i] = v;
    }
  }
}

template <class F, int N, int R, int T>
__device__ __forceinline__ void dot_runs(const typename F::Raw (&raw)[R], int p, const float* __restrict__ x,
                                         int64_t cols, float (&s)[R][N]) {
  if constexpr (T < F::kRuns) {
    dot_run<F, N, R, T>(raw, p, x, cols, s);
    dot_runs<F, N, R, T + 1>(raw, p, x, cols, s);
  }
}

template <class F, int N, int R>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const uint8_t* __restrict__ wdata, int64_t rows,
                                                            int64_t cols, uint64_t row_bytes,
                                                            const float* __restrict__ x, float* __restrict__ y) {
  // Pieces per lane loaded ahead: about the same bytes in flight whatever R; fewer for large N,
  // where the accumulators take the registers.
  constexpr int U = F::kU / R / (N >= 5 ? 2 : 1) > 0 ? F::kU / R / (N >= 5 ? 2 : 1) : 1;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5)) * R;
  if (r0 >= rows) return;  // whole warp leaves together
  const uint8_t* rp[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = r0 + r < rows ? r0 + r : rows - 1;  // duplicate rows past the end (not stored)
    rp[r] = wdata + static_cast<uint64_t>(row) * row_bytes;
  }
  const int n_pieces = static_cast<int>(cols / F::kPieceElems);

  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[r][i] = 0.0f;

  // Pieces past the end of the row (last iteration only) are replaced by the row's last piece,
  // computed and discarded, so the body has no branches and loads can be scheduled freely.
  for (int base = lane; base < n_pieces; base += 32 * U) {
    typename F::Raw raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = min(base + 32 * u, n_pieces - 1);
#pragma unroll
      for (int r = 0; r < R; ++r) raw[u][r] = F::load(rp[r], p);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool valid = base + 32 * u < n_pieces;
      const int p = min(base + 32 * u, n_pieces - 1);
      float s[R][N];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < N; ++i) s[r][i] = 0.0f;
      dot_runs<F, N, R, 0>(raw[u], p, x, cols, s);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < N; ++i) acc[r][i] = valid ? acc[r][i] + s[r][i] : acc[r][i];
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float v = acc[r][i];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      acc[r][i] = v;
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r0 + r < rows) {
#pragma unroll
        for (int i = 0; i < N; ++i) y[i * rows + r0 + r] = acc[r][i];
      }
    }
  }
}

template <class F, int N, int R>
void launch_gemv_r(const WeightMatrix& w, const float* x, float* y, cudaStream_t s) {
  const int64_t rows_per_block = int64_t{kGemvWarps} * R;
  const int64_t blocks = (w.rows + rows_per_block - 1) / rows_per_block;
  gemv_kernel<F, N, R><<<static_cast<unsigned>(blocks), kGemvThreads, 0, s>>>(w.data, w.rows, w.cols, w.row_bytes, x,
                                                                             y);
  STRATA_CUDA_LAUNCH_CHECK();
}

// Rows per warp: 1 for a single x row (most warps, most memory parallelism); for batches, each x
// load is shared by R weight rows, 4 where the matrix has rows enough to keep every SM busy.
template <class F, int N>
void launch_gemv_n(const WeightMatrix& w, const float* x, float* y, cudaStream_t s) {
  if constexpr (N == 1) {
    launch_gemv_r<F, 1, 1>(w, x, y, s);
  } else if constexpr (N < 4) {
    launch_gemv_r<F, N, 2>(w, x, y, s);
  } else {
    if (F::kMaxR >= 4 && w.rows >= 4096) {
      launch_gemv_r<F, N, (F::kMaxR >= 4 ? 4 : 2)>(w, x, y, s);
    } else {
      launch_gemv_r<F, N, 2>(w, x, y, s);
    }
  }
}

template <class F>
void launch_gemv(const WeightMatrix& w, const float* x, int64_t n, float* y, cudaStream_t s) {
  switch (n) {
    case 1: launch_gemv_n<F, 1>(w, x, y, s); break;
    case 2: launch_gemv_n<F, 2>(w, x, y, s); break;
    case 3: launch_gemv_n<F, 3>(w, x, y, s); break;
    case 4: launch_gemv_n<F, 4>(w, x, y, s); break;
    case 5: launch_gemv_n<F, 5>(w, x, y, s); break;
    case 6: launch_gemv_n<F, 6>(w, x, y, s); break;
    case 7: launch_gemv_n<F, 7>(w, x, y, s); break;
    case 8: launch_gemv_n<F, 8>(w, x, y, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "gemv: n outside 1..kGemvMaxRows", __FILE__, __LINE__);
  }
}

// ------------------------------------------------------------------------------------------
// Dequantization to half: one thread per piece.

template <class F, int T>
__device__ __forceinline__ void dequant_runs(const typename F::Raw& raw, int p, __half* dst_row) {
  if constexpr (T < F::kRuns) {
    float w[4];
    F::template decode<T>(raw, p, w);
    const __half2 a = __halves2half2(__float2half_rn(w[0]), __float2half_rn(w[1]));
    const __half2 b = __halves2half2(__float2half_rn(w[2]), __float2half_rn(w[3]));
    uint2 v;
    v.x = *reinterpret_cast<const uint32_t*>(&a);
    v.y = *reinterpret_cast<const uint32_t*>(&b);
    *reinterpret_cast<uint2*>(dst_row + F::run_start(p, T)) = v;
    dequant_runs<F, T + 1>(raw, p, dst_row);
  }
}

template <class F>
__global__ void __launch_bounds__(256) dequant_f16_kernel(const uint8_t* __restrict__ wdata, int64_t r0, int64_t nr,
                                                          int64_t cols, uint64_t row_bytes, __half* __restrict__ dst) {
  const int64_t pieces_per_row = cols / F::kPieceElems;
  const int64_t total = nr * pieces_per_row;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = g / pieces_per_row;
    const int p = static_cast<int>(g - r * pieces_per_row);
    const typename F::Raw raw = F::load(wdata + static_cast<uint64_t>(r0 + r) * row_bytes, p);
    dequant_runs<F, 0>(raw, p, dst + r * cols);
  }
}

template <class F>
void launch_dequant(const WeightMatrix& w, int64_t r0, int64_t nr, void* dst, cudaStream_t s) {
  const int64_t total = nr * (w.cols / F::kPieceElems);
  if (total <= 0) return;
  constexpr int kThreads = 256;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;
  dequant_f16_kernel<F><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(w.data, r0, nr, w.cols, w.row_bytes,
                                                                          static_cast<__half*>(dst));
  STRATA_CUDA_LAUNCH_CHECK();
}

// Rows picked by index, dequantized to f32 (embedding lookups of quantized tables).
template <class F, int T>
__device__ __forceinline__ void dequant_runs_f32(const typename F::Raw& raw, int p, float* dst_row) {
  if constexpr (T < F::kRuns) {
    float w[4];
    F::template decode<T>(raw, p, w);
    float* d = dst_row + F::run_start(p, T);
    d[0] = w[0];
    d[1] = w[1];
    d[2] = w[2];
    d[3] = w[3];
    dequant_runs_f32<F, T + 1>(raw, p, dst_row);
  }
}

template <class F>
__global__ void __launch_bounds__(256) dequant_rows_f32_kernel(const uint8_t* __restrict__ wdata, const int32_t* rows,
                                                               int64_t n, int64_t cols, uint64_t row_bytes,
                                                               float* __restrict__ dst) {
  const int64_t pieces_per_row = cols / F::kPieceElems;
  const int64_t total = n * pieces_per_row;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = g / pieces_per_row;
    const int p = static_cast<int>(g - r * pieces_per_row);
    const typename F::Raw raw = F::load(wdata + static_cast<uint64_t>(rows[r]) * row_bytes, p);
    dequant_runs_f32<F, 0>(raw, p, dst + r * cols);
  }
}

template <class F>
void launch_dequant_rows_f32(const WeightMatrix& w, const int32_t* rows, int64_t n, float* dst, cudaStream_t s) {
  const int64_t total = n * (w.cols / F::kPieceElems);
  if (total <= 0) return;
  constexpr int kThreads = 256;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;
  dequant_rows_f32_kernel<F><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(w.data, rows, n, w.cols, w.row_bytes, dst);
  STRATA_CUDA_LAUNCH_CHECK();
}

// ------------------------------------------------------------------------------------------
// f32 -> f16 / bf16.

template <bool kBf16>
__global__ void __launch_bounds__(256) f32_to_16bit_kernel(const float* __restrict__ src, int64_t n,
                                                           uint16_t* __restrict__ dst) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = src[i];
    if constexpr (kBf16) {
      dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    } else {
      dst[i] = __half_as_ushort(__float2half_rn(v));
    }
  }
}

}  // namespace

bool matmul_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

void gemv(const WeightMatrix& w, const float* x, int64_t n, float* y, cudaStream_t s) {
  if (w.rows <= 0 || n <= 0) return;
  if ((reinterpret_cast<uintptr_t>(x) & 15u) != 0 || (reinterpret_cast<uintptr_t>(w.data) & 15u) != 0) {
    throw_cuda_error(cudaErrorMisalignedAddress, "gemv: x and w.data must be 16-byte aligned", __FILE__, __LINE__);
  }
  switch (w.type) {
    case GgmlType::kF32: launch_gemv<FmtF32>(w, x, n, y, s); break;
    case GgmlType::kF16: launch_gemv<Fmt16<false>>(w, x, n, y, s); break;
    case GgmlType::kBF16: launch_gemv<Fmt16<true>>(w, x, n, y, s); break;
    case GgmlType::kQ8_0: launch_gemv<FmtQ8_0>(w, x, n, y, s); break;
    case GgmlType::kQ4_K: launch_gemv<FmtQ4_K>(w, x, n, y, s); break;
    case GgmlType::kQ6_K: launch_gemv<FmtQ6_K>(w, x, n, y, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "gemv: unsupported weight type", __FILE__, __LINE__);
  }
}

void dequantize_to_f16(const WeightMatrix& w, int64_t r0, int64_t nr, void* dst, cudaStream_t s) {
  switch (w.type) {
    case GgmlType::kF32: launch_dequant<FmtF32>(w, r0, nr, dst, s); break;
    case GgmlType::kF16: launch_dequant<Fmt16<false>>(w, r0, nr, dst, s); break;
    case GgmlType::kBF16: launch_dequant<Fmt16<true>>(w, r0, nr, dst, s); break;
    case GgmlType::kQ8_0: launch_dequant<FmtQ8_0>(w, r0, nr, dst, s); break;
    case GgmlType::kQ4_K: launch_dequant<FmtQ4_K>(w, r0, nr, dst, s); break;
    case GgmlType::kQ6_K: launch_dequant<FmtQ6_K>(w, r0, nr, dst, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "dequantize_to_f16: unsupported weight type", __FILE__, __LINE__);
  }
}

void dequantize_rows_f32(const WeightMatrix& w, const int32_t* rows, int64_t n, float* out, cudaStream_t s) {
  switch (w.type) {
    case GgmlType::kQ8_0: launch_dequant_rows_f32<FmtQ8_0>(w, rows, n, out, s); break;
    case GgmlType::kQ4_K: launch_dequant_rows_f32<FmtQ4_K>(w, rows, n, out, s); break;
    case GgmlType::kQ6_K: launch_dequant_rows_f32<FmtQ6_K>(w, rows, n, out, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "dequantize_rows_f32: unsupported weight type", __FILE__, __LINE__);
  }
}

void f32_to_16bit(const float* src, int64_t n, void* dst, bool bf16, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;
  if (bf16) {
    f32_to_16bit_kernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(src, n, static_cast<uint16_t*>(dst));
  } else {
    f32_to_16bit_kernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(src, n, static_cast<uint16_t*>(dst));
  }
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata::cuda
