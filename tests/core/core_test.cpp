// core/: half-float conversions, byte-size parsing, the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <numeric>

#include "core/anon_memory.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "core/units.h"

namespace strata {
namespace {

TEST(Fp16, KnownValues) {
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // ties to even -> infinity
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // halfway, ties to even (down)
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // halfway, ties to even (up)
  EXPECT_EQ(f32_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(NAN))));
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_f32(0x8000)), 0x80000000u);
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Units, ParseBytes) {
  EXPECT_EQ(parse_bytes("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_bytes("512M"), 512000000ull);
  EXPECT_EQ(parse_bytes("1.5 KiB"), 1536ull);
  EXPECT_EQ(parse_bytes("1000"), 1000ull);
  EXPECT_EQ(parse_bytes("4 gb"), 4000000000ull);
  EXPECT_FALSE(parse_bytes("").has_value());
  EXPECT_FALSE(parse_bytes("-1G").has_value());
  EXPECT_FALSE(parse_bytes("12 parsecs").has_value());
  EXPECT_FALSE(parse_bytes("1.2.3").has_value());
  EXPECT_FALSE(parse_bytes("99999999TiB").has_value());
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(12), "12 B");
}

// Anonymous memory: zeroed and writable; with Pages::kHuge it starts on a 2 MiB boundary (whether
// the kernel backs it with huge pages is its choice: THP may be off), and moving hands it over.
TEST(AnonymousMemory, ZeroedWritableAndHugeAligned) {
  for (const auto pages : {AnonymousMemory::Pages::kDefault, AnonymousMemory::Pages::kHuge}) {
    const uint64_t bytes = (uint64_t{5} << 20) + 123;
    AnonymousMemory m(bytes, pages);
    ASSERT_NE(m.data(), nullptr);
    EXPECT_EQ(m.size(), bytes);
    if (pages == AnonymousMemory::Pages::kHuge) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % AnonymousMemory::kHugePageBytes, 0u);
    }
    EXPECT_EQ(m.data()[0], 0);
    EXPECT_EQ(m.data()[bytes - 1], 0);
    m.data()[0] = 7;
    m.data()[bytes - 1] = 9;
    AnonymousMemory moved = std::move(m);
    EXPECT_EQ(m.data(), nullptr);
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(moved.data()[0], 7);
    EXPECT_EQ(moved.data()[bytes - 1], 9);
  }
  EXPECT_EQ(AnonymousMemory(0, AnonymousMemory::Pages::kHuge).data(), nullptr);
}

TEST(ThreadPool, RunsEveryIndexOnceAndCoversRanges) {
  for (int n : {1, 2, 3, 8}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run([&](int t) { hits[static_cast<size_t>(t)]++; });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      std::vector<int> cover(1000, 0);
      pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) cover[static_cast<size_t>(i)]++;
      });
      for (int c : cover) ASSERT_EQ(c, 1);
    }
  }
  EXPECT_GE(ThreadPool::physical_cores(), 1);
}

TEST(ThreadPool, WakesAfterSleeping) {
  ThreadPool pool(3);
  std::atomic<int> sum{0};
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // long enough for workers to sleep
    pool.run([&](int t) { sum += t + 1; });
  }
  EXPECT_EQ(sum.load(), 5 * 6);
}

}  // namespace
}  // namespace strata
