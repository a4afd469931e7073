#include "kv/warm_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"

namespace strata {

std::string_view warm_format_name(WarmFormat f) {
  switch (f) {
    case WarmFormat::kNone: return "none";
    case WarmFormat::kInt8: return "int8";
    case WarmFormat::kFp8: return "fp8";
    case WarmFormat::kInt4: return "int4";
  }
  return "?";
}

std::optional<WarmFormat> warm_format_from_name(std::string_view name) {
  if (name == "none") return WarmFormat::kNone;
  if (name == "int8") return WarmFormat::kInt8;
  if (name == "fp8") return WarmFormat::kFp8;
  if (name == "int4") return WarmFormat::kInt4;
  return std::nullopt;
}

int32_t warm_span(WarmFormat f, int32_t block_size) {
  if (f != WarmFormat::kInt4 || block_size >= 32) return 1;
  return (32 + block_size - 1) / block_size;
}

namespace {
int64_t align4(int64_t n) { return (n + 3) / 4 * 4; }
}  // namespace

int64_t warm_slot_bytes(WarmFormat f, bool is_value, int32_t block_size, int32_t n_kv_heads, int32_t head_dim) {
  const int64_t T = int64_t{warm_span(f, block_size)} * block_size;
  const int64_t H = n_kv_heads, D = head_dim;
  switch (f) {
    case WarmFormat::kNone: return 0;
    case WarmFormat::kInt8: return align4(T * H * D) + align4(2 * T * H);
    case WarmFormat::kFp8: return align4(T * H * D) + 4 * H;
    case WarmFormat::kInt4: {
      STRATA_CHECK(D % 2 == 0, "int4 needs an even head dimension");
      const int64_t data = align4(T * H * D / 2);
      if (!is_value) {
        const int64_t gk = T % 32 == 0 ? 32 : T;
        const int64_t groups = T / gk;
        return data + align4(2 * groups * H * D) + align4(groups * H * D);
      }
      const int64_t gv = D % 32 == 0 ? 32 : D;
      const int64_t groups = D / gv;
      return data + align4(2 * T * H * groups) + align4(T * H * groups);
    }
  }
  return 0;
}

}  // namespace strata

// --- encoding and the reference decoder ---------------------------------------------------------

namespace strata {
namespace {

float load_hot(const uint8_t* p, KvDtype t) {
  switch (t) {
    case KvDtype::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case KvDtype::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fp16_to_f32(h);
    }
    case KvDtype::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    }
  }
  return 0;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}
float get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

// Gathers the T tokens of the span's blocks: x[t][h][d] as f32.
std::vector<float> gather(const KvLayerView& hot, bool value, const BlockId* blocks, int32_t span) {
  const int32_t bs = hot.block_size, H = hot.n_kv_heads, D = hot.head_dim;
  const int es = kv_dtype_size(hot.dtype);
  std::vector<float> x(static_cast<size_t>(span) * bs * H * D);
  const uint8_t* base = value ? hot.v : hot.k;
  size_t i = 0;
  for (int32_t j = 0; j < span; ++j) {
    const uint8_t* b = base + int64_t{blocks[j]} * hot.block_stride_bytes();
    for (int64_t e = 0; e < int64_t{bs} * H * D; ++e) x[i++] = load_hot(b + e * es, hot.dtype);
  }
  return x;
}

void encode_int8(const float* x, int64_t T, int64_t H, int64_t D, uint8_t* out) {
  int8_t* q = reinterpret_cast<int8_t*>(out);
  uint8_t* scales = out + align4(T * H * D);
  for (int64_t r = 0; r < T * H; ++r) {
    float amax = 0;
    for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::abs(x[r * D + d]));
    put_f16(scales + 2 * r, amax / 127.0f);
    const float s = get_f16(scales + 2 * r);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      q[r * D + d] = static_cast<int8_t>(std::clamp(std::nearbyint(x[r * D + d] * inv), -127.0f, 127.0f));
    }
  }
}

}  // namespace

uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::abs(x);
  if (std::isnan(x)) return 0x7f;
  if (a >= 448.0f) return sign | 0x7e;  // saturate (e4m3 has no infinity)
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int E = e - 1;      // a = 1.xxx * 2^E
  if (a == 0 || E < -6) {
    const float q = std::nearbyint(std::ldexp(a, 9));  // subnormal steps of 2^-9; q == 8 is the smallest normal
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  float q = std::nearbyint(std::ldexp(a, 3 - E));  // in [8, 16]
  if (q >= 16.0f) {
    q = 8.0f;
    ++E;
  }
  const int code = ((E + 7) << 3) | (static_cast<int>(q) - 8);
  return static_cast<uint8_t>(sign | std::min(code, 0x7e));
}

float e4m3_to_f32(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 7;
  if (exp == 0xf && mant == 7) return NAN;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
}

namespace {

void encode_fp8(const float* x, int64_t T, int64_t H, int64_t D, uint8_t* out) {
  uint8_t* scales = out + align4(T * H * D);
  for (int64_t h = 0; h < H; ++h) {
    float amax = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::abs(x[(t * H + h) * D + d]));
    const float s = amax / 448.0f;
    std::memcpy(scales + 4 * h, &s, 4);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) out[(t * H + h) * D + d] = f32_to_e4m3(x[(t * H + h) * D + d] * inv);
  }
}

// Chooses scale and zero point for values in [lo, hi] (asymmetric 4-bit, zero as int8).
void int4_params(float lo, float hi, uint8_t* scale_out, int8_t* zero_out, float* s_out, int* z_out) {
  // The zero point -lo/s must fit int8: in the rare narrow group far from zero the scale widens
  // (this also stores a constant group exactly: s = |c|/127, zero = -+127).
  float s = std::max((hi - lo) / 15.0f, std::abs(lo) / 127.0f);
  put_f16(scale_out, s);
  s = get_f16(scale_out);
  const int z = s > 0 ? static_cast<int>(std::clamp(std::nearbyint(-lo / s), -128.0f, 127.0f)) : 0;
  *zero_out = static_cast<int8_t>(z);
  *s_out = s;
  *z_out = z;
}

uint8_t int4_q(float x, float s, int z) {
  if (s <= 0) return static_cast<uint8_t>(std::clamp(z, 0, 15));
  return static_cast<uint8_t>(std::clamp(std::nearbyint(x / s) + static_cast<float>(z), 0.0f, 15.0f));
}

void put_nibble(uint8_t* data, int64_t idx, uint8_t q) {
  uint8_t& b = data[idx / 2];
  b = (idx % 2 == 0) ? static_cast<uint8_t>((b & 0xf0) | q) : static_cast<uint8_t>((b & 0x0f) | (q << 4));
}

void encode_int4_k(const float* x, int64_t T, int64_t H, int64_t D, uint8_t* out) {
  const int64_t gk = T % 32 == 0 ? 32 : T;
  const int64_t G = T / gk;
  uint8_t* data = out;
  uint8_t* scales = out + align4(T * H * D / 2);
  auto* zeros = reinterpret_cast<int8_t*>(scales + align4(2 * G * H * D));
  std::memset(data, 0, static_cast<size_t>(T * H * D / 2));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t t = g * gk; t < (g + 1) * gk; ++t) {
          lo = std::min(lo, x[(t * H + h) * D + d]);
          hi = std::max(hi, x[(t * H + h) * D + d]);
        }
        const int64_t m = (g * H + h) * D + d;
        float s;
        int z;
        int4_params(lo, hi, scales + 2 * m, zeros + m, &s, &z);
        for (int64_t t = g * gk; t < (g + 1) * gk; ++t) put_nibble(data, (t * H + h) * D + d, int4_q(x[(t * H + h) * D + d], s, z));
      }
}

void encode_int4_v(const float* x, int64_t T, int64_t H, int64_t D, uint8_t* out) {
  const int64_t gv = D % 32 == 0 ? 32 : D;
  const int64_t NG = D / gv;
  uint8_t* data = out;
  uint8_t* scales = out + align4(T * H * D / 2);
  auto* zeros = reinterpret_cast<int8_t*>(scales + align4(2 * T * H * NG));
  std::memset(data, 0, static_cast<size_t>(T * H * D / 2));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t g = 0; g < NG; ++g) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t d = g * gv; d < (g + 1) * gv; ++d) {
          lo = std::min(lo, x[(t * H + h) * D + d]);
          hi = std::max(hi, x[(t * H + h) * D + d]);
        }
        const int64_t m = (t * H + h) * NG + g;
        float s;
        int z;
        int4_params(lo, hi, scales + 2 * m, zeros + m, &s, &z);
        for (int64_t d = g * gv; d < (g + 1) * gv; ++d) put_nibble(data, (t * H + h) * D + d, int4_q(x[(t * H + h) * D + d], s, z));
      }
}

}  // namespace

void warm_encode(WarmFormat f, const KvLayerView& hot, const BlockId* blocks, int32_t span, uint8_t* k_slot,
                 uint8_t* v_slot) {
  STRATA_CHECK(span == warm_span(f, hot.block_size), "span {} for format {}", span, warm_format_name(f));
  const int64_t T = int64_t{span} * hot.block_size, H = hot.n_kv_heads, D = hot.head_dim;
  for (int is_value = 0; is_value < 2; ++is_value) {
    const std::vector<float> x = gather(hot, is_value != 0, blocks, span);
    uint8_t* out = is_value ? v_slot : k_slot;
    switch (f) {
      case WarmFormat::kNone: STRATA_CHECK(false, "warm_encode with format none"); break;
      case WarmFormat::kInt8: encode_int8(x.data(), T, H, D, out); break;
      case WarmFormat::kFp8: encode_fp8(x.data(), T, H, D, out); break;
      case WarmFormat::kInt4:
        if (is_value) encode_int4_v(x.data(), T, H, D, out);
        else encode_int4_k(x.data(), T, H, D, out);
        break;
    }
  }
}

void warm_decode_row(WarmFormat f, bool is_value, const uint8_t* slot, int32_t span, int32_t block_size,
                     int32_t n_kv_heads, int32_t head_dim, int32_t t, int32_t h, float* out) {
  const int64_t T = int64_t{span} * block_size, H = n_kv_heads, D = head_dim;
  const int64_t row = int64_t{t} * H + h;
  switch (f) {
    case WarmFormat::kNone: STRATA_CHECK(false, "warm_decode_row with format none"); break;
    case WarmFormat::kInt8: {
      const auto* q = reinterpret_cast<const int8_t*>(slot);
      const float s = get_f16(slot + align4(T * H * D) + 2 * row);
      for (int64_t d = 0; d < D; ++d) out[d] = s * static_cast<float>(q[row * D + d]);
      break;
    }
    case WarmFormat::kFp8: {
      float s;
      std::memcpy(&s, slot + align4(T * H * D) + 4 * h, 4);
      for (int64_t d = 0; d < D; ++d) out[d] = s * e4m3_to_f32(slot[row * D + d]);
      break;
    }
    case WarmFormat::kInt4: {
      const uint8_t* data = slot;
      const uint8_t* scales = slot + align4(T * H * D / 2);
      auto nibble = [&](int64_t idx) { return (idx % 2 == 0) ? (data[idx / 2] & 0xf) : (data[idx / 2] >> 4); };
      if (!is_value) {
        const int64_t gk = T % 32 == 0 ? 32 : T;
        const int64_t G = T / gk, g = t / gk;
        const auto* zeros = reinterpret_cast<const int8_t*>(scales + align4(2 * G * H * D));
        for (int64_t d = 0; d < D; ++d) {
          const int64_t m = (g * H + h) * D + d;
          out[d] = get_f16(scales + 2 * m) * static_cast<float>(nibble(row * D + d) - zeros[m]);
        }
      } else {
        const int64_t gv = D % 32 == 0 ? 32 : D;
        const int64_t NG = D / gv;
        const auto* zeros = reinterpret_cast<const int8_t*>(scales + align4(2 * T * H * NG));
        for (int64_t d = 0; d < D; ++d) {
          const int64_t m = row * NG + d / gv;
          out[d] = get_f16(scales + 2 * m) * static_cast<float>(nibble(row * D + d) - zeros[m]);
        }
      }
      break;
    }
  }
}

}  // namespace strata
