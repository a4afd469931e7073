#include "backend/cpu/kernels_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "gguf/quant.h"
#include "kv/warm_format.h"

namespace strata::cpu::ref {

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.type, w.data + r * w.row_bytes, row.data(), w.cols);
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0;
      const float* xt = x + t * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(row[c]) * xt[c];
      y[t * w.rows + r] = static_cast<float>(acc);
    }
  }
}

void rms_norm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * scale * weight[i];
  }
}

void rope(float* x, const int32_t* pos, int64_t n_tokens, int32_t n_heads, int32_t head_dim, const RopeParams& p) {
  const int32_t half = p.n_rot / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const double position = static_cast<double>(pos[t]) * p.freq_scale;
    for (int32_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        double theta = position * std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
        if (p.freq_factors) theta /= p.freq_factors[i];
        const double c = std::cos(theta), s = std::sin(theta);
        const int32_t a = p.neox ? i : 2 * i;
        const int32_t b = p.neox ? i + half : 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = static_cast<float>(x0 * c - x1 * s);
        v[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    gate[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

namespace {

void store_elem(uint8_t* p, KvDtype t, float v) {
  switch (t) {
    case KvDtype::kF32: std::memcpy(p, &v, 4); break;
    case KvDtype::kF16: { uint16_t h = f32_to_fp16(v); std::memcpy(p, &h, 2); break; }
    case KvDtype::kBF16: { uint16_t h = f32_to_bf16(v); std::memcpy(p, &h, 2); break; }
  }
}

float load_elem(const uint8_t* p, KvDtype t) {
  switch (t) {
    case KvDtype::kF32: { float v; std::memcpy(&v, p, 4); return v; }
    case KvDtype::kF16: { uint16_t h; std::memcpy(&h, p, 2); return fp16_to_f32(h); }
    case KvDtype::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
  }
  return 0;
}

}  // namespace

void kv_store(const KvLayerView& kv, const float* k, const float* v, const int32_t* slots, int64_t n_tokens) {
  const int64_t width = int64_t{kv.n_kv_heads} * kv.head_dim;
  const int es = kv_dtype_size(kv.dtype);
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* kd = kv.k + slots[t] * kv.token_stride_bytes();
    uint8_t* vd = kv.v + slots[t] * kv.token_stride_bytes();
    for (int64_t i = 0; i < width; ++i) {
      store_elem(kd + i * es, kv.dtype, k[t * width + i]);
      store_elem(vd + i * es, kv.dtype, v[t * width + i]);
    }
  }
}

void kv_row(const KvLayerView& kv, bool value, BlockId block, int32_t slot, int32_t head, float* out) {
  if (block < kv.n_hot_blocks || kv.is_host(block)) {  // a host slot holds the hot block's bytes
    STRATA_CHECK(!kv.is_host(block) || kv.host != nullptr, "block id {} names a host slot, the view has none", block);
    const uint8_t* base = value ? kv.hot_v(block) : kv.hot_k(block);
    for (int32_t d = 0; d < kv.head_dim; ++d) {
      const int64_t idx = (int64_t{slot} * kv.n_kv_heads + head) * kv.head_dim + d;
      out[d] = load_elem(base + idx * kv_dtype_size(kv.dtype), kv.dtype);
    }
    return;
  }
  STRATA_CHECK(kv.warm_format != WarmFormat::kNone, "block id {} past the hot pool without a warm tier", block);
  const int32_t w = block - kv.n_hot_blocks;
  const int32_t warm_slot = w / kv.warm_span, sub = w % kv.warm_span;
  const uint8_t* base = value ? kv.warm_v + warm_slot * kv.warm_v_slot_bytes : kv.warm_k + warm_slot * kv.warm_k_slot_bytes;
  warm_decode_row(kv.warm_format, value, base, kv.warm_span, kv.block_size, kv.n_kv_heads, kv.head_dim,
                  sub * kv.block_size + slot, head, out);
}

float kv_read(const KvLayerView& kv, bool value, BlockId block, int32_t slot, int32_t head, int32_t d) {
  std::vector<float> row(static_cast<size_t>(kv.head_dim));
  kv_row(kv, value, block, slot, head, row.data());
  return row[static_cast<size_t>(d)];
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) / sum);
}

void paged_attention(const float* q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                     float scale, float* out) {
  const int32_t hd = kv.head_dim;
  const int32_t group = n_head / kv.n_kv_heads;
  for (const auto& s : seqs) {
    // Every key and value row the sequence's last query sees, per kv head: [kv head][position][hd].
    const int32_t n_pos = s.start_pos + s.n_q;
    std::vector<float> keys(static_cast<size_t>(kv.n_kv_heads) * n_pos * hd), values(keys.size());
    for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
      for (int32_t p = 0; p < n_pos; ++p) {
        const size_t at = (static_cast<size_t>(h) * n_pos + p) * hd;
        kv_row(kv, false, s.blocks[p / kv.block_size], p % kv.block_size, h, keys.data() + at);
        kv_row(kv, true, s.blocks[p / kv.block_size], p % kv.block_size, h, values.data() + at);
      }
    }
    for (int32_t i = 0; i < s.n_q; ++i) {
      const int32_t n_keys = s.start_pos + i + 1;
      std::vector<float> scores(static_cast<size_t>(n_keys));
      for (int32_t h = 0; h < n_head; ++h) {
        const int32_t kvh = h / group;
        const float* qv = q + (int64_t{s.q_begin + i} * n_head + h) * hd;
        const float* kh = keys.data() + static_cast<size_t>(kvh) * n_pos * hd;
        const float* vh = values.data() + static_cast<size_t>(kvh) * n_pos * hd;
        for (int32_t p = 0; p < n_keys; ++p) {
          double dot = 0;
          for (int32_t d = 0; d < hd; ++d) dot += static_cast<double>(qv[d]) * kh[int64_t{p} * hd + d];
          scores[p] = static_cast<float>(dot * scale);
        }
        softmax(scores.data(), n_keys);
        float* o = out + (int64_t{s.q_begin + i} * n_head + h) * hd;
        for (int32_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (int32_t p = 0; p < n_keys; ++p) acc += static_cast<double>(scores[p]) * vh[int64_t{p} * hd + d];
          o[d] = static_cast<float>(acc);
        }
      }
    }
  }
}

}  // namespace strata::cpu::ref
