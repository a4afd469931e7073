#include "model/model_weights.h"

#include <fmt/format.h>

#include <string>

#include "core/error.h"
#include "gguf/quant.h"

namespace strata {
namespace {

// Walks the tensors a config needs. With a backend it uploads them; without one (check()) it only
// validates names, shapes and vector types, and the returned views point into the file.
class Loader {
 public:
  Loader(const GgufFile& f, ModelWeights& w, Backend* b) : f_(f), w_(w), b_(b) {}

  const GgufTensorInfo* find(const std::string& name, bool required) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t && required) fail("{}: missing tensor '{}'", f_.source(), name);
    return t;
  }

  void check_shape(const GgufTensorInfo& t, std::initializer_list<int64_t> shape) {
    std::vector<int64_t> want(shape);
    bool ok = true;  // trailing dimensions of 1 are allowed
    for (size_t i = 0; ok && i < kGgufMaxDims; ++i) ok = static_cast<int64_t>(t.ne[i]) == (i < want.size() ? want[i] : 1);
    if (!ok) {
      std::string w = "[";
      for (size_t i = 0; i < want.size(); ++i) w += fmt::format("{}{}", i ? ", " : "", want[i]);
      fail("{}: tensor '{}' has shape {}, expected {}]", f_.source(), t.name, t.shape_string(), w);
    }
  }

  WeightMatrix matrix(const std::string& name, int64_t cols, int64_t rows, bool required = true) {
    const GgufTensorInfo* t = find(name, required);
    if (!t) return {};
    check_shape(*t, {cols, rows});
    const WeightMatrix host{t->type, rows, cols, t->data, ggml_row_size(t->type, static_cast<uint64_t>(cols))};
    if (b_ == nullptr) return host;
    if (!b_->supports_matmul(t->type)) {
      fail("{}: tensor '{}' has type {}, which Strata cannot run (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, "
           "q8_0, q2_k, q3_k, q4_k, q5_k, q6_k)",
           f_.source(), name, ggml_type_name(t->type));
    }
    w_.matrix_bytes += t->n_bytes;
    return b_->upload_matrix(host);
  }

  const float* vector(const std::string& name, int64_t n, bool required = true) {
    const GgufTensorInfo* t = find(name, required);
    if (!t) return nullptr;
    check_shape(*t, {n});
    const bool in_place = t->type == GgmlType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0;
    if (!in_place && !can_dequantize(t->type)) fail("{}: tensor '{}' has unsupported type {}", f_.source(), name, ggml_type_name(t->type));
    if (b_ == nullptr) return reinterpret_cast<const float*>(t->data);  // a view for check(), never read
    if (in_place) return b_->upload_vector(reinterpret_cast<const float*>(t->data), n);
    auto& v = w_.owned.emplace_back(static_cast<size_t>(n));
    dequantize_row(t->type, t->data, v.data(), n);
    return b_->upload_vector(v.data(), n);
  }

 private:
  const GgufFile& f_;
  ModelWeights& w_;
  Backend* b_;  // null: check only
};

ModelWeights walk(const GgufFile& f, const ModelConfig& c, Backend* backend) {
  ModelWeights w;
  Loader ld(f, w, backend);
  w.token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  w.matrix_bytes = 0;  // embedding rows are gathered, not streamed, per step
  w.output_norm = ld.vector("output_norm.weight", c.n_embd);
  w.output = ld.matrix("output.weight", c.n_embd, c.n_vocab, /*required=*/false);
  if (w.output.data == nullptr) {
    w.output = w.token_embd;  // tied embeddings
    w.matrix_bytes += static_cast<uint64_t>(w.token_embd.row_bytes) * static_cast<uint64_t>(c.n_vocab);
  }
  w.rope_freqs = ld.vector("rope_freqs.weight", c.n_rot / 2, /*required=*/false);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights L;
    L.attn_norm = ld.vector(p + "attn_norm.weight", c.n_embd);
    L.wq = ld.matrix(p + "attn_q.weight", c.n_embd, c.q_dim());
    L.wk = ld.matrix(p + "attn_k.weight", c.n_embd, c.kv_dim());
    L.wv = ld.matrix(p + "attn_v.weight", c.n_embd, c.kv_dim());
    if (c.has_qkv_bias) {
      L.bq = ld.vector(p + "attn_q.bias", c.q_dim());
      L.bk = ld.vector(p + "attn_k.bias", c.kv_dim());
      L.bv = ld.vector(p + "attn_v.bias", c.kv_dim());
    }
    L.wo = ld.matrix(p + "attn_output.weight", c.q_dim(), c.n_embd);
    L.ffn_norm = ld.vector(p + "ffn_norm.weight", c.n_embd);
    L.w_gate = ld.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
    L.w_up = ld.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
    L.w_down = ld.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    w.layers.push_back(L);
  }
  return w;
}

}  // namespace

ModelWeights ModelWeights::load(const GgufFile& f, const ModelConfig& c, Backend& backend) { return walk(f, c, &backend); }

void ModelWeights::check(const GgufFile& f, const ModelConfig& c) { walk(f, c, nullptr); }

}  // namespace strata
