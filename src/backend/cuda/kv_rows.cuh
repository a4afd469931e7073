// Device (and host, for the host-side checks) helpers shared by the KV kernels (kv.cu) and paged
// attention (attention.cu): bit conversions of the KV element types, the fp8 e4m3 decoder, and
// RowSrc/row_src/row_elem, which read one K or V row of a hot block, a block in a host slot
// (--kv-offload) or a warm sub-block exactly as
// kv/warm_format.cpp's warm_decode_row and backend/cpu/kernels_ref.cpp's kv_row do.
// Thread-safety: pure functions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <cstdint>

#include "kv/kv_types.h"
#include "kv/warm_format.h"

namespace strata::cuda {

#define STRATA_HD __host__ __device__ __forceinline__

STRATA_HD int64_t align4(int64_t n) { return (n + 3) / 4 * 4; }

STRATA_HD uint32_t f32_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
STRATA_HD float bits_f32(uint32_t x) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(x);
#else
  return std::bit_cast<float>(x);
#endif
}

STRATA_HD float half_bits_to_f32(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
STRATA_HD float bf16_bits_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }
// f32 -> f16 / bf16 bits, round to nearest even (the hardware conversion); NaNs keep their sign and
// top payload bits as core/fp16.h does (the hardware returns one canonical NaN).
STRATA_HD uint16_t f32_to_half_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7c00u | 0x200u | ((x >> 13) & 0x3ffu));
  }
  const __half_raw r = __half_raw(__float2half_rn(f));
  return r.x;
}
STRATA_HD uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const __nv_bfloat16_raw r = __nv_bfloat16_raw(__float2bfloat16_rn(f));
  return r.x;
}
STRATA_HD float ld_f16(const uint8_t* p) { return half_bits_to_f32(*reinterpret_cast<const uint16_t*>(p)); }

STRATA_HD float e4m3_decode(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t exp = (v >> 3) & 0xf;
  const uint32_t mant = v & 7;
  if (exp == 0xf && mant == 7) return bits_f32(sign | 0x7fc00000u);
  if (exp == 0) return bits_f32(sign | f32_bits(static_cast<float>(mant) * 0.001953125f));  // mant * 2^-9
  return bits_f32(sign | ((exp + 120u) << 23) | (mant << 20));
}

struct RowSrc {
  int kind = 0;  // 0 f32, 1 f16, 2 bf16, 3 int8, 4 fp8, 5 int4 keys, 6 int4 values
  const uint8_t* data = nullptr;
  const uint8_t* sc = nullptr;  // int4: f16 scales of the row's group(s)
  const int8_t* zr = nullptr;   // int4: zero points
  float scale = 0;              // int8 / fp8
  int gv = 32;                  // int4 values: channels per group
};

// The hot-layout K (value = false) or V row (token `slot`, kv head `head`, elements of es bytes) of
// hot block `id`, or of a block in a host slot (id >= kv.host_base, --kv-offload: the same bytes in
// mapped pinned host memory, read in place over the bus).
STRATA_HD const uint8_t* hot_row(const KvLayerView& kv, bool value, int32_t id, int32_t slot, int32_t head, int es) {
  const int64_t row = (int64_t{slot} * kv.n_kv_heads + head) * kv.head_dim * es;
  if (id >= kv.host_base) {
    return kv.host + int64_t{id - kv.host_base} * kv.host_slot_bytes + (value ? kv.host_v_offset : kv.host_k_offset) + row;
  }
  return (value ? kv.v : kv.k) + int64_t{id} * kv.block_size * kv.n_kv_heads * kv.head_dim * es + row;
}

// Row (token `slot` of block `id`, kv head `head`) of K (value = false) or V.
STRATA_HD RowSrc row_src(const KvLayerView& kv, bool value, int32_t id, int32_t slot, int32_t head) {
  RowSrc r;
  const int64_t H = kv.n_kv_heads, D = kv.head_dim;
  if (id < kv.n_hot_blocks || id >= kv.host_base) {
    const int es = kv.dtype == KvDtype::kF32 ? 4 : 2;
    r.kind = kv.dtype == KvDtype::kF32 ? 0 : (kv.dtype == KvDtype::kF16 ? 1 : 2);
    r.data = hot_row(kv, value, id, slot, head, es);
    return r;
  }
  const int32_t w = id - kv.n_hot_blocks;
  const int32_t ws = w / kv.warm_span, sub = w % kv.warm_span;
  const uint8_t* base = value ? kv.warm_v + ws * kv.warm_v_slot_bytes : kv.warm_k + ws * kv.warm_k_slot_bytes;
  const int64_t T = int64_t{kv.warm_span} * kv.block_size;
  const int64_t t = int64_t{sub} * kv.block_size + slot;
  const int64_t row = t * H + head;
  switch (kv.warm_format) {
    case WarmFormat::kInt8:
      r.kind = 3;
      r.data = base + row * D;
      r.scale = ld_f16(base + align4(T * H * D) + 2 * row);
      break;
    case WarmFormat::kFp8:
      r.kind = 4;
      r.data = base + row * D;
      r.scale = *reinterpret_cast<const float*>(base + align4(T * H * D) + 4 * head);
      break;
    case WarmFormat::kInt4: {
      r.data = base + row * D / 2;
      const uint8_t* scales = base + align4(T * H * D / 2);
      if (!value) {
        r.kind = 5;
        const int64_t gk = T % 32 == 0 ? 32 : T;
        const int64_t G = T / gk, g = t / gk;
        r.sc = scales + 2 * (g * H + head) * D;
        r.zr = reinterpret_cast<const int8_t*>(scales + align4(2 * G * H * D)) + (g * H + head) * D;
      } else {
        r.kind = 6;
        const int64_t gv = D % 32 == 0 ? 32 : D;
        const int64_t NG = D / gv;
        r.gv = static_cast<int>(gv);
        r.sc = scales + 2 * row * NG;
        r.zr = reinterpret_cast<const int8_t*>(scales + align4(2 * T * H * NG)) + row * NG;
      }
      break;
    }
    default: break;
  }
  return r;
}

STRATA_HD float row_elem(const RowSrc& r, int d) {
  switch (r.kind) {
    case 0: return reinterpret_cast<const float*>(r.data)[d];
    case 1: return half_bits_to_f32(reinterpret_cast<const uint16_t*>(r.data)[d]);
    case 2: return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(r.data)[d]);
    case 3: return r.scale * static_cast<float>(reinterpret_cast<const int8_t*>(r.data)[d]);
    case 4: return r.scale * e4m3_decode(r.data[d]);
    case 5:
    case 6: {
      const uint8_t b = r.data[d >> 1];
      const int nib = (d & 1) ? (b >> 4) : (b & 0xf);
      const int m = r.kind == 5 ? d : d / r.gv;
      return ld_f16(r.sc + 2 * m) * static_cast<float>(nib - r.zr[m]);
    }
    default: return 0.0f;
  }
}


// Element idx of the hot arenas (K and V) written from f32 in the view's element type, as
// backend/cpu/kernels_ref.cpp's kv_store.
STRATA_HD void store_kv_elem(const KvLayerView& kv, int64_t idx, float k, float v) {
  switch (kv.dtype) {
    case KvDtype::kF32:
      reinterpret_cast<float*>(kv.k)[idx] = k;
      reinterpret_cast<float*>(kv.v)[idx] = v;
      break;
    case KvDtype::kF16:
      reinterpret_cast<uint16_t*>(kv.k)[idx] = f32_to_half_bits(k);
      reinterpret_cast<uint16_t*>(kv.v)[idx] = f32_to_half_bits(v);
      break;
    case KvDtype::kBF16:
      reinterpret_cast<uint16_t*>(kv.k)[idx] = f32_to_bf16_bits(k);
      reinterpret_cast<uint16_t*>(kv.v)[idx] = f32_to_bf16_bits(v);
      break;
  }
}

#undef STRATA_HD

}  // namespace strata::cuda
