// The cold tier under a running server: prefix-cached blocks evicted from RAM go to the spill file
// and come back as prefix hits; when the file is damaged behind the server's back (overwritten
// through /proc, as a failing disk would), every damaged block is a counted miss that is
// recomputed: the same text, no crash, and the server keeps serving.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

using test::metrics;

std::string complete(ServerProcess& s, const std::string& prompt, int max_tokens) {
  const Json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = s.client()->Post("/v1/completions", body.dump(), "application/json");
  if (!r || r->status != 200) return "<failed: " + (r ? r->body : std::string("no answer")) + ">";
  return Json::parse(r->body)["choices"][0]["text"];
}

// The swap tests' load: kSwapRequests prompts "Once upon a time <i>", kSwapTokens greedy tokens each; run
// one after another on a roomy server (the reference) or all at once.
constexpr int kSwapRequests = 6, kSwapTokens = 120;
std::string swap_prompt(int i) { return "Once upon a time " + std::to_string(i); }
std::vector<std::string> swap_reference() {
  ServerProcess roomy;
  std::vector<std::string> out;
  for (int i = 0; i < kSwapRequests; ++i) out.push_back(complete(roomy, swap_prompt(i), kSwapTokens));
  return out;
}
std::vector<std::string> swap_load_at_once(ServerProcess& s) {
  std::vector<std::string> got(kSwapRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kSwapRequests; ++i) {
    clients.emplace_back([&, i] { got[static_cast<size_t>(i)] = complete(s, swap_prompt(i), kSwapTokens); });
  }
  for (auto& t : clients) t.join();
  return got;
}

// The swap load all at once on a server of 24 blocks of 16 tokens with --preempt swap, spilling to
// a fresh directory, `args` added: its outputs must be `reference` and the load must have been
// preempted. Returns /metrics at the end.
std::map<std::string, double> swap_run(const std::vector<std::string>& reference, const std::vector<std::string>& args) {
  const std::string spill = test::make_temp_dir("strata-cold-swap");
  ServerProcess::Options o;
  o.args = {"--kv-blocks", "24", "--kv-block-size", "16", "--kv-spill-dir", spill, "--kv-spill-size", "16MiB",
            "--preempt", "swap"};
  o.args.insert(o.args.end(), args.begin(), args.end());
  std::map<std::string, double> m;
  {
    ServerProcess s(o);
    EXPECT_EQ(swap_load_at_once(s), reference);
    m = metrics(s);
  }
  std::filesystem::remove_all(spill);
  EXPECT_GT(m["strata_preemptions_total"], 0) << "the load should not fit 24 blocks";
  return m;
}

// Overwrites every byte of the server's (unlinked) spill file with garbage; returns the bytes
// written.
int64_t damage_spill_file(pid_t pid) {
  const int fd = test::reopen_open_file(pid, "strata-kv-spill-");
  if (fd < 0) return 0;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::string junk(static_cast<size_t>(size), '\xab');
  for (size_t i = 0; i < junk.size(); i += 7) junk[i] = static_cast<char>(i * 31);
  const bool ok = ::pwrite(fd, junk.data(), junk.size(), 0) == static_cast<ssize_t>(junk.size());
  ::close(fd);
  return ok ? size : 0;
}

TEST(ServerColdTier, PrefixHitsComeBackFromTheSpillFileAndDamageIsRecomputed) {
  const std::string spill = test::make_temp_dir("strata-cold-serve");
  ServerProcess::Options o;
  // 12 blocks of 16 tokens in RAM: each request below needs about 8, so every new prompt evicts
  // the previous one's cached blocks into the spill file.
  o.args = {"--kv-blocks", "12", "--kv-block-size", "16", "--kv-spill-dir", spill, "--kv-spill-size", "8MiB"};
  ServerProcess s(o);

  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her "
      "friend Tom. One day, they found a big red ball in the park and played with it all day long. ";
  const std::vector<std::string> others = {"The little dog ran to the tree and barked at the cat who sat on a branch. ",
                                           "Tom had a red car. He liked to drive it around the house every morning. ",
                                           "Anna liked to read books about the sea, the fish and the big blue whales. "};
  auto flood = [&] {
    for (const auto& p : others) ASSERT_NE(complete(s, p + p + p, 16).rfind("<failed", 0), 0u);
  };

  const std::string first = complete(s, story, 16);
  ASSERT_EQ(first.rfind("<failed", 0), std::string::npos) << first;
  flood();
  auto m = metrics(s);
  ASSERT_GT(m["strata_kv_spill_out_bytes_total"], 0) << "the story's blocks should have been spilled";

  // Undamaged: the story's prefix comes back from the file, same text.
  const double hits0 = m["strata_prefix_cache_hit_tokens_total"], in0 = m["strata_kv_spill_in_bytes_total"];
  EXPECT_EQ(complete(s, story, 16), first);
  m = metrics(s);
  EXPECT_GT(m["strata_kv_spill_in_bytes_total"], in0);
  EXPECT_GT(m["strata_prefix_cache_hit_tokens_total"], hits0);
  EXPECT_EQ(m["strata_kv_cold_read_failures_total"], 0);

  // Damaged: evict again, overwrite the file, ask again.
  flood();
  ASSERT_GT(damage_spill_file(s.pid()), 0) << "no spill file found among the server's open files";
  EXPECT_EQ(complete(s, story, 16), first);
  m = metrics(s);
  EXPECT_GT(m["strata_kv_cold_read_failures_total"], 0);
  EXPECT_EQ(m["strata_requests_failed_total"], 0);
  // Still serving, and a fresh request is exact too.
  EXPECT_EQ(s.client()->Get("/health")->status, 200);
  EXPECT_EQ(complete(s, story, 16), first);
  std::filesystem::remove_all(spill);
}

// Swap preemption under load: sequences swapped out to the spill file are read back ahead of the
// step that resumes them (strata_kv_cold_prefetch_hits_total), with the tokens of a run that never
// swapped.
TEST(ServerColdTier, SwappedSequencesAreReadAheadOfTheirResumeAndStayExact) {
  auto m = swap_run(swap_reference(), {});
  EXPECT_GT(m["strata_kv_spill_in_bytes_total"], 0);
  EXPECT_GT(m["strata_kv_cold_prefetch_hits_total"], 0);
  EXPECT_EQ(m["strata_kv_cold_read_failures_total"], 0);
}

// The host tier (--kv-host-memory) above a spill file: the same swap load, exact; /metrics shows
// each tier's blocks and bytes (strata_kv_tier_blocks / strata_kv_tier_bytes, with the configured
// capacities) and the moves into and out of host memory.
TEST(ServerColdTier, AHostTierAboveTheFileServesSwapsExactlyAndShowsOnMetrics) {
  auto m = swap_run(swap_reference(), {"--kv-host-memory", "8MiB"});
  EXPECT_EQ(m["strata_kv_tier_blocks{tier=\"hot\",state=\"total\"}"], 24);
  // Slots are whole frames (a block and its 8-byte checksum) of the sizes asked for.
  const double block = m["strata_kv_capacity_bytes{tier=\"hot\"}"] / 24;
  EXPECT_EQ(m["strata_kv_tier_blocks{tier=\"host\",state=\"total\"}"], std::floor((8 << 20) / (block + 8)));
  EXPECT_EQ(m["strata_kv_tier_blocks{tier=\"file\",state=\"total\"}"], std::floor((16 << 20) / (block + 8)));
  EXPECT_EQ(m["strata_kv_tier_blocks{tier=\"warm\",state=\"total\"}"], 0);
  EXPECT_EQ(m["strata_kv_tier_bytes{tier=\"host\",state=\"total\"}"],
            m["strata_kv_tier_blocks{tier=\"host\",state=\"total\"}"] * (block + 8));
  EXPECT_GT(m["strata_kv_tier_moves_total{tier=\"host\",op=\"spill\"}"], 0);
  EXPECT_GT(m["strata_kv_tier_moves_total{tier=\"host\",op=\"fetch\"}"], 0);
  EXPECT_EQ(m["strata_kv_tier_moves_total{tier=\"file\",op=\"spill\"}"], 0) << "8 MiB of host memory holds this load";
  EXPECT_EQ(m["strata_kv_tier_blocks{tier=\"host\",state=\"used\"}"], 0) << "nothing is swapped at the end";
  EXPECT_EQ(m["strata_kv_tier_moves_total{tier=\"file\",op=\"migrate\"}"], 0) << "host memory was never full";
  EXPECT_EQ(m["strata_kv_cold_read_failures_total"], 0);
}

// A host tier of 4 blocks above the file: when it is full its oldest blocks move down to the file
// (strata_kv_tier_moves_total{tier="file",op="migrate"}) and the swapped requests stay exact; with
// --kv-no-host-migrate nothing moves and the file takes the spills.
TEST(ServerColdTier, AFullHostTierMovesBlocksDownToTheFileAndStaysExact) {
  const std::vector<std::string> reference = swap_reference();
  for (const bool migrate : {true, false}) {
    SCOPED_TRACE(migrate ? "migration" : "--kv-no-host-migrate");
    // stories260K's blocks of 16 tokens are 10 KiB with their frame: 4 host slots.
    std::vector<std::string> args = {"--kv-host-memory", "41KiB"};
    if (!migrate) args.push_back("--kv-no-host-migrate");
    auto m = swap_run(reference, args);
    EXPECT_EQ(m["strata_kv_tier_blocks{tier=\"host\",state=\"total\"}"], 4);
    const double moved = m["strata_kv_tier_moves_total{tier=\"file\",op=\"migrate\"}"];
    if (migrate) {
      EXPECT_GT(moved, 0);
      EXPECT_GT(m["strata_kv_tier_moves_total{tier=\"file\",op=\"fetch\"}"], 0) << "moved blocks come back from the file";
    } else {
      EXPECT_EQ(moved, 0);
      EXPECT_GT(m["strata_kv_tier_moves_total{tier=\"file\",op=\"spill\"}"], 0);
    }
    EXPECT_EQ(m["strata_kv_tier_blocks{tier=\"file\",state=\"used\"}"], 0) << "nothing is swapped at the end";
    EXPECT_EQ(m["strata_kv_cold_read_failures_total"], 0);
  }
}

}  // namespace
}  // namespace strata
