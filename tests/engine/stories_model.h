// What the engine tests share: stories260K (../shared/models) and its tokenizer, loaded once per
// test program, the prompts they run, and the check of an engine's final KV state.
// Thread-safety: stories() may be called from any thread (a function-local static).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <chrono>

#include <cstdlib>

#include "backend/backend.h"
#include "core/error.h"
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

// The device the engine tests that honour STRATA_TEST_DEVICE run on: cpu when unset; `cuda` runs
// them on the GPU (skipped, with the reason, where none is usable).
inline DeviceKind test_device() {
  const char* d = std::getenv("STRATA_TEST_DEVICE");
  if (d == nullptr || *d == '\0') return DeviceKind::kCpu;
  const auto k = device_kind_from_name(d);
  if (!k) throw Error(std::string("STRATA_TEST_DEVICE='") + d + "' is not cpu, cuda or auto");
  return *k;
}

// stories260K and its tokenizer on test_device(), loaded once; skip says why the device is
// unusable (empty when loaded).
struct DeviceStories {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::string skip;
};

inline DeviceStories& device_stories() {
  static DeviceStories s = [] {
    DeviceStories x;
    try {
      BackendOptions o;
      o.device = resolve_device(test_device());
      o.n_threads = 2;
      x.model = Model::load(shared_path("models/stories260K.gguf"), o);
      x.tok = Tokenizer::from_gguf(x.model->file());
    } catch (const Error& e) {
      x.skip = e.what();
    }
    return x;
  }();
  return s;
}

#define STRATA_REQUIRE_TEST_DEVICE()                                                                            \
  do {                                                                                                          \
    if (!::strata::test::device_stories().skip.empty())                                                         \
      GTEST_SKIP() << "no usable device: " << ::strata::test::device_stories().skip;                            \
  } while (0)

// A greedy request that runs to exactly max_tokens (end of generation ignored).
inline Request greedy_request(const Tokenizer& tok, const std::string& prompt, int32_t max_tokens) {
  Request r;
  r.prompt = tok.encode(prompt, true, false);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

// What a request's events said: its tokens, its usage, its error (empty when none).
struct Collected {
  std::vector<TokenId> tokens;
  Usage usage;
  std::string error;
};

inline Collected collect(RequestHandle& h) {
  Collected r;
  EngineEvent e;
  while (h.next(e)) {
    if (e.kind == EngineEvent::Kind::kToken) r.tokens.push_back(e.token);
    if (e.kind == EngineEvent::Kind::kDone) r.usage = e.usage;
    if (e.kind == EngineEvent::Kind::kError) r.error = e.error;
  }
  return r;
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
