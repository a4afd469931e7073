// Black-box tests of `strata gguf quantize` and `strata gguf digest` (their output is checked
// against llama-quantize's in tests/model/llama_reference_test.cpp), and of make-random's rope and
// norm flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "support/test_support.h"

namespace strata {
namespace {

using test::run_command;
using test::shared_path;
using test::strata_bin;

TEST(GgufQuantizeCli, QuantizesMatricesAndKeepsVectors) {
  const std::string dir = test::make_temp_dir("strata-quantize");
  const std::string src = dir + "/f32.gguf", out = dir + "/q8.gguf";
  auto r = run_command({strata_bin(), "gguf", "make-random", "--preset", "tiny", "--dtype", "f32", "--vocab-from",
                        shared_path("tokenizer/ggml-vocab-llama-spm.gguf"), "-o", src});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_command({strata_bin(), "gguf", "quantize", src, "--type", "q8_0", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("16 matrices converted to q8_0"), std::string::npos) << r.err;
  auto in = GgufFile::open(src);
  auto q = GgufFile::open(out);
  ASSERT_EQ(q->tensors().size(), in->tensors().size());
  int matrices = 0;
  for (const auto& t : q->tensors()) {
    if (t.n_dims >= 2) {
      EXPECT_EQ(t.type, GgmlType::kQ8_0) << t.name;
      ++matrices;
    } else {
      EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
    }
  }
  EXPECT_EQ(matrices, 2 * 7 + 2);  // 7 per layer, token_embd and output
  EXPECT_EQ(q->find_uint("general.file_type").value_or(0), 7u);  // llama.cpp's MOSTLY_Q8_0

  // The digest lists every tensor; identical tensors have identical digests, and changed ones not.
  auto d_in = run_command({strata_bin(), "gguf", "digest", src});
  auto d_q = run_command({strata_bin(), "gguf", "digest", out});
  ASSERT_EQ(d_in.exit_code, 0) << d_in.err;
  ASSERT_EQ(d_q.exit_code, 0) << d_q.err;
  auto a = nlohmann::json::parse(d_in.out), b = nlohmann::json::parse(d_q.out);
  ASSERT_EQ(a.size(), in->tensors().size());
  ASSERT_EQ(b.size(), in->tensors().size());
  EXPECT_EQ(a["blk.0.attn_norm.weight"], b["blk.0.attn_norm.weight"]);
  EXPECT_NE(a["blk.0.attn_q.weight"], b["blk.0.attn_q.weight"]);
  EXPECT_EQ(a["blk.0.attn_q.weight"].get<std::string>().size(), 32u);
  std::filesystem::remove_all(dir);
}

TEST(GgufQuantizeCli, BadTypesAndShapesExitTwo) {
  const std::string dir = test::make_temp_dir("strata-quantize");
  auto r = run_command({strata_bin(), "gguf", "quantize", shared_path("models/stories260K.gguf"), "--type", "q9_9", "-o",
                        dir + "/x.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unsupported --type 'q9_9'"), std::string::npos) << r.err;
  // stories260K's rows have 64 elements: too short for the 256-element K-quant blocks.
  r = run_command({strata_bin(), "gguf", "quantize", shared_path("models/stories260K.gguf"), "--type", "q4_k", "-o",
                   dir + "/x.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rows of 64 elements, not a multiple of q4_k's block of 256"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "gguf", "digest", dir + "/missing.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  std::filesystem::remove_all(dir);
}

TEST(GgufQuantizeCli, MakeRandomWritesRopeAndNormSettings) {
  const std::string dir = test::make_temp_dir("strata-quantize");
  const std::string out = dir + "/m.gguf";
  auto r = run_command({strata_bin(), "gguf", "make-random", "--n-layer", "1", "--n-embd", "256", "--n-head", "4",
                        "--n-ff", "256", "--rope-freq-base", "500000", "--rms-eps", "1e-6", "--llama3-rope-factor",
                        "32", "--vocab-from", shared_path("tokenizer/ggml-vocab-llama-spm.gguf"), "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = GgufFile::open(out);
  EXPECT_FLOAT_EQ(static_cast<float>(m->find_float("llama.rope.freq_base").value_or(0)), 500000.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(m->find_float("llama.attention.layer_norm_rms_epsilon").value_or(0)), 1e-6f);
  ASSERT_NE(m->find_tensor("rope_freqs.weight"), nullptr);
  // As llama.cpp's converter writes Llama 3: the scaling is in rope_freqs alone, no scaling type.
  EXPECT_FALSE(m->has("llama.rope.scaling.type"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
