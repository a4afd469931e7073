// The host communicator of tensor parallelism (backend/communicator.h): all_reduce_sum against a
// direct sum in rank order computed here (bit for bit, on every rank), all_gather against the
// expected interleaving, and abort() waking ranks that wait for one that never comes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "backend/communicator.h"

namespace strata {
namespace {

// Runs fn(rank) on n threads and joins them.
template <typename Fn>
void on_ranks(int32_t n, Fn fn) {
  std::vector<std::thread> t;
  for (int32_t r = 0; r < n; ++r) t.emplace_back([&, r] { fn(r); });
  for (auto& th : t) th.join();
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(HostCommunicator, AllReduceSumIsTheSumInRankOrderOnEveryRank) {
  for (int32_t n : {1, 2, 3, 4}) {
    const int64_t rows = 5, cols = 37;  // not a multiple of the rank count: uneven shares
    auto comm = make_host_communicator(n);
    EXPECT_EQ(comm->size(), n);
    std::vector<std::vector<float>> buf;
    for (int32_t r = 0; r < n; ++r) buf.push_back(random_floats(static_cast<size_t>(rows * cols), 100 + static_cast<uint32_t>(r)));
    // The expected sums: rank 0 + rank 1 + ... in that order, in f32.
    std::vector<float> want(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < want.size(); ++i) {
      float s = buf[0][i];
      for (int32_t r = 1; r < n; ++r) s += buf[static_cast<size_t>(r)][i];
      want[i] = s;
    }
    // Several collectives in a row (the buffers are reused, as a forward pass does).
    on_ranks(n, [&](int32_t r) {
      comm->all_reduce_sum(r, ActView{buf[static_cast<size_t>(r)].data(), rows, cols});
      comm->barrier(r);
    });
    for (int32_t r = 0; r < n; ++r) {
      EXPECT_EQ(std::memcmp(buf[static_cast<size_t>(r)].data(), want.data(), want.size() * sizeof(float)), 0)
          << "rank " << r << " of " << n;
      EXPECT_EQ(comm->stats(r).calls, 1) << "the all-reduce is a collective; the barrier is not counted";
    }
    // Again on the results: every rank holds want, so the sum is n * want in rank order.
    on_ranks(n, [&](int32_t r) { comm->all_reduce_sum(r, ActView{buf[static_cast<size_t>(r)].data(), rows, cols}); });
    for (size_t i = 0; i < want.size(); ++i) {
      float s = want[i];
      for (int32_t r = 1; r < n; ++r) s += want[i];
      ASSERT_EQ(buf[static_cast<size_t>(n - 1)][i], s) << i;
    }
  }
}

TEST(HostCommunicator, AllGatherPutsEachRanksColumnsInRankOrder) {
  const int32_t n = 3;
  const int64_t rows = 4, cols = 6;
  auto comm = make_host_communicator(n);
  std::vector<std::vector<float>> local, out(n, std::vector<float>(static_cast<size_t>(rows * cols * n), -1.0f));
  for (int32_t r = 0; r < n; ++r) local.push_back(random_floats(static_cast<size_t>(rows * cols), 7 + static_cast<uint32_t>(r)));
  on_ranks(n, [&](int32_t r) {
    const auto i = static_cast<size_t>(r);
    comm->all_gather(r, ActView{local[i].data(), rows, cols}, ActView{out[i].data(), rows, cols * n});
  });
  for (int32_t r = 0; r < n; ++r) {
    for (int64_t row = 0; row < rows; ++row) {
      for (int32_t k = 0; k < n; ++k) {
        for (int64_t j = 0; j < cols; ++j) {
          ASSERT_EQ(out[static_cast<size_t>(r)][static_cast<size_t>(row * cols * n + k * cols + j)],
                    local[static_cast<size_t>(k)][static_cast<size_t>(row * cols + j)])
              << "rank " << r << " row " << row << " from rank " << k << " col " << j;
        }
      }
    }
  }
}

TEST(HostCommunicator, AbortWakesRanksWaitingForOneThatNeverComes) {
  const int32_t n = 3;
  auto comm = make_host_communicator(n);
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  std::vector<int> threw(2, 0);
  // Ranks 0 and 1 enter an all-reduce; rank 2 "fails" and aborts instead of joining.
  std::thread t0([&] {
    try {
      comm->all_reduce_sum(0, ActView{a.data(), 1, 8});
    } catch (const CommAborted&) {
      threw[0] = 1;
    }
  });
  std::thread t1([&] {
    try {
      comm->all_reduce_sum(1, ActView{b.data(), 1, 8});
    } catch (const CommAborted&) {
      threw[1] = 1;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let them wait (the test holds either way)
  comm->abort();
  t0.join();
  t1.join();
  EXPECT_EQ(threw, (std::vector<int>{1, 1}));
  EXPECT_TRUE(comm->aborted());
  EXPECT_THROW(comm->barrier(2), CommAborted);  // later calls fail at once
}

}  // namespace
}  // namespace strata
