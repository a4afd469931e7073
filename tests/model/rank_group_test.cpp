// The rank threads of tensor parallelism (model/rank_group.h): every rank runs each job once, rank 0
// on the caller's thread and every other rank always on the same thread of its own; jobs that meet
// in the host communicator's collectives, many times in a row, give the sums computed here.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "backend/communicator.h"
#include "model/rank_group.h"

namespace strata {
namespace {

TEST(RankGroup, RunsEveryRankOnceOnItsOwnThread) {
  const int32_t n = 4;
  RankGroup g(n);
  EXPECT_EQ(g.size(), n);
  std::vector<std::thread::id> first(n);
  for (int job = 0; job < 50; ++job) {
    std::vector<int> calls(n, 0);
    std::vector<std::thread::id> ids(n);
    g.run([&](int32_t r) {
      ++calls[static_cast<size_t>(r)];
      ids[static_cast<size_t>(r)] = std::this_thread::get_id();
    });
    EXPECT_EQ(calls, std::vector<int>(n, 1)) << "job " << job;
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), static_cast<size_t>(n));
    if (job == 0) first = ids;
    EXPECT_EQ(ids, first) << "a rank moved to another thread";
  }
}

TEST(RankGroup, RanksMeetInCollectivesManyTimes) {
  const int32_t n = 3;
  RankGroup g(n);
  auto comm = make_host_communicator(n);
  std::vector<std::vector<float>> buf(n, std::vector<float>(17));
  for (int step = 0; step < 200; ++step) {
    g.run([&](int32_t r) {
      auto& b = buf[static_cast<size_t>(r)];
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(step + r * 100 + static_cast<int>(i));
      comm->all_reduce_sum(r, ActView{b.data(), 1, static_cast<int64_t>(b.size())});
    });
    for (int32_t r = 0; r < n; ++r) {
      for (size_t i = 0; i < 17; ++i) {
        // (step + i) * 3 + 0 + 100 + 200: small integers, exact in f32.
        ASSERT_EQ(buf[static_cast<size_t>(r)][i], static_cast<float>(3 * (step + static_cast<int>(i)) + 300)) << step;
      }
    }
  }
}

}  // namespace
}  // namespace strata
