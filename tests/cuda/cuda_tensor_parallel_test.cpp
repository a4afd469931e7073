// Tensor parallelism over GPUs (label `cuda`; SKIPPED with the reason where fewer than 2 GPUs are
// usable): the NCCL communicator (backend/cuda/nccl_communicator.h) against sums and layouts
// computed here on the host, and stories260K with TP=2 (and TP=4 with 4 GPUs) through the engine:
// greedy tokens equal the llama.cpp references (../shared/reference), alone and batched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "engine/engine.h"
#include "engine/stories_model.h"

namespace strata {
namespace {

#define STRATA_REQUIRE_GPUS(n)                                                                             \
  do {                                                                                                     \
    if (cuda_device_count() < (n))                                                                         \
      GTEST_SKIP() << "needs " << (n) << " usable GPUs; this machine has " << cuda_device_count();          \
  } while (0)

std::vector<std::unique_ptr<Backend>> gpus(int32_t n) {
  std::vector<std::unique_ptr<Backend>> out;
  for (int32_t r = 0; r < n; ++r) {
    BackendOptions o;
    o.device = DeviceKind::kCuda;
    o.device_index = r;
    out.push_back(make_backend(o));
  }
  return out;
}

TEST(CudaTensorParallel, NcclAllReduceAndAllGatherMatchTheHost) {
  STRATA_REQUIRE_GPUS(2);
  const int32_t n = std::min(cuda_device_count(), 4);
  auto backends = gpus(n);
  std::vector<Backend*> raw;
  for (auto& b : backends) raw.push_back(b.get());
  auto comm = make_device_communicator(raw);
  const int64_t rows = 3, cols = 1000;
  std::vector<std::vector<float>> in(static_cast<size_t>(n)), reduced(static_cast<size_t>(n)), gathered(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    std::mt19937 rng(static_cast<uint32_t>(r) + 1);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (int64_t i = 0; i < rows * cols; ++i) in[static_cast<size_t>(r)].push_back(d(rng));
  }
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<size_t>(r);
      Backend& b = *backends[i];
      b.bind_thread();
      const uint64_t bytes = static_cast<uint64_t>(rows * cols) * sizeof(float);
      auto x = b.allocate(bytes, MemoryUse::kActivations);
      auto all = b.allocate(bytes * static_cast<uint64_t>(n), MemoryUse::kActivations);
      b.copy_to_device(x->data(), in[i].data(), bytes);
      const ActView xv{reinterpret_cast<float*>(x->data()), rows, cols};
      comm->all_gather(r, xv, ActView{reinterpret_cast<float*>(all->data()), rows, cols * n});
      comm->all_reduce_sum(r, xv);
      reduced[i].resize(static_cast<size_t>(rows * cols));
      gathered[i].resize(static_cast<size_t>(rows * cols * n));
      b.copy_to_host(reduced[i].data(), x->data(), bytes);
      b.copy_to_host(gathered[i].data(), all->data(), bytes * static_cast<uint64_t>(n));
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t e = 0; e < rows * cols; ++e) {
    double want = 0;
    for (int32_t r = 0; r < n; ++r) want += in[static_cast<size_t>(r)][static_cast<size_t>(e)];
    // NCCL's ring adds in its own order: within f32 rounding of the exact sum, the same bits on every rank.
    ASSERT_NEAR(reduced[0][static_cast<size_t>(e)], want, 1e-5) << e;
    for (int32_t r = 1; r < n; ++r) ASSERT_EQ(reduced[static_cast<size_t>(r)][static_cast<size_t>(e)], reduced[0][static_cast<size_t>(e)]);
  }
  for (int32_t r = 0; r < n; ++r) {
    for (int64_t row = 0; row < rows; ++row) {
      for (int32_t k = 0; k < n; ++k) {
        ASSERT_EQ(std::memcmp(gathered[static_cast<size_t>(r)].data() + row * cols * n + k * cols,
                              in[static_cast<size_t>(k)].data() + row * cols, static_cast<size_t>(cols) * sizeof(float)),
                  0)
            << "rank " << r << " row " << row << " block " << k;
      }
    }
  }
}

std::vector<std::pair<std::string, std::vector<TokenId>>> references() {
  std::vector<std::pair<std::string, std::vector<TokenId>>> out;
  std::istringstream in(test::read_file(test::shared_path("reference/stories260K-greedy.jsonl")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.emplace_back(j["prompt"], j["tokens"].get<std::vector<TokenId>>());
  }
  return out;
}

void expect_references(int32_t tp) {
  BackendOptions o;
  o.device = DeviceKind::kCuda;
  o.tensor_parallel = tp;
  auto model = Model::load(test::shared_path("models/stories260K.gguf"), o);
  auto tok = Tokenizer::from_gguf(model->file());
  ASSERT_EQ(model->tensor_parallel(), tp);
  EngineConfig cfg;
  cfg.kv.block_size = 16;
  cfg.kv.dtype = KvDtype::kF32;
  cfg.kv.num_blocks = 64;
  const auto refs = references();
  {
    Engine e(*model, *tok, cfg);  // alone
    for (const auto& [prompt, tokens] : refs) {
      const auto c = test::collect(*e.submit(test::greedy_request(*tok, prompt, 64)));
      EXPECT_EQ(c.error, "");
      EXPECT_EQ(c.tokens, tokens) << "TP=" << tp << " " << prompt;
    }
    test::expect_drained(e);
  }
  Engine e(*model, *tok, cfg);  // batched
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& [prompt, tokens] : refs) handles.push_back(e.submit(test::greedy_request(*tok, prompt, 64)));
  for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(test::collect(*handles[i]).tokens, refs[i].second) << "TP=" << tp << " batched";
  test::expect_drained(e);
}

TEST(CudaTensorParallel, Stories260KTp2GivesTheReferenceTokens) {
  STRATA_REQUIRE_GPUS(2);
  expect_references(2);
}

TEST(CudaTensorParallel, Stories260KTp4GivesTheReferenceTokens) {
  STRATA_REQUIRE_GPUS(4);
  expect_references(4);
}

}  // namespace
}  // namespace strata
