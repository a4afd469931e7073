// The cheap kernels of the forward pass (kernels.h): rms_norm, rope, silu_mul, add_inplace,
// kv_store and get_row, SIMD per Highway target. Each works row by row (or element by element), so
// a row's result does not depend on the other rows of the call.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_groups.h"
#include "core/check.h"
#include "core/fp16.h"
#include "gguf/quant.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/elementwise.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#ifndef STRATA_BACKEND_CPU_ELEMENTWISE_ONCE_
#define STRATA_BACKEND_CPU_ELEMENTWISE_ONCE_
namespace strata::cpu {
// Largest n_rot rope() handles (cos/sin of one position live on the stack).
inline constexpr int32_t kMaxRopeDims = 1024;
}  // namespace strata::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

void RmsNorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t dim, float eps) {
  const DF d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    VF a0 = hn::Zero(d), a1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= dim; i += 2 * N) {
      const VF v0 = hn::LoadU(d, xr + i), v1 = hn::LoadU(d, xr + i + N);
      a0 = hn::MulAdd(v0, v0, a0);
      a1 = hn::MulAdd(v1, v1, a1);
    }
    double ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
    for (; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const auto scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    const VF vs = hn::Set(d, scale);
    i = 0;
    for (; i + N <= dim; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, xr + i), vs), hn::LoadU(d, weight + i)), d, yr + i);
    for (; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void Rope(float* x, const int32_t* pos, int64_t n_tokens, int32_t n_heads, int32_t head_dim, const RopeParams& p) {
  const DF d;
  const auto N = static_cast<int32_t>(hn::Lanes(d));
  const int32_t half = p.n_rot / 2;
  double inv_freq[kMaxRopeDims / 2];
  for (int32_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
    if (p.freq_factors) inv_freq[i] /= p.freq_factors[i];
  }
  // Per token: cos and sin of each pair's angle, computed once for all heads. For the normal
  // layout they are stored per element ([c0, c0, c1, c1, ...] and [-s0, s0, -s1, s1, ...]) so a
  // pair swap turns the rotation into two multiplies.
  HWY_ALIGN float cs[kMaxRopeDims], sn[kMaxRopeDims];
  for (int64_t t = 0; t < n_tokens; ++t) {
    const double position = static_cast<double>(pos[t]) * p.freq_scale;
    for (int32_t i = 0; i < half; ++i) {
      // Reduce the angle in double so large positions keep full f32 accuracy.
      const double theta = position * inv_freq[i];
      const auto r = static_cast<float>(std::remainder(theta, 2.0 * std::numbers::pi));
      const float c = std::cos(r), s = std::sin(r);
      if (p.neox) {
        cs[i] = c;
        sn[i] = s;
      } else {
        cs[2 * i] = cs[2 * i + 1] = c;
        sn[2 * i] = -s;
        sn[2 * i + 1] = s;
      }
    }
    for (int32_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      int32_t i = 0;
      if (p.neox) {
        for (; i + N <= half; i += N) {
          const VF a = hn::LoadU(d, v + i), b = hn::LoadU(d, v + half + i);
          const VF c = hn::Load(d, cs + i), s = hn::Load(d, sn + i);
          hn::StoreU(hn::NegMulAdd(b, s, hn::Mul(a, c)), d, v + i);
          hn::StoreU(hn::MulAdd(a, s, hn::Mul(b, c)), d, v + half + i);
        }
        for (; i < half; ++i) {
          const float a = v[i], b = v[half + i];
          v[i] = a * cs[i] - b * sn[i];
          v[half + i] = a * sn[i] + b * cs[i];
        }
      } else {
#if HWY_TARGET != HWY_SCALAR
        for (; i + N <= p.n_rot; i += N) {
          const VF a = hn::LoadU(d, v + i);
          hn::StoreU(hn::MulAdd(hn::Shuffle2301(a), hn::Load(d, sn + i), hn::Mul(a, hn::Load(d, cs + i))), d, v + i);
        }
#endif
        for (; i < p.n_rot; i += 2) {
          const float a = v[i], b = v[i + 1];
          v[i] = a * cs[i] + b * sn[i];
          v[i + 1] = b * cs[i + 1] + a * sn[i + 1];
        }
      }
    }
  }
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const DF d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  const VF one = hn::Set(d, 1.0f), cap = hn::Set(d, 88.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF g = hn::LoadU(d, gate + i);
    // exp(-g) capped below f32 overflow: g / (1 + e^88) is already the limit -0 · |g| would give.
    const VF e = hn::Exp(d, hn::Min(hn::Neg(g), cap));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(d, up + i)), d, gate + i);
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(std::min(-gate[i], 88.0f))) * up[i];
}

void AddInplace(float* y, const float* x, int64_t n) {
  const DF d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] += x[i];
}

// n floats to 16-bit patterns, rounding to nearest even exactly as core/fp16.h does.
void ToF16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // F16C rounds to nearest even, handles subnormals and keeps NaNs quiet like f32_to_fp16.
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, src + i)), dh, reinterpret_cast<hwy::float16_t*>(dst + i));
#endif
  for (; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}

void ToBF16(const float* src, uint16_t* dst, int64_t n) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto bits = hn::BitCast(du, hn::LoadU(d, src + i));
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb)));
    const auto is_nan = hn::Gt(hn::And(bits, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
    const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
    const auto r = hn::IfThenElse(is_nan, quiet, rounded);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(hn::RebindToSigned<DF>(), r)), d16, dst + i);
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void KvStore(const KvLayerView& kv, const float* k, const float* v, const int32_t* slots, int64_t n_tokens) {
  const int64_t width = int64_t{kv.n_kv_heads} * kv.head_dim;
  const int64_t stride = kv.token_stride_bytes();
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* kd = kv.k + slots[t] * stride;
    uint8_t* vd = kv.v + slots[t] * stride;
    const float* ks = k + t * width;
    const float* vs = v + t * width;
    switch (kv.dtype) {
      case KvDtype::kF32:
        std::memcpy(kd, ks, static_cast<size_t>(width) * sizeof(float));
        std::memcpy(vd, vs, static_cast<size_t>(width) * sizeof(float));
        break;
      case KvDtype::kF16:
        ToF16(ks, reinterpret_cast<uint16_t*>(kd), width);
        ToF16(vs, reinterpret_cast<uint16_t*>(vd), width);
        break;
      case KvDtype::kBF16:
        ToBF16(ks, reinterpret_cast<uint16_t*>(kd), width);
        ToBF16(vs, reinterpret_cast<uint16_t*>(vd), width);
        break;
    }
  }
}

// cols elements of one row's bytes at `row` (contiguous) into out.
void RowToF32(GgmlType type, const uint8_t* row, int64_t cols, float* out) {
  const DF d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, row, static_cast<size_t>(cols) * sizeof(float));
      return;
    case GgmlType::kF16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto* src = reinterpret_cast<const hwy::float16_t*>(row);
      for (; i + N <= cols; i += N) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, src + i)), d, out + i);
      for (; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = fp16_to_f32(h);
      }
      return;
    }
    default:
      dequantize_row(type, row, out, cols);
      return;
  }
}

void GetRow(const WeightMatrix& table, int64_t r, float* out) {
  if (table.row_group == 0) {
    RowToF32(table.type, table.data + static_cast<uint64_t>(r) * table.row_bytes, table.cols, out);
    return;
  }
  if (table.row_group == WeightMatrix::kQuantGroup) {  // Q4_K/Q6_K/Q8_0 in groups (quant_groups.h): the row's blocks gathered
    thread_local std::vector<uint8_t> row;
    row.resize(table.row_bytes);
    read_quant_group_row(table, r, row.data());
    RowToF32(table.type, row.data(), table.cols, out);
    return;
  }
  // Rows in groups (op_types.h): the row's 64-byte pieces are row_group lines apart (16-bit types).
  const uint64_t g = static_cast<uint64_t>(r) / table.row_group, j = static_cast<uint64_t>(r) % table.row_group;
  const uint8_t* group = table.data + g * table.row_group * table.row_bytes;
  const int64_t per_line = 64 / static_cast<int64_t>(ggml_type_traits(table.type).type_size);
  for (int64_t c = 0; c * per_line < table.cols; ++c) {
    RowToF32(table.type, group + (static_cast<uint64_t>(c) * table.row_group + j) * 64, per_line, out + c * per_line);
  }
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(RmsNorm);
HWY_EXPORT(Rope);
HWY_EXPORT(SiluMul);
HWY_EXPORT(AddInplace);
HWY_EXPORT(KvStore);
HWY_EXPORT(GetRow);

void rms_norm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t dim, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNorm)(x, weight, y, n_rows, dim, eps);
}

void rope(float* x, const int32_t* pos, int64_t n_tokens, int32_t n_heads, int32_t head_dim, const RopeParams& p) {
  STRATA_CHECK(p.n_rot % 2 == 0 && p.n_rot <= head_dim && p.n_rot <= kMaxRopeDims, "rope: n_rot {} (head_dim {})",
               p.n_rot, head_dim);
  HWY_DYNAMIC_DISPATCH(Rope)(x, pos, n_tokens, n_heads, head_dim, p);
}

void silu_mul(float* gate, const float* up, int64_t n) { HWY_DYNAMIC_DISPATCH(SiluMul)(gate, up, n); }

void add_inplace(float* y, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(AddInplace)(y, x, n); }

void kv_store(const KvLayerView& kv, const float* k, const float* v, const int32_t* slots, int64_t n_tokens) {
  HWY_DYNAMIC_DISPATCH(KvStore)(kv, k, v, slots, n_tokens);
}

void get_row(const WeightMatrix& table, int64_t r, float* out) { HWY_DYNAMIC_DISPATCH(GetRow)(table, r, out); }

}  // namespace strata::cpu
#endif  // HWY_ONCE
