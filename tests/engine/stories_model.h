// What the engine tests share: stories260K (../shared/models) and its tokenizer, loaded once per
// test program, the prompts they run, and the check of an engine's final KV state.
// Thread-safety: stories() may be called from any thread (a function-local static).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <chrono>

#include "engine/engine.h"
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

// Shuts the engine down (draining its requests) and checks its final KV state: invariants hold and
// nobody holds a block in any tier or a sequence. Returns the final stats.
inline KvStats expect_drained(Engine& e, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  e.shutdown(true, timeout);
  const KvManager& kv = e.kv_after_shutdown();
  kv.check_invariants();
  const KvStats st = kv.stats();
  EXPECT_EQ(st.hot.used, 0);
  EXPECT_EQ(st.warm.used, 0);
  EXPECT_EQ(st.cold.used, 0);
  EXPECT_EQ(st.host.used, 0);
  EXPECT_EQ(st.file.used, 0);
  EXPECT_EQ(st.sequences, 0);
  return st;
}

}  // namespace strata::test
