// Black-box tests of `strata eval ppl` on stories260K and tests/data/stories260K-t1.txt: the JSON
// fields (token counts against `strata tokenize`, KV bytes per token against the model geometry
// read with `strata gguf info --json`), the warm tier's fidelity acceptance (docs/PERFORMANCE.md),
// and exit codes on bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

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

// Mean over windows of the hot bytes a window of n tokens holds at the end (n-1 tokens stored),
// per stored token, every block hot at `elt` bytes per element.
double all_hot_bytes_per_token(const Geometry& g, int64_t tokens, int64_t ctx, int64_t block, int64_t elt) {
  double sum = 0;
  int64_t windows = 0;
  for (int64_t w0 = 0; w0 + 1 < tokens; w0 += ctx) {
    const int64_t stored = std::min(tokens, w0 + ctx) - w0 - 1;
    const int64_t blocks = (stored + block - 1) / block;
    sum += static_cast<double>(blocks * block * 2 * g.n_layer * g.n_head_kv * g.head_dim * elt) / static_cast<double>(stored);
    ++windows;
  }
  return sum / static_cast<double>(windows);
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
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token"].get<double>(), all_hot_bytes_per_token(g, tokens, 256, 16, 2));
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_token_ref"].get<double>(), all_hot_bytes_per_token(g, tokens, 256, 16, 2));
}

TEST(EvalCli, KvBytesPerTokenFollowTheDtypeAndBlockSize) {
  const Geometry g = geometry();
  const int64_t tokens = token_count(kText);
  const Json f32 = eval({"--ctx", "512", "--kv-dtype", "f32", "--kv-block-size", "32"});
  const Json bf16 = eval({"--ctx", "512", "--kv-dtype", "bf16", "--kv-block-size", "32"});
  ASSERT_TRUE(f32.is_object() && bf16.is_object());
  EXPECT_EQ(f32["kv_dtype"], "f32");
  EXPECT_EQ(bf16["kv_dtype"], "bf16");
  EXPECT_DOUBLE_EQ(f32["kv_bytes_per_token"].get<double>(), all_hot_bytes_per_token(g, tokens, 512, 32, 4));
  EXPECT_DOUBLE_EQ(bf16["kv_bytes_per_token"].get<double>(), all_hot_bytes_per_token(g, tokens, 512, 32, 2));
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
    EXPECT_DOUBLE_EQ(j["kv_bytes_per_token_ref"].get<double>(), all_hot_bytes_per_token(g, tokens, g.n_ctx, 16, 2));
    if (b.hot_tokens == "64") {
      EXPECT_LT(j["kv_bytes_per_token"].get<double>(), prev_bytes);
      prev_bytes = j["kv_bytes_per_token"].get<double>();
    }
  }
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
