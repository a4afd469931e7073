// What the engine tests share: stories260K (../shared/models) and its tokenizer, loaded once per
// test program, and the prompts they run.
// Thread-safety: stories() may be called from any thread (a function-local static).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace strata::test {

struct StoriesModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

inline StoriesModel& stories() {
  static StoriesModel s = [] {
    StoriesModel x;
    x.model = Model::load(shared_path("models/stories260K.gguf"), 2);
    x.tok = Tokenizer::from_gguf(x.model->file());
    return x;
  }();
  return s;
}

// Short and long prompts in TinyStories' style (the first six are shared by several tests).
inline const std::vector<std::string>& story_prompts() {
  static const std::vector<std::string> p = {
      "Once upon a time",
      "Lily and Tom went to the park",
      "The little dog",
      "One day, a big bear found a red ball in the forest. He wanted to play with it, so he",
      "Sam",
      "The sun was shining and the birds were singing. Mia took her kite and ran to the hill where her friends",
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day,",
  };
  return p;
}

}  // namespace strata::test
