#include "model/model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#define XXH_STATIC_LINKING_ONLY  // for XXH3_state_t on the stack
#include <xxhash.h>

#include "core/check.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/kv_view_digest.h"
#include "sample/logit_kernels.h"

namespace strata {
namespace {

// STRATA_FUSED_LOGITS=0: passes whose every row takes logits keep the gather path (Model::forward;
// read once).
bool fused_logits_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_FUSED_LOGITS");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

// Decode passes of at most this many tokens may be recorded and replayed (Backend::begin_replay).
constexpr int64_t kMaxReplayTokens = 512;

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

std::unique_ptr<Model> Model::load(const std::string& path, std::unique_ptr<Backend> backend) {
  STRATA_CHECK(backend != nullptr);
  auto file = GgufFile::open(path);
  return std::unique_ptr<Model>(new Model(std::move(file), std::move(backend)));
}

std::unique_ptr<Model> Model::load(const std::string& path, const BackendOptions& o) {
  if (o.tensor_parallel <= 1) return load(path, make_backend(o));
  if (resolve_device(o.device) == DeviceKind::kCuda && cuda_device_count() < o.tensor_parallel) {
    fail("--tensor-parallel {} on --device cuda: CUDA tensor parallelism needs {} GPUs (one per rank); this machine "
         "has {}; use --device cpu",
         o.tensor_parallel, o.tensor_parallel, cuda_device_count());
  }
  auto file = GgufFile::open(path);
  return std::unique_ptr<Model>(new Model(std::move(file), o));
}

std::unique_ptr<Model> Model::load(const std::string& path, int n_threads) {
  return load(path, BackendOptions{DeviceKind::kCpu, n_threads});
}

Model::Model(std::unique_ptr<GgufFile> file, std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      owned_file_(std::move(file)),
      file_(owned_file_.get()),
      config_(ModelConfig::from_gguf(*file_)),
      weights_(ModelWeights::load(*file_, config_, *backend_)),
      fingerprint_(model_fingerprint(*file_)) {
  rope_.n_rot = config_.n_rot;
  rope_.freq_base = config_.rope_freq_base;
  rope_.freq_scale = config_.rope_freq_scale;
  rope_.neox = config_.rope_style == RopeStyle::kNeox;
  rope_.freq_factors = weights_.rope_freqs;
}

Model::Model(const GgufFile& file, const ModelConfig& whole, const TpShard& shard, Communicator& comm,
             std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      file_(&file),
      config_(shard.config),
      weights_(ModelWeights::load_shard(file, whole, shard, *backend_)),
      shard_storage_(shard) {
  shard_ = &shard_storage_;
  comm_of_rank_ = &comm;
  rope_.n_rot = config_.n_rot;
  rope_.freq_base = config_.rope_freq_base;
  rope_.freq_scale = config_.rope_freq_scale;
  rope_.neox = config_.rope_style == RopeStyle::kNeox;
  rope_.freq_factors = weights_.rope_freqs;
}

// Why ranks are threads of this process and not processes: the scheduler and the KV manager are
// one, single-threaded (the engine thread), and every rank executes the same plan — in threads the
// ranks read the plan (the batch, the block tables) in place, with no IPC; NCCL serves several
// devices of one process as well (ncclCommInitAll).
Model::Model(std::unique_ptr<GgufFile> file, const BackendOptions& o)
    : owned_file_(std::move(file)), file_(owned_file_.get()), config_(ModelConfig::from_gguf(*file_)) {
  const int32_t n = o.tensor_parallel;
  std::vector<TpShard> shards;
  for (int32_t r = 0; r < n; ++r) shards.push_back(tp_shard(config_, r, n));  // throws before any loading
  ModelWeights::check(*file_, config_);
  fingerprint_ = model_fingerprint(*file_);
  // CPU ranks: --threads split between them. CUDA ranks: GPU r for rank r.
  const DeviceKind device = resolve_device(o.device);
  const int threads = o.n_threads > 0 ? o.n_threads : ThreadPool::physical_cores();
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<Backend*> raw;
  for (int32_t r = 0; r < n; ++r) {
    BackendOptions rank_options;
    rank_options.device = device;
    rank_options.n_threads = device == DeviceKind::kCpu ? std::max(1, threads / n) : o.n_threads;
    rank_options.device_index = device == DeviceKind::kCuda ? r : 0;
    rank_options.mapped_weights = o.mapped_weights;
    backends.push_back(make_backend(rank_options));
    raw.push_back(backends.back().get());
  }
  comm_ = device == DeviceKind::kCpu ? make_host_communicator(n) : make_device_communicator(raw);
  for (int32_t r = 0; r < n; ++r) {
    auto& b = backends[static_cast<size_t>(r)];
    b->bind_thread();  // its weights go to its GPU
    ranks_.push_back(std::unique_ptr<Model>(new Model(*file_, config_, shards[static_cast<size_t>(r)], *comm_, std::move(b))));
  }
  ranks_[0]->backend().bind_thread();  // the loading thread is rank 0's again
  group_ = std::make_unique<RankGroup>(n);
  if (const char* f = std::getenv("STRATA_TEST_TP_FAIL"); f != nullptr && *f != '\0') {
    const std::string spec(f);
    const size_t at = spec.find('@');
    fail_rank_for_test(std::stoi(spec.substr(0, at)), at == std::string::npos ? 0 : std::stoll(spec.substr(at + 1)));
  }
}

Model::~Model() = default;

void Model::fail_rank_for_test(int32_t rank, int64_t step) {
  fail_rank_ = rank;
  fail_step_ = rank_steps_ + step;
}

std::vector<Backend*> Model::rank_backends() {
  std::vector<Backend*> out;
  if (ranks_.empty()) out.push_back(backend_.get());
  for (auto& r : ranks_) out.push_back(&r->backend());
  return out;
}

KvGeometry Model::kv_geometry(int32_t block_size, KvDtype dtype) const {
  const int32_t n = tensor_parallel();
  return KvGeometry{config_.n_layer, n > 1 ? tp_kv_heads(config_, n) : config_.n_head_kv, config_.head_dim, block_size, dtype};
}

uint64_t Model::step_weight_bytes() const {
  uint64_t b = weights_.matrix_bytes;
  for (const auto& r : ranks_) b += r->step_weight_bytes();
  return b;
}

std::span<const float> Model::forward_ranks(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers) {
  if (ranks_failed_) fail("tensor parallelism: a rank failed in an earlier forward pass; the model cannot run any more");
  const auto n = static_cast<int32_t>(ranks_.size());
  const auto L = static_cast<size_t>(config_.n_layer);
  STRATA_CHECK(kv_layers.size() == L * static_cast<size_t>(n), "tensor parallelism: {} KV layer views for {} layers x {} ranks",
               kv_layers.size(), L, n);
  for (const ForwardSeq& s : batch.seqs) {
    STRATA_CHECK(s.importance == nullptr && s.query == nullptr, "tensor parallelism: attention importance is not supported");
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::span<const float>> out(static_cast<size_t>(n));
  const int64_t step = rank_steps_++;
  group_->run([&](int32_t r) {
    const auto i = static_cast<size_t>(r);
    try {
      if (r == fail_rank_ && step == fail_step_) fail("failure injected by the test hook (forward pass {})", step);
      ranks_[i]->backend().bind_thread();  // CUDA: this thread issues to rank r's GPU
      out[i] = ranks_[i]->forward(batch, kv_layers.subspan(i * L, L));
    } catch (const CommAborted&) {
      errors[i] = std::current_exception();
    } catch (const std::exception& e) {
      errors[i] = std::make_exception_ptr(Error(fmt::format("tensor-parallel rank {} of {}: {}", r, n, e.what())));
      comm_->abort();  // the others may be waiting for this rank in a collective
    }
  });
  // The error of a rank that failed, not the CommAborted of the ranks it woke.
  std::exception_ptr cause, any;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    if (!any) any = e;
    try {
      std::rethrow_exception(e);
    } catch (const CommAborted&) {
    } catch (...) {
      if (!cause) cause = e;
    }
  }
  ranks_[0]->backend().bind_thread();  // the caller (rank 0) issues to rank 0's GPU afterwards too
  if (any) {
    ranks_failed_ = true;
    std::rethrow_exception(cause ? cause : any);
  }
  return out[0];
}

namespace {

// Cuts [n][width] f32 views out of one buffer, each starting on a 64-byte boundary.
class Carver {
 public:
  explicit Carver(int64_t n) : n_(n) {}
  ActView take(int64_t width) {
    const ActView v{reinterpret_cast<float*>(base_ + offset_), n_, width};
    offset_ += (static_cast<uint64_t>(n_ * width) * sizeof(float) + 63) / 64 * 64;
    return v;
  }
  uint64_t bytes() const { return offset_; }
  void set_base(uint8_t* base) { base_ = base; offset_ = 0; }

 private:
  int64_t n_;
  uint8_t* base_ = nullptr;
  uint64_t offset_ = 0;
};

}  // namespace

void Model::ensure_buffers(int64_t n_tokens, int64_t n_logit_rows) {
  const ModelConfig& c = config_;
  if (n_tokens > capacity_tokens_) {
    Carver cv(n_tokens);
    auto carve = [&] {
      x_ = cv.take(c.n_embd);
      h_ = cv.take(c.n_embd);
      q_ = cv.take(c.q_dim());
      k_ = cv.take(c.kv_dim());
      v_ = cv.take(c.kv_dim());
      attn_ = cv.take(c.q_dim());
      gate_ = cv.take(c.n_ff);
      up_ = cv.take(c.n_ff);
      out_ = cv.take(c.n_embd);
    };
    carve();  // measures
    act_mem_.reset();
    act_mem_ = backend_->allocate(cv.bytes(), MemoryUse::kActivations);
    cv.set_base(act_mem_->data());
    carve();
    capacity_tokens_ = n_tokens;
  }
  if (n_logit_rows > capacity_logit_rows_) {
    // A rank of tensor parallelism computes its vocabulary slice and gathers every rank's.
    const int64_t vocab_rows = shard_ != nullptr ? shard_->n_vocab : c.n_vocab;
    Carver cv(n_logit_rows);
    auto carve = [&] {
      logit_in_ = cv.take(c.n_embd);
      logits_ = cv.take(vocab_rows);
      if (shard_ != nullptr) logits_all_ = cv.take(c.n_vocab);
    };
    carve();  // measures
    logit_mem_.reset();
    logit_mem_ = backend_->allocate(cv.bytes(), MemoryUse::kActivations);
    cv.set_base(logit_mem_->data());
    carve();
    capacity_logit_rows_ = n_logit_rows;
  }
}

void Model::copy_queries(const ForwardBatch& batch) {
  if (query_rows_.empty()) return;
  const ModelConfig& c = config_;
  const int64_t row_floats = int64_t{c.n_head} * c.head_dim;
  const auto nq = static_cast<int64_t>(query_rows_.size());
  query_host_.resize(static_cast<size_t>(c.n_layer * nq * row_floats));
  backend_->copy_to_host(query_host_.data(), query_mem_->data(), query_host_.size() * sizeof(float));
  int64_t j = 0;  // the seqs that asked, in query_rows_'s order
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    float* dst = batch.seqs[i].query;
    if (dst == nullptr || attn_seqs_[i].n_q == 0) continue;
    for (int32_t l = 0; l < c.n_layer; ++l) {
      const float* src = query_host_.data() + (l * nq + j) * row_floats;
      std::copy(src, src + row_floats, dst + l * row_floats);
    }
    ++j;
  }
}

std::span<const float> Model::forward(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers) {
  if (!ranks_.empty()) return forward_ranks(batch, kv_layers);
  return forward_impl(batch, kv_layers, {});
}

uint64_t Model::forward_pick(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers, bool from_picks) {
  for (const ForwardSeq& s : batch.seqs) {
    STRATA_CHECK(s.tokens.size() == 1 && s.logits == LogitsMode::kLast && s.importance == nullptr && s.query == nullptr,
                 "forward_pick: every sequence takes one token and its logits, no importance, no query");
  }
  const auto n = static_cast<int64_t>(batch.seqs.size());
  STRATA_CHECK(!from_picks || n <= last_pick_rows_, "forward_pick: {} sequences from a pick of {}", n, last_pick_rows_);
  const uint64_t ticket = pick_next_;
  PickTicket& t = pick_tickets_[ticket % Backend::kPickTickets];
  const bool device = picks_on_device();
  if (device && (!from_picks || last_pick_device_)) {
    forward_impl(batch, kv_layers, {true, from_picks});
    t.device = true;
    t.backend_ticket = backend_->collect_picks(n);
    t.host.clear();
  } else {
    // On the host: the tokens of the last picks (waited for), then the pass and a host pick.
    const ForwardBatch* run = &batch;
    ForwardBatch with_tokens;
    if (from_picks) {
      const std::span<const TokenId> last = picked(pick_next_ - 1);
      pick_tokens_.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pick_tokens_[static_cast<size_t>(i)] = std::max(last[static_cast<size_t>(i)], 0);  // -1: 0
      with_tokens = batch;
      for (int64_t i = 0; i < n; ++i) with_tokens.seqs[static_cast<size_t>(i)].tokens = {&pick_tokens_[static_cast<size_t>(i)], 1};
      run = &with_tokens;
    }
    const std::span<const float> logits = forward(*run, kv_layers);
    const auto V = static_cast<size_t>(config_.n_vocab);
    STRATA_CHECK(logits.size() == static_cast<size_t>(n) * V);
    pick_block_max_.resize(logit_blocks(V));
    t.device = false;
    t.host.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t.host[static_cast<size_t>(i)] = greedy_token(logits.subspan(static_cast<size_t>(i) * V, V), pick_block_max_);
  }
  last_pick_device_ = t.device;
  last_pick_rows_ = n;
  ++pick_next_;
  return ticket;
}

std::span<const TokenId> Model::picked(uint64_t ticket) {
  STRATA_CHECK(ticket < pick_next_ && pick_next_ - ticket <= Backend::kPickTickets, "picked: ticket {} (the next is {})",
               ticket, pick_next_);
  const PickTicket& t = pick_tickets_[ticket % Backend::kPickTickets];
  if (t.device) return backend_->picks(t.backend_ticket);
  return t.host;
}

std::span<const float> Model::forward_impl(const ForwardBatch& batch, std::span<const KvLayerView> kv_layers, PickMode pm) {
  const ModelConfig& c = config_;
  STRATA_CHECK(static_cast<int32_t>(kv_layers.size()) == c.n_layer);
  const int64_t T = batch.n_tokens();
  const int64_t n_logits = batch.n_logit_rows();
  ensure_buffers(T, n_logits);
  if (T == 0) return {};
  const int32_t bs = kv_layers[0].block_size;

  // Flatten the batch: tokens, positions, KV slots, attention descriptors, rows that need logits.
  tokens_.clear();
  pos_.clear();
  slots_.clear();
  logit_rows_.clear();
  attn_seqs_.clear();
  for (const ForwardSeq& s : batch.seqs) {
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    const int32_t t0 = static_cast<int32_t>(tokens_.size());
    const int32_t k0 = s.kv_start >= 0 ? s.kv_start : s.start_pos;  // KV slot of the first new token
    STRATA_CHECK(static_cast<int64_t>(s.blocks.size()) * bs >= k0 + n, "block table too short");
    attn_seqs_.push_back({t0, n, k0, s.blocks.data(), static_cast<int32_t>(s.blocks.size()), s.importance,
                          s.importance_from});
    for (int32_t i = 0; i < n; ++i) {
      const TokenId tok = pm.from_picks ? 0 : s.tokens[i];  // from_picks: the device's pick, not read here
      STRATA_CHECK(tok >= 0 && tok < c.n_vocab, "token id {} out of range", tok);
      const int32_t p = s.start_pos + i, k = k0 + i;
      tokens_.push_back(tok);
      pos_.push_back(p);
      slots_.push_back(s.blocks[k / bs] * bs + k % bs);
      if (s.logits == LogitsMode::kAll || (s.logits == LogitsMode::kLast && i == n - 1)) logit_rows_.push_back(t0 + i);
    }
  }

  Backend& be = *backend_;
  // Queries asked for on a device backend: gathered per layer on the device (query_mem_), copied
  // back once after the pass.
  const bool want_query = std::any_of(batch.seqs.begin(), batch.seqs.end(), [](const ForwardSeq& s) { return s.query != nullptr; });
  const int64_t row_floats = int64_t{c.n_head} * c.head_dim;
  query_rows_.clear();
  if (want_query && !backend_->host_visible()) {
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
      const AttentionSeq& a = attn_seqs_[i];
      if (batch.seqs[i].query != nullptr && a.n_q > 0) query_rows_.push_back(a.q_begin + a.n_q - 1);
    }
    const auto nq = static_cast<int64_t>(query_rows_.size());
    if (nq > query_capacity_rows_) {
      query_mem_.reset();
      query_mem_ = backend_->allocate(static_cast<uint64_t>(c.n_layer * nq * row_floats) * sizeof(float),
                                      MemoryUse::kActivations);
      query_capacity_rows_ = nq;
    }
  }
  // Decode steps (one new token per sequence) repeat their shape: a backend that can record and
  // replay a pass (CUDA graphs) gets the chance. Tables are padded to a multiple of 32 blocks, so
  // one recording serves a sequence while it grows by up to 32 blocks. Passes whose sequences hold
  // blocks in host slots (--kv-offload) replay too: the slots' base id and address are fields of
  // the views, in the key like every other field.
  bool replay = false;
  // Not in a rank of tensor parallelism: its passes meet the other ranks in collectives.
  if (T <= kMaxReplayTokens && shard_ == nullptr && std::all_of(batch.seqs.begin(), batch.seqs.end(), [](const ForwardSeq& s) {
        return s.tokens.size() == 1;
      })) {
    int32_t max_blocks = 0, max_ctx = 0;
    for (const AttentionSeq& a : attn_seqs_) {
      max_blocks = std::max(max_blocks, a.n_blocks);
      max_ctx = std::max(max_ctx, a.start_pos + a.n_q);
    }
    Backend::ReplayShape shape;
    shape.n_tokens = static_cast<int32_t>(T);
    shape.n_seqs = static_cast<int32_t>(attn_seqs_.size());
    shape.max_blocks = (max_blocks + 31) / 32 * 32;
    shape.max_ctx = max_ctx;
    // Everything a recording bakes in: sizes, every buffer address (the carving of the activation
    // buffers depends on their capacity) and every field of every layer's KV view (the kernels take
    // the views by value: arenas, warm tier, host slots). One model serves engine after engine, and
    // a new engine's KV storage may get the address of the last one's freed arena: a key of the
    // arenas' addresses and geometry alone then found the last engine's recording, and replayed
    // its views — without host slots (host_base at INT32_MAX: a host id read as a hot block past
    // the arena; -inf logits in engine_offload_test on the H200) or with its freed host tier.
    // Whether the pass reports attention importance (extra ops per layer on a device backend).
    const bool importance = std::any_of(attn_seqs_.begin(), attn_seqs_.end(),
                                        [](const AttentionSeq& a) { return a.importance != nullptr; });
    const uint64_t parts[] = {static_cast<uint64_t>(importance) | uint64_t{pm.pick} << 1 | uint64_t{pm.from_picks} << 2,
                              static_cast<uint64_t>(T), static_cast<uint64_t>(n_logits),
                              static_cast<uint64_t>(shape.max_blocks), static_cast<uint64_t>(capacity_tokens_),
                              static_cast<uint64_t>(capacity_logit_rows_), reinterpret_cast<uint64_t>(x_.data),
                              reinterpret_cast<uint64_t>(logit_in_.data), static_cast<uint64_t>(query_rows_.size()),
                              reinterpret_cast<uint64_t>(query_mem_ ? query_mem_->data() : nullptr)};
    uint64_t key = XXH3_64bits(parts, sizeof parts);
    for (const KvLayerView& kv : kv_layers) key = kv_view_digest(kv, key);
    shape.key = key;
    replay = be.begin_replay(shape);
  }
  const ActView x = x_.row_range(0, T), h = h_.row_range(0, T), q = q_.row_range(0, T), k = k_.row_range(0, T),
                v = v_.row_range(0, T), attn = attn_.row_range(0, T), gate = gate_.row_range(0, T),
                up = up_.row_range(0, T), out = out_.row_range(0, T);
  if (shard_ != nullptr) {
    // A rank's table holds its vocabulary slice and a zero row after it: each token is one rank's
    // row and zeros on the others, so the sum over the ranks is the row, exactly.
    local_tokens_.resize(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const TokenId t = tokens_[i] - shard_->vocab0;
      local_tokens_[i] = t >= 0 && t < shard_->n_vocab ? t : shard_->n_vocab;
    }
    be.embed(weights_.token_embd, local_tokens_, x);
    comm_of_rank_->all_reduce_sum(shard_->rank, x);
  } else if (pm.from_picks) {
    be.embed_picked(weights_.token_embd, x);
  } else {
    be.embed(weights_.token_embd, tokens_, x);
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // The residual adds are fused with the projection before them and the norm that follows them
  // (Backend::matmul_add_rms_norm): the attention block's output with the feed-forward norm, the
  // feed-forward output with the next layer's attention norm. On a backend that supports it
  // (decode batches on CUDA with STRATA_CUDA_LAZY_NORM=1) the norm is left pending in h and the
  // projections that read h apply it (`norm`); nothing else reads h. Tensor-parallel ranks sum the
  // projection over the ranks between the matmul and the add, so they take the ops one by one.
  const bool lazy_norm = shard_ == nullptr && be.supports_lazy_norm(T);
  // A decode pass of one sequence and one token: a backend may run every layer in one call
  // (Backend::decode_layers: one persistent kernel on CUDA); else the layer loop below.
  bool fused = false;
  if (T == 1 && shard_ == nullptr && !want_query && attn_seqs_.size() == 1 && attn_seqs_[0].importance == nullptr) {
    if (decode_layers_.empty()) {  // the weights stay where they are: made once
      decode_layers_.reserve(weights_.layers.size());
      for (const LayerWeights& L : weights_.layers) {
        decode_layers_.push_back({&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, L.attn_norm, L.ffn_norm, L.bq,
                                  L.bk, L.bv});
      }
    }
    DecodeLayersArgs da;
    da.layers = decode_layers_;
    da.kv = kv_layers;
    da.x = x;
    da.pos = pos_;
    da.slots = slots_;
    da.seqs = attn_seqs_;
    da.n_head = c.n_head;
    da.n_kv_head = c.n_head_kv;
    da.head_dim = c.head_dim;
    da.n_ff = c.n_ff;
    da.rope = rope_;
    da.eps = c.rms_eps;
    da.scale = scale;
    fused = be.decode_layers(da);
  }
  PendingNorm norm;  // what h holds: the normed rows (nothing pending) after rms_norm
  // Every token row takes logits (decode passes, eval's windows): the last layer's down projection
  // adds into x and opens the output norm as any other layer's does (matmul_add_rms_norm), and the
  // LM head reads h: on CUDA 3 kernels from the down projection to the logits instead of 5
  // (projection, add, gather, norm, LM head; H200, llama-1b: 6-7 us less GPU time per decode
  // step). The same ops on the CPU (add_rms_norm is add then rms_norm there).
  // STRATA_FUSED_LOGITS=0 keeps the gather path (an A/B switch).
  const bool fused_logits = !fused && shard_ == nullptr && n_logits == T && fused_logits_enabled();
  if (!fused) be.rms_norm(x, weights_.layers[0].attn_norm, h, c.rms_eps);
  for (int32_t l = 0; l < (fused ? 0 : c.n_layer); ++l) {
    const LayerWeights& L = weights_.layers[l];
    const KvLayerView& kv = kv_layers[l];
    // Attention block (h holds the normed x).
    const MatmulOut qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
    be.matmul_multi_normed(qkv, h, norm);
    if (L.bq) {
      be.add_bias(q, L.bq);
      be.add_bias(k, L.bk);
      be.add_bias(v, L.bv);
    }
    if (want_query) {
      // The two halves of rope_kv_store_attention, with the rotated queries copied in between.
      be.rope_kv_store(q, k, v, pos_, c.n_head, c.n_head_kv, c.head_dim, rope_, kv, slots_);
      if (be.host_visible()) {
        for (size_t i = 0; i < batch.seqs.size(); ++i) {
          float* dst = batch.seqs[i].query;
          const AttentionSeq& a = attn_seqs_[i];
          if (dst == nullptr || a.n_q == 0) continue;
          const float* src = q.data + (int64_t{a.q_begin} + a.n_q - 1) * q.cols;
          std::copy(src, src + row_floats, dst + l * row_floats);
        }
      } else if (!query_rows_.empty()) {
        const auto nq = static_cast<int64_t>(query_rows_.size());
        be.gather_rows(q, query_rows_, ActView{reinterpret_cast<float*>(query_mem_->data()) + l * nq * row_floats, nq, row_floats});
      }
      be.paged_attention(q, kv, attn_seqs_, c.n_head, scale, attn);
    } else {
      be.rope_kv_store_attention(q, k, v, pos_, c.n_head, c.n_head_kv, c.head_dim, rope_, kv, slots_, attn_seqs_, scale,
                                 attn);
    }
    if (shard_ != nullptr) {
      be.matmul(L.wo, attn, out);
      comm_of_rank_->all_reduce_sum(shard_->rank, out);  // the heads of every rank
      be.add_rms_norm(x, out, L.ffn_norm, h, c.rms_eps);
    } else {
      norm = be.matmul_add_rms_norm(L.wo, attn, out, x, L.ffn_norm, h, c.rms_eps, lazy_norm);
    }
    // Feed-forward block (SiLU-gated).
    be.matmul_silu_mul_normed(L.w_gate, L.w_up, h, norm, gate, up);
    if (shard_ != nullptr) {
      be.matmul(L.w_down, gate, out);
      comm_of_rank_->all_reduce_sum(shard_->rank, out);  // the slices of every rank
      if (l + 1 < c.n_layer) {
        be.add_rms_norm(x, out, weights_.layers[l + 1].attn_norm, h, c.rms_eps);
      } else {
        be.add(x, out);
      }
    } else if (l + 1 < c.n_layer) {
      norm = be.matmul_add_rms_norm(L.w_down, gate, out, x, weights_.layers[l + 1].attn_norm, h, c.rms_eps, lazy_norm);
    } else if (fused_logits) {
      // Not lazily: the LM head's thousands of blocks would each re-add the norm's partial sums
      // (on the H200 that cost what the two kernels it saves do).
      norm = be.matmul_add_rms_norm(L.w_down, gate, out, x, weights_.output_norm, h, c.rms_eps, false);
    } else {
      be.matmul(L.w_down, gate, out);
      be.add(x, out);
    }
  }

  // Logits only for the rows that are sampled.
  // collect_importance enqueues the importance's copy to the host; finish_importance adds it into
  // the sequences' buffers after the last wait of the pass (the logits' copy), so the pass waits
  // for the device once.
  if (n_logits == 0) {
    if (replay) be.end_replay();
    be.collect_importance();
    copy_queries(batch);
    be.finish_importance();
    return {};
  }
  STRATA_CHECK(static_cast<int64_t>(logit_rows_.size()) == n_logits);
  const ActView logit_in = logit_in_.row_range(0, n_logits);
  ActView logits = logits_.row_range(0, n_logits);
  if (fused_logits) {  // logit_rows_ is 0, 1, ..., T - 1: h holds (or has pending) the normed rows
    const MatmulOut head[] = {{&weights_.output, logits}};
    be.matmul_multi_normed(head, h, norm);
  } else {
    be.gather_rows(x, logit_rows_, logit_in);
    be.rms_norm(logit_in, weights_.output_norm, logit_in, c.rms_eps);
    be.matmul(weights_.output, logit_in, logits);
  }
  if (shard_ != nullptr) {  // every rank's vocabulary slice, in rank order: the whole rows
    const ActView all = logits_all_.row_range(0, n_logits);
    comm_of_rank_->all_gather(shard_->rank, logits, all);
    logits = all;
  }
  if (pm.pick) {  // forward_pick: the tokens stay on the device; nothing is waited for
    be.greedy_pick(logits);
    if (replay) be.end_replay();
    return {};
  }
  if (replay) be.end_replay();
  be.collect_importance();
  copy_queries(batch);
  const auto n_floats = static_cast<size_t>(logits.size());
  if (be.host_visible()) {
    be.finish_importance();
    return {logits.data, n_floats};
  }
  float* dst = be.host_result_buffer(n_floats);  // pinned on a GPU: the copy runs at PCIe speed
  if (dst == nullptr) {
    logits_host_.resize(n_floats);
    dst = logits_host_.data();
  }
  be.copy_to_host(dst, logits.data, n_floats * sizeof(float));
  be.finish_importance();
  return {dst, n_floats};
}

}  // namespace strata
