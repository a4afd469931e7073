// Model::fingerprint keys the KV caches: equal for the same model bytes wherever they are loaded
// from, different for other weights (a fine-tune keeps every metadata value and shape) or another
// tokenizer.
#include <gtest/gtest.h>

#include <filesystem>

#include "gguf/random_model.h"
#include "model/model.h"
#include "support/test_support.h"

namespace strata {
namespace {

std::string write_model(const std::string& dir, const std::string& name, uint64_t seed, const std::string& vocab) {
  RandomModelSpec spec;
  spec.n_layer = 1;
  spec.n_embd = 64;
  spec.n_head = 2;
  spec.n_head_kv = 2;
  spec.n_ff = 128;
  spec.n_ctx = 128;
  spec.seed = seed;
  const std::string path = dir + "/" + name + ".gguf";
  write_random_model(spec, *GgufFile::open(test::shared_path("tokenizer/" + vocab)), path);
  return path;
}

TEST(ModelFingerprint, SameBytesSameFingerprintOtherWeightsOrVocabOther) {
  const std::string dir = test::make_temp_dir("strata-fingerprint");
  const std::string a = write_model(dir, "a", 1, "ggml-vocab-llama-spm.gguf");
  const std::string copy = dir + "/copy.gguf";
  std::filesystem::copy_file(a, copy);
  const std::string tuned = write_model(dir, "tuned", 2, "ggml-vocab-llama-spm.gguf");
  const std::string other_vocab = write_model(dir, "phi3", 1, "ggml-vocab-phi-3.gguf");

  const uint64_t fa = Model::load(a, 1)->fingerprint();
  EXPECT_EQ(Model::load(a, 1)->fingerprint(), fa);
  EXPECT_EQ(Model::load(copy, 1)->fingerprint(), fa);
  EXPECT_NE(Model::load(tuned, 1)->fingerprint(), fa);
  EXPECT_NE(Model::load(other_vocab, 1)->fingerprint(), fa);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
