// `strata eval ppl`: teacher-forced perplexity of a text under a KV configuration, next to the
// full-precision run's (the same KV dtype, every block hot), plus the share of positions where
// the top-1 token agrees, the mean KL divergence of the run's next-token distributions from the
// reference's (when the text times the vocabulary is at most 32M floats), and the KV bytes per
// token of both.
//
// KV bytes per token are those held at the end of the text: each window is one sequence in a
// pool of its own, and when it finishes its bytes (every RAM tier, scales and zero points
// included, whole blocks and slots as allocated) and the tokens it holds (all but its last
// token) are added up; the figure is bytes over tokens, as if every window's sequence were still
// held when the last one finishes. For a text within one window it is exactly the pool's bytes
// at the end over the tokens held. The mean over windows of each window's bytes per token is kept
// as `kv_bytes_per_token_window_mean`: it weighs a short last window like a full one, and a short
// window holds relatively many hot tokens, so it reads high.
//
// Eviction (--kv-evict, --kv-budget, ...): each window runs as one request would: its first
// --prompt tokens are the prompt (computed in chunks of --chunk; snapkv votes at its end), the
// rest are fed --chunk tokens per forward pass, and after every pass the policy evicts down to
// the budget (kv/kv_evictor.h), so later tokens attend only to what was kept (with --kv-recall,
// also to the demoted blocks recalled for each pass). With --prompt, only
// the positions after the prompt are scored (the prompt is context, as in a request). The
// reference run keeps every token, with the same chunks.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli.h"
#include "cli/common_flags.h"
#include "core/check.h"
#include "core/error.h"
#include "engine/step_runner.h"
#include "kv/kv_evictor.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct EvalOptions {
  ModelFlags model;
  KvFlags kv;
  std::string file;
  int32_t ctx = 0;
  int32_t chunk = 0;
  int32_t prompt = 0;
  bool json = false;
};

struct PplRun {
  double nll = 0;              // sum of -log p(next token)
  int64_t scored = 0;          // positions scored
  std::vector<TokenId> top1;   // argmax at each scored position
  uint64_t kv_bytes = 0;        // bytes held at the end of each window, summed over windows
  int64_t kv_tokens = 0;        // tokens held at the end of each window, summed
  double kv_bytes_per_token_window_mean = 0;
  int64_t windows = 0;
  double kv_bytes_per_token() const { return kv_tokens ? static_cast<double>(kv_bytes) / static_cast<double>(kv_tokens) : 0; }
  int64_t reencoded_blocks = 0;  // hot blocks re-encoded into the warm tier, all windows
  int64_t evicted_tokens = 0;    // dropped by the eviction policy, all windows
  int64_t max_held_tokens = 0;   // most tokens one window's sequence held after a step
  int64_t recalled_tokens = 0;   // --kv-recall: tokens loaded back into attention, all windows
  uint64_t recall_bytes = 0;     // --kv-recall: demoted bytes held at the end of each window, summed
  double kl = 0;                 // sum over scored positions of KL(reference || this run), nats
  bool has_kl = false;
};

// Up to this many floats (scored positions x vocabulary) the reference's log-probabilities are kept
// for the KL divergence.
constexpr int64_t kMaxKlFloats = int64_t{32} << 20;

// Feeds each window chunk by chunk, so that blocks leave the hot window (and are re-encoded)
// while later tokens still attend to them, as in a long generation.
// ref_out: where the log-probabilities of every scored position go (the reference run); ref_in:
// those of the reference, for the KL divergence of this run. Either may be null.
PplRun run_ppl(Model& model, const std::vector<TokenId>& tokens, int32_t ctx, int32_t chunk, int32_t prompt,
               const KvConfig& kvc, std::vector<float>* ref_out = nullptr, const std::vector<float>* ref_in = nullptr) {
  const ModelConfig& mc = model.config();
  const KvGeometry geo = model.kv_geometry(kvc.block_size, kvc.dtype);
  PplRun run;
  const int64_t V = mc.n_vocab;
  std::vector<double> scratch;
  double bytes_sum = 0;
  for (size_t w0 = 0; w0 + 1 < tokens.size(); w0 += static_cast<size_t>(ctx)) {
    const size_t w1 = std::min(tokens.size(), w0 + static_cast<size_t>(ctx));
    std::vector<TokenId> window(tokens.begin() + static_cast<long>(w0), tokens.begin() + static_cast<long>(w1));
    if (window.size() < 2) break;
    KvStorage storage(geo, kvc, model.backend().thread_pool(), model.rank_backends());
    KvManager kv(geo, kvc, storage.capacity(), model.fingerprint());
    std::unique_ptr<KvEvictor> evictor;
    if (kvc.evict.enabled()) {
      evictor = std::make_unique<KvEvictor>(kv, kvc.evict, mc.n_layer, mc.n_head, storage.views(),
                                            model.backend().host_visible() ? nullptr : &model.backend(),
                                            make_recall_spill(kvc, geo));
    }
    std::vector<BlockId> table;
    kv.add_sequence(1);
    const int32_t n = static_cast<int32_t>(window.size());
    const int32_t n_prompt = std::min(std::max(prompt, 1), n - 1);
    for (int32_t pos = 0; pos < n - 1;) {
      // With --prompt, prompt chunks end at the prompt's end, so that snapkv votes there.
      const int32_t len = std::min({chunk, n - 1 - pos, prompt > 0 && pos < n_prompt ? n_prompt - pos : chunk});
      if (!kv.allocate(1, window, pos + len)) fail("the KV pool is too small for --ctx {}; raise --kv-memory", ctx);
      if (!run_kv_ops(kv, storage, kv.take_ops()).empty()) fail("the KV cache could not be read back from the cold tier");
      ForwardBatch b;
      b.seqs.push_back({std::span<const TokenId>(window).subspan(static_cast<size_t>(pos), static_cast<size_t>(len)), pos,
                        kv.block_table(1), LogitsMode::kAll});
      if (evictor) {
        const KvEvictor::StepImportance imp = evictor->prepare(1, pos, len, n_prompt);
        evictor->attention_table(1, table);  // recalled blocks first (--kv-recall)
        b.seqs.back().blocks = table;
        b.seqs.back().kv_start = evictor->kv_slot(1, pos);
        b.seqs.back().importance = imp.buffer;
        b.seqs.back().importance_from = imp.from_row;
        b.seqs.back().query = imp.query;
      }
      const auto logits = model.forward(b, storage.views());
      kv.commit(1, window, pos + len);
      if (evictor) run.evicted_tokens += evictor->after_step(1, pos, len, n_prompt, kvc.evict.budget);
      run.max_held_tokens = std::max<int64_t>(run.max_held_tokens, kv.num_tokens(1));
      const int32_t step_pos = pos;
      pos += len;
      for (int32_t i = 0; i < len; ++i) {
        if (prompt > 0 && step_pos + i < n_prompt - 1) continue;  // the prompt is context, not scored
        const auto row = logits.subspan(static_cast<size_t>(i) * V, static_cast<size_t>(V));
        float mx = row[0];
        TokenId best = 0;
        for (int64_t v = 1; v < V; ++v) {
          if (row[static_cast<size_t>(v)] > mx) {
            mx = row[static_cast<size_t>(v)];
            best = static_cast<TokenId>(v);
          }
        }
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[static_cast<size_t>(v)]) - mx);
        const TokenId target = window[static_cast<size_t>(step_pos + i + 1)];
        const double log_z = std::log(sum);
        run.nll += -(static_cast<double>(row[static_cast<size_t>(target)]) - mx - log_z);
        if (ref_out != nullptr) {
          for (int64_t v = 0; v < V; ++v) ref_out->push_back(static_cast<float>(row[static_cast<size_t>(v)] - mx - log_z));
        }
        if (ref_in != nullptr) {
          const float* r = ref_in->data() + static_cast<size_t>(run.scored) * static_cast<size_t>(V);
          double kl = 0;
          for (int64_t v = 0; v < V; ++v) {
            const double lr = r[v], lp = static_cast<double>(row[static_cast<size_t>(v)]) - mx - log_z;
            kl += std::exp(lr) * (lr - lp);
          }
          run.kl += kl;
          run.has_kl = true;
        }
        run.top1.push_back(best);
        ++run.scored;
      }
    }
    const KvStats st = kv.stats();
    run.reencoded_blocks += st.reencoded_blocks;
    run.recalled_tokens += st.recalled_tokens;
    if (evictor && evictor->recall_store() != nullptr) run.recall_bytes += evictor->recall_store()->bytes();
    STRATA_CHECK(st.tokens_stored + kv.num_evicted(1) == n - 1, "the window holds {} tokens, not {}",
                 st.tokens_stored + kv.num_evicted(1), n - 1);
    const uint64_t bytes = st.hot.bytes_used + st.warm.bytes_used;
    run.kv_bytes += bytes;
    run.kv_tokens += n - 1;  // per token of the text: what eviction saves shows here
    bytes_sum += static_cast<double>(bytes) / static_cast<double>(n - 1);
    ++run.windows;
  }
  run.kv_bytes_per_token_window_mean = run.windows ? bytes_sum / static_cast<double>(run.windows) : 0;
  return run;
}

int run_eval_ppl(const EvalOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) fail("cannot read --file '{}'", o.file);
  std::stringstream ss;
  ss << in.rdbuf();
  const KvConfig kvc = o.kv.to_config();
  if (o.ctx < 0) fail("--ctx must be >= 0 (0: the model's context), got {}", o.ctx);
  if (o.chunk < 0) fail("--chunk must be >= 0 (0: the KV block size), got {}", o.chunk);
  if (o.prompt < 0) fail("--prompt must be >= 0, got {}", o.prompt);
  if (kvc.evict.enabled() && o.model.tensor_parallel > 1) {
    fail("--kv-evict {} is not supported with --tensor-parallel {} yet", evict_kind_name(kvc.evict.kind), o.model.tensor_parallel);
  }
  auto model = Model::load(o.model.model, o.model.backend_options());
  if (kvc.evict.enabled() && !model->backend().reports_attention_importance()) {
    fail("--kv-evict {} needs attention kernels that report token importance (--device cpu or cuda); the {} backend's do not",
         evict_kind_name(kvc.evict.kind), device_kind_name(model->backend().kind()));
  }
  auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<TokenId> tokens = tokenizer->encode(ss.str(), true, false);
  if (tokens.size() < 2) fail("--file '{}' has fewer than 2 tokens", o.file);
  const int32_t ctx = o.ctx > 0 ? std::min(o.ctx, model->config().n_ctx_train) : model->config().n_ctx_train;
  const int32_t chunk = o.chunk > 0 ? o.chunk : kvc.block_size;
  const int64_t windows = (static_cast<int64_t>(tokens.size()) - 2) / ctx + 1;
  if (o.ctx > ctx && windows > 1) {
    // Not silent: bytes per token (each window holds its own hot window) and perplexity depend on it.
    fmt::print(stderr, "note: --ctx {} is beyond the model's context of {} tokens; the {} tokens are evaluated in {} windows of up to {}\n",
               o.ctx, ctx, tokens.size(), windows, ctx);
  }

  KvConfig ref_cfg = kvc;  // full precision: every block stays hot, no sharing
  ref_cfg.warm_format = WarmFormat::kNone;
  ref_cfg.spill_dir.clear();
  ref_cfg.host_bytes = 0;
  ref_cfg.evict = EvictConfig{};  // and none evicted
  if (o.prompt >= ctx) fail("--prompt ({}) must be shorter than the window (--ctx {})", o.prompt, ctx);
  std::vector<float> ref_logp;
  const bool kl = static_cast<int64_t>(tokens.size()) * model->config().n_vocab <= kMaxKlFloats;
  const PplRun ref = run_ppl(*model, tokens, ctx, chunk, o.prompt, ref_cfg, kl ? &ref_logp : nullptr);
  const PplRun run = run_ppl(*model, tokens, ctx, chunk, o.prompt, kvc, nullptr, kl ? &ref_logp : nullptr);
  const double kl_mean = run.has_kl ? run.kl / static_cast<double>(run.scored) : 0.0;
  const double ppl = std::exp(run.nll / static_cast<double>(run.scored));
  const double ppl_ref = std::exp(ref.nll / static_cast<double>(ref.scored));
  int64_t agree = 0;
  for (size_t i = 0; i < run.top1.size(); ++i) agree += run.top1[i] == ref.top1[i];
  const double agreement = static_cast<double>(agree) / static_cast<double>(run.top1.size());
  const double delta = 100.0 * (ppl - ppl_ref) / ppl_ref;

  if (o.json) {
    nlohmann::ordered_json j;
    j["model"] = o.model.model;
    j["file"] = o.file;
    j["tokens"] = tokens.size();
    j["scored"] = run.scored;
    j["ctx"] = ctx;
    j["windows"] = run.windows;
    j["kv_dtype"] = kv_dtype_name(kvc.dtype);
    j["kv_warm_dtype"] = warm_format_name(kvc.warm_format);
    j["kv_hot_tokens"] = kvc.hot_tokens;
    j["ppl"] = ppl;
    j["ppl_ref"] = ppl_ref;
    j["delta_ppl_pct"] = delta;
    j["top1_agreement"] = agreement;
    // Mean KL(full cache || this run) per scored position, nats (null for a vocabulary too large to keep).
    j["kl_divergence_mean"] = run.has_kl ? nlohmann::ordered_json(kl_mean) : nlohmann::ordered_json(nullptr);
    j["kv_bytes_per_token"] = run.kv_bytes_per_token();
    j["kv_bytes_per_token_ref"] = ref.kv_bytes_per_token();
    j["kv_bytes_per_token_window_mean"] = run.kv_bytes_per_token_window_mean;
    j["kv_bytes_per_token_window_mean_ref"] = ref.kv_bytes_per_token_window_mean;
    j["reencoded_blocks"] = run.reencoded_blocks;
    j["chunk"] = chunk;
    j["prompt"] = o.prompt;
    j["kv_evict"] = evict_kind_name(kvc.evict.kind);
    j["kv_budget"] = kvc.evict.budget;
    j["kv_sinks"] = kvc.evict.sinks;
    j["kv_recent"] = kvc.evict.enabled() ? kvc.evict.recent_for(kvc.evict.budget) : 0;
    j["tokens_evicted"] = run.evicted_tokens;
    j["max_held_tokens"] = run.max_held_tokens;
    j["kv_recall"] = kvc.evict.recall;
    j["kv_recall_blocks"] = kvc.evict.recall ? kvc.evict.recall_blocks : 0;
    j["tokens_recalled"] = run.recalled_tokens;
    j["recall_bytes"] = run.recall_bytes;  // outside the KV pool, not in kv_bytes_per_token
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("{} tokens ({} scored), context {} ({} window{}), KV {} with warm {} after {} hot tokens\n", tokens.size(),
             run.scored, ctx, run.windows, run.windows == 1 ? "" : "s", kv_dtype_name(kvc.dtype),
             warm_format_name(kvc.warm_format), kvc.hot_tokens);
  fmt::print("perplexity {:.4f} vs {:.4f} at full precision ({:+.3f}%)\n", ppl, ppl_ref, delta);
  fmt::print("top-1 agreement {:.2f}%\n", 100 * agreement);
  if (run.has_kl) fmt::print("mean KL divergence from the full cache {:.6f} nats per position\n", kl_mean);
  fmt::print("KV bytes per token at the end of the text {:.1f} vs {:.1f} ({:.3f}x)\n", run.kv_bytes_per_token(),
             ref.kv_bytes_per_token(), run.kv_bytes_per_token() / ref.kv_bytes_per_token());
  if (run.windows > 1) {
    fmt::print("KV bytes per token, mean over windows {:.1f} vs {:.1f} ({:.3f}x)\n", run.kv_bytes_per_token_window_mean,
               ref.kv_bytes_per_token_window_mean, run.kv_bytes_per_token_window_mean / ref.kv_bytes_per_token_window_mean);
  }
  fmt::print("blocks re-encoded into the warm tier: {}\n", run.reencoded_blocks);
  if (kvc.evict.enabled()) {
    fmt::print("eviction {} with a budget of {} tokens: {} tokens evicted, at most {} held\n", evict_kind_name(kvc.evict.kind),
               kvc.evict.budget, run.evicted_tokens, run.max_held_tokens);
    if (kvc.evict.recall) {
      fmt::print("recall of {} demoted blocks per step: {} tokens loaded back\n", kvc.evict.recall_blocks, run.recalled_tokens);
    }
  }
  return kExitOk;
}

}  // namespace

void add_eval_commands(Cli& cli) {
  CLI::App* eval = cli.app.add_subcommand("eval", "Fidelity measurements");
  eval->require_subcommand(1);
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = eval->add_subcommand("ppl", "Perplexity of a text under a KV configuration vs full precision");
  add_model_flags(cmd, o->model);
  add_kv_flags(cmd, o->kv);
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("--ctx", o->ctx, "Window length in tokens (default: the model's context)");
  cmd->add_option("--chunk", o->chunk, "Tokens per forward pass (default: the KV block size)");
  cmd->add_option("--prompt", o->prompt,
                  "Tokens at the start of each window treated as the prompt: not scored; snapkv votes at its end "
                  "(default 0: every position scored)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([&cli, o] { cli.run = [o] { return run_eval_ppl(*o); }; });
}

}  // namespace strata::cli
