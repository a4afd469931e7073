// ModelWeights::check (the validation `strata serve` runs before it listens) refuses what
// ModelWeights::load refuses, with the same message, and accepts what load accepts.
#include <gtest/gtest.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "support/test_support.h"

namespace strata {
namespace {

// What check() says of the file at `path`: "" when it accepts it.
std::string check_message(const std::string& path) {
  try {
    const auto f = GgufFile::open(path);
    ModelWeights::check(*f, ModelConfig::from_gguf(*f));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string load_message(const std::string& path) {
  try {
    Model::load(path, 1);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelWeightsCheck, AcceptsWhatLoadAcceptsAndRefusesWithLoadsMessage) {
  const std::string good = test::shared_path("models/stories260K.gguf");
  EXPECT_EQ(check_message(good), "");
  EXPECT_EQ(load_message(good), "");
  // A vocabulary-only GGUF carries a model's hyper-parameters but no tensors.
  const std::string vocab = test::shared_path("tokenizer/ggml-vocab-llama-spm.gguf");
  const std::string refused = check_message(vocab);
  EXPECT_NE(refused.find("missing tensor 'token_embd.weight'"), std::string::npos) << refused;
  EXPECT_EQ(refused, load_message(vocab));
}

}  // namespace
}  // namespace strata
