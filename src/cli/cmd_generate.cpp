// `strata generate`: one prompt streamed to stdout, or a JSONL file of prompts run through the
// engine concurrently with one JSON object printed per prompt, in input order.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/common_flags.h"
#include "core/error.h"
#include "core/jsonl.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct GenerateOptions {
  ModelFlags model;
  KvFlags kv;
  EngineFlags engine;
  SamplingFlags sampling;
  std::string prompt;
  std::string prompts_file;
  bool json = false;
  bool no_special = false;
  int32_t progress = 0;  // --progress N: a line on stderr every N generated tokens (0: none)
};

// The result of one prompt, as `--json` prints it.
struct Outcome {
  std::vector<TokenId> prompt_tokens;
  std::vector<TokenId> tokens;
  std::string text;
  std::string finish = "length";
  Clock::time_point submitted, first_token, finished;
  Usage usage;

  nlohmann::ordered_json to_json() const {
    const double prompt_ms = std::chrono::duration<double, std::milli>(first_token - submitted).count();
    const double gen_ms = std::chrono::duration<double, std::milli>(finished - first_token).count();
    const double prompt_tps = prompt_ms > 0 ? static_cast<double>(prompt_tokens.size()) * 1000.0 / prompt_ms : 0;
    const double gen_tps = gen_ms > 0 && tokens.size() > 1 ? static_cast<double>(tokens.size() - 1) * 1000.0 / gen_ms : 0;
    nlohmann::ordered_json j;
    j["prompt_tokens"] = prompt_tokens;
    j["tokens"] = tokens;
    j["text"] = text;
    j["finish_reason"] = finish;
    j["cached_tokens"] = usage.cached_tokens;
    j["preemptions"] = usage.preemptions;
    j["timings"] = {{"prompt_ms", prompt_ms}, {"gen_ms", gen_ms}, {"prompt_tok_s", prompt_tps}, {"gen_tok_s", gen_tps}};
    return j;
  }
};

// The KV memory the engine's sequences hold now (bytes of the RAM tiers).
double kv_held_bytes(const EngineStats& st) {
  return st.kv.usage_ratio() * static_cast<double>(st.kv.hot.bytes_total + st.kv.warm.bytes_total);
}

// Reads events until kDone; `stream` prints text as it comes. With progress > 0, every `progress`
// tokens a line on stderr: tokens so far, tokens/s over the last `progress` (time between their
// events), KV bytes held now (what a long run under --kv-budget shows to be flat).
Outcome drain(RequestHandle& h, Outcome o, bool stream, int32_t progress, const Engine& engine) {
  o.first_token = o.submitted;
  EngineEvent e;
  bool first = true;
  Clock::time_point mark;
  while (h.next(e)) {
    if (e.kind == EngineEvent::Kind::kToken || e.kind == EngineEvent::Kind::kFinish) {
      if (first) {
        o.first_token = e.time;
        mark = e.time;
        first = false;
      }
      if (e.kind == EngineEvent::Kind::kToken) {
        o.tokens.push_back(e.token);
        if (progress > 0 && o.tokens.size() % static_cast<size_t>(progress) == 0) {
          const double s = std::chrono::duration<double>(e.time - mark).count();
          mark = e.time;
          // The first window starts at the first token: it spans progress - 1 intervals.
          const auto every = static_cast<size_t>(progress);
          const size_t intervals = o.tokens.size() == every ? every - 1 : every;
          fmt::print(stderr, "progress: {} tokens, {:.1f} tok/s over the last {}, KV held {:.0f} bytes\n", o.tokens.size(),
                     s > 0 ? static_cast<double>(intervals) / s : 0.0, progress, kv_held_bytes(engine.stats()));
        }
      }
      else o.finish = std::string(finish_reason_name(e.finish_reason));
      o.text += e.text;
      if (stream && !e.text.empty()) {
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        std::fflush(stdout);
      }
    } else if (e.kind == EngineEvent::Kind::kError) {
      fail("generation failed: {}", e.error);
    } else if (e.kind == EngineEvent::Kind::kDone) {
      o.usage = e.usage;
      o.finished = e.time;
    }
  }
  return o;
}

template <typename T>
T field(const nlohmann::json& j, const char* key, T fallback, const std::string& path, size_t line) {
  if (!j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const std::exception&) {
    fail("{}:{}: field '{}' has the wrong type", path, line, key);
  }
}

// Errors name the line as PATH:LINE, as read_jsonl does.
Request request_from_line(const nlohmann::json& j, const std::string& path, size_t line, const SamplingParams& defaults, const Tokenizer& tok,
                          bool parse_special) {
  static const std::set<std::string> kKnown = {"prompt", "max_tokens", "temperature", "top_k", "top_p", "min_p", "seed",
                                               "stop", "ignore_eos", "presence_penalty", "frequency_penalty",
                                               "repetition_penalty", "priority", "tenant"};
  if (!j.is_object()) fail("{}:{}: not a JSON object", path, line);
  for (const auto& [k, v] : j.items()) {
    if (!kKnown.count(k)) fail("{}:{}: unknown field '{}'", path, line, k);
  }
  if (!j.contains("prompt") || !j["prompt"].is_string()) fail("{}:{}: needs a string field 'prompt'", path, line);
  Request r;
  r.prompt = tok.encode(j["prompt"].get<std::string>(), true, parse_special);
  SamplingParams p = defaults;
  if (j.contains("max_tokens")) p.max_tokens = field<int32_t>(j, "max_tokens", 0, path, line);
  p.temperature = field<float>(j, "temperature", p.temperature, path, line);
  p.top_k = field<int32_t>(j, "top_k", p.top_k, path, line);
  p.top_p = field<float>(j, "top_p", p.top_p, path, line);
  p.min_p = field<float>(j, "min_p", p.min_p, path, line);
  if (j.contains("seed")) p.seed = field<uint64_t>(j, "seed", 0, path, line);
  if (j.contains("stop")) {
    p.stop = j["stop"].is_string() ? std::vector<std::string>{j["stop"].get<std::string>()}
                                   : field<std::vector<std::string>>(j, "stop", {}, path, line);
  }
  p.ignore_eos = field<bool>(j, "ignore_eos", p.ignore_eos, path, line);
  p.presence_penalty = field<float>(j, "presence_penalty", p.presence_penalty, path, line);
  p.frequency_penalty = field<float>(j, "frequency_penalty", p.frequency_penalty, path, line);
  p.repetition_penalty = field<float>(j, "repetition_penalty", p.repetition_penalty, path, line);
  if (auto err = p.validate(tok.n_vocab())) fail("{}:{}: {}", path, line, *err);
  r.params = p;
  r.priority = field<int32_t>(j, "priority", 0, path, line);
  r.tenant = field<std::string>(j, "tenant", "", path, line);
  return r;
}

int run_generate(const GenerateOptions& o) {
  if (o.prompt.empty() == o.prompts_file.empty()) fail("give exactly one of --prompt and --prompts-file");
  if (o.progress < 0) fail("--progress must be >= 0 (tokens between progress lines; 0: off), got {}", o.progress);
  const BackendOptions backend = o.model.backend_options();
  const EngineConfig cfg = o.engine.to_config(o.kv, backend.device);
  auto model = Model::load(o.model.model, backend);
  auto tokenizer = Tokenizer::from_gguf(model->file());
  if (tokenizer->n_vocab() != model->config().n_vocab) {
    fail("the tokenizer has {} tokens but the model {}", tokenizer->n_vocab(), model->config().n_vocab);
  }
  const SamplingParams defaults = o.sampling.to_params(model->config().n_vocab);

  std::vector<Request> requests;
  if (!o.prompt.empty()) {
    Request r;
    r.prompt = tokenizer->encode(o.prompt, true, !o.no_special);
    r.params = defaults;
    requests.push_back(std::move(r));
  } else {
    read_jsonl(o.prompts_file, [&](const nlohmann::json& j, size_t n) {
      requests.push_back(request_from_line(j, o.prompts_file, n, defaults, *tokenizer, !o.no_special));
      return true;
    });
    if (requests.empty()) fail("--prompts-file '{}' holds no prompts", o.prompts_file);
  }

  Engine engine(*model, *tokenizer, cfg);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<Outcome> outcomes(requests.size());
  const auto t0 = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    outcomes[i].prompt_tokens = requests[i].prompt;
    outcomes[i].submitted = Clock::now();
    handles.push_back(engine.submit(std::move(requests[i])));
  }
  const bool stream = !o.json && handles.size() == 1;
  for (size_t i = 0; i < handles.size(); ++i) {
    outcomes[i] = drain(*handles[i], std::move(outcomes[i]), stream, o.progress, engine);
    if (o.json) {
      auto j = outcomes[i].to_json();
      if (cfg.kv.evict.enabled()) {
        // Engine-wide so far (all prompts of the run): the policy, the budget, tokens evicted, and
        // the highest KV memory the sequences held after any step.
        const EngineStats st = engine.stats();
        j["kv"] = {{"evict", evict_kind_name(cfg.kv.evict.kind)},
                   {"budget", st.kv_budget},
                   {"budget_auto", st.kv_budget_auto},
                   {"budget_min", st.kv_budget_min},
                   {"evicted_tokens", st.kv.evicted_tokens},
                   {"compacted_tokens", st.kv.compacted_tokens},
                   {"recall", cfg.kv.evict.recall},
                   {"recalled_tokens", st.kv.recalled_tokens},
                   {"recall_bytes", st.kv.recall_bytes},
                   {"recall_spilled_blocks", st.kv.recall_spilled_blocks},
                   {"recall_dropped_blocks", st.kv.recall_dropped_blocks},
                   {"held_bytes_peak", st.kv_usage_peak * static_cast<double>(st.kv.hot.bytes_total + st.kv.warm.bytes_total)}};
      }
      fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else if (!stream) {
      fmt::print("--- prompt {} ---\n{}\n", i + 1, outcomes[i].text);
    }
  }
  if (stream) fmt::print("\n");
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  int64_t prompt_tokens = 0, gen_tokens = 0;
  for (const auto& oc : outcomes) {
    prompt_tokens += static_cast<int64_t>(oc.prompt_tokens.size());
    gen_tokens += static_cast<int64_t>(oc.tokens.size());
  }
  if (outcomes.size() == 1) {
    const auto j = outcomes[0].to_json();
    fmt::print(stderr, "prompt: {} tokens in {:.1f} ms ({:.1f} tok/s); generated: {} tokens in {:.1f} ms ({:.1f} tok/s); finish: {}\n",
               prompt_tokens, j["timings"]["prompt_ms"].get<double>(), j["timings"]["prompt_tok_s"].get<double>(), gen_tokens,
               j["timings"]["gen_ms"].get<double>(), j["timings"]["gen_tok_s"].get<double>(), outcomes[0].finish);
  } else {
    fmt::print(stderr, "{} prompts: {} prompt + {} generated tokens in {:.2f} s ({:.1f} tok/s total), {} preemptions\n",
               outcomes.size(), prompt_tokens, gen_tokens, wall, static_cast<double>(prompt_tokens + gen_tokens) / wall,
               engine.stats().preemptions);
  }
  engine.shutdown(true, std::chrono::seconds(10));
  return kExitOk;
}

}  // namespace

void add_generate_commands(Cli& cli) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = cli.app.add_subcommand("generate", "Generate text from a prompt (streamed) or a file of prompts (batched)");
  add_model_flags(cmd, o->model);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("--prompts-file", o->prompts_file,
                  "JSONL file: one {\"prompt\": ..., optional sampling fields} per line, all run concurrently");
  add_sampling_flags(cmd, o->sampling);
  add_engine_flags(cmd, o->engine);
  add_kv_flags(cmd, o->kv);
  cmd->add_flag("--no-parse-special", o->no_special, "Treat special-token text in prompts as plain text");
  cmd->add_flag("--json", o->json, "Print one JSON object per prompt (prompt_tokens, tokens, text, timings)");
  cmd->add_option("--progress", o->progress,
                  "Every N generated tokens of a prompt, print to stderr the tokens so far, tokens/s over the last N "
                  "and the KV bytes held now (0: off)");
  cmd->callback([&cli, o] { cli.run = [o] { return run_generate(*o); }; });
}

}  // namespace strata::cli
