#include "model/model_weights.h"

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "core/error.h"
#include "gguf/quant.h"

namespace strata {
namespace {

// A part of a matrix for a rank of tensor parallelism: rows or columns [begin, begin + count).
struct Slice {
  bool columns = false;
  int64_t begin = 0;
  int64_t count = -1;  // < 0: the whole matrix
};

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

  // `table`: only row-gathered (the embedding of a model with its own output matrix): uploaded with
  // upload_table. A copy the backend made of bytes in the file lets their pages go (drop_pages).
  WeightMatrix matrix(const std::string& name, int64_t cols, int64_t rows, bool required = true, Slice s = {},
                      bool table = false) {
    const GgufTensorInfo* t = find(name, required);
    if (!t) return {};
    check_shape(*t, {cols, rows});
    WeightMatrix host{t->type, rows, cols, t->data, ggml_row_size(t->type, static_cast<uint64_t>(cols))};
    if (s.count >= 0 && !s.columns) {  // whole rows: a view
      host.data += s.begin * host.row_bytes;
      host.rows = s.count;
    } else if (s.count >= 0) {  // columns: each row's part, packed into a copy
      const GgmlTypeTraits tr = ggml_type_traits(t->type);
      if (s.begin % tr.block_size != 0 || s.count % tr.block_size != 0) {
        fail("{}: tensor '{}' ({}, blocks of {} columns) cannot be split by columns for --tensor-parallel: a rank's "
             "columns [{}, {}) do not fall on block boundaries",
             f_.source(), name, ggml_type_name(t->type), tr.block_size, s.begin, s.begin + s.count);
      }
      const uint64_t part = ggml_row_size(t->type, static_cast<uint64_t>(s.count));
      const uint64_t offset = static_cast<uint64_t>(s.begin / tr.block_size) * tr.type_size;
      auto& buf = w_.owned_bytes.emplace_back(static_cast<size_t>(part * static_cast<uint64_t>(rows)));
      for (int64_t r = 0; r < rows; ++r) std::memcpy(buf.data() + r * part, host.data + r * host.row_bytes + offset, part);
      host = WeightMatrix{t->type, rows, s.count, buf.data(), part};
    }
    if (b_ == nullptr) return host;
    if (!b_->supports_matmul(t->type)) {
      fail("{}: tensor '{}' has type {}, which Strata cannot run (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, "
           "q8_0, q2_k, q3_k, q4_k, q5_k, q6_k)",
           f_.source(), name, ggml_type_name(t->type));
    }
    w_.matrix_bytes += host.row_bytes * static_cast<uint64_t>(host.rows);
    const WeightMatrix up = table ? b_->upload_table(host) : b_->upload_matrix(host);
    if (up.data != host.data) f_.drop_pages(host.data, host.row_bytes * static_cast<uint64_t>(host.rows));
    return up;
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

  // Rows [begin, begin + count) of the embedding and one zero row after them (all-zero bytes are
  // zero in every ggml type: its scales are zero), copied: the table of a rank of tensor parallelism.
  WeightMatrix embedding_shard(const std::string& name, int64_t cols, int64_t rows, int64_t begin, int64_t count) {
    const GgufTensorInfo* t = find(name, true);
    check_shape(*t, {cols, rows});
    const uint64_t row_bytes = ggml_row_size(t->type, static_cast<uint64_t>(cols));
    auto& buf = w_.owned_bytes.emplace_back(static_cast<size_t>(row_bytes * static_cast<uint64_t>(count + 1)), uint8_t{0});
    std::memcpy(buf.data(), t->data + begin * row_bytes, static_cast<size_t>(row_bytes * static_cast<uint64_t>(count)));
    const WeightMatrix host{t->type, count + 1, cols, buf.data(), row_bytes};
    if (!b_->supports_matmul(t->type)) fail("{}: tensor '{}' has type {}, which Strata cannot run", f_.source(), name, ggml_type_name(t->type));
    return b_->upload_matrix(host);
  }

 private:
  const GgufFile& f_;
  ModelWeights& w_;
  Backend* b_;  // null: check only
};

// `shard` null: the whole model. Else rank shard->rank's part, `c` the whole model's config.
ModelWeights walk(const GgufFile& f, const ModelConfig& c, Backend* backend, const TpShard* shard = nullptr) {
  ModelWeights w;
  Loader ld(f, w, backend);
  const int32_t hd = c.head_dim;
  // Slices of a rank (whole matrices without a shard).
  Slice q_rows, kv_rows, ff_rows, vocab_rows, q_cols, ff_cols;
  if (shard != nullptr) {
    const ModelConfig& r = shard->config;
    q_rows = {false, int64_t{shard->head0} * hd, int64_t{r.n_head} * hd};
    kv_rows = {false, int64_t{shard->kv_head0} * hd, int64_t{r.n_head_kv} * hd};
    ff_rows = {false, shard->ff0, r.n_ff};
    vocab_rows = {false, shard->vocab0, shard->n_vocab};
    q_cols = {true, q_rows.begin, q_rows.count};
    ff_cols = {true, ff_rows.begin, ff_rows.count};
    w.token_embd = ld.embedding_shard("token_embd.weight", c.n_embd, c.n_vocab, shard->vocab0, shard->n_vocab);
  } else {
    const bool tied = f.find_tensor("output.weight") == nullptr;  // then the embedding is also the output matrix
    w.token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab, true, {}, /*table=*/!tied);
  }
  w.matrix_bytes = 0;  // embedding rows are gathered, not streamed, per step
  w.output_norm = ld.vector("output_norm.weight", c.n_embd);
  w.output = ld.matrix("output.weight", c.n_embd, c.n_vocab, /*required=*/false, vocab_rows);
  if (w.output.data == nullptr) {
    w.output = w.token_embd;  // tied embeddings (a rank's: its vocabulary rows, without the zero row)
    if (shard != nullptr) w.output.rows = shard->n_vocab;
    w.matrix_bytes += static_cast<uint64_t>(w.output.row_bytes) * static_cast<uint64_t>(w.output.rows);
  }
  w.rope_freqs = ld.vector("rope_freqs.weight", c.n_rot / 2, /*required=*/false);
  // A rank's part of a bias: offsetting the (backend) address is address arithmetic only.
  auto bias = [&](const std::string& name, int64_t n, const Slice& s) {
    const float* b = ld.vector(name, n);
    return s.count >= 0 ? b + s.begin : b;
  };
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights L;
    L.attn_norm = ld.vector(p + "attn_norm.weight", c.n_embd);
    L.wq = ld.matrix(p + "attn_q.weight", c.n_embd, c.q_dim(), true, q_rows);
    L.wk = ld.matrix(p + "attn_k.weight", c.n_embd, c.kv_dim(), true, kv_rows);
    L.wv = ld.matrix(p + "attn_v.weight", c.n_embd, c.kv_dim(), true, kv_rows);
    if (c.has_qkv_bias) {
      L.bq = bias(p + "attn_q.bias", c.q_dim(), q_rows);
      L.bk = bias(p + "attn_k.bias", c.kv_dim(), kv_rows);
      L.bv = bias(p + "attn_v.bias", c.kv_dim(), kv_rows);
    }
    L.wo = ld.matrix(p + "attn_output.weight", c.q_dim(), c.n_embd, true, q_cols);
    L.ffn_norm = ld.vector(p + "ffn_norm.weight", c.n_embd);
    L.w_gate = ld.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff, true, ff_rows);
    L.w_up = ld.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff, true, ff_rows);
    L.w_down = ld.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd, true, ff_cols);
    w.layers.push_back(L);
  }
  return w;
}

}  // namespace

ModelWeights ModelWeights::load(const GgufFile& f, const ModelConfig& c, Backend& backend) { return walk(f, c, &backend); }

ModelWeights ModelWeights::load_shard(const GgufFile& f, const ModelConfig& c, const TpShard& shard, Backend& backend) {
  return walk(f, c, &backend, &shard);
}

void ModelWeights::check(const GgufFile& f, const ModelConfig& c) { walk(f, c, nullptr); }

}  // namespace strata
