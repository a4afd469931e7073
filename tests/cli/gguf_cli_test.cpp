// Black-box tests of `strata gguf info` and `strata gguf make-random`.
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

TEST(GgufCli, InfoShowsTheSharedModel) {
  auto r = run_command({strata_bin(), "gguf", "info", shared_path("models/stories260K.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture: llama, 5 layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("48 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor types: f32 (48)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokenizer.ggml.tokens"), std::string::npos);
  EXPECT_NE(r.out.find("(512 items)"), std::string::npos) << "long arrays are abbreviated";
  EXPECT_NE(r.out.find("blk.4.ffn_down.weight"), std::string::npos);

  auto j = run_command({strata_bin(), "gguf", "info", "--json", shared_path("models/stories260K.gguf")});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["n_layer"], 5);
  EXPECT_EQ(doc["tensor_count"], 48);
  EXPECT_EQ(doc["tensor_types"]["f32"], 48);
  EXPECT_EQ(doc["metadata"]["llama.embedding_length"], 64);
  EXPECT_EQ(doc["metadata"]["tokenizer.ggml.tokens"]["length"], 512);
  EXPECT_EQ(doc["tensors"].size(), 48u);
}

TEST(GgufCli, MissingAndMalformedFilesExitTwo) {
  auto r = run_command({strata_bin(), "gguf", "info", "/nonexistent.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot open '/nonexistent.gguf'"), std::string::npos) << r.err;
  const std::string dir = test::make_temp_dir("strata-gguf");
  test::write_file(dir + "/text.gguf", "hello, this is not a model\n");
  r = run_command({strata_bin(), "gguf", "info", dir + "/text.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a GGUF file"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(GgufCli, MakeRandomReadsBackWithTheSameMetadataAndTensors) {
  const std::string dir = test::make_temp_dir("strata-gguf");
  const std::string vocab = shared_path("tokenizer/ggml-vocab-llama-spm.gguf");
  for (const std::string dtype : {"f32", "f16", "bf16", "q8_0", "q4_k"}) {
    const std::string out = dir + "/m-" + dtype + ".gguf";
    auto r = run_command({strata_bin(), "gguf", "make-random", "--arch", "llama", "--n-layer", "2", "--n-embd", "256",
                          "--n-head", "4", "--n-head-kv", "2", "--n-ff", "512", "--ctx", "512", "--vocab-from", vocab,
                          "--dtype", dtype, "--seed", "7", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto m = GgufFile::open(out);
    auto v = GgufFile::open(vocab);
    EXPECT_EQ(m->architecture(), "llama");
    EXPECT_EQ(m->get_uint("llama.block_count"), 2u);
    EXPECT_EQ(m->get_uint("llama.embedding_length"), 256u);
    EXPECT_EQ(m->get_uint("llama.attention.head_count_kv"), 2u);
    EXPECT_EQ(m->get_uint("llama.context_length"), 512u);
    for (const auto& kv : v->metadata()) {
      if (kv.key.rfind("tokenizer.", 0) != 0) continue;
      const GgufValue* copy = m->find(kv.key);
      ASSERT_NE(copy, nullptr) << kv.key;
      EXPECT_TRUE(*copy == kv.value) << kv.key;
    }
    const uint64_t n_vocab = v->get_string_array("tokenizer.ggml.tokens").size();
    // token_embd, output_norm, output + 9 per layer
    EXPECT_EQ(m->tensors().size(), 3u + 2 * 9);
    const GgufTensorInfo* emb = m->find_tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->ne[0], 256u);
    EXPECT_EQ(emb->ne[1], n_vocab);
    EXPECT_EQ(std::string(ggml_type_name(emb->type)), dtype);
    ASSERT_NE(m->find_tensor("blk.1.ffn_down.weight"), nullptr);
    EXPECT_EQ(m->find_tensor("blk.1.ffn_down.weight")->ne[0], 512u);
    EXPECT_EQ(m->find_tensor("blk.0.attn_k.weight")->ne[1], 128u);
    EXPECT_EQ(m->find_tensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);

    // Same seed, same bytes.
    const std::string again = dir + "/again.gguf";
    r = run_command({strata_bin(), "gguf", "make-random", "--n-layer", "2", "--n-embd", "256", "--n-head", "4",
                     "--n-head-kv", "2", "--n-ff", "512", "--ctx", "512", "--vocab-from", vocab, "--dtype", dtype,
                     "--seed", "7", "-o", again});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(test::read_file(out), test::read_file(again));
  }
  std::filesystem::remove_all(dir);
}

TEST(GgufCli, MakeRandomRejectsImpossibleShapes) {
  const std::string dir = test::make_temp_dir("strata-gguf");
  auto r = run_command({strata_bin(), "gguf", "make-random", "--n-layer", "1", "--n-embd", "96", "--n-head", "4",
                        "--n-ff", "128", "--vocab-from", shared_path("tokenizer/ggml-vocab-llama-spm.gguf"), "--dtype",
                        "q4_k", "-o", dir + "/x.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("multiple of 256"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "gguf", "make-random", "--preset", "nope", "--vocab-from",
                   shared_path("tokenizer/ggml-vocab-llama-spm.gguf"), "-o", dir + "/x.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown preset 'nope'"), std::string::npos) << r.err;
  r = run_command({strata_bin(), "gguf", "make-random", "-o", dir + "/x.gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--vocab-from"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(GgufCli, QwenPresetHasBiases) {
  const std::string dir = test::make_temp_dir("strata-gguf");
  auto r = run_command({strata_bin(), "gguf", "make-random", "--arch", "qwen2", "--n-layer", "1", "--n-embd", "64",
                        "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128", "--vocab-from",
                        shared_path("tokenizer/ggml-vocab-gpt-2.gguf"), "--dtype", "f32", "-o", dir + "/q.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = GgufFile::open(dir + "/q.gguf");
  EXPECT_EQ(m->architecture(), "qwen2");
  EXPECT_EQ(m->get_uint("qwen2.block_count"), 1u);
  ASSERT_NE(m->find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(m->find_tensor("blk.0.attn_v.bias")->ne[0], 32u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
