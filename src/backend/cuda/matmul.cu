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
// Exactness: F32/F16/BF16 (and every quantized weight that dequantize_to_f16 /
// dequantize_rows_f32 write) are the exact values of gguf/quant.cpp's dequantize_row, written
// with __fmul_rn/__fsub_rn so that nvcc cannot contract them into FMAs. The GEMV of the quantized
// formats (kReassoc) instead reassociates per piece, as ggml's mmvq: sums of x * q over a
// sub-block in f32 (q exact, made from the bits with byte permutes, no int->float conversion
// unit), then times the block scale, minus the min times the sum of x (F::dot). All of it with
// explicit _rn intrinsics, per (row, x row, piece) only, so still independent of n, R, U and
// batching; the error vs the exact dequantize-then-FMA is ~1e-8 of sum |w x|.
//
// 8-bit x (kXq: Q4_K, Q6_K and Q8_0 by default, STRATA_CUDA_GEMV_Q8X=0|q4_k: none | Q4_K; where gemv_xq_bytes gives
// a size and the entry is given the buffer): each run of 32 values of x is quantized to bytes with
// one scale (xq.cuh), by a launch of its own before the GEMV (quantize_xq_kernel) or, for the O
// projection of a decode step, by the attention kernel that wrote x (GemvXq::ready), and the
// pieces take byte dot products (dp4a) of their weights' integers
// with those bytes, then a few float operations per group (F::dot_q8; Q4_K: three per 16 weights)
// instead of one byte permute and one FMA per weight.
// The CPU backend dots K-quants with 8-bit x too; the error vs the f32 x is that of x's rounding
// (under 1% of a product's size on random data, simulated). A row's bytes depend on that row of x alone
// and the dot on (row, x row, piece) alone, so batches stay bit-invariant.
//
// n = 1: quantized formats take R = 2 rows per warp where the launch has >= 4096 rows (x loads
// and sums shared); U is lowered for short rows so that no lane computes clamped duplicates.
//
// Alignment assumed: w.data 16-byte aligned (cudaMalloc gives 256), x 16-byte aligned, dst of
// dequantize_to_f16 8-byte aligned. Row starts are only 2-byte aligned for Q8_0 and Q6_K, so
// those use 16-bit loads; F32/F16/BF16 rows (cols % 8 == 0) and Q4_K rows (144-byte blocks) are
// 16-byte aligned and use 16-byte loads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/xq.cuh"

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

SHD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// __byte_perm: result byte k = byte (s >> 4k) & 7 of {b:a} (a = bytes 0..3, b = bytes 4..7).
SHD uint32_t perm(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, s);
#else
  const uint64_t v = static_cast<uint64_t>(a) | (static_cast<uint64_t>(b) << 32);
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return r;
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
// Loads of weight bytes: read-only, streamed (not kept in L1, so x stays there). Plain ld.global,
// not the non-coherent path (.nc): on an H100, llama-1b F16 decode took 963.6 -> 947.7 us of GPU
// per step with these loads alone changed (Q4_K and 8-row batches level).

// kS: p points into shared memory (the staged producers' copies of their rows).
template <bool kS = false>
SHD uint4 ld_w_v4(const uint8_t* p) {
  uint4 v;
#ifdef __CUDA_ARCH__
  if constexpr (kS) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(smem_addr(p)));
  } else {
    asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  }
#else
  std::memcpy(&v, p, 16);
#endif
  return v;
}

template <bool kS = false>
SHD uint32_t ld_w_u16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  unsigned short v;
  if constexpr (kS) {
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(smem_addr(p)));
  } else {
    asm("ld.global.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  }
  return v;
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

template <bool kS = false>
SHD uint32_t ld_w_u8(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  uint32_t v;
  if constexpr (kS) {
    asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(smem_addr(p)));
  } else {
    asm("ld.global.L1::no_allocate.u8 %0, [%1];" : "=r"(v) : "l"(p));
  }
  return v;
#else
  return *p;
#endif
}

// 4 bytes from a 2-byte aligned address.
template <bool kS = false>
SHD uint32_t ld_w_u32_a2(const uint8_t* p) { return ld_w_u16<kS>(p) | (ld_w_u16<kS>(p + 2) << 16); }

// 4 floats of x (16-byte aligned), through L1 (x is reused by every row). One x row (N = 1):
// ld.global.ca, not __ldg's ld.global.nc (which nvcc also picks for a plain load through a const
// __restrict__ pointer): x is an L1/L2 hit on each warp's critical path, and the non-coherent path
// answers later. Decode GPU time per step, llama-1b, with ld_ro's one-row loads below: H200 F16
// 828.9 -> 814.2 us, Q4_K 582.5 -> 572.0; H100 F16 977.5 -> 963.6. For batches (N > 1) the same
// change was 1.1-1.3% slower (F16, 8 rows), so they keep __ldg.
template <int N = 1>
SHD float4 ld_x4(const float* p) {
#ifdef __CUDA_ARCH__
  if constexpr (N == 1) {
    return __ldca(reinterpret_cast<const float4*>(p));
  } else {
    return __ldg(reinterpret_cast<const float4*>(p));
  }
#else
  float4 v;
  std::memcpy(&v, p, 16);
  return v;
#endif
}

SHD float comp(const float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

// Integer-to-float without the (quarter-rate) conversion unit: exact for v < 2^23.
SHD float small_u2f(uint32_t v) { return sub_rn(bits_to_float(0x4B000000u | v), 8388608.0f); }
// Exact float of the signed byte b (low 8 bits of b; higher bits ignored).
SHD float s8_to_f(uint32_t b) { return sub_rn(bits_to_float(0x4B000000u | ((b ^ 0x80u) & 0xffu)), 8388736.0f); }
// Exact float of a signed integer |v| < 2^22, without the conversion unit (1.5 * 2^23 + v).
SHD float small_i2f(int32_t v) { return sub_rn(bits_to_float(0x4B400000u + static_cast<uint32_t>(v)), 12582912.0f); }

// Sum of the four products of the signed bytes of a and b, plus c (exact).
SHD int32_t dp4a(uint32_t a, uint32_t b, int32_t c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int32_t>(static_cast<int8_t>(a >> (8 * k))) * static_cast<int32_t>(static_cast<int8_t>(b >> (8 * k)));
  }
  return c;
#endif
}

// A T (uint4: 16 bytes of quantized x; uint2: 8; float2: a group's scale and scaled sum) from p,
// aligned to sizeof(T), read-only through L1: ld.global.ca for one x row, as ld_x4 says.
template <int N, class T>
SHD T ld_ro(const void* p) {
#ifdef __CUDA_ARCH__
  if constexpr (N == 1) {
    return __ldca(static_cast<const T*>(p));
  } else {
    return __ldg(static_cast<const T*>(p));
  }
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

// Float 0.5 + v / 256 (exact) of byte k of word w, for bytes v < 128: the byte becomes bits
// 16..23 of the float, under the exponent byte 0x3F (bit 23 is v's top bit, 0).
SHD float mant_byte(uint32_t w, int k) {
  return bits_to_float(perm(w, 0x3F000000u, 0x7044u | (static_cast<uint32_t>(k) << 8)));
}

// Sum of 16 consecutive floats held in 4 float4, in a fixed tree order.
SHD float sum16(const float4 (&v)[4]) {
  float t[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) t[k] = add_rn(add_rn(v[k].x, v[k].y), add_rn(v[k].z, v[k].w));
  return add_rn(add_rn(t[0], t[1]), add_rn(t[2], t[3]));
}

SHD float sum8(const float4& a, const float4& b) {
  return add_rn(add_rn(add_rn(a.x, a.y), add_rn(a.z, a.w)), add_rn(add_rn(b.x, b.y), add_rn(b.z, b.w)));
}

SHD uint32_t word_rt(const uint4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

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
  static constexpr int kR1 = 1;
  static constexpr bool kReassoc = false;  // exact: dequantized weights, fma chain in run order
  using Raw = uint4;
  template <bool kS = false>
  static SHD Raw load(const uint8_t* row, int p) { return ld_w_v4<kS>(row + 16 * static_cast<int64_t>(p)); }
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
  static constexpr int kR1 = 1;
  static constexpr bool kReassoc = false;  // exact: dequantized weights, fma chain in run order
  using Raw = uint4;
  template <bool kS = false>
  static SHD Raw load(const uint8_t* row, int p) { return ld_w_v4<kS>(row + 16 * static_cast<int64_t>(p)); }
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
  static constexpr int kR1 = 2;
  struct Raw {
    uint32_t d;
    uint32_t q0, q1;
  };
  template <bool kS = false>
  static SHD Raw load(const uint8_t* row, int p) {
    const uint8_t* blk = row + 34 * static_cast<int64_t>(p >> 2);
    const uint8_t* q = blk + 2 + 8 * (p & 3);
    Raw r;
    r.d = ld_w_u16<kS>(blk);
    r.q0 = ld_w_u32_a2<kS>(q);
    r.q1 = ld_w_u32_a2<kS>(q + 4);
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
  // GEMV piece sums, reassociated: s = d * (fma chain of x q over the 8 columns), q exact (byte
  // ^ 0x80 under the exponent of 2^23, minus 2^23 + 128: no conversion unit).
  static constexpr bool kReassoc = true;
  template <int N, int R>
  static SHD void dot(const Raw (&raw)[R], int p, const float* x, int64_t cols, float (&s)[R][N]) {
    const int e = 8 * p;
    float q[R][8];
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      d[r] = half_bits_to_float(raw[r].d);
      const uint32_t u0 = raw[r].q0 ^ 0x80808080u;
      const uint32_t u1 = raw[r].q1 ^ 0x80808080u;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        q[r][k] = sub_rn(bits_to_float(perm(u0, 0x4B000000u, 0x7440u | k)), 8388736.0f);
        q[r][4 + k] = sub_rn(bits_to_float(perm(u1, 0x4B000000u, 0x7440u | k)), 8388736.0f);
      }
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float4 x0 = ld_x4<N>(x + i * cols + e);
      const float4 x1 = ld_x4<N>(x + i * cols + e + 4);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float a = mul_rn(x0.x, q[r][0]);
        a = fma_rn(x0.y, q[r][1], a);
        a = fma_rn(x0.z, q[r][2], a);
        a = fma_rn(x0.w, q[r][3], a);
        a = fma_rn(x1.x, q[r][4], a);
        a = fma_rn(x1.y, q[r][5], a);
        a = fma_rn(x1.z, q[r][6], a);
        a = fma_rn(x1.w, q[r][7], a);
        s[r][i] = mul_rn(d[r], a);
      }
    }
  }
  // Against x quantized to 8 bits (see FmtQ4_K::dot_q8): the piece's 8 columns lie in one group
  // of scale xd; s = (d xd) * (sum of q x bytes), two byte dot products.
  template <int N, int R>
  static SHD void dot_q8(const Raw (&raw)[R], int p, const int8_t* xq, const float2* xds, int64_t cols, float (&s)[R][N]) {
    const int e = 8 * p;
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) d[r] = half_bits_to_float(raw[r].d);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const uint2 q2 = ld_ro<N, uint2>(xq + i * cols + e);
      const float xd = ld_ro<N, float2>(xds + (i * cols + e) / 16).x;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int32_t acc = dp4a(raw[r].q1, q2.y, dp4a(raw[r].q0, q2.x, 0));
        s[r][i] = mul_rn(mul_rn(d[r], xd), small_i2f(acc));
      }
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
  static constexpr int kR1 = 2;
  struct Raw {
    uint4 hdr;
    uint4 qs;
  };
  template <bool kS = false>
  static SHD Raw load(const uint8_t* row, int p) {
    const uint8_t* blk = row + 144 * static_cast<int64_t>(p >> 3);
    Raw r;
    r.hdr = ld_w_v4<kS>(blk);
    r.qs = ld_w_v4<kS>(blk + 16 + 16 * (p & 7));
    return r;
  }
  static SHD int run_start(int p, int t) {
    const int k = p & 7;
    return 256 * (p >> 3) + 64 * (k >> 1) + 16 * (k & 1) + (t < 4 ? 4 * t : 32 + 4 * (t - 4));
  }
  // Scale and min of sub-block j (k4_scale_min of gguf/quant_blocks.h) from the header words
  // s0 = scales[0..3], s1 = scales[4..7], s2 = scales[8..11]; 32-bit shifts, no branches.
  static SHD void scale_min(int j, uint32_t s0, uint32_t s1, uint32_t s2, uint32_t* sc, uint32_t* m) {
    const int sh = 8 * (j & 3);
    const uint32_t b0 = s0 >> sh;  // scales[j & 3] (low bits)
    const uint32_t b1 = s1 >> sh;  // scales[4 + (j & 3)]
    const uint32_t b2 = s2 >> sh;  // scales[8 + (j & 3)]
    const uint32_t sc_lo = b0 & 63u, m_lo = b1 & 63u;                                  // j < 4
    const uint32_t sc_hi = (b2 & 0xFu) | ((b0 >> 2) & 0x30u);                          // j >= 4
    const uint32_t m_hi = ((b2 >> 4) & 0xFu) | ((b1 >> 2) & 0x30u);
    *sc = j < 4 ? sc_lo : sc_hi;
    *m = j < 4 ? m_lo : m_hi;
  }
  template <int T>
  static SHD void decode(const Raw& r, int p, float w[4]) {
    const int j = 2 * ((p & 7) >> 1) + (T >= 4 ? 1 : 0);
    uint32_t sc, m;
    scale_min(j, r.hdr.y, r.hdr.z, r.hdr.w, &sc, &m);
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
  // Sub-block j's scale d * sc and min dmin * m as floats.
  static SHD void sub_scale_min(const Raw& raw, int j, float* dj, float* mj) {
    uint32_t sc, m;
    scale_min(j, raw.hdr.y, raw.hdr.z, raw.hdr.w, &sc, &m);
    *dj = mul_rn(half_bits_to_float(raw.hdr.x & 0xffffu), small_u2f(sc));
    *mj = mul_rn(half_bits_to_float(raw.hdr.x >> 16), small_u2f(m));
  }
  // GEMV piece sums, reassociated. Half h of the piece (h = 0: low nibbles, sub-block j0 = 2c,
  // columns e0 .. e0 + 15; h = 1: high nibbles, sub-block j0 + 1, columns e0 + 32 ..): with
  // f = 0.5 + q / 32 (exact: the nibble as mantissa bits 19..22 of a float in [0.5, 1)),
  // sum x w = dj sum x q - mj S_x = (32 dj) S_f - (16 dj + mj) S_x, S_f = sum x f, S_x = sum x.
  // Per weight: one byte permute and one FMA (S_x is shared by the R rows).
  static constexpr bool kReassoc = true;
  template <int N, int R>
  static SHD void dot(const Raw (&raw)[R], int p, const float* x, int64_t cols, float (&s)[R][N]) {
    const int e0 = run_start(p, 0);
    const int j0 = 2 * ((p & 7) >> 1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float a[R], b[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float dj, mj;
        sub_scale_min(raw[r], j0 + h, &dj, &mj);
        a[r] = mul_rn(32.0f, dj);
        b[r] = fma_rn(16.0f, dj, mj);
      }
#pragma unroll
      for (int i = 0; i < N; ++i) {
        float4 xv[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) xv[t] = ld_x4<N>(x + i * cols + e0 + 32 * h + 4 * t);
        const float sx = sum16(xv);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float f[2] = {0.0f, 0.0f};  // two chains: words 0, 1 and words 2, 3
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const uint32_t w = word_rt(raw[r].qs, t);
            const uint32_t v = h == 0 ? (w << 3) & 0x78787878u : (w >> 1) & 0x78787878u;
#pragma unroll
            for (int k = 0; k < 4; ++k) f[t >> 1] = fma_rn(comp(xv[t], k), mant_byte(v, k), f[t >> 1]);
          }
          const float hs = fma_rn(a[r], add_rn(f[0], f[1]), -mul_rn(b[r], sx));
          s[r][i] = h == 0 ? hs : add_rn(s[r][i], hs);  // half 0 + half 1
        }
      }
    }
  }
  // GEMV piece sums against x quantized to 8 bits (GemvMats::xq, quantize_xq_kernel): half h's 16
  // columns c .. c + 15 (c = e0 + 32 h) lie in one 32-column group of x with scale xd and
  // S = xd * (sum of the group's 16 q there), so with x_k = xd q_k and w_k = dj n_k - mj,
  // sum x w = (xd dj) sum q n - mj S: the integer sum by four byte dot products (dp4a), the rest
  // three float operations. Per (row, x row, piece) only, as dot.
  template <int N, int R>
  static SHD void dot_q8(const Raw (&raw)[R], int p, const int8_t* xq, const float2* xds, int64_t cols, float (&s)[R][N]) {
    const int e0 = run_start(p, 0);
    const int j0 = 2 * ((p & 7) >> 1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float dj[R], mj[R];
#pragma unroll
      for (int r = 0; r < R; ++r) sub_scale_min(raw[r], j0 + h, &dj[r], &mj[r]);
      const int c = e0 + 32 * h;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const uint4 q4 = ld_ro<N, uint4>(xq + i * cols + c);
        const float2 ds = ld_ro<N, float2>(xds + (i * cols + c) / 16);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          int32_t acc = 0;
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const uint32_t w = word_rt(raw[r].qs, t);
            const uint32_t nib = h == 0 ? w & 0x0F0F0F0Fu : (w >> 4) & 0x0F0F0F0Fu;
            acc = dp4a(nib, word_rt(q4, t), acc);
          }
          const float hs = fma_rn(mul_rn(ds.x, dj[r]), small_i2f(acc), -mul_rn(mj[r], ds.y));
          s[r][i] = h == 0 ? hs : add_rn(s[r][i], hs);
        }
      }
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
  static constexpr int kR1 = 2;
  struct Raw {
    uint32_t ql0[2];  // ql[64h + l0 ..] (g = 0, 2)
    uint32_t ql1[2];  // ql[64h + 32 + l0 ..] (g = 1, 3)
    uint32_t qh[2];   // qh[32h + l0 ..]
    uint32_t sc;      // byte g = scales[8h + 2g + l0 / 16]
    uint32_t d;
  };
  template <bool kS = false>
  static SHD Raw load(const uint8_t* row, int p) {
    const uint8_t* blk = row + 210 * static_cast<int64_t>(p >> 3);
    const int k = p & 7;
    const int h = k >> 2;
    const int l0 = 8 * (k & 3);
    Raw r;
    const uint8_t* a = blk + 64 * h + l0;
    r.ql0[0] = ld_w_u32_a2<kS>(a);
    r.ql0[1] = ld_w_u32_a2<kS>(a + 4);
    r.ql1[0] = ld_w_u32_a2<kS>(a + 32);
    r.ql1[1] = ld_w_u32_a2<kS>(a + 36);
    const uint8_t* b = blk + 128 + 32 * h + l0;
    r.qh[0] = ld_w_u32_a2<kS>(b);
    r.qh[1] = ld_w_u32_a2<kS>(b + 4);
    const uint8_t* s = blk + 192 + 8 * h + (l0 >> 4);
    r.sc = ld_w_u8<kS>(s) | (ld_w_u8<kS>(s + 2) << 8) | (ld_w_u8<kS>(s + 4) << 16) | (ld_w_u8<kS>(s + 6) << 24);
    r.d = ld_w_u16<kS>(blk + 208);
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
  // GEMV piece sums, reassociated. Group g (columns e + 32 g .. + 7, e = run_start(p, 0), one
  // scale): q = u - 32 with u = lo | hi << 4 in [0, 64); with f = 0.5 + u / 128 (exact: u as
  // mantissa bits 17..22), sum x q = 128 S_f - 96 S_x, times dsc = d * scale.
  static constexpr bool kReassoc = true;
  template <int N, int R>
  static SHD void dot(const Raw (&raw)[R], int p, const float* x, int64_t cols, float (&s)[R][N]) {
    const int e = run_start(p, 0);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float a[R], b[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float dsc = mul_rn(half_bits_to_float(raw[r].d), s8_to_f(raw[r].sc >> (8 * g)));
        a[r] = mul_rn(128.0f, dsc);
        b[r] = mul_rn(96.0f, dsc);
      }
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float4 x0 = ld_x4<N>(x + i * cols + e + 32 * g);
        const float4 x1 = ld_x4<N>(x + i * cols + e + 32 * g + 4);
        const float sx = sum8(x0, x1);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float f[2];
#pragma unroll
          for (int sub = 0; sub < 2; ++sub) {
            const uint32_t lw = (g & 1) ? raw[r].ql1[sub] : raw[r].ql0[sub];
            const uint32_t lo = g >= 2 ? (lw >> 3) & 0x1E1E1E1Eu : (lw << 1) & 0x1E1E1E1Eu;
            const uint32_t hw = raw[r].qh[sub];
            const uint32_t hi = (g == 3 ? hw >> 1 : hw << (5 - 2 * g)) & 0x60606060u;
            const uint32_t v = lo | hi;  // bytes 2 u
            const float4& xv = sub == 0 ? x0 : x1;
            float c = mul_rn(xv.x, mant_byte(v, 0));
            c = fma_rn(xv.y, mant_byte(v, 1), c);
            c = fma_rn(xv.z, mant_byte(v, 2), c);
            c = fma_rn(xv.w, mant_byte(v, 3), c);
            f[sub] = c;
          }
          const float gs = fma_rn(a[r], add_rn(f[0], f[1]), -mul_rn(b[r], sx));
          s[r][i] = g == 0 ? gs : add_rn(s[r][i], gs);  // groups in order 0..3
        }
      }
    }
  }
  // Against x quantized to 8 bits (see FmtQ4_K::dot_q8): group g's 8 columns lie in one x group of
  // scale xd; sum x q = xd (sum u x - 32 sum x) over the bytes, four byte dot products, then
  // times dsc.
  template <int N, int R>
  static SHD void dot_q8(const Raw (&raw)[R], int p, const int8_t* xq, const float2* xds, int64_t cols, float (&s)[R][N]) {
    const int e = run_start(p, 0);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float dsc[R];
      uint32_t u[R][2];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        dsc[r] = mul_rn(half_bits_to_float(raw[r].d), s8_to_f(raw[r].sc >> (8 * g)));
#pragma unroll
        for (int sub = 0; sub < 2; ++sub) {
          const uint32_t lw = (g & 1) ? raw[r].ql1[sub] : raw[r].ql0[sub];
          const uint32_t lo = g >= 2 ? (lw >> 4) & 0x0F0F0F0Fu : lw & 0x0F0F0F0Fu;
          const uint32_t hi = ((raw[r].qh[sub] >> (2 * g)) & 0x03030303u) << 4;
          u[r][sub] = lo | hi;  // bytes u in [0, 64)
        }
      }
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int c = e + 32 * g;
        const uint2 q2 = ld_ro<N, uint2>(xq + i * cols + c);
        const float xd = ld_ro<N, float2>(xds + (i * cols + c) / 16).x;
        const int32_t sx = dp4a(0x01010101u, q2.y, dp4a(0x01010101u, q2.x, 0));
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int32_t acc = dp4a(u[r][1], q2.y, dp4a(u[r][0], q2.x, 0)) - 32 * sx;
          const float gs = mul_rn(mul_rn(dsc[r], xd), small_i2f(acc));
          s[r][i] = g == 0 ? gs : add_rn(s[r][i], gs);  // groups in order 0..3
        }
      }
    }
  }
};

#undef SHD

// ------------------------------------------------------------------------------------------
// GEMV kernel. One launch serves up to kGemvMaxMats matrices of one format and one cols (gemv:
// one, gemv_multi: several reading the same x): matrix k owns blocks [block_begin[k],
// block_begin[k + 1]) and a block maps to R * kGemvWarps consecutive rows of one matrix, so a
// row's arithmetic is exactly that of a gemv of its matrix alone.

constexpr int kGemvWarps = 4;  // warps (output row groups) per block
constexpr int kGemvThreads = 32 * kGemvWarps;
constexpr int kGemvMaxMats = 4;

// Launches of at most this many weight bytes bulk-prefetch their rows into L2 (0: never; see launch).
constexpr uint64_t kGemvL2PrefetchMaxBytes = 0;

struct GemvMats {  // passed by value (kernel parameter space)
  const uint8_t* w[kGemvMaxMats];
  float* y[kGemvMaxMats];
  int64_t rows[kGemvMaxMats];
  uint64_t row_bytes[kGemvMaxMats];
  uint32_t block_begin[kGemvMaxMats];  // block_begin[0] = 0
  int count;
  int l2_prefetch;  // kPrefetch kernels: 1 = bulk-prefetch each warp's whole rows into L2 at start
  // 1: every block triggers the next kernel's launch (PDL) before anything else, so that kernel's
  // blocks may launch, and load their weights, while this one still waits (F16/BF16 GEMVs of
  // one x row: see gemv_early_trigger).
  int early_trigger;
  // The staged producers (gemv_xq_staged_kernel): slots of shared memory, each one chunk of kXsChunkRows
  // rows of every matrix: kXsChunks (the block's rows at once) or fewer (a ring: chunk c in slot c % slots).
  int stage_slots;
  // Lazy norm (gemv_kernel's NM; see gemv_add_norm and gemv_multi_normed in kernels.h).
  // NM = 1 (producer, one matrix): nx[i][j] += product (the residual add), nh[i][j] = nx[i][j] *
  // ng[j], parts[i][q] = sum of the squares of nx[i][j] for the kGemvWarps / KS rows j of group q,
  // in row order (independent of n and R).
  // NM = 2 (consumer): every product times r_i = 1 / sqrt(sum_p parts[i][p] / cols + eps).
  float* nx;
  const float* ng;
  float* nh;
  float* parts;     // NM = 1: written; NM = 2: read
  int32_t n_parts;  // parts per x row (groups of the producer's rows)
  float eps;
  // gemv_kernel's kXq: x quantized to 8 bits by quantize_xq_kernel: xq[n][cols] bytes,
  // xds[n][cols / 16] (scale of the 32-column group, scale times the sum of the 16 q).
  const int8_t* xq;
  const float2* xds;
};

template <class F, int N, int R, int T>
__device__ __forceinline__ void dot_run(const typename F::Raw (&raw)[R], int p, const float* __restrict__ x,
                                        int64_t cols, float (&s)[R][N]) {
  const int e = F::run_start(p, T);
  float4 xv[N];
#pragma unroll
  for (int i = 0; i < N; ++i) xv[i] = ld_x4<N>(x + i * cols + e);
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

// Loads the U pieces base, base + 32, ... of each of the R rows (indices past the row's end are
// clamped to its last piece, whose result consume_pieces discards).
template <class F, int R, int U>
__device__ __forceinline__ void load_pieces(typename F::Raw (&raw)[U][R], const uint8_t* const (&rp)[R], int base,
                                            int n_pieces) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int p = min(base + 32 * u, n_pieces - 1);
#pragma unroll
    for (int r = 0; r < R; ++r) raw[u][r] = F::load(rp[r], p);
  }
}

// acc += piece sums of pieces base, base + 32, ... in ascending order (the fixed per-lane order).
template <class F, int N, int R, int U, bool kXq = false>
__device__ __forceinline__ void consume_pieces(const typename F::Raw (&raw)[U][R], int base, int n_pieces,
                                               const float* __restrict__ x, int64_t cols, float (&acc)[R][N],
                                               const int8_t* xq = nullptr, const float2* xds = nullptr) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const bool valid = base + 32 * u < n_pieces;
    const int p = min(base + 32 * u, n_pieces - 1);
    float s[R][N];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < N; ++i) s[r][i] = 0.0f;
    if constexpr (kXq) {
      F::template dot_q8<N, R>(raw[u], p, xq, xds, cols, s);
    } else if constexpr (F::kReassoc) {
      F::template dot<N, R>(raw[u], p, x, cols, s);
    } else {
      dot_runs<F, N, R, 0>(raw[u], p, x, cols, s);
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < N; ++i) acc[r][i] = valid ? acc[r][i] + s[r][i] : acc[r][i];
  }
}

// A warp's main loop over its rows' pieces, after the PDL wait: raw holds the lane's first U pieces
// of each row (loaded before the wait). kPrefetch: the next U pieces are loaded before the current
// ones are used; otherwise (rows of at most 32 U pieces, one iteration) each group is loaded in turn.
template <class F, int N, int R, int U, bool kXq, bool kPrefetch>
__device__ __forceinline__ void stream_pieces(typename F::Raw (&raw)[U][R], const uint8_t* const (&rp)[R], int lane,
                                              int n_pieces, const float* __restrict__ x, int64_t cols, float (&acc)[R][N],
                                              const int8_t* xq, const float2* xds) {
  if constexpr (kPrefetch) {
    for (int g = 0; g < n_pieces; g += 32 * U) {
      typename F::Raw nxt[U][R];
      const bool more = g + 32 * U < n_pieces;  // warp-uniform
      if (more) load_pieces<F, R, U>(nxt, rp, g + 32 * U + lane, n_pieces);
      consume_pieces<F, N, R, U, kXq>(raw, g + lane, n_pieces, x, cols, acc, xq, xds);
      if (!more) break;
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) raw[u][r] = nxt[u][r];
    }
  } else {
    for (int base = lane; base < n_pieces; base += 32 * U) {
      if (base != lane) load_pieces<F, R, U>(raw, rp, base, n_pieces);
      consume_pieces<F, N, R, U, kXq>(raw, base, n_pieces, x, cols, acc, xq, xds);
    }
  }
}

// Matrix that owns block b. The parameters are __grid_constant__, so m.w[k] etc. with this k are
// indexed constant-bank loads (no local copy) and need not stay in registers.
__host__ __device__ __forceinline__ int mat_of_block(const GemvMats& m, uint32_t b) {
  int k = 0;
#pragma unroll
  for (int j = 1; j < kGemvMaxMats; ++j) k += (j < m.count && b >= m.block_begin[j]) ? 1 : 0;
  return k;
}

// blockIdx.x read afresh (volatile: not merged with the first read), so that the values derived
// from it for the final store are recomputed from the parameters instead of being kept in
// registers through the main loop.
__device__ __forceinline__ uint32_t fresh_ctaid_x() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  return v;
}

// Whole-row L2 prefetch for the long-row (kPrefetch) kernels: one bulk (TMA) request per row at
// kernel start puts every weight byte of the launch in flight at once, so DRAM streams at full
// rate from the first microsecond instead of following each warp's register-limited window
// (the demand loads below then mostly hit L2). A hint only: the loads and the arithmetic are
// unchanged. The range is shrunk to 16-byte boundaries (the bulk copy's alignment rule), so
// nothing outside the row is touched; sm_90+ only. Enabled by the host (GemvMats::l2_prefetch)
// only for launches of at most 40 MB of weights, which the L2 holds.
__device__ __forceinline__ void prefetch_row_l2(const uint8_t* row, uint64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint64_t a = static_cast<uint64_t>(__cvta_generic_to_global(row));
  const uint64_t b = (a + 15u) & ~uint64_t{15};
  const uint64_t e = (a + bytes) & ~uint64_t{15};
  if (e > b && e - b <= 0xfffffff0u) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b), "r"(static_cast<uint32_t>(e - b)) : "memory");
  }
#else
  (void)row;
  (void)bytes;
#endif
}

// kPrefetch (n = 1 and rows longer than 32 U pieces, e.g. [2048 x 8192]): the next U pieces of
// each lane are loaded before the current ones are used, so loads stay in flight between
// iterations. Rows of at most 32 U pieces take a single iteration and use kPrefetch = false
// (fewer registers, more warps per SM).
// Pieces per lane loaded ahead: about the same bytes in flight whatever R; fewer for large N,
// where the accumulators take the registers.
// (The quantized formats' reassociated piece sums keep the x of a piece in registers for all R
// rows, so they halve U from N = 3.)
template <class F, int N, int R>
constexpr int gemv_u() {
  constexpr int kDiv = (N >= 5 ? 2 : 1) * (F::kReassoc && N >= 3 ? 2 : 1);
  return F::kU / R / kDiv > 0 ? F::kU / R / kDiv : 1;
}

// U: pieces per lane in flight (gemv_u, or less for short rows, so that no lane loads and
// computes clamped duplicates of the last piece in vain).
// kGlu (R = 2, m.count = 2: gate and up of one shape): warp w owns row j = block * kGemvWarps + w
// of both matrices and writes m.y[0][i][j] = silu(gate . x_i) * (up . x_i), each product exactly as
// the plain GEMV computes it and the SiLU exactly as silu_mul_kernel does.
//
// KS > 1 (split rows, long rows only): the KS warps w, w + 1, ... (w % KS == 0) of a block share
// R rows, warp w + s taking columns [s cols / KS, (s + 1) cols / KS) (a whole number of weight
// blocks), so a row is streamed by KS warps at once; the KS partial sums are added in order of s
// through shared memory. Fixed per shape (the host picks KS from cols alone), so a row's result
// still does not depend on n or on the other rows.
// Consumer of a lazy norm (NM = 2), right after the PDL wait: asks L1 for the lines of the
// producer's partial sums ([N][n_parts] floats, 128-byte lines split over the block's threads), so
// that norm_part_sums in the epilogue finds them there without stalling the main loop (a hint:
// the loads are the same without it).
template <int N>
__device__ __forceinline__ void norm_prefetch(const GemvMats& m) {
#if defined(__CUDA_ARCH__)
  const uint64_t a = static_cast<uint64_t>(__cvta_generic_to_global(m.parts)) & ~uint64_t{127};
  const uint64_t e = static_cast<uint64_t>(__cvta_generic_to_global(m.parts + static_cast<int64_t>(N) * m.n_parts));
  for (uint64_t l = a + 128u * threadIdx.x; l < e; l += 128u * kGemvThreads) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(l));
  }
#else
  (void)m;
#endif
}

// This thread's share of the sums of squares of each x row: parts p = threadIdx.x, + kGemvThreads,
// ... in order, summed in double (ld.global.ca through L1: the blocks of an SM share the lines; the
// producer finished before the PDL wait).
template <int N>
__device__ __forceinline__ void norm_part_sums(const GemvMats& m, double (&s)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) s[i] = 0.0;
  for (int p = static_cast<int>(threadIdx.x); p < m.n_parts; p += kGemvThreads) {
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] += static_cast<double>(__ldca(m.parts + static_cast<int64_t>(i) * m.n_parts + p));
  }
}

// The block's r_i from the threads' shares: a fixed xor butterfly per warp, then the warps in order
// (every thread of the block must call it; the same arithmetic in every block, and in
// norm_resolve_kernel of elementwise.cu). kWide: a block of more than kGemvThreads threads
// (gemv_xq_out_kernel) takes the shares of its first kGemvThreads only (the others' are 0).
template <int N, bool kWide = false>
__device__ __forceinline__ void norm_scales(const GemvMats& m, int64_t cols, double (&s)[N], float (&r)[N]) {
  __shared__ double sums[kGemvWarps][N];
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    double v = s[i];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0 && (!kWide || warp < kGemvWarps)) sums[warp][i] = v;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    double t = sums[0][i];
#pragma unroll
    for (int w = 1; w < kGemvWarps; ++w) t += sums[w][i];
    r[i] = static_cast<float>(1.0 / sqrt(t / static_cast<double>(cols) + static_cast<double>(m.eps)));
  }
}

// Producer of a lazy norm (NM = 1, one matrix): the first row of the warp's R rows and the matrix's
// rows (as the epilogue computes them).
template <int R, int KS>
__device__ __forceinline__ int64_t producer_r0() {
  return (static_cast<int64_t>(blockIdx.x) * (kGemvWarps / KS) + static_cast<int>(threadIdx.x >> 5) / KS) * R;
}
// The producer's epilogue operands loaded early, so that its tail waits for no load: g of the
// warp's rows before the PDL wait (weights are never written), the residual x after it (rows past
// the end: 0, not stored). Only where they fit in few registers (kProducerEarly).
template <int N, int R>
inline constexpr bool kProducerEarly = N * R <= 8;
template <int N, int R, int KS>
__device__ __forceinline__ void producer_load_g(const GemvMats& m, float (&g)[R]) {
  const int64_t r0 = producer_r0<R, KS>(), rows = m.rows[0];
#pragma unroll
  for (int r = 0; r < R; ++r) g[r] = r0 + r < rows ? m.ng[r0 + r] : 0.0f;
}
template <int N, int R, int KS>
__device__ __forceinline__ void producer_load_x(const GemvMats& m, float (&x)[R][N]) {
  const int64_t r0 = producer_r0<R, KS>(), rows = m.rows[0];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) x[r][i] = r0 + r < rows ? m.nx[i * rows + r0 + r] : 0.0f;
}

// NM (lazy norm, GemvMats): 0 plain; 1 producer (the residual add and x * g in the epilogue, the
// block's sum of squares into m.parts; one matrix, not kGlu); 2 consumer (products times r). With
// NM != 0 no warp leaves early: every block reaches its barriers with all its warps.
template <class F, int N, int R, bool kPrefetch, int U, bool kGlu = false, int KS = 1, int NM = 0, bool kXq = false>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const __grid_constant__ GemvMats m, int64_t cols,
                                                            const float* __restrict__ x) {
  static_assert(!kGlu || R == 2, "the SwiGLU GEMV takes one row of each of two matrices per warp");
  static_assert(KS == 1 || (!kGlu && kGemvWarps % KS == 0), "split rows: plain GEMV, KS divides the block's warps");
  static_assert(NM != 1 || !kGlu, "the lazy-norm producer is a plain GEMV");
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int sub = warp % KS;  // which part of the row (0 when KS = 1)
  if (m.early_trigger != 0) pdl_trigger();
  bool active = true;         // KS > 1 or NM != 0: warps past the last row compute a clamped row, store nothing

  const uint8_t* rp[R];
  if constexpr (kGlu) {
    int64_t j = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
    if (j >= m.rows[0]) {
      if constexpr (NM == 0) {
        pdl_wait();
        return;
      } else {
        active = false;
        j = 0;
      }
    }
    rp[0] = m.w[0] + static_cast<uint64_t>(j) * m.row_bytes[0];
    rp[1] = m.w[1] + static_cast<uint64_t>(j) * m.row_bytes[1];
  } else {
    const uint32_t b = blockIdx.x;
    const int k = mat_of_block(m, b);
    const int64_t rows = m.rows[k];
    int64_t r0 = (static_cast<int64_t>(b - m.block_begin[k]) * (kGemvWarps / KS) + warp / KS) * R;
    if (r0 >= rows) {
      if constexpr (KS == 1 && NM == 0) {  // whole warp leaves together (after the PDL wait: see launch.cuh)
        pdl_wait();
        return;
      } else {  // stays for the block's barrier
        active = false;
        r0 = 0;
      }
    }
    const uint8_t* wdata = m.w[k];
    const uint64_t row_bytes = m.row_bytes[k];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = r0 + r < rows ? r0 + r : rows - 1;  // duplicate rows past the end (not stored)
      rp[r] = wdata + static_cast<uint64_t>(row) * row_bytes + static_cast<uint64_t>(sub) * (row_bytes / KS);
    }
    if (kPrefetch && m.l2_prefetch != 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (lane == r) prefetch_row_l2(rp[r], row_bytes / KS);
      }
    }
  }
  const int n_pieces = static_cast<int>(cols / KS / F::kPieceElems);
  const float* __restrict__ xs = x + static_cast<int64_t>(sub) * (cols / KS);  // row stride stays cols
  const int8_t* xq = nullptr;  // kXq: the same columns of the quantized x
  const float2* xds = nullptr;
  if constexpr (kXq) {
    xq = m.xq + static_cast<int64_t>(sub) * (cols / KS);
    xds = m.xds + static_cast<int64_t>(sub) * (cols / KS) / 16;
  }

  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[r][i] = 0.0f;
  constexpr bool kEarly = NM == 1 && kProducerEarly<N, R>;
  float pg[R], px[R][N];  // kEarly: the producer's g and x of the warp's rows
  (void)pg;
  (void)px;
  if constexpr (kEarly) producer_load_g<N, R, KS>(m, pg);

  // Groups of 32 U pieces (prefetch: a warp-uniform loop); lane l takes pieces g + l + 32 u. Pieces past
  // the end of the row are replaced by the row's last piece, computed and discarded, so the body
  // has no branches and loads can be scheduled freely.
  // The first pieces of weights are loaded before the PDL wait (weights are never written), so
  // they are in flight while the kernel that writes x still runs.
  if constexpr (kPrefetch) {
    typename F::Raw raw[U][R];
    load_pieces<F, R, U>(raw, rp, lane, n_pieces);
    pdl_wait();
    pdl_trigger();
    if constexpr (NM == 2) norm_prefetch<N>(m);
    if constexpr (kEarly) producer_load_x<N, R, KS>(m, px);
    stream_pieces<F, N, R, U, kXq, true>(raw, rp, lane, n_pieces, xs, cols, acc, xq, xds);
  } else {
    typename F::Raw raw[U][R];
    if (lane < n_pieces) load_pieces<F, R, U>(raw, rp, lane, n_pieces);
    pdl_wait();
    pdl_trigger();
    if constexpr (NM == 2) norm_prefetch<N>(m);
    if constexpr (kEarly) producer_load_x<N, R, KS>(m, px);
    stream_pieces<F, N, R, U, kXq, false>(raw, rp, lane, n_pieces, xs, cols, acc, xq, xds);
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
  float nr[N];  // NM = 2: r of each x row
  if constexpr (NM == 2) {
    double nss[N];
    norm_part_sums<N>(m, nss);
    norm_scales<N>(m, cols, nss, nr);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < N; ++i) acc[r][i] = acc[r][i] * nr[i];
  }
  (void)nr;
  if constexpr (kGlu) {
    if (lane == 0 && active) {
      const int64_t rows = m.rows[0];
      const int64_t j = static_cast<int64_t>(fresh_ctaid_x()) * kGemvWarps + (threadIdx.x >> 5);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float g = acc[0][i];
        m.y[0][i * rows + j] = g / (1.0f + expf(-g)) * acc[1][i];
      }
    }
    return;
  }
  bool store = lane == 0 && active;
  if constexpr (KS > 1) {
    __shared__ float part[kGemvWarps][R][N];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < N; ++i) part[warp][r][i] = acc[r][i];
    }
    __syncthreads();
    if constexpr (NM != 1) {
      if (sub != 0 || !active) return;
    }
    store = store && sub == 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        float v = part[warp][r][i];
#pragma unroll
        for (int t = 1; t < KS; ++t) v += part[warp + t][r][i];
        acc[r][i] = v;
      }
    }
  }
  float sqv[R][N];  // NM = 1: the squares of the x values this warp wrote (0: rows not written)
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) sqv[r][i] = 0.0f;
  (void)sqv;
  if (store) {
    const uint32_t b = fresh_ctaid_x();
    const int k = mat_of_block(m, b);
    const int64_t rows = m.rows[k];
    const int64_t r0 = (static_cast<int64_t>(b - m.block_begin[k]) * (kGemvWarps / KS) + warp / KS) * R;
    float* y = m.y[k];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r0 + r < rows) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
          if constexpr (NM == 1) {
            const int64_t e = i * rows + r0 + r;
            const float xn = (kEarly ? px[r][i] : m.nx[e]) + acc[r][i];  // add()'s arithmetic
            m.nx[e] = xn;
            m.nh[e] = xn * (kEarly ? pg[r] : m.ng[r0 + r]);
            sqv[r][i] = __fmul_rn(xn, xn);
          } else {
            y[i * rows + r0 + r] = acc[r][i];
          }
        }
      }
    }
  }
  if constexpr (NM == 1) {
    // One partial per group of G consecutive rows (G = the block's rows at R = 1, which depends on
    // the shape only): the squares added in row order, so a row's partials — and r — are the same
    // bits whatever n, R and the other rows (the block's R groups: parts [block R, block R + R)).
    constexpr int G = kGemvWarps / KS;
    __shared__ float sq[G * R][N];
    if (lane == 0 && sub == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < N; ++i) sq[(warp / KS) * R + r][i] = sqv[r][i];
    }
    __syncthreads();
    if (threadIdx.x < R * N) {
      const int g = static_cast<int>(threadIdx.x) / N, i = static_cast<int>(threadIdx.x) % N;
      float t = sq[g * G][i];
#pragma unroll
      for (int k = 1; k < G; ++k) t = __fadd_rn(t, sq[g * G + k][i]);
      const int64_t part = static_cast<int64_t>(fresh_ctaid_x()) * R + g;
      if (part < m.n_parts) m.parts[static_cast<int64_t>(i) * m.n_parts + part] = t;
    }
  }
}

// x quantized to 8 bits for the Q4_K / Q6_K / Q8_0 GEMVs (kXq), as xq.cuh says. One thread per 4
// values, 8 threads per group. early (one-row decode): the GEMV after it may launch, and load its
// first weight pieces, while the kernel that writes x still runs (measured on an H100, llama-1b
// Q4_K: 621.5 -> 614.2 us of GPU per step; at 8 rows 3% slower, so not there).
constexpr int kXqThreads = 128;
__global__ void __launch_bounds__(kXqThreads) quantize_xq_kernel(const float* __restrict__ x, int64_t n4, int8_t* __restrict__ xq,
                                                                 float2* __restrict__ xds, int early) {
  if (early != 0) pdl_trigger();
  pdl_wait();
  pdl_trigger();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kXqThreads + threadIdx.x;
  const bool live = v < n4;  // n4 % 8 == 0: a group is all live or all not
  // ld_x4: ld.global.ca at any n here (8-row batches of Q4_K measured level with it).
  const float4 a = live ? ld_x4(x + 4 * v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float m = fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w)));
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float d, id;
  xq_scale(m, &d, &id);
  const float xv[4] = {a.x, a.y, a.z, a.w};
  uint32_t packed = 0;
  int32_t sum = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int32_t q = xq_quant(xv[k], id);
    packed |= (static_cast<uint32_t>(q) & 0xffu) << (8 * k);
    sum += q;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (!live) return;
  reinterpret_cast<uint32_t*>(xq)[v] = packed;
  if ((threadIdx.x & 3u) == 0) xds[v / 4] = make_float2(d, __fmul_rn(d, static_cast<float>(sum)));
}

// One-row producers that also write their output's 8-bit form (GemvXq::out, kernels.h): the
// lazy-norm producer (O and down projections: x += product, h = x * g, the partial sums; h is
// quantized) and the SwiGLU GEMV (gate/up, plain or times r; its output is quantized), over
// weights whose GEMV reads 8-bit x, for one x row. A block holds kXoRows = 32 consecutive output
// rows, one group of the 8-bit x (xq.cuh), with RW = 1 or 2 rows per warp (the SwiGLU: rows of
// both matrices), so it quantizes its own group from shared memory: no quantize_xq_kernel launch
// before the next GEMV, and no hand-off between blocks. Every value is the bits the two launches
// give: each row's products are gemv_kernel's (stream_pieces, the same butterfly), r is
// norm_part_sums / norm_scales over the shares of the block's first kGemvThreads threads, the
// partial sums gemv_kernel's (groups of kGemvWarps rows, in row order, at KS = 1), and the bytes
// quantize_xq_kernel's (xq_store_warp: a group's amax and integer sums do not depend on who
// computes them). The backend asks for it by default with RW = 2 (STRATA_CUDA_XQ_OUT=1: RW = 1,
// =0: never); on an H100 (llama-1b Q4_K) RW = 2 was the fastest; a form with RW = 4 (8 warps),
// tried once, was far slower and is not kept.
constexpr int kXoRows = 32;

// The one-row kernels' row sums from each lane's (gemv_kernel's butterfly), times r for the lazy
// norm's consumer (NM = 2: gemv_kernel's r, from the shares of the block's first kGemvThreads
// threads, summed as there); every thread of the block calls it.
template <int NM, int R>
__device__ __forceinline__ void reduce_rows_norm(const GemvMats& m, int64_t cols, float (&acc)[R][1]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r][0];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    acc[r][0] = v;
  }
  if constexpr (NM == 2) {
    double nss[1] = {0.0};
    if (threadIdx.x < kGemvThreads) norm_part_sums<1>(m, nss);
    float nr[1];
    norm_scales<1, true>(m, cols, nss, nr);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][0] * nr[0];
  }
}

// The one-row kernels (producers with an 8-bit output, staged GEMVs) right after they are released:
// the PDL wait, then (NM = 2) the lazy norm's partial sums asked of L1, (NM = 1) the residual x of
// the warp's rows into px.
template <int NM, int RW>
__device__ __forceinline__ void one_row_released(const GemvMats& m, int64_t row0, float (&px)[RW]) {
  pdl_wait();
  pdl_trigger();
  if constexpr (NM == 2) {
    if (threadIdx.x < kGemvThreads) norm_prefetch<1>(m);
  }
  if constexpr (NM == 1) {
#pragma unroll
    for (int k = 0; k < RW; ++k) px[k] = m.nx[row0 + k];
  }
}

// The epilogue of the one-row producers with an 8-bit output (gemv_xq_out_kernel and its staged
// form): acc holds each lane's sums of the warp's R rows (kGlu: gate and up of row k at 2k, 2k + 1),
// pg and px (NM = 1) the g and x of its RW output rows; every thread of the block calls it.
template <bool kGlu, int NM, int RW>
__device__ __forceinline__ void xq_out_epilogue(const GemvMats& m, int64_t cols, float (&acc)[kGlu ? 2 * RW : RW][1],
                                                const float (&pg)[RW], const float (&px)[RW], int64_t row0, int lane,
                                                int warp, int8_t* __restrict__ oq, float2* __restrict__ ods) {
  reduce_rows_norm<NM>(m, cols, acc);
  __shared__ float out[kXoRows];  // the block's outputs (h, or the SwiGLU's), to quantize
  __shared__ float sq[kXoRows];   // NM = 1: the squares of the x values
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < RW; ++k) {
      const int i = warp * RW + k;
      if constexpr (kGlu) {
        const float g = acc[2 * k][0];
        const float v = g / (1.0f + expf(-g)) * acc[2 * k + 1][0];
        m.y[0][row0 + k] = v;
        out[i] = v;
      } else {
        const float xn = px[k] + acc[k][0];  // add()'s arithmetic
        m.nx[row0 + k] = xn;
        const float h = xn * pg[k];
        m.nh[row0 + k] = h;
        out[i] = h;
        sq[i] = __fmul_rn(xn, xn);
      }
    }
  }
  __syncthreads();
  step_trace_stamp(12);  // 12 every warp's outputs in shared memory
  if constexpr (NM == 1) {
    constexpr int G = kGemvWarps;  // gemv_kernel's rows per partial at KS = 1
    if (threadIdx.x < kXoRows / G) {
      const int q = static_cast<int>(threadIdx.x);
      float t = sq[q * G];
#pragma unroll
      for (int k = 1; k < G; ++k) t = __fadd_rn(t, sq[q * G + k]);
      const int64_t part = static_cast<int64_t>(blockIdx.x) * (kXoRows / G) + q;
      if (part < m.n_parts) m.parts[part] = t;
    }
  }
  if (warp == kXoRows / RW - 1) {
    xq_store_warp(out[lane], lane, oq + static_cast<int64_t>(blockIdx.x) * kXoRows,
                  ods + static_cast<int64_t>(blockIdx.x) * (kXoRows / 16));
  }
}

// RW rows per warp (1: 32 warps; 2: 16 warps, each x load serving both rows, half the threads).
template <class F, bool kGlu, int NM, int U, bool kPrefetch, int RW>
__global__ void __launch_bounds__(32 * kXoRows / RW, 1) gemv_xq_out_kernel(const __grid_constant__ GemvMats m, int64_t cols,
                                                                           int8_t* __restrict__ oq, float2* __restrict__ ods) {
  static_assert(kGlu ? NM == 0 || NM == 2 : NM == 1, "the SwiGLU GEMV (plain or times r) or the lazy-norm producer");
  static_assert(RW == 1 || RW == 2, "one or two rows per warp");
  constexpr int R = kGlu ? 2 * RW : RW;  // weight rows per warp (the SwiGLU: gate and up of each row)
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if (m.early_trigger != 0) pdl_trigger();
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kXoRows + warp * RW;  // rows % kXoRows == 0: every row exists
  const uint8_t* rp[R];
#pragma unroll
  for (int k = 0; k < RW; ++k) {
    if constexpr (kGlu) {
      rp[2 * k] = m.w[0] + static_cast<uint64_t>(row0 + k) * m.row_bytes[0];
      rp[2 * k + 1] = m.w[1] + static_cast<uint64_t>(row0 + k) * m.row_bytes[1];
    } else {
      rp[k] = m.w[0] + static_cast<uint64_t>(row0 + k) * m.row_bytes[0];
    }
  }
  const int n_pieces = static_cast<int>(cols / F::kPieceElems);
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
  float pg[RW], px[RW];  // NM = 1: g and x of the warp's rows (gemv_kernel's kEarly)
#pragma unroll
  for (int k = 0; k < RW; ++k) pg[k] = px[k] = 0.0f;
  if constexpr (NM == 1) {
#pragma unroll
    for (int k = 0; k < RW; ++k) pg[k] = m.ng[row0 + k];
  }
  typename F::Raw raw[U][R];
  if constexpr (kPrefetch) {
    load_pieces<F, R, U>(raw, rp, lane, n_pieces);
  } else {
    if (lane < n_pieces) load_pieces<F, R, U>(raw, rp, lane, n_pieces);
  }
  one_row_released<NM>(m, row0, px);
  stream_pieces<F, 1, R, U, true, kPrefetch>(raw, rp, lane, n_pieces, nullptr, cols, acc, m.xq, m.xds);
  step_trace_stamp(11);  // the step trace's phases (launch.cuh): 11 warp 0's dot products done
  xq_out_epilogue<kGlu, NM, RW>(m, cols, acc, pg, px, row0, lane, warp, oq, ods);
}

// Staged form of gemv_xq_out_kernel (GemvXq::out_staged): the block's weight rows are copied into
// shared memory by bulk copies (TMA) before the PDL wait, in chunks of kXsChunkRows rows of each
// matrix, each completing on an mbarrier of its own (a warp starts on its rows as soon as their
// chunk is in). No weight byte waits in registers, so a block takes few registers per thread:
// several blocks share a multiprocessor, and every block of the launch (and of the next one, where
// it fits) has its weights in flight while the kernel before it still runs. Where the register form
// takes two waves of blocks (llama-1b's gate/up: 256 blocks of a whole SM each), this takes one.
// Shared memory: kXoRows rows of each matrix (Q4_K, 2,048 columns, gate and up: 72 KB), or, where
// that does not fit or leaves the launch more than one wave of blocks, a ring of two slots of
// kXsChunkRows rows (GemvMats::stage_slots; chunks 2 and 3 are copied into the slots of 0 and 1 once
// their warps are done with them; llama-1b Q8_0: down, and gate/up). The arithmetic is the register
// form's: each lane takes pieces lane, lane + 32, ... of each row in ascending order, the same dot_q8
// and the same epilogue, so the bits are the same.
constexpr int kXsChunkRows = 8;  // 8 rows of any quantized format: a multiple of 16 bytes
constexpr int kXsChunks = kXoRows / kXsChunkRows;

// One chunk's copy: rows [row0, row0 + kXsChunkRows) of w0 (then w1) into dst, completing on bar.
template <int kMats>
__device__ __forceinline__ void stage_chunk(uint8_t* dst, uint64_t* bar, const uint8_t* w0, const uint8_t* w1,
                                            uint64_t row0, uint64_t rb) {
  const uint32_t chunk_bytes = static_cast<uint32_t>(kXsChunkRows * rb);
  const uint64_t policy = evict_first_policy();
  bulk_copy_hint(dst, w0 + row0 * rb, chunk_bytes, bar, policy);
  if constexpr (kMats == 2) bulk_copy_hint(dst + chunk_bytes, w1 + row0 * rb, chunk_bytes, bar, policy);
}
// The staged kernels' copies: warp c < kXsChunks (its lane 0) initialises mbarrier c and, where
// c < slots, copies rows [8c, 8c + 8) of the block (from row blk_row0) of each of the kMats matrices
// (w0, then w1) into slot c of stage, matrix after matrix. Weights only: may run before the PDL wait.
// slots = kXsChunks (gemv_staged_kernel's only form): every chunk; a ring (fewer slots): the barriers
// of the chunks it copies later are initialised here too (warps slots..kXsChunks - 1).
template <int kMats>
__device__ __forceinline__ void stage_rows(uint8_t* stage, uint64_t* bar, const uint8_t* w0, const uint8_t* w1,
                                           uint64_t blk_row0, uint64_t rb, int warp, int lane, int slots = kXsChunks) {
  if (warp >= kXsChunks || lane != 0) return;
  const uint32_t chunk_bytes = static_cast<uint32_t>(kXsChunkRows * rb);
  mbar_init(&bar[warp], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  mbar_expect_tx(&bar[warp], kMats * chunk_bytes);
  if (warp < slots) {
    stage_chunk<kMats>(stage + static_cast<uint64_t>(warp * kMats) * chunk_bytes, &bar[warp], w0, w1,
                       blk_row0 + static_cast<uint64_t>(warp) * kXsChunkRows, rb);
  }
}

// The staged kernels' dot products: acc[r] += the lane's pieces lane, lane + 32, ... (ascending) of
// row r at `mine` (rows rb apart; kGlu: gate (even r) and up (odd r) of row r / 2, the up rows
// chunk_bytes after the gate rows), C rows at a time, against the 8-bit x (kXq) or the f32 x at x
// (each piece's sum as consume_pieces takes it: the same bits as gemv_kernel).
template <class F, bool kGlu, int R, bool kXq = true>
__device__ __forceinline__ void staged_dots(const uint8_t* mine, uint32_t chunk_bytes, uint64_t rb, int lane,
                                            const GemvMats& m, int64_t cols, float (&acc)[R][1],
                                            const float* __restrict__ x = nullptr) {
  constexpr int C = R < 4 ? R : 4;  // rows per pass (registers)
  const int n_pieces = static_cast<int>(cols / F::kPieceElems);
  for (int p = lane; p < n_pieces; p += 32) {
#pragma unroll
    for (int c0 = 0; c0 < R; c0 += C) {
      typename F::Raw raw[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int r = c0 + c;
        const uint64_t off = kGlu ? (r & 1) * uint64_t{chunk_bytes} + static_cast<uint64_t>(r >> 1) * rb : static_cast<uint64_t>(r) * rb;
        raw[c] = F::template load<true>(mine + off, p);
      }
      float sum[C][1];
#pragma unroll
      for (int c = 0; c < C; ++c) sum[c][0] = 0.0f;
      if constexpr (kXq) {
        F::template dot_q8<1, C>(raw, p, m.xq, m.xds, cols, sum);
      } else if constexpr (F::kReassoc) {
        F::template dot<1, C>(raw, p, x, cols, sum);
      } else {
        dot_runs<F, 1, C, 0>(raw, p, x, cols, sum);
      }
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c0 + c][0] = acc[c0 + c][0] + sum[c][0];
    }
  }
}

template <class F, bool kGlu, int NM, int RW>
__global__ void __launch_bounds__(32 * kXoRows / RW) gemv_xq_staged_kernel(const __grid_constant__ GemvMats m, int64_t cols,
                                                                           int8_t* __restrict__ oq, float2* __restrict__ ods) {
  static_assert(kGlu ? NM == 0 || NM == 2 : NM == 1, "the SwiGLU GEMV (plain or times r) or the lazy-norm producer");
  static_assert(RW == 2 || RW == 4, "two or four rows per warp");
  static_assert(kXoRows / RW >= kXsChunks && kXsChunkRows % RW == 0, "a warp per chunk to copy it; a warp's rows in one chunk");
  constexpr int kMats = kGlu ? 2 : 1;
  constexpr int R = kGlu ? 2 * RW : RW;
  extern __shared__ __align__(128) uint8_t stage[];
  __shared__ uint64_t bar[kXsChunks];
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if (m.early_trigger != 0) pdl_trigger();
  const uint64_t rb = m.row_bytes[0];  // kGlu: up's too (checked by the host)
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kXoRows + warp * RW;
  // Chunk c: rows [8c, 8c + 8) of the block in each matrix, matrix after matrix, in slot c % slots.
  // A ring (slots < kXsChunks): chunk c >= slots is copied by lane 0 of the first warp of chunk
  // c - slots, once that chunk's warps have all arrived on empty[its slot].
  const uint32_t chunk_bytes = static_cast<uint32_t>(kXsChunkRows * rb);
  const int slots = m.stage_slots;
  const uint64_t blk_row0 = static_cast<uint64_t>(blockIdx.x) * kXoRows;
  const uint8_t* w1 = kGlu ? m.w[1] : nullptr;
  constexpr int kWarpsPerChunk = kXsChunkRows / RW;
  __shared__ uint64_t empty[kXsChunks];
  stage_rows<kMats>(stage, bar, m.w[0], w1, blk_row0, rb, warp, lane, slots);
  if (slots < kXsChunks && warp < slots && lane == 0) mbar_init(&empty[warp], kWarpsPerChunk);
  float pg[RW], px[RW];  // NM = 1: g and x of the warp's rows
#pragma unroll
  for (int k = 0; k < RW; ++k) pg[k] = px[k] = 0.0f;
  if constexpr (NM == 1) {
#pragma unroll
    for (int k = 0; k < RW; ++k) pg[k] = m.ng[row0 + k];
  }
  __syncthreads();  // the barriers initialised before any warp waits on them
  one_row_released<NM>(m, row0, px);
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
  const int chunk = warp * RW / kXsChunkRows;
  const int slot = chunk % slots;
  uint8_t* const slot_at = stage + static_cast<uint64_t>(slot * kMats) * chunk_bytes;
  const uint8_t* mine = slot_at + static_cast<uint64_t>(warp * RW % kXsChunkRows) * rb;
  mbar_wait(&bar[chunk], 0);
  staged_dots<F, kGlu>(mine, chunk_bytes, rb, lane, m, cols, acc);
  const int next = chunk + slots;  // the chunk that takes this slot next
  if (next < kXsChunks) {
    __syncwarp();  // every lane's reads of the slot done
    if (lane == 0) {
      mbar_arrive(&empty[slot]);
      if (warp % kWarpsPerChunk == 0) {
        mbar_wait(&empty[slot], static_cast<uint32_t>(chunk / slots) & 1u);
        stage_chunk<kMats>(slot_at, &bar[next], m.w[0], w1, blk_row0 + static_cast<uint64_t>(next) * kXsChunkRows, rb);
      }
    }
  }
  step_trace_stamp(11);
  xq_out_epilogue<kGlu, NM, RW>(m, cols, acc, pg, px, row0, lane, warp, oq, ods);
}

// The staged form of the one-row GEMVs that write floats, over 8-bit x (kXq) or the f32 x at x (gemv_kernel
// at N = 1: plain, NM = 0, or the lazy norm's consumer, NM = 2, e.g. the QKV projection; GemvXq::out_staged
// on gemv / gemv_multi / gemv_multi_normed): blocks of kXoRows rows of one matrix (m.block_begin in
// blocks of kXoRows), staged as gemv_xq_staged_kernel's, RW rows per warp. A launch of few, lean
// blocks: the kernel after it (the decode attention) finds room on the SMs before this one ends.
// Each row's arithmetic is gemv_kernel's (pieces lane, lane + 32, ... ascending, its butterfly; r as
// gemv_kernel's NM = 2 from the shares of the block's first kGemvThreads threads): the same bits.
template <class F, int NM, int RW, bool kXq>
__global__ void __launch_bounds__(32 * kXoRows / RW) gemv_staged_kernel(const __grid_constant__ GemvMats m, int64_t cols,
                                                                        const float* __restrict__ x) {
  static_assert(NM == 0 || NM == 2, "plain or the lazy norm's consumer");
  static_assert(kXoRows / RW >= kXsChunks && kXsChunkRows % RW == 0, "a warp per chunk to copy it; a warp's rows in one chunk");
  constexpr int R = RW;
  extern __shared__ __align__(128) uint8_t stage[];
  __shared__ uint64_t bar[kXsChunks];
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if (m.early_trigger != 0) pdl_trigger();
  const int k = mat_of_block(m, blockIdx.x);
  const uint64_t rb = m.row_bytes[k];
  const int64_t blk_row0 = static_cast<int64_t>(blockIdx.x - m.block_begin[k]) * kXoRows;
  const uint32_t chunk_bytes = static_cast<uint32_t>(kXsChunkRows * rb);
  stage_rows<1>(stage, bar, m.w[k], nullptr, static_cast<uint64_t>(blk_row0), rb, warp, lane);
  __syncthreads();  // the barriers initialised before any warp waits on them
  float unused[1];
  one_row_released<NM>(m, 0, unused);
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
  const uint8_t* mine = stage + static_cast<uint64_t>(warp * RW) * rb;
  mbar_wait(&bar[warp * RW / kXsChunkRows], 0);
  staged_dots<F, false, R, kXq>(mine, chunk_bytes, rb, lane, m, cols, acc, x);
  reduce_rows_norm<NM>(m, cols, acc);
  if (lane == 0) {
    const int64_t row0 = blk_row0 + warp * RW;
    float* y = m.y[k];
#pragma unroll
    for (int r = 0; r < R; ++r) y[row0 + r] = acc[r][0];
  }
}

// Host side: the matrices of one launch (rows > 0 only), their shared cols and the row count
// that picks R.
struct GemvLaunch {
  GemvMats m{};
  int64_t cols = 0;
  int64_t rows_total = 0;
  int64_t* plan = nullptr;  // non-null: store the grid size here and launch nothing
};

// Fills m.block_begin for R rows per KS warps; returns the grid size.
int64_t plan_gemv_blocks(GemvMats& m, int R, int KS = 1) {
  const int64_t rows_per_block = int64_t{kGemvWarps / KS} * R;
  int64_t blocks = 0;
  for (int k = 0; k < m.count; ++k) {
    m.block_begin[k] = static_cast<uint32_t>(blocks);
    blocks += (m.rows[k] + rows_per_block - 1) / rows_per_block;
  }
  for (int k = m.count; k < kGemvMaxMats; ++k) m.block_begin[k] = static_cast<uint32_t>(blocks);
  return blocks;
}

template <class F, int N, int R, bool kGlu = false, int KS = 1, int NM = 0, bool kXq = false>
void launch_gemv_r(GemvLaunch l, const float* x, cudaStream_t s) {
  const int64_t blocks = kGlu ? (l.m.rows[0] + kGemvWarps - 1) / kGemvWarps : plan_gemv_blocks(l.m, R, KS);
  if (blocks > 0x7fffffff) {
    throw_cuda_error(cudaErrorInvalidValue, "gemv: too many rows for one launch", __FILE__, __LINE__);
  }
  // The lazy-norm producer's partials per x row: one per kGemvWarps / KS rows (see gemv_kernel).
  const int64_t parts = (l.m.rows[0] + kGemvWarps / KS - 1) / (kGemvWarps / KS);
  if (l.plan != nullptr) {
    *l.plan = NM == 1 ? parts : blocks;
    return;
  }
  if constexpr (NM == 1) l.m.n_parts = static_cast<int32_t>(parts);
  constexpr int U = gemv_u<F, N, R>();
  const int64_t n_pieces = l.cols / KS / F::kPieceElems;
  if constexpr (N == 1) {
    if (n_pieces > 32 * U) {
      // Whole-row L2 prefetch: measured on the H200 (Nsight Compute, Llama-1B down projection, 32 MB)
      // it made the kernel slower (17.2 us against 15.3 us without), so it stays off; kept for
      // other shapes and GPUs to try (kGemvL2PrefetchMaxBytes).
      uint64_t total = 0;
      for (int k = 0; k < l.m.count; ++k) total += static_cast<uint64_t>(l.m.rows[k]) * l.m.row_bytes[k];
      l.m.l2_prefetch = total <= kGemvL2PrefetchMaxBytes ? 1 : 0;
      launch_pdl(gemv_kernel<F, N, R, true, U, kGlu, KS, NM, kXq>, dim3(static_cast<unsigned>(blocks)), dim3(kGemvThreads), 0, s, l.m,
                 l.cols, x);
      return;
    }
  }
  // Short rows at N = 1 (batches keep U: more instantiations, and registers are tighter there).
  if constexpr (N == 1 && U >= 4) {
    if (n_pieces <= 32 * (U / 4)) {
      launch_pdl(gemv_kernel<F, N, R, false, U / 4, kGlu, KS, NM, kXq>, dim3(static_cast<unsigned>(blocks)), dim3(kGemvThreads), 0, s,
                 l.m, l.cols, x);
      return;
    }
  }
  if constexpr (N == 1 && U >= 2) {
    if (n_pieces <= 32 * (U / 2)) {
      launch_pdl(gemv_kernel<F, N, R, false, U / 2, kGlu, KS, NM, kXq>, dim3(static_cast<unsigned>(blocks)), dim3(kGemvThreads), 0, s,
                 l.m, l.cols, x);
      return;
    }
  }
  launch_pdl(gemv_kernel<F, N, R, false, U, kGlu, KS, NM, kXq>, dim3(static_cast<unsigned>(blocks)), dim3(kGemvThreads), 0, s, l.m, l.cols,
             x);
}

// Rows per warp: 1 for a single x row (most warps, most memory parallelism); for batches, each x
// load is shared by R weight rows, 4 where the launch has rows enough to keep every SM busy.
// (R changes which warp computes a row, never the row's arithmetic.)
template <class F, int N, int KS = 1, int NM = 0, bool kXq = false>
void launch_gemv_n(const GemvLaunch& l, const float* x, cudaStream_t s) {
  if constexpr (KS > 1) {
    launch_gemv_r<F, N, 1, false, KS, NM, kXq>(l, x, s);  // split rows: one row per KS warps (R = 1)
  } else if constexpr (N == 1) {
    // Quantized formats: 2 rows per warp where there are rows enough (the x loads and sums of
    // a piece serve both rows).
    if (F::kR1 > 1 && l.rows_total >= 4096) {
      launch_gemv_r<F, 1, (F::kR1 > 1 ? F::kR1 : 1), false, 1, NM, kXq>(l, x, s);
    } else {
      launch_gemv_r<F, 1, 1, false, 1, NM, kXq>(l, x, s);
    }
  } else if constexpr (N == 3 && F::kReassoc && F::kMaxR == 2) {
    launch_gemv_r<F, N, 1, false, 1, NM, kXq>(l, x, s);  // K-quants at n = 3: R = 2 spilled a register
  } else if constexpr (N < 4) {
    launch_gemv_r<F, N, 2, false, 1, NM, kXq>(l, x, s);
  } else if constexpr (N == 4 && F::kPieceElems == 4) {
    // F32 at n = 4 always with R = 4 (ptxas spilled a register in the R = 2 instantiation).
    launch_gemv_r<F, N, 4, false, 1, NM, kXq>(l, x, s);
  } else {
    if (F::kMaxR >= 4 && l.rows_total >= 4096) {
      launch_gemv_r<F, N, (F::kMaxR >= 4 ? 4 : 2), false, 1, NM, kXq>(l, x, s);
    } else {
      launch_gemv_r<F, N, 2, false, 1, NM, kXq>(l, x, s);
    }
  }
}

// Weights of a format per GGUF block (a split must start on a block boundary).
template <class F>
constexpr int64_t block_elems() {
  if constexpr (std::is_same_v<F, FmtQ8_0>) return 32;
  else if constexpr (std::is_same_v<F, FmtQ4_K> || std::is_same_v<F, FmtQ6_K>) return 256;
  else return 1;
}

// Rows of at least 4 x kGemvSplitPartBytes are split across 4 warps (gemv_kernel's KS), each part
// a whole number of blocks and pieces: a 16 KB row (F16, 8192 columns) streams as four 4 KB parts
// at once, as the 4 KB rows of the [8192 x 2048] matrices do. Depends on the shape only, never on
// n. STRATA_CUDA_GEMV_SPLIT=1 keeps every row on one warp (read once).
constexpr uint64_t kGemvSplitPartBytes = 4096;
template <class F>
int gemv_split(int64_t cols, uint64_t row_bytes) {
  static const bool allowed = [] {
    const char* v = std::getenv("STRATA_CUDA_GEMV_SPLIT");
    return v == nullptr || std::string_view(v) != "1";
  }();
  constexpr int KS = 4;
  const bool fits = cols % (KS * block_elems<F>()) == 0 && (cols / KS) % F::kPieceElems == 0;
  return allowed && fits && row_bytes >= KS * kGemvSplitPartBytes ? KS : 1;
}

template <class F, int KS, int NM = 0, bool kXq = false>
void launch_gemv_ks(const GemvLaunch& l, const float* x, int64_t n, cudaStream_t s) {
  switch (n) {
    case 1: launch_gemv_n<F, 1, KS, NM, kXq>(l, x, s); break;
    case 2: launch_gemv_n<F, 2, KS, NM, kXq>(l, x, s); break;
    case 3: launch_gemv_n<F, 3, KS, NM, kXq>(l, x, s); break;
    case 4: launch_gemv_n<F, 4, KS, NM, kXq>(l, x, s); break;
    case 5: launch_gemv_n<F, 5, KS, NM, kXq>(l, x, s); break;
    case 6: launch_gemv_n<F, 6, KS, NM, kXq>(l, x, s); break;
    case 7: launch_gemv_n<F, 7, KS, NM, kXq>(l, x, s); break;
    case 8: launch_gemv_n<F, 8, KS, NM, kXq>(l, x, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "gemv: n outside 1..kGemvMaxRows", __FILE__, __LINE__);
  }
}

template <class F, int NM = 0, bool kXq = false>
void launch_gemv(const GemvLaunch& l, const float* x, int64_t n, cudaStream_t s) {
  if (gemv_split<F>(l.cols, l.m.row_bytes[0]) == 4) {
    launch_gemv_ks<F, 4, NM, kXq>(l, x, n, s);
  } else {
    launch_gemv_ks<F, 1, NM, kXq>(l, x, n, s);
  }
}

template <class F, int NM = 0, bool kXq = false>
void launch_gemv_glu(const GemvLaunch& l, const float* x, int64_t n, cudaStream_t s) {
  switch (n) {
    case 1: launch_gemv_r<F, 1, 2, true, 1, NM, kXq>(l, x, s); break;
    case 2: launch_gemv_r<F, 2, 2, true, 1, NM, kXq>(l, x, s); break;
    case 3: launch_gemv_r<F, 3, 2, true, 1, NM, kXq>(l, x, s); break;
    case 4: launch_gemv_r<F, 4, 2, true, 1, NM, kXq>(l, x, s); break;
    case 5: launch_gemv_r<F, 5, 2, true, 1, NM, kXq>(l, x, s); break;
    case 6: launch_gemv_r<F, 6, 2, true, 1, NM, kXq>(l, x, s); break;
    case 7: launch_gemv_r<F, 7, 2, true, 1, NM, kXq>(l, x, s); break;
    case 8: launch_gemv_r<F, 8, 2, true, 1, NM, kXq>(l, x, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "gemv: n outside 1..kGemvMaxRows", __FILE__, __LINE__);
  }
}

// The plain (kGlu = false) or SwiGLU GEMV of format F, on the 8-bit x where l carries one (only
// the formats with a dot_q8).
template <class F>
inline constexpr bool kHasDotQ8 = std::is_same_v<F, FmtQ4_K> || std::is_same_v<F, FmtQ6_K> || std::is_same_v<F, FmtQ8_0>;
template <class F, int NM, bool kGlu>
void launch_gemv_fmt(const GemvLaunch& l, const float* x, int64_t n, cudaStream_t s) {
  if constexpr (kHasDotQ8<F>) {
    if (l.m.xq != nullptr) {
      if constexpr (kGlu) {
        launch_gemv_glu<F, NM, true>(l, x, n, s);
      } else {
        launch_gemv<F, NM, true>(l, x, n, s);
      }
      return;
    }
  }
  if constexpr (kGlu) {
    launch_gemv_glu<F, NM>(l, x, n, s);
  } else {
    launch_gemv<F, NM>(l, x, n, s);
  }
}

// F16/BF16 GEMVs of one x row (gemv_kernel, and gemv_xq_out_kernel for the producers) trigger the
// next kernel at their top (GemvMats::early_trigger). On an H100, llama-1b, GPU time per step,
// alternated: F16 937.8 / 938.0 -> 928.5 / 929.2 us, BF16 939.9 -> 932.7 (2026-12-06, device call 1).
// Q4_K did too from the second session of 2026-12-06 (then 560.0 -> 542.8 us), until its GEMVs were
// staged in shared memory: on an H100 on 2026-12-07 (seventh session), two rounds alternated,
// triggering after the wait took llama-1b Q4_K from 532.5 / 532.4 to 526.0 / 526.3 us and 4 layers of a
// Llama-3-8B shape from 338.0 / 338.5 to 331.8 / 331.5 us, the same greedy tokens. Q6_K lost 1.9%
// with the early trigger (1,183.1 / 1,183.4 -> 1,205.7 / 1,205.5). So every type but F16/BF16
// triggers after its wait, as do batches. STRATA_CUDA_GEMV_EARLY_TRIGGER=0 turns it off, =q4_k adds
// Q4_K (the former default), =all turns it on for every type (read once per process; CudaBackend
// rejects other values).
bool gemv_early_trigger(GgmlType type, int64_t n) {
  static const int on = [] {
    const char* v = std::getenv("STRATA_CUDA_GEMV_EARLY_TRIGGER");
    const int mode = gemv_early_trigger_mode(v != nullptr ? v : "");
    return mode < 0 ? 1 : mode;  // CudaBackend has rejected such a value already
  }();
  return on != 0 && n == 1 &&
         (on == 2 || type == GgmlType::kF16 || type == GgmlType::kBF16 || (on == 3 && type == GgmlType::kQ4_K));
}

template <int NM = 0, bool kGlu = false>
void launch_gemv_type(GgmlType type, const GemvLaunch& l0, const float* x, int64_t n, cudaStream_t s) {
  GemvLaunch l = l0;
  l.m.early_trigger = gemv_early_trigger(type, n) ? 1 : 0;
  switch (type) {
    case GgmlType::kF32: launch_gemv_fmt<FmtF32, NM, kGlu>(l, x, n, s); break;
    case GgmlType::kF16: launch_gemv_fmt<Fmt16<false>, NM, kGlu>(l, x, n, s); break;
    case GgmlType::kBF16: launch_gemv_fmt<Fmt16<true>, NM, kGlu>(l, x, n, s); break;
    case GgmlType::kQ8_0: launch_gemv_fmt<FmtQ8_0, NM, kGlu>(l, x, n, s); break;
    case GgmlType::kQ4_K: launch_gemv_fmt<FmtQ4_K, NM, kGlu>(l, x, n, s); break;
    case GgmlType::kQ6_K: launch_gemv_fmt<FmtQ6_K, NM, kGlu>(l, x, n, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "gemv: unsupported weight type", __FILE__, __LINE__);
  }
}

template <int NM = 0>
void launch_gemv_glu_type(GgmlType type, const GemvLaunch& l, const float* x, int64_t n, cudaStream_t s) {
  launch_gemv_type<NM, true>(type, l, x, n, s);
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

void gemv(const WeightMatrix& w, const float* x, int64_t n, float* y, cudaStream_t s, GemvXq xq) {
  gemv_multi(&w, &y, 1, x, n, s, xq);
}

namespace {

std::atomic<int64_t> g_norm_producer_launches{0};
std::atomic<int64_t> g_norm_consumer_launches{0};

// The launch of gemv_multi's matrices over x; false when there is nothing to compute.
bool multi_launch(const WeightMatrix* ws, float* const* ys, int count, const float* x, int64_t n, GemvLaunch& l) {
  if (count < 0 || count > kGemvMaxMats) {
    throw_cuda_error(cudaErrorInvalidValue, "gemv_multi: count outside 0..4", __FILE__, __LINE__);
  }
  if (count == 0 || n <= 0) return false;
  l.cols = ws[0].cols;
  for (int k = 0; k < count; ++k) {
    const WeightMatrix& w = ws[k];
    if (w.type != ws[0].type || w.cols != ws[0].cols) {
      throw_cuda_error(cudaErrorInvalidValue, "gemv_multi: matrices differ in type or cols", __FILE__, __LINE__);
    }
    if (w.rows <= 0) continue;  // nothing to compute (as gemv)
    if ((reinterpret_cast<uintptr_t>(w.data) & 15u) != 0) {
      throw_cuda_error(cudaErrorMisalignedAddress, "gemv: x and w.data must be 16-byte aligned", __FILE__, __LINE__);
    }
    const int c = l.m.count++;
    l.m.w[c] = w.data;
    l.m.y[c] = ys[k];
    l.m.rows[c] = w.rows;
    l.m.row_bytes[c] = w.row_bytes;
    l.rows_total += w.rows;
  }
  if (l.m.count == 0) return false;
  if ((reinterpret_cast<uintptr_t>(x) & 15u) != 0) {
    throw_cuda_error(cudaErrorMisalignedAddress, "gemv: x and w.data must be 16-byte aligned", __FILE__, __LINE__);
  }
  return true;
}

// The launch of gemv_silu_mul; false when there is nothing to compute.
bool glu_launch(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n, float* out, GemvLaunch& l) {
  if (gate.type != up.type || gate.cols != up.cols || gate.rows != up.rows || gate.row_bytes != up.row_bytes) {
    throw_cuda_error(cudaErrorInvalidValue, "gemv_silu_mul: gate and up differ in type or shape", __FILE__, __LINE__);
  }
  if (n <= 0 || gate.rows <= 0) return false;
  if (((reinterpret_cast<uintptr_t>(gate.data) | reinterpret_cast<uintptr_t>(up.data) | reinterpret_cast<uintptr_t>(x)) &
       15u) != 0) {
    throw_cuda_error(cudaErrorMisalignedAddress, "gemv: x and w.data must be 16-byte aligned", __FILE__, __LINE__);
  }
  if (gate.rows > int64_t{0x7fffffff} * kGemvWarps) {
    throw_cuda_error(cudaErrorInvalidValue, "gemv: too many rows for one launch", __FILE__, __LINE__);
  }
  l.cols = gate.cols;
  l.m.count = 2;
  l.m.w[0] = gate.data;
  l.m.w[1] = up.data;
  l.m.y[0] = out;
  l.m.y[1] = nullptr;
  l.m.rows[0] = l.m.rows[1] = gate.rows;
  l.m.row_bytes[0] = l.m.row_bytes[1] = gate.row_bytes;
  l.rows_total = gate.rows;
  return true;
}

void check_norm_rows(int64_t n) {
  if (n > kGemvMaxRows) throw_cuda_error(cudaErrorInvalidValue, "gemv: n outside 1..kGemvMaxRows", __FILE__, __LINE__);
}

std::atomic<int64_t> g_xq_launches{0};

// Whether the GEMVs over weights of `type` read x quantized to 8 bits: Q4_K, Q6_K and Q8_0 by default
// (=all: the same); STRATA_CUDA_GEMV_Q8X=q4_k keeps Q4_K only, =0: none (read once per process).
// Measured on an H100, llama-1b: Q4_K faster at one token and at 8 rows. Q6_K 17% faster at 8 rows
// (GPU time per step 2,671 -> 2,213 us) and, with the lazy norm that Q6_K takes too
// (CudaBackend::matmul_add_rms_norm), 1.2% faster at one (1,188.8 -> 1,174.2 us; without the lazy
// norm 3.8% slower) (2026-12-06, device call 1). Q8_0 3% slower at one row, 14% faster at 8
// (2026-12-05); with the staged kernels (CudaBackend's defaults) 17% faster at one row (GPU time per
// step 1,178.6 -> 981.5 us, sixth session of 2026-12-06). A choice by n would make a row's bits depend
// on its batch.
bool xq_type(GgmlType type) {
  enum class Set { kNone, kQ4K, kDefault, kAll };
  static const Set set = [] {
    const char* v = std::getenv("STRATA_CUDA_GEMV_Q8X");
    const std::string_view s = v != nullptr ? v : "";
    return s == "0" ? Set::kNone : s == "all" ? Set::kAll : s == "q4_k" ? Set::kQ4K : Set::kDefault;
  }();
  switch (type) {
    case GgmlType::kQ4_K: return set != Set::kNone;
    case GgmlType::kQ6_K: return set == Set::kDefault || set == Set::kAll;
    case GgmlType::kQ8_0: return set == Set::kDefault || set == Set::kAll;
    default: return false;
  }
}

// With a buffer of gemv_xq_bytes: points l at the quantized x, quantizing it first (a launch
// before the GEMV) unless the kernel that wrote x wrote it too (xq.ready); otherwise l reads the
// f32 x.
void use_xq(GgmlType type, GemvLaunch& l, const float* x, int64_t n, GemvXq xq, cudaStream_t s) {
  if (xq.buf == nullptr || gemv_xq_bytes(type, n, l.cols) == 0) return;
  auto* q = static_cast<int8_t*>(xq.buf);
  const int64_t n4 = n * l.cols / 4;
  auto* ds = reinterpret_cast<float2*>(q + n * l.cols);
  l.m.xq = q;
  l.m.xds = ds;
  if (xq.ready) return;
  launch_pdl(quantize_xq_kernel, dim3(static_cast<unsigned>((n4 + kXqThreads - 1) / kXqThreads)), dim3(kXqThreads), 0, s,
             x, n4, q, ds, n == 1 ? 1 : 0);
  g_xq_launches.fetch_add(1, std::memory_order_relaxed);
}

std::atomic<int64_t> g_xq_out_launches{0};

// gemv_xq_out_kernel for format F with RW rows per warp: U pieces per lane as gemv_kernel would
// take them at one row, at most 2 (or 1 for two rows' SwiGLU) where rows are long, so that the
// block keeps within its registers.
template <class F, bool kGlu, int NM, int RW>
void launch_xq_out_fmt(const GemvLaunch& l, void* out, cudaStream_t s) {
  const int64_t rows = l.m.rows[0];
  auto* q = static_cast<int8_t*>(out);
  auto* ds = reinterpret_cast<float2*>(q + rows);
  const int64_t n_pieces = l.cols / F::kPieceElems;
  const dim3 grid(static_cast<unsigned>(rows / kXoRows)), block(32 * kXoRows / RW);
  constexpr int kLongU = kGlu ? 1 : 2;
  if (n_pieces <= 32) {
    launch_pdl(gemv_xq_out_kernel<F, kGlu, NM, 1, false, RW>, grid, block, 0, s, l.m, l.cols, q, ds);
  } else if (n_pieces <= 64) {
    launch_pdl(gemv_xq_out_kernel<F, kGlu, NM, 2, false, RW>, grid, block, 0, s, l.m, l.cols, q, ds);
  } else {
    launch_pdl(gemv_xq_out_kernel<F, kGlu, NM, kLongU, true, RW>, grid, block, 0, s, l.m, l.cols, q, ds);
  }
  g_xq_out_launches.fetch_add(1, std::memory_order_relaxed);
}

std::atomic<int64_t> g_xq_staged_launches{0};

// Dynamic shared memory a staged block may take on the current device (the opt-in maximum less
// room for the kernel's static arrays), read once per device.
uint64_t staged_smem_limit() {
  static std::atomic<int64_t> limits[64] = {};
  int dev = 0;
  STRATA_CUDA(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return 0;
  int64_t v = limits[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int optin = 0;
    STRATA_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    v = std::max<int64_t>(int64_t{optin} - 1024, 1);
    limits[dev].store(v, std::memory_order_relaxed);
  }
  return static_cast<uint64_t>(v);
}

// Lets `kernel` take staged_smem_limit() bytes of dynamic shared memory on the current device, once
// per device (opted: a bit per device, one variable per kernel; staged_smem_limit() is 0, and no
// staged launch is made, on devices past 63).
void opt_in_staged_smem(const void* kernel, std::atomic<uint64_t>& opted) {
  int dev = 0;
  STRATA_CUDA(cudaGetDevice(&dev));
  if ((opted.load(std::memory_order_relaxed) >> dev & 1u) != 0) return;
  STRATA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(staged_smem_limit())));
  opted.fetch_or(uint64_t{1} << dev, std::memory_order_relaxed);
}

// Waves of `blocks` blocks of `kernel` (threads each, smem bytes of dynamic shared memory) on the
// current device: ceil(blocks / (blocks resident per SM x SMs)); 0 where none fits. Occupancy
// queries are kept per kernel, device and size (a handful per process).
int64_t launch_waves(const void* kernel, int threads, uint64_t smem, int64_t blocks) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, uint64_t>, int64_t> per_wave;  // blocks resident at once
  int dev = 0;
  STRATA_CUDA(cudaGetDevice(&dev));
  const auto key = std::make_tuple(kernel, dev, threads, smem);
  int64_t n = 0;
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = per_wave.find(key); it != per_wave.end()) n = it->second;
  }
  if (n == 0) {
    int per_sm = 0, sms = 0;
    STRATA_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, static_cast<size_t>(smem)));
    STRATA_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    n = std::max<int64_t>(int64_t{per_sm} * sms, 0);
    if (n == 0) return 0;
    const std::lock_guard<std::mutex> lock(mu);
    per_wave[key] = n;
  }
  return (blocks + n - 1) / n;
}

// gemv_xq_staged_kernel for format F where its rows fit shared memory and the bulk copies' 16-byte
// alignment holds (else false: the caller takes the register form). Slots: GemvXq's out_staged_slots
// where it is 2 or 4 (STRATA_CUDA_XQ_STAGE_SLOTS), else, by default (0), chosen here: kXsChunks (the
// block's 32 rows at once) where they fit and the launch then takes one wave (or as few as with two),
// else a ring of two; but for Q4_K, where the 32 rows do not fit shared memory at all, the register
// form (kStageSlotsAutoRing: the ring there too, the default before 2026-12-07). On llama-1b that
// gives every Q4_K and Q6_K producer 4, and Q8_0's gate/up (139 KB at 4: one block per SM, two waves
// of 256) and down (278 KB at 4) 2. A ring copies its last chunks after the PDL wait, which cost where
// the whole rows fit in one wave (H200: Q4_K 520 -> 602 us per step with O and down at 2). Where the
// rows do not fit at all, the register form against the ring, GPU us per step on an H100, 4 layers of
// a Llama-3-8B shape (docs/PERFORMANCE.md, 2026-12-07): Q4_K's down (32 rows of 8,064 B) 370.1 ->
// 341.8, faster; Q6_K's down 512.7 -> 620.6 and Q8_0's gate/up 686.6 -> 888.1, slower; llama-1b's
// Q8_0 down level (960.7 / 959.6).
template <class F, bool kGlu, int NM, int RW>
bool launch_xq_staged_fmt(const GemvLaunch& l0, void* out, uint64_t max_bytes, int forced_slots, cudaStream_t s) {
  GemvLaunch l = l0;
  const uint64_t rb = l.m.row_bytes[0];
  const uint64_t chunk_set = uint64_t{kXsChunkRows} * rb * (kGlu ? 2 : 1);  // one slot
  if (max_bytes != 0 && kXsChunks * chunk_set > max_bytes) return false;
  if ((kXsChunkRows * rb) % 16 != 0 || (kGlu && l.m.row_bytes[1] != rb)) return false;
  for (int k = 0; k < (kGlu ? 2 : 1); ++k) {
    if (reinterpret_cast<uintptr_t>(l.m.w[k]) % 16 != 0) return false;
  }
  const uint64_t limit = staged_smem_limit();
  auto* kernel = gemv_xq_staged_kernel<F, kGlu, NM, RW>;
  static std::atomic<uint64_t> opted{0};
  opt_in_staged_smem(reinterpret_cast<const void*>(kernel), opted);
  const int64_t rows = l.m.rows[0];
  const int64_t blocks = rows / kXoRows;
  constexpr int kThreads = 32 * kXoRows / RW;
  constexpr int kRing = 2;
  int slots = 0;
  if (forced_slots > 0) {
    slots = forced_slots * chunk_set <= limit ? forced_slots : 0;
  } else if (kXsChunks * chunk_set <= limit) {
    slots = kXsChunks;
    const int64_t whole = launch_waves(reinterpret_cast<const void*>(kernel), kThreads, kXsChunks * chunk_set, blocks);
    if (whole > 1 && launch_waves(reinterpret_cast<const void*>(kernel), kThreads, kRing * chunk_set, blocks) < whole) slots = kRing;
  } else if ((forced_slots == kStageSlotsAutoRing || !std::is_same_v<F, FmtQ4_K>) && kRing * chunk_set <= limit) {
    slots = kRing;
  }
  if (slots == 0) return false;
  l.m.stage_slots = slots;
  const uint64_t smem = static_cast<uint64_t>(slots) * chunk_set;
  auto* q = static_cast<int8_t*>(out);
  auto* ds = reinterpret_cast<float2*>(q + rows);
  launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), static_cast<size_t>(smem), s, l.m, l.cols, q, ds);
  g_xq_out_launches.fetch_add(1, std::memory_order_relaxed);
  g_xq_staged_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <bool kGlu, int NM, int RW>
bool launch_xq_staged_rw(GgmlType type, const GemvLaunch& l, void* out, uint64_t max_bytes, int slots, cudaStream_t s) {
  switch (type) {
    case GgmlType::kQ4_K: return launch_xq_staged_fmt<FmtQ4_K, kGlu, NM, RW>(l, out, max_bytes, slots, s);
    case GgmlType::kQ6_K: return launch_xq_staged_fmt<FmtQ6_K, kGlu, NM, RW>(l, out, max_bytes, slots, s);
    case GgmlType::kQ8_0: return launch_xq_staged_fmt<FmtQ8_0, kGlu, NM, RW>(l, out, max_bytes, slots, s);
    default: return false;
  }
}

// GemvXq::out_staged: 1 = the SwiGLU at four rows per warp, the producers at two; 2 or 4 = that
// many for both.
template <bool kGlu, int NM>
bool launch_xq_staged(GgmlType type, const GemvLaunch& l, void* out, int staged, uint64_t max_bytes, int slots, cudaStream_t s) {
  const int rw = staged == 1 ? (kGlu ? 4 : 2) : staged;
  return rw == 4 ? launch_xq_staged_rw<kGlu, NM, 4>(type, l, out, max_bytes, slots, s)
                 : launch_xq_staged_rw<kGlu, NM, 2>(type, l, out, max_bytes, slots, s);
}

std::atomic<int64_t> g_gemv_staged_launches{0};

// gemv_staged_kernel (RW = 4: blocks of 256 threads) for a one-row GEMV (over 8-bit x where kXq,
// else over the f32 x) where every matrix's rows are a multiple of kXoRows and a block's rows fit
// shared memory (else false: the caller launches gemv_kernel). RW = 4 against 2 (512 threads), GPU us
// per step on an H100, llama-1b, two rounds each: Q4_K 541.2 / 541.0 -> 533.5 / 534.1, Q6_K 701.6 /
// 702.9 -> 700.5 / 700.1, Q8_0 965.0 / 965.5 -> 960.1 / 959.0; RW = 8 (128 threads): Q4_K 557.4
// (docs/PERFORMANCE.md, 2026-12-07).
template <class F, int NM, bool kXq>
bool launch_gemv_staged_fmt(const GemvLaunch& l0, const float* x, uint64_t max_bytes, cudaStream_t s) {
  constexpr int RW = 4;
  GemvLaunch l = l0;
  const uint64_t rb = l.m.row_bytes[0];
  const uint64_t smem = uint64_t{kXoRows} * rb;
  if ((kXsChunkRows * rb) % 16 != 0 || (max_bytes != 0 && smem > max_bytes) || smem > staged_smem_limit()) return false;
  if (gemv_split<F>(l.cols, rb) != 1) return false;  // gemv_kernel splits such rows over warps: another sum order
  int64_t blocks = 0;
  for (int k = 0; k < l.m.count; ++k) {
    if (l.m.rows[k] % kXoRows != 0 || l.m.row_bytes[k] != rb || reinterpret_cast<uintptr_t>(l.m.w[k]) % 16 != 0) return false;
    l.m.block_begin[k] = static_cast<uint32_t>(blocks);
    blocks += l.m.rows[k] / kXoRows;
  }
  for (int k = l.m.count; k < kGemvMaxMats; ++k) l.m.block_begin[k] = static_cast<uint32_t>(blocks);
  if (blocks > 0x7fffffff) return false;
  auto* kernel = gemv_staged_kernel<F, NM, RW, kXq>;
  static std::atomic<uint64_t> opted{0};
  opt_in_staged_smem(reinterpret_cast<const void*>(kernel), opted);
  launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kXoRows / RW), static_cast<size_t>(smem), s, l.m, l.cols, x);
  g_gemv_staged_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// The staged form of a one-row GEMV where xq asks for it: over the 8-bit x for the types whose
// GEMVs read one (Q4_K, Q6_K, Q8_0 with STRATA_CUDA_GEMV_Q8X=all), over the f32 x for F16, BF16 and
// Q8_0 (F32 rows of the models' widths do not fit shared memory).
template <int NM>
bool launch_gemv_staged(GgmlType type, const GemvLaunch& l, const float* x, int64_t n, GemvXq xq, cudaStream_t s) {
  if (xq.out_staged == 0 || n != 1 || (xq.out_staged == 3 && NM != 2)) return false;  // 3: consumers only
  GemvLaunch e = l;
  e.m.early_trigger = gemv_early_trigger(type, n) ? 1 : 0;
  const uint64_t mb = xq.out_staged_max_bytes;
  if (l.m.xq != nullptr) {
    switch (type) {
      case GgmlType::kQ4_K: return launch_gemv_staged_fmt<FmtQ4_K, NM, true>(e, x, mb, s);
      case GgmlType::kQ6_K: return launch_gemv_staged_fmt<FmtQ6_K, NM, true>(e, x, mb, s);
      case GgmlType::kQ8_0: return launch_gemv_staged_fmt<FmtQ8_0, NM, true>(e, x, mb, s);
      default: return false;
    }
  }
  switch (type) {
    case GgmlType::kF16: return launch_gemv_staged_fmt<Fmt16<false>, NM, false>(e, x, mb, s);
    case GgmlType::kBF16: return launch_gemv_staged_fmt<Fmt16<true>, NM, false>(e, x, mb, s);
    case GgmlType::kQ8_0: return launch_gemv_staged_fmt<FmtQ8_0, NM, false>(e, x, mb, s);
    default: return false;
  }
}

template <bool kGlu, int NM, int RW>
void launch_xq_out_rw(GgmlType type, const GemvLaunch& l, void* out, cudaStream_t s) {
  switch (type) {
    case GgmlType::kQ4_K: launch_xq_out_fmt<FmtQ4_K, kGlu, NM, RW>(l, out, s); break;
    case GgmlType::kQ6_K: launch_xq_out_fmt<FmtQ6_K, kGlu, NM, RW>(l, out, s); break;
    case GgmlType::kQ8_0: launch_xq_out_fmt<FmtQ8_0, kGlu, NM, RW>(l, out, s); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "gemv: no 8-bit output for this weight type", __FILE__, __LINE__);
  }
}

template <bool kGlu, int NM>
void launch_xq_out(GgmlType type, const GemvLaunch& l, void* out, int rows_per_warp, cudaStream_t s) {
  if (rows_per_warp == 2) {
    launch_xq_out_rw<kGlu, NM, 2>(type, l, out, s);
  } else {
    launch_xq_out_rw<kGlu, NM, 1>(type, l, out, s);
  }
}

// Rows split across warps (gemv_split) for a GEMV of `type`.
int split_of(GgmlType type, int64_t cols, uint64_t row_bytes) {
  switch (type) {
    case GgmlType::kQ4_K: return gemv_split<FmtQ4_K>(cols, row_bytes);
    case GgmlType::kQ6_K: return gemv_split<FmtQ6_K>(cols, row_bytes);
    case GgmlType::kQ8_0: return gemv_split<FmtQ8_0>(cols, row_bytes);
    default: return 0;
  }
}

// The producer's launch where xq.out asks for the output's 8-bit form: gemv_xq_out_kernel (the
// caller checked gemv_xq_out; l reads the 8-bit x), else false.
template <bool kGlu, int NM>
bool launch_with_xq_out(GgmlType type, const GemvLaunch& l, int64_t n, GemvXq xq, cudaStream_t s) {
  if (xq.out == nullptr) return false;
  if (l.m.xq == nullptr || !gemv_xq_out(type, n, l.m.rows[0], l.cols, l.m.row_bytes[0])) {
    throw_cuda_error(cudaErrorInvalidValue, "gemv: an 8-bit output asked where gemv_xq_out says no", __FILE__, __LINE__);
  }
  if (xq.out == xq.buf) {
    throw_cuda_error(cudaErrorInvalidValue, "gemv: the 8-bit output must not be the buffer the GEMV reads", __FILE__, __LINE__);
  }
  GemvLaunch e = l;
  e.m.early_trigger = gemv_early_trigger(type, n) ? 1 : 0;
  if (xq.out_staged == 0 || !launch_xq_staged<kGlu, NM>(type, e, xq.out, xq.out_staged, xq.out_staged_max_bytes, xq.out_staged_slots, s)) {
    launch_xq_out<kGlu, NM>(type, e, xq.out, xq.out_rows_per_warp, s);
  }
  return true;
}

}  // namespace

bool gemv_xq_out(GgmlType type, int64_t n, int64_t rows, int64_t cols, uint64_t row_bytes) {
  return n == 1 && xq_type(type) && xq_bytes(1, cols) > 0 && rows > 0 && rows % kXoRows == 0 &&
         rows / kXoRows <= 0x7fffffff && split_of(type, cols, row_bytes) == 1;
}

int64_t xq_bytes(int64_t n, int64_t cols) {
  if (n <= 0 || cols <= 0 || cols % 32 != 0) return 0;
  return n * cols + n * cols / 16 * static_cast<int64_t>(sizeof(float2));
}

int64_t gemv_xq_bytes(GgmlType type, int64_t n, int64_t cols) { return xq_type(type) ? xq_bytes(n, cols) : 0; }

void gemv_multi(const WeightMatrix* ws, float* const* ys, int count, const float* x, int64_t n, cudaStream_t s, GemvXq xq) {
  GemvLaunch l;
  if (!multi_launch(ws, ys, count, x, n, l)) return;
  use_xq(ws[0].type, l, x, n, xq, s);
  if (!launch_gemv_staged<0>(ws[0].type, l, x, n, xq, s)) launch_gemv_type(ws[0].type, l, x, n, s);
}

void gemv_silu_mul(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n, float* out,
                   cudaStream_t s, GemvXq xq) {
  GemvLaunch l;
  if (!glu_launch(gate, up, x, n, out, l)) return;
  use_xq(gate.type, l, x, n, xq, s);
  if (launch_with_xq_out<true, 0>(gate.type, l, n, xq, s)) return;
  launch_gemv_glu_type(gate.type, l, x, n, s);
}

int64_t gemv_add_norm_parts(const WeightMatrix& w, int64_t n) {
  if (n <= 0 || w.rows <= 0) return 0;
  check_norm_rows(n);
  GemvLaunch l;
  float* none = nullptr;
  alignas(16) static const float kAligned[4] = {};
  if (!multi_launch(&w, &none, 1, kAligned, n, l)) return 0;
  int64_t parts = 0;
  l.plan = &parts;
  launch_gemv_type<1>(w.type, l, kAligned, n, nullptr);
  return parts;
}

int64_t gemv_add_norm(const WeightMatrix& w, const float* in, int64_t n, float* x, const float* g, float* h, float* parts,
                      cudaStream_t s, GemvXq xq) {
  check_norm_rows(n);
  GemvLaunch l;
  float* none = nullptr;
  if (!multi_launch(&w, &none, 1, in, n, l)) return 0;
  l.m.nx = x;
  l.m.ng = g;
  l.m.nh = h;
  l.m.parts = parts;
  int64_t n_parts = 0;
  GemvLaunch dry = l;
  dry.plan = &n_parts;
  launch_gemv_type<1>(w.type, dry, in, n, s);
  use_xq(w.type, l, in, n, xq, s);
  l.m.n_parts = static_cast<int32_t>(n_parts);
  if (!launch_with_xq_out<false, 1>(w.type, l, n, xq, s)) launch_gemv_type<1>(w.type, l, in, n, s);
  g_norm_producer_launches.fetch_add(1, std::memory_order_relaxed);
  return n_parts;
}

void gemv_multi_normed(const WeightMatrix* ws, float* const* ys, int count, const float* h, int64_t n,
                       const float* parts, int32_t n_parts, float eps, cudaStream_t s, GemvXq xq) {
  check_norm_rows(n);
  GemvLaunch l;
  if (!multi_launch(ws, ys, count, h, n, l)) return;
  use_xq(ws[0].type, l, h, n, xq, s);
  l.m.parts = const_cast<float*>(parts);
  l.m.n_parts = n_parts;
  l.m.eps = eps;
  if (!launch_gemv_staged<2>(ws[0].type, l, h, n, xq, s)) launch_gemv_type<2>(ws[0].type, l, h, n, s);
  g_norm_consumer_launches.fetch_add(1, std::memory_order_relaxed);
}

void gemv_silu_mul_normed(const WeightMatrix& gate, const WeightMatrix& up, const float* h, int64_t n, float* out,
                          const float* parts, int32_t n_parts, float eps, cudaStream_t s, GemvXq xq) {
  check_norm_rows(n);
  GemvLaunch l;
  if (!glu_launch(gate, up, h, n, out, l)) return;
  use_xq(gate.type, l, h, n, xq, s);
  l.m.parts = const_cast<float*>(parts);
  l.m.n_parts = n_parts;
  l.m.eps = eps;
  if (!launch_with_xq_out<true, 2>(gate.type, l, n, xq, s)) launch_gemv_glu_type<2>(gate.type, l, h, n, s);
  g_norm_consumer_launches.fetch_add(1, std::memory_order_relaxed);
}

int gemv_early_trigger_mode(std::string_view s) {
  return s.empty() ? 1 : s == "0" ? 0 : s == "all" ? 2 : s == "q4_k" ? 3 : -1;
}

namespace gemv_stats {
int64_t norm_producer_launches() { return g_norm_producer_launches.load(std::memory_order_relaxed); }
int64_t norm_consumer_launches() { return g_norm_consumer_launches.load(std::memory_order_relaxed); }
int64_t xq_launches() { return g_xq_launches.load(std::memory_order_relaxed); }
int64_t xq_out_launches() { return g_xq_out_launches.load(std::memory_order_relaxed); }
int64_t xq_staged_launches() { return g_xq_staged_launches.load(std::memory_order_relaxed); }
int64_t gemv_staged_launches() { return g_gemv_staged_launches.load(std::memory_order_relaxed); }
bool xq_type(GgmlType type) { return cuda::xq_type(type); }
}  // namespace gemv_stats

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

#if defined(STRATA_CUDA_STEP_TRACE)
void step_trace_set_matmul(const StepTraceDev& t, cudaStream_t s) { step_trace_set_local(t, s); }
#else
void step_trace_set_matmul(const StepTraceDev&, cudaStream_t) {}
#endif

}  // namespace strata::cuda
