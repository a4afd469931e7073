#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY  // for XXH3_state_t on the stack
#include <xxhash.h>

#include "core/check.h"
#include "core/error.h"

namespace strata {
namespace {

// Bytes hashed from the start of every tensor's data.
constexpr uint64_t kFingerprintSampleBytes = 4096;

// XXH3-64 of the GGUF header (every metadata value: hyper-parameters, vocabulary, merges, special
// ids, chat template; and the tensor table: names, types, shapes, offsets) and of the first 4 KiB
// of every tensor. The header alone would give two fine-tunes of one base (same metadata, same
// shapes) one fingerprint; hashing all weight bytes would read gigabytes at load. The samples touch
// one page per tensor, and a fine-tune changes nearly every tensor.
uint64_t model_fingerprint(const GgufFile& f) {
  const auto& tensors = f.tensors();
  STRATA_CHECK(!tensors.empty());
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  // The header is the file's bytes before the data section; tensor data are views into the same bytes.
  const uint8_t* file_start = tensors.front().data - tensors.front().offset - f.data_offset();
  XXH3_64bits_update(&st, file_start, f.data_offset());
  for (const GgufTensorInfo& t : tensors) {
    XXH3_64bits_update(&st, t.data, std::min(t.n_bytes, kFingerprintSampleBytes));
  }
  return XXH3_64bits_digest(&st);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, int n_threads) {
  auto file = GgufFile::open(path);
  if (n_threads <= 0) n_threads = ThreadPool::physical_cores();
  return std::unique_ptr<Model>(new Model(std::move(file), n_threads));
}

Model::Model(std::unique_ptr<GgufFile> file, int n_threads)
    : file_(std::move(file)),
      config_(ModelConfig::from_gguf(*file_)),
      weights_(ModelWeights::load(*file_, config_)),
      fingerprint_(model_fingerprint(*file_)),
      pool_(n_threads) {
  rope_.n_rot = config_.n_rot;
  rope_.freq_base = config_.rope_freq_base;
  rope_.freq_scale = config_.rope_freq_scale;
  rope_.neox = config_.rope_style == RopeStyle::kNeox;
  rope_.freq_factors = weights_.rope_freqs;
}

void Model::ensure_buffers(int64_t n_tokens, int64_t n_logit_rows) {
  const auto& c = config_;
  if (n_tokens > capacity_tokens_) {
    capacity_tokens_ = n_tokens;
    const auto n = static_cast<size_t>(n_tokens);
    x_.resize(n * c.n_embd);
    h_.resize(n * c.n_embd);
    q_.resize(n * c.q_dim());
    k_.resize(n * c.kv_dim());
    v_.resize(n * c.kv_dim());
    attn_.resize(n * c.q_dim());
    gate_.resize(n * c.n_ff);
    up_.resize(n * c.n_ff);
    out_.resize(n * std::max(c.n_embd, c.q_dim()));
  }
  logit_in_.resize(static_cast<size_t>(n_logit_rows) * c.n_embd);
  logits_.resize(static_cast<size_t>(n_logit_rows) * c.n_vocab);
}

std::span<const float> Model::forward(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers) {
  const ModelConfig& c = config_;
  STRATA_CHECK(static_cast<int32_t>(kv_layers.size()) == c.n_layer);
  const int64_t T = batch.n_tokens();
  const int64_t n_logits = batch.n_logit_rows();
  ensure_buffers(T, n_logits);
  if (T == 0) return {};
  const int32_t bs = kv_layers[0].block_size;

  // Flatten the batch: tokens, positions, KV slots and attention descriptors.
  tokens_.clear();
  pos_.clear();
  slots_.clear();
  attn_seqs_.clear();
  for (const ForwardSeq& s : batch.seqs) {
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    STRATA_CHECK(static_cast<int64_t>(s.blocks.size()) * bs >= s.start_pos + n, "block table too short");
    attn_seqs_.push_back({static_cast<int32_t>(tokens_.size()), n, s.start_pos, s.blocks.data(),
                          static_cast<int32_t>(s.blocks.size())});
    for (int32_t i = 0; i < n; ++i) {
      const TokenId tok = s.tokens[i];
      STRATA_CHECK(tok >= 0 && tok < c.n_vocab, "token id {} out of range", tok);
      const int32_t p = s.start_pos + i;
      tokens_.push_back(tok);
      pos_.push_back(p);
      slots_.push_back(s.blocks[p / bs] * bs + p % bs);
    }
  }

  const int64_t D = c.n_embd;
  for (int64_t t = 0; t < T; ++t) cpu::get_row(weights_.token_embd, tokens_[t], x_.data() + t * D);

  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = weights_.layers[l];
    // Attention block.
    cpu::rms_norm(x_.data(), L.attn_norm, h_.data(), T, D, c.rms_eps);
    const cpu::MatmulJob qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
    cpu::matmul_multi(qkv, h_.data(), T, pool_, scratch_);
    if (L.bq) {
      for (int64_t t = 0; t < T; ++t) {
        cpu::add_inplace(q_.data() + t * c.q_dim(), L.bq, c.q_dim());
        cpu::add_inplace(k_.data() + t * c.kv_dim(), L.bk, c.kv_dim());
        cpu::add_inplace(v_.data() + t * c.kv_dim(), L.bv, c.kv_dim());
      }
    }
    cpu::rope(q_.data(), pos_.data(), T, c.n_head, c.head_dim, rope_);
    cpu::rope(k_.data(), pos_.data(), T, c.n_head_kv, c.head_dim, rope_);
    cpu::kv_store(kv_layers[l], k_.data(), v_.data(), slots_.data(), T);
    cpu::paged_attention(q_.data(), kv_layers[l], attn_seqs_, c.n_head, scale, attn_.data(), pool_, scratch_);
    cpu::matmul(L.wo, attn_.data(), T, out_.data(), pool_, scratch_);
    cpu::add_inplace(x_.data(), out_.data(), T * D);
    // Feed-forward block (SiLU-gated).
    cpu::rms_norm(x_.data(), L.ffn_norm, h_.data(), T, D, c.rms_eps);
    const cpu::MatmulJob gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
    cpu::matmul_multi(gate_up, h_.data(), T, pool_, scratch_);
    cpu::silu_mul(gate_.data(), up_.data(), T * c.n_ff);
    cpu::matmul(L.w_down, gate_.data(), T, out_.data(), pool_, scratch_);
    cpu::add_inplace(x_.data(), out_.data(), T * D);
  }

  // Logits only for the rows that are sampled.
  int64_t row = 0, t0 = 0;
  for (const ForwardSeq& s : batch.seqs) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.logits == LogitsMode::kAll) {
      std::memcpy(logit_in_.data() + row * D, x_.data() + t0 * D, static_cast<size_t>(n * D) * sizeof(float));
      row += n;
    } else if (s.logits == LogitsMode::kLast && n > 0) {
      std::memcpy(logit_in_.data() + row * D, x_.data() + (t0 + n - 1) * D, static_cast<size_t>(D) * sizeof(float));
      row += 1;
    }
    t0 += n;
  }
  if (n_logits == 0) return {};
  cpu::rms_norm(logit_in_.data(), weights_.output_norm, logit_in_.data(), n_logits, D, c.rms_eps);
  cpu::matmul(weights_.output, logit_in_.data(), n_logits, logits_.data(), pool_, scratch_);
  return {logits_.data(), static_cast<size_t>(n_logits) * c.n_vocab};
}

}  // namespace strata
