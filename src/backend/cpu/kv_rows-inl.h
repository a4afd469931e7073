// How paged attention reads the keys and values of one KV block of one kv head, per SIMD target:
// a "row source" per storage format hands out head_dim slices of a key or value row as f32 lanes.
//
//   Hot blocks (f32, f16, bf16; kv/kv_types.h): f32 rows are read in place; 16-bit rows are
//     widened once per block into an L1-sized buffer, since every query vector of the work item
//     reads them again.
//   Warm blocks (kv/warm_format.h) are decoded in registers as they are read, never copied out:
//     int8  k = q widened to f32; the per-token scale multiplies the finished score (keys) or is
//           folded into the softmax weight (values), so a vector costs one widening load and one
//           convert.
//     fp8   the e4m3 bits are moved into an f16 pattern (same mantissa; exponent bias 15 instead of
//           7) and widened by the f16 conversion, exact for subnormals too; the 2^8 between the
//           biases and the per-(block, head) scale go with the score or the weight like int8's.
//           (The NaN codes 0x7f/0xff, which the encoder never writes for finite input, read ±480.)
//     int4  nibbles to u32 lanes, minus the zero point as integers, times the scale: bit for bit
//           warm_decode_row's value. Keys have per-channel parameters (per group of tokens) and
//           values per-token ones (per group of channels), gathered once per block into WarmParams.
//
// Every source has: KRow KeyRow(p) / VRow ValueRow(p) (a handle on row p of the block, hoisted out
// of the head_dim loop), K(d, row, off) / V(d, row, off) (lanes [off, off + Lanes(d)) of the row,
// off a multiple of Lanes(d)), and kscale / vscale (per-key multipliers of the score and of the
// value, or null).
// Included once per Highway target (foreach_target); thread-safety: pure functions over caller
// memory.

#if defined(STRATA_BACKEND_CPU_KV_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STRATA_BACKEND_CPU_KV_ROWS_INL_H_
#undef STRATA_BACKEND_CPU_KV_ROWS_INL_H_
#else
#define STRATA_BACKEND_CPU_KV_ROWS_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "hwy/highway.h"
#include "kv/kv_types.h"
#include "kv/warm_format.h"

#ifndef STRATA_BACKEND_CPU_KV_ROWS_ONCE_
#define STRATA_BACKEND_CPU_KV_ROWS_ONCE_
namespace strata::cpu {

// Where one block's rows of one kv head live, whatever the tier.
struct KvBlockRef {
  bool warm = false;
  const uint8_t* k = nullptr;  // hot: the block's first row of this head; warm: the K slot
  const uint8_t* v = nullptr;
  int32_t t0 = 0;              // warm: first token of the block within its slot
};

// Finds block `id` of a block table for kv head `kvh`: a hot block, a block in a host slot (hot
// layout, read in place: --kv-offload) or a warm sub-block. Precondition: a warm id only with a
// warm tier, a host id only with host slots.
inline KvBlockRef locate_block(const KvLayerView& kv, BlockId id, int32_t kvh) {
  KvBlockRef r;
  if (id < kv.n_hot_blocks || kv.is_host(id)) {
    const int64_t head = int64_t{kvh} * kv.head_dim * kv_dtype_size(kv.dtype);
    r.k = kv.hot_k(id) + head;
    r.v = kv.hot_v(id) + head;
    return r;
  }
  const int32_t w = id - kv.n_hot_blocks;
  const int32_t slot = w / kv.warm_span;
  r.warm = true;
  r.k = kv.warm_k + int64_t{slot} * kv.warm_k_slot_bytes;
  r.v = kv.warm_v + int64_t{slot} * kv.warm_v_slot_bytes;
  r.t0 = (w % kv.warm_span) * kv.block_size;
  return r;
}

// Geometry of a warm slot's sections (the layout comment of kv/warm_format.h).
struct WarmLayout {
  int64_t T = 0;             // tokens per slot
  int64_t data_bytes = 0;    // the data section, rounded up to 4 bytes (scales follow)
  int64_t k_groups = 0;      // int4 keys: token groups per slot
  int64_t k_group_len = 0;   //   tokens per group
  int64_t v_groups = 0;      // int4 values: channel groups per row
  int64_t v_scale_bytes = 0; //   the value scale section, rounded up to 4 bytes (zeros follow)
  int64_t k_scale_bytes = 0; //   the key scale section, rounded up to 4 bytes

  WarmLayout() = default;
  explicit WarmLayout(const KvLayerView& kv) {
    T = int64_t{kv.warm_span} * kv.block_size;
    const int64_t HD = int64_t{kv.n_kv_heads} * kv.head_dim;
    const int64_t elems = kv.warm_format == WarmFormat::kInt4 ? T * HD / 2 : T * HD;
    data_bytes = (elems + 3) / 4 * 4;
    k_group_len = T % 32 == 0 ? 32 : T;
    k_groups = T / k_group_len;
    v_groups = kv.head_dim % 32 == 0 ? kv.head_dim / 32 : 1;
    k_scale_bytes = (2 * k_groups * HD + 3) / 4 * 4;
    v_scale_bytes = (2 * T * kv.n_kv_heads * v_groups + 3) / 4 * 4;
  }
};

// Per-block parameters of warm rows, gathered into the work item's scratch.
struct WarmParams {
  float* kscale;  // [s_stride] score multiplier per key (int8, fp8); 0 past the block
  float* vscale;  // [s_stride] value multiplier per key (int8, fp8); 0 past the block
  float* k4s;     // [k4_groups][head_dim] int4 key scales of the groups the block touches
  int32_t* k4z;   // [k4_groups][head_dim] int4 key zero points
  int32_t* k4g;   // [block_size] offset of each key's group in k4s / k4z
  float* v4s;     // [block_size][v_groups] int4 value scales
  int32_t* v4z;   // [block_size][v_groups] int4 value zero points

  // Floats (4-byte words) of scratch for a block size, head dim and s_stride.
  static size_t words(int32_t bs, int32_t hd, int32_t s_stride) {
    const size_t k4_groups = static_cast<size_t>(bs) / 32 + 2;
    const size_t v_groups = hd % 32 == 0 ? static_cast<size_t>(hd) / 32 : 1;
    return 2 * static_cast<size_t>(s_stride) + 2 * k4_groups * static_cast<size_t>(hd) + static_cast<size_t>(bs) +
           2 * static_cast<size_t>(bs) * v_groups;
  }
  static WarmParams carve(float* f, int32_t bs, int32_t hd, int32_t s_stride) {
    const size_t k4_groups = static_cast<size_t>(bs) / 32 + 2;
    const size_t v_groups = hd % 32 == 0 ? static_cast<size_t>(hd) / 32 : 1;
    WarmParams w;
    w.kscale = f;
    w.vscale = w.kscale + s_stride;
    w.k4s = w.vscale + s_stride;
    w.k4z = reinterpret_cast<int32_t*>(w.k4s + k4_groups * static_cast<size_t>(hd));
    w.k4g = w.k4z + k4_groups * static_cast<size_t>(hd);
    w.v4s = reinterpret_cast<float*>(w.k4g + bs);
    w.v4z = reinterpret_cast<int32_t*>(w.v4s + static_cast<size_t>(bs) * v_groups);
    return w;
  }
};

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

}  // namespace strata::cpu
#endif  // STRATA_BACKEND_CPU_KV_ROWS_ONCE_

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Hot rows as f32: in place for f32 KV, widened into buf[np][head_dim] for bf16 (f16 rows are
// read in place by F16Source).
template <class D>
const float* HotRows(D d, const KvLayerView& kv, const uint8_t* p, int32_t np, float* buf, size_t* stride) {
  const int32_t hd = kv.head_dim;
  const int64_t tok = kv.token_stride_bytes();
  if (kv.dtype == KvDtype::kF32) {
    *stride = static_cast<size_t>(tok / 4);
    return reinterpret_cast<const float*>(p);
  }
  const size_t N = hn::Lanes(d);
  const hn::Rebind<uint16_t, D> du16;
  const hn::Rebind<uint32_t, D> du32;
  const hn::Rebind<hwy::float16_t, D> dh;
  for (int32_t r = 0; r < np; ++r) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(p + r * tok);
    float* dst = buf + int64_t{r} * hd;
    for (size_t i = 0; i < static_cast<size_t>(hd); i += N) {
      if (kv.dtype == KvDtype::kF16) {
        hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src + i))), d, dst + i);
      } else {
        const auto wide = hn::PromoteTo(du32, hn::LoadU(du16, src + i));
        hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(wide)), d, dst + i);
      }
    }
  }
  *stride = static_cast<size_t>(hd);
  return buf;
}

template <class D>
struct HotSource {
  using KRow = const float*;
  using VRow = const float*;
  const float* k;
  size_t ks;  // row strides in floats
  const float* v;
  size_t vs;
  const float* kscale = nullptr;
  const float* vscale = nullptr;
  KRow KeyRow(int32_t p) const { return k + p * ks; }
  VRow ValueRow(int32_t p) const { return v + p * vs; }
  static HWY_INLINE hn::Vec<D> K(D d, KRow r, size_t off) { return hn::LoadU(d, r + off); }
  static HWY_INLINE hn::Vec<D> V(D d, VRow r, size_t off) { return hn::LoadU(d, r + off); }
};

// Hot f16 rows read in place and widened in registers as the loops load them (no f32 copy of
// the block first: attention over a block does little arithmetic per key, so a widening pass costs
// as much as the dot products).
template <class D>
struct F16Source {
  using KRow = const hwy::float16_t*;
  using VRow = const hwy::float16_t*;
  const hwy::float16_t* k;  // row 0 of the block, this head
  const hwy::float16_t* v;
  int64_t stride;           // elements between consecutive tokens: n_kv_heads * head_dim
  const float* kscale = nullptr;
  const float* vscale = nullptr;
  KRow KeyRow(int32_t p) const { return k + p * stride; }
  VRow ValueRow(int32_t p) const { return v + p * stride; }
  static HWY_INLINE hn::Vec<D> Widen(D d, const hwy::float16_t* r) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, r));
  }
  static HWY_INLINE hn::Vec<D> K(D d, KRow r, size_t off) { return Widen(d, r + off); }
  static HWY_INLINE hn::Vec<D> V(D d, VRow r, size_t off) { return Widen(d, r + off); }
};

// int8: q as f32; scales per key in kscale / vscale.
template <class D>
struct Int8Source {
  using KRow = const int8_t*;
  using VRow = const int8_t*;
  const int8_t* k;  // row 0 of the block, this head
  const int8_t* v;
  int64_t stride;   // bytes between consecutive tokens: n_kv_heads * head_dim
  const float* kscale;
  const float* vscale;
  KRow KeyRow(int32_t p) const { return k + p * stride; }
  VRow ValueRow(int32_t p) const { return v + p * stride; }
  static HWY_INLINE hn::Vec<D> Widen(D d, const int8_t* r) {
    const hn::RebindToSigned<D> di;
    const hn::Rebind<int8_t, D> d8;
    return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, r)));
  }
  static HWY_INLINE hn::Vec<D> K(D d, KRow r, size_t off) { return Widen(d, r + off); }
  static HWY_INLINE hn::Vec<D> V(D d, VRow r, size_t off) { return Widen(d, r + off); }
};

// fp8 e4m3: the value / 2^8 as f32 (see the file comment); the scales carry the 2^8.
template <class D>
struct Fp8Source {
  using KRow = const uint8_t*;
  using VRow = const uint8_t*;
  const uint8_t* k;
  const uint8_t* v;
  int64_t stride;
  const float* kscale;
  const float* vscale;
  KRow KeyRow(int32_t p) const { return k + p * stride; }
  VRow ValueRow(int32_t p) const { return v + p * stride; }
  static HWY_INLINE hn::Vec<D> Widen(D d, const uint8_t* r) {
    const hn::Rebind<uint8_t, D> d8;
    const hn::Rebind<uint16_t, D> du16;
    const hn::Rebind<int16_t, D> di16;
    const hn::Rebind<hwy::float16_t, D> dh;
    // s eeee mmm -> (as int16) s s eeee mmm 0000000 -> clear the copy of the sign: s 0 eeee mmm 0000000,
    // an f16 of exponent field 0eeee and mantissa mmm0000000.
    const auto hi = hn::BitCast(di16, hn::ShiftLeft<8>(hn::PromoteTo(du16, hn::LoadU(d8, r))));
    const auto h = hn::And(hn::ShiftRight<1>(hi), hn::Set(di16, static_cast<int16_t>(0xBFFF)));
    return hn::PromoteTo(d, hn::BitCast(dh, h));
  }
  static HWY_INLINE hn::Vec<D> K(D d, KRow r, size_t off) { return Widen(d, r + off); }
  static HWY_INLINE hn::Vec<D> V(D d, VRow r, size_t off) { return Widen(d, r + off); }
};

// Nibbles of channels [c, c + Lanes) of a packed int4 row (channel 2i in the low nibble of byte i,
// 2i+1 in the high one) as u32 lanes. c is a multiple of the lane count.
template <class DU>
HWY_INLINE hn::Vec<DU> Nibbles(DU du, const uint8_t* row, size_t c) {
  constexpr size_t kLanes = hn::MaxLanes(DU());
  static_assert(kLanes == 1 || kLanes == 4 || kLanes == 8 || (kLanes == 16 && HWY_TARGET <= HWY_AVX3),
                "lane counts of f32 tags");
  if constexpr (kLanes == 1) {
    const uint32_t b = row[c / 2];
    return hn::Set(du, (c & 1) ? b >> 4 : b & 0xF);
  } else if constexpr (kLanes <= 8) {
    // One 32-bit word holds the 8 nibbles; lane i shifts it by 4i.
    uint32_t w = 0;
    std::memcpy(&w, row + c / 2, kLanes / 2);
    const auto shifts = hn::ShiftLeft<2>(hn::Iota(du, 0));
    return hn::And(hn::Shr(hn::Set(du, w), shifts), hn::Set(du, 0xF));
  }
#if HWY_TARGET <= HWY_AVX3
  else {  // 16 lanes: two such words, one per half
    const hn::Half<DU> dh;
    uint32_t w[2];
    std::memcpy(w, row + c / 2, 8);
    const auto shifts = hn::ShiftLeft<2>(hn::Iota(dh, 0));
    const auto lo = hn::Shr(hn::Set(dh, w[0]), shifts), hi = hn::Shr(hn::Set(dh, w[1]), shifts);
    return hn::And(hn::Combine(du, hi, lo), hn::Set(du, 0xF));
  }
#endif
}

// int4: scale * (nibble - zero), with per-channel key parameters and per-token value parameters.
template <class D>
struct Int4Source {
  struct KRow {
    const uint8_t* data;
    const float* s;    // [head_dim] of the key's group
    const int32_t* z;
  };
  struct VRow {
    const uint8_t* data;
    const float* s;    // [v_groups] of the token
    const int32_t* z;
  };
  const uint8_t* k;  // row 0 of the block, this head
  const uint8_t* v;
  int64_t stride;    // bytes between consecutive tokens: n_kv_heads * head_dim / 2
  int32_t v_groups;
  int32_t v_group_shift;  // channel >> shift = value group (31 when a row is one group)
  const WarmParams* w;
  const float* kscale = nullptr;
  const float* vscale = nullptr;
  KRow KeyRow(int32_t p) const { return {k + p * stride, w->k4s + w->k4g[p], w->k4z + w->k4g[p]}; }
  VRow ValueRow(int32_t p) const { return {v + p * stride, w->v4s + p * v_groups, w->v4z + p * v_groups}; }
  static HWY_INLINE hn::Vec<D> K(D d, const KRow& r, size_t off) {
    const hn::RebindToSigned<D> di;
    const hn::RebindToUnsigned<D> du;
    const auto q = hn::Sub(hn::BitCast(di, Nibbles(du, r.data, off)), hn::LoadU(di, r.z + off));
    return hn::Mul(hn::LoadU(d, r.s + off), hn::ConvertTo(d, q));
  }
  HWY_INLINE hn::Vec<D> V(D d, const VRow& r, size_t off) const {
    const hn::RebindToSigned<D> di;
    const hn::RebindToUnsigned<D> du;
    const size_t g = off >> v_group_shift;
    const auto q = hn::Sub(hn::BitCast(di, Nibbles(du, r.data, off)), hn::Set(di, r.z[g]));
    return hn::Mul(hn::Set(d, r.s[g]), hn::ConvertTo(d, q));
  }
};

// Fills the per-key multipliers of an int8 or fp8 block (np keys) and zeroes them up to s_stride.
HWY_INLINE void WarmScales(const KvLayerView& kv, const WarmLayout& L, const KvBlockRef& b, int32_t kvh, int32_t np,
                           int32_t s_stride, const WarmParams& w) {
  if (kv.warm_format == WarmFormat::kInt8) {
    const int64_t H = kv.n_kv_heads;
    for (int32_t p = 0; p < np; ++p) {
      const int64_t row = (b.t0 + p) * H + kvh;
      w.kscale[p] = load_f16(b.k + L.data_bytes + 2 * row);
      w.vscale[p] = load_f16(b.v + L.data_bytes + 2 * row);
    }
  } else {  // fp8: one f32 scale per (slot, head)
    float sk, sv;
    std::memcpy(&sk, b.k + L.data_bytes + 4 * kvh, 4);
    std::memcpy(&sv, b.v + L.data_bytes + 4 * kvh, 4);
    for (int32_t p = 0; p < np; ++p) {
      w.kscale[p] = sk * 256.0f;
      w.vscale[p] = sv * 256.0f;
    }
  }
  for (int32_t p = np; p < s_stride; ++p) w.kscale[p] = w.vscale[p] = 0.0f;
}

// Gathers an int4 block's key parameters (every group its bs keys touch) and value parameters.
HWY_INLINE void Int4Params(const KvLayerView& kv, const WarmLayout& L, const KvBlockRef& b, int32_t kvh,
                           const WarmParams& w) {
  const int64_t H = kv.n_kv_heads, hd = kv.head_dim, bs = kv.block_size;
  const int64_t g0 = b.t0 / L.k_group_len, g1 = (b.t0 + bs - 1) / L.k_group_len;
  const uint8_t* ks = b.k + L.data_bytes;
  const auto* kz = reinterpret_cast<const int8_t*>(ks + L.k_scale_bytes);
  for (int64_t g = g0; g <= g1; ++g) {
    for (int64_t c = 0; c < hd; ++c) {
      const int64_t m = (g * H + kvh) * hd + c;
      w.k4s[(g - g0) * hd + c] = load_f16(ks + 2 * m);
      w.k4z[(g - g0) * hd + c] = kz[m];
    }
  }
  for (int64_t p = 0; p < bs; ++p) w.k4g[p] = static_cast<int32_t>(((b.t0 + p) / L.k_group_len - g0) * hd);
  const uint8_t* vs = b.v + L.data_bytes;
  const auto* vz = reinterpret_cast<const int8_t*>(vs + L.v_scale_bytes);
  for (int64_t p = 0; p < bs; ++p) {
    for (int64_t g = 0; g < L.v_groups; ++g) {
      const int64_t m = ((b.t0 + p) * H + kvh) * L.v_groups + g;
      w.v4s[p * L.v_groups + g] = load_f16(vs + 2 * m);
      w.v4z[p * L.v_groups + g] = vz[m];
    }
  }
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
