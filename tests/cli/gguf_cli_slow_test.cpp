// Hostile files through the CLI: truncations at every offset of the first 4 KB of a real GGUF and
// random byte flips in its header must end with exit code 2 and a message (or a normal listing when
// the damaged file is still valid) — never a crash or a hang.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "support/test_support.h"

namespace strata {
namespace {

void expect_clean_outcome(const test::CommandResult& r, const std::string& what) {
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 2) << what << ": exit code " << r.exit_code << "\n" << r.err;
  if (r.exit_code == 2) {
    EXPECT_NE(r.err.find("strata: error: "), std::string::npos) << what << ": " << r.err;
  } else {
    EXPECT_NE(r.out.find("tensors"), std::string::npos) << what;
  }
}

TEST(GgufCliHostile, EveryTruncationOfTheFirst4KB) {
  const std::string model = test::read_file(test::shared_path("models/stories260K.gguf"));
  const std::string dir = test::make_temp_dir("strata-trunc");
  const std::string path = dir + "/t.gguf";
  for (size_t n = 0; n <= 4096; ++n) {
    test::write_file(path, model.substr(0, n));
    auto r = test::run_command({test::strata_bin(), "gguf", "info", path}, 20.0);
    expect_clean_outcome(r, "truncated at " + std::to_string(n));
    ASSERT_EQ(r.exit_code, 2) << "a truncated file cannot be valid (tensor data is missing)";
  }
  std::filesystem::remove_all(dir);
}

TEST(GgufCliHostile, RandomByteFlipsInTheHeader) {
  const std::string model = test::read_file(test::shared_path("models/stories260K.gguf"));
  const std::string dir = test::make_temp_dir("strata-flip");
  const std::string path = dir + "/f.gguf";
  std::mt19937 rng(42);
  int rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bytes = model;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) bytes[rng() % 4096] ^= static_cast<char>(1u << (rng() % 8));
    test::write_file(path, bytes);
    auto r = test::run_command({test::strata_bin(), "gguf", "info", "--json", path}, 20.0);
    expect_clean_outcome(r, "trial " + std::to_string(trial));
    rejected += r.exit_code == 2;
  }
  EXPECT_GT(rejected, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
