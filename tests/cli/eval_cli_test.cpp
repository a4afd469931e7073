// Black-box tests of `strata eval ppl` on stories260K and tests/data/stories260K-t1.txt: the JSON
// fields (token counts against `strata tokenize`, KV bytes per token against the model geometry
// read with `strata gguf info --json` and the slot sizes of kv/warm_format.h), the warm tier's
// fidelity acceptance (docs/PERFORMANCE.md), and exit codes on bad input.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "kv/warm_format.h"
#include "support/test_support.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using test::run_command;
using test::shared_path;
using test::strata_bin;

const std::string kModel = shared_path("models/stories260K.gguf");
const std::string kText = std::string(STRATA_SOURCE_DIR) + "/tests/data/stories260K-t1.txt";

Json eval(std::vector<std::string> extra) {
  std::vector<std::string> argv = {strata_bin(), "eval", "ppl", "--model", kModel, "--file", kText, "-t", "1", "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return Json();
  return Json::parse(r.out);
}

// The model's KV geometry, from the file's metadata (not from Strata's model code).
struct Geometry {
  int64_t n_layer = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
};
Geometry geometry() {
  auto r = run_command({strata_bin(), "gguf", "info", "--json", kModel});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const Json m = Json::parse(r.out)["metadata"];
  Geometry g;
  g.n_layer = m["llama.block_count"].get<int64_t>();
  const int64_t n_head = m["llama.attention.head_count"].get<int64_t>();
  g.n_head_kv = m.contains("llama.attention.head_count_kv") ? m["llama.attention.head_count_kv"].get<int64_t>() : n_head;
  g.head_dim = m["llama.embedding_length"].get<int64_t>() / n_head;
  g.n_ctx = m["llama.context_length"].get<int64_t>();
  return g;
}

// Token count of the file as eval reads it (with BOS), from `strata tokenize`.
int64_t token_count(const std::string& path) {
  auto r = run_command({strata_bin(), "tokenize", "--model", kModel, "--file", path, "--add-special", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["n_tokens"], j["tokens"].size());
  return j["n_tokens"].get<int64_t>();
}

// Windows of `ctx` tokens, each scoring all but its last token.
int64_t scored_positions(int64_t tokens, int64_t ctx) {
  int64_t scored = 0;
  for (int64_t w0 = 0; w0 + 1 < tokens; w0 += ctx) scored += std::min(tokens, w0 + ctx) - w0 - 1;
  return scored;
}

// The KV bytes a window of n tokens holds when it finishes (n-1 tokens stored): hot blocks of
// `block` tokens at `elt` bytes per element, and, with a warm format, one warm slot (K and V, every
// layer, warm_slot_bytes) per group of `span` full blocks entirely older than the last `hot` tokens.
// `end_of_text`: the bytes of all windows over the tokens they hold (what `kv_bytes_per_token`
// reports); `window_mean`: the mean over windows of each window's bytes per token.
struct KvBytes {
  double end_of_text = 0;
  double window_mean = 0;
  int64_t windows = 0;
};
KvBytes expected_kv_bytes(const Geometry& g, int64_t tokens, int64_t ctx, int32_t block, int64_t elt,
                          WarmFormat warm = WarmFormat::kNone, int64_t hot = 0) {
  const int64_t hot_block_bytes = block * 2 * g.n_layer * g.n_head_kv * g.head_dim * elt;
  const int64_t span = warm == WarmFormat::kNone ? 0 : warm_span(warm, block);
  const int64_t H = g.n_head_kv, D = g.head_dim;
  const int64_t warm_slot =
      warm == WarmFormat::kNone ? 0
                                : g.n_layer * (warm_slot_bytes(warm, false, block, static_cast<int32_t>(H), static_cast<int32_t>(D)) +
                                               warm_slot_bytes(warm, true, block, static_cast<int32_t>(H), static_cast<int32_t>(D)));
  uint64_t bytes_sum = 0;
  int64_t tokens_sum = 0;
  double mean_sum = 0;
  KvBytes out;
  for (int64_t w0 = 0; w0 + 1 < tokens; w0 += ctx) {
    const int64_t stored = std::min(tokens, w0 + ctx) - w0 - 1;
    const int64_t groups = span == 0 || stored <= hot ? 0 : (stored - hot) / block / span;
    const int64_t hot_blocks = (stored - groups * span * block + block - 1) / block;
    const uint64_t bytes = static_cast<uint64_t>(groups * warm_slot + hot_blocks * hot_block_bytes);
    bytes_sum += bytes;
    tokens_sum += stored;
    mean_sum += static_cast<double>(bytes) / static_cast<double>(stored);
    ++out.windows;
  }
  out.end_of_text = static_cast<double>(bytes_sum) / static_cast<double>(tokens_sum);
  out.window_mean = mean_sum / static_cast<double>(out.windows);
  return out;
}

void expect_kv_bytes(const Json& j, const KvBytes& run, const KvBytes& ref) {
  EXPECT_EQ(j["windows"], run.windows);
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token"].get<double>(), run.end_of_text) << j.dump();
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token_window_mean"].get<double>(), run.window_mean) << j.dump();
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token_ref"].get<double>(), ref.end_of_text) << j.dump();
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token_window_mean_ref"].get<double>(), ref.window_mean) << j.dump();
}

TEST(EvalCli, FullPrecisionReportsTheFieldsScriptsRead) {
  const Geometry g = geometry();
  const int64_t tokens = token_count(kText);
  ASSERT_GT(tokens, 3000);
  const Json j = eval({"--ctx", "256"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["model"], kModel);
  EXPECT_EQ(j["file"], kText);
  EXPECT_EQ(j["tokens"], tokens);
  EXPECT_EQ(j["ctx"], 256);
  EXPECT_EQ(j["scored"], scored_positions(tokens, 256));
  EXPECT_EQ(j["kv_dtype"], "f16");
  EXPECT_EQ(j["kv_warm_dtype"], "none");
  EXPECT_EQ(j["kv_hot_tokens"], 256);
  const double ppl = j["ppl"].get<double>();
  EXPECT_TRUE(std::isfinite(ppl));
  EXPECT_GT(ppl, 1.0);
  // An in-distribution text of the model itself: far below the vocabulary's 512.
  EXPECT_LT(ppl, 20.0);
  // Nothing is re-encoded: the run is the reference.
  EXPECT_EQ(j["ppl"], j["ppl_ref"]);
  EXPECT_EQ(j["delta_ppl_pct"], 0.0);
  EXPECT_EQ(j["top1_agreement"], 1.0);
  EXPECT_EQ(j["reencoded_blocks"], 0);
  const KvBytes all_hot = expected_kv_bytes(g, tokens, 256, 16, 2);
  expect_kv_bytes(j, all_hot, all_hot);
}

TEST(EvalCli, KvBytesPerTokenFollowTheDtypeAndBlockSize) {
  const Geometry g = geometry();
  const int64_t tokens = token_count(kText);
  const Json f32 = eval({"--ctx", "512", "--kv-dtype", "f32", "--kv-block-size", "32"});
  const Json bf16 = eval({"--ctx", "512", "--kv-dtype", "bf16", "--kv-block-size", "32"});
  ASSERT_TRUE(f32.is_object() && bf16.is_object());
  EXPECT_EQ(f32["kv_dtype"], "f32");
  EXPECT_EQ(bf16["kv_dtype"], "bf16");
  expect_kv_bytes(f32, expected_kv_bytes(g, tokens, 512, 32, 4), expected_kv_bytes(g, tokens, 512, 32, 4));
  expect_kv_bytes(bf16, expected_kv_bytes(g, tokens, 512, 32, 2), expected_kv_bytes(g, tokens, 512, 32, 2));
  EXPECT_EQ(f32["scored"], scored_positions(tokens, 512));
  // bf16 keys and values round differently from f32 ones, but barely move perplexity.
  EXPECT_NEAR(bf16["ppl"].get<double>(), f32["ppl"].get<double>(), 0.01 * f32["ppl"].get<double>());
}

// The warm tier's acceptance (docs/PERFORMANCE.md, "Fidelity and bytes per token"): int8 with a
// 64-token hot window keeps perplexity within 0.5% and greedy top-1 agreement at 99% or more of
// the all-hot f16 run over the whole text at the model's context. Measured there: int8 -0.02% /
// 99.69%, fp8 -0.26% / 98.0%, int4 +0.59% / 95.5%; fp8 and int4 are held to the bounds below
// (a little slack around the measured numbers, which are deterministic for one thread count).
// The acceptance alone would miss a codec that rounds toward zero (int8 then gives -0.25% and
// 99.49%), so int8 is also held to 0.1%, five times its measured -0.02%.
struct WarmBound {
  std::string dtype;
  std::string hot_tokens;
  double max_abs_delta_pct;
  double min_agreement;
};

TEST(EvalCli, WarmTierMeetsItsFidelityBoundsAndReallyReencodes) {
  const Geometry g = geometry();
  const int64_t tokens = token_count(kText);
  const std::vector<WarmBound> bounds = {
      {"int8", "64", 0.1, 0.99},
      {"int8", "16", 0.1, 0.99},
      {"fp8", "64", 0.5, 0.97},
      {"int4", "64", 1.0, 0.94},
  };
  double prev_bytes = 1e300;
  for (const auto& b : bounds) {
    SCOPED_TRACE(b.dtype + " hot " + b.hot_tokens);
    const Json j = eval({"--kv-warm-dtype", b.dtype, "--kv-hot-tokens", b.hot_tokens});
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["kv_warm_dtype"], b.dtype);
    EXPECT_EQ(j["kv_hot_tokens"], std::stoi(b.hot_tokens));
    EXPECT_EQ(j["ctx"], g.n_ctx);
    EXPECT_EQ(j["scored"], scored_positions(tokens, g.n_ctx));
    const double ppl = j["ppl"].get<double>(), ref = j["ppl_ref"].get<double>();
    EXPECT_TRUE(std::isfinite(ppl) && ppl > 1.0) << ppl;
    EXPECT_NEAR(j["delta_ppl_pct"].get<double>(), 100.0 * (ppl - ref) / ref, 1e-9);
    EXPECT_LE(std::abs(j["delta_ppl_pct"].get<double>()), b.max_abs_delta_pct) << j.dump();
    EXPECT_GE(j["top1_agreement"].get<double>(), b.min_agreement) << j.dump();
    // Re-encoded for real: every full block older than the hot window of each window, and the
    // quality is not that of the reference (a run that skipped re-encoding would be identical).
    const int64_t hot = std::stoi(b.hot_tokens);
    const int64_t span = b.dtype == "int4" ? 2 : 1;  // int4 groups 32 tokens: two blocks of 16
    int64_t expected = 0;
    for (int64_t w0 = 0; w0 + 1 < tokens; w0 += g.n_ctx) {
      const int64_t stored = std::min(tokens, w0 + g.n_ctx) - w0 - 1;
      expected += (stored - hot) / 16 / span * span;
    }
    EXPECT_EQ(j["reencoded_blocks"], expected) << j.dump();
    EXPECT_NE(j["ppl"], j["ppl_ref"]);
    EXPECT_LT(j["top1_agreement"].get<double>(), 1.0);
    // Fewer KV bytes than all hot; int8 > fp8 > int4 (fp8 keeps fewer scales than int8 here).
    EXPECT_LT(j["kv_bytes_per_token"].get<double>(), j["kv_bytes_per_token_ref"].get<double>());
    expect_kv_bytes(j, expected_kv_bytes(g, tokens, g.n_ctx, 16, 2, *warm_format_from_name(b.dtype), hot),
                    expected_kv_bytes(g, tokens, g.n_ctx, 16, 2));
    if (b.hot_tokens == "64") {
      EXPECT_LT(j["kv_bytes_per_token"].get<double>(), prev_bytes);
      prev_bytes = j["kv_bytes_per_token"].get<double>();
    }
  }
}

// `kv_bytes_per_token` is what the windows hold at the end of the text over the tokens they hold:
// a short last window (a few tokens in whole hot blocks) weighs by its tokens, not as a window. The
// per-window mean, which it used to report, stays as `kv_bytes_per_token_window_mean` and reads
// higher. Also a text within one window: the bytes of that one sequence at the end.
TEST(EvalCli, KvBytesPerTokenAreThoseHeldAtTheEndOfTheText) {
  const Geometry g = geometry();
  const int64_t tokens = token_count(kText);
  // A window length whose last window holds only a few tokens.
  int64_t ctx = 0;
  for (int64_t c = 1000; c <= 2000 && ctx == 0; ++c) {
    const int64_t last = tokens - (tokens - 2) / c * c;
    if (last >= 3 && last <= 12) ctx = c;
  }
  ASSERT_GT(ctx, 0);
  for (const std::string dtype : {"int4", "int8"}) {
    SCOPED_TRACE(dtype + " ctx " + std::to_string(ctx));
    const Json j = eval({"--ctx", std::to_string(ctx), "--kv-warm-dtype", dtype, "--kv-hot-tokens", "64"});
    ASSERT_TRUE(j.is_object());
    const KvBytes run = expected_kv_bytes(g, tokens, ctx, 16, 2, *warm_format_from_name(dtype), 64);
    const KvBytes ref = expected_kv_bytes(g, tokens, ctx, 16, 2);
    ASSERT_GE(run.windows, 2);
    expect_kv_bytes(j, run, ref);
    // The short last window inflates the mean, not the end-of-text figure.
    EXPECT_GT(j["kv_bytes_per_token_window_mean"].get<double>(), 1.2 * j["kv_bytes_per_token"].get<double>()) << j.dump();
  }
  // One window: the bytes the pool holds at the end, from the slot sizes.
  const std::string dir = test::make_temp_dir("strata-eval-bytes");
  const std::string part = dir + "/part.txt";
  {
    std::ifstream in(kText, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    test::write_file(part, text.substr(0, 4000));
  }
  const int64_t part_tokens = token_count(part);
  ASSERT_LT(part_tokens, g.n_ctx);
  std::vector<std::string> argv = {strata_bin(), "eval", "ppl", "--model", kModel, "--file", part, "-t", "1", "--json",
                                   "--kv-warm-dtype", "int4", "--kv-hot-tokens", "64"};
  auto r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  const int64_t stored = part_tokens - 1;
  const int64_t H = g.n_head_kv, D = g.head_dim;
  const int64_t slots = (stored - 64) / 32;  // int4 over blocks of 16: a slot holds 2 blocks
  const int64_t hot_blocks = (stored - slots * 32 + 15) / 16;
  const int64_t slot_bytes = warm_slot_bytes(WarmFormat::kInt4, false, 16, static_cast<int32_t>(H), static_cast<int32_t>(D)) +
                             warm_slot_bytes(WarmFormat::kInt4, true, 16, static_cast<int32_t>(H), static_cast<int32_t>(D));
  const double bytes = static_cast<double>(g.n_layer * (slots * slot_bytes + hot_blocks * 16 * 2 * H * D * 2));
  EXPECT_EQ(j["windows"], 1);
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token"].get<double>(), bytes / static_cast<double>(stored)) << j.dump();
  EXPECT_EQ(j["kv_bytes_per_token"], j["kv_bytes_per_token_window_mean"]);
  std::filesystem::remove_all(dir);
}

// A --ctx beyond the model's context is clamped to it (as the engine does), and said so: the text
// then runs in several windows, each with a hot window of its own.
TEST(EvalCli, ClampedContextIsReported) {
  const Geometry g = geometry();
  const int64_t tokens = token_count(kText);
  ASSERT_LT(g.n_ctx, 16384);
  auto r = run_command({strata_bin(), "eval", "ppl", "--model", kModel, "--file", kText, "-t", "1", "--json", "--ctx", "16384"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["ctx"], g.n_ctx);
  EXPECT_EQ(j["windows"], (tokens - 2) / g.n_ctx + 1);
  EXPECT_GE(j["windows"].get<int64_t>(), 2);
  EXPECT_NE(r.err.find(fmt::format("--ctx 16384 is beyond the model's context of {} tokens", g.n_ctx)), std::string::npos)
      << r.err;
}

TEST(EvalCli, BadInputExitsTwoWithAMessage) {
  const std::string dir = test::make_temp_dir("strata-eval");
  test::write_file(dir + "/empty.txt", "");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--file", "/nonexistent.txt"}, "cannot read --file '/nonexistent.txt'"},
      {{"--file", dir + "/empty.txt"}, "has fewer than 2 tokens"},
      {{"--file", kText, "--kv-warm-dtype", "int3"}, "--kv-warm-dtype 'int3' is not one of none, int8, fp8, int4"},
      {{"--file", kText, "--kv-hot-tokens", "-1"}, "--kv-hot-tokens must be >= 0"},
      {{"--file", kText, "--ctx", "-5"}, "--ctx"},
      {{"--file", kText, "--chunk", "-1"}, "--chunk"},
      {{"--file", kText, "--kv-blocks", "2", "--ctx", "256"}, "the KV pool is too small for --ctx 256"},
      {{"--file", kText, "--model", "/nonexistent.gguf"}, "cannot open '/nonexistent.gguf'"},
      {{}, "--file is required"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {strata_bin(), "eval", "ppl", "-t", "1"};
    if (std::find(c.args.begin(), c.args.end(), "--model") == c.args.end()) argv.insert(argv.end(), {"--model", kModel});
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(c.message);
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
