// The official `openai` npm client against `strata serve` (tests/server/node/openai_client_test.mjs):
// what users' code sees, not just what our own HTTP client sees. The client is installed by
// scripts/install-test-deps.sh.
#include <gtest/gtest.h>

#include <filesystem>

#include "server/server_process.h"

namespace strata {
namespace {

TEST(OpenAINodeClient, CompletionsChatStreamingUsageAndErrors) {
  const std::string node_dir = std::string(STRATA_SOURCE_DIR) + "/tests/server/node";
  ASSERT_TRUE(std::filesystem::exists(node_dir + "/node_modules/openai/package.json"))
      << "the openai npm client is not installed: run scripts/install-test-deps.sh";
  const auto which = test::run_command({"/bin/sh", "-c", "command -v node"});
  ASSERT_EQ(which.exit_code, 0) << "Node.js is needed for this test";
  std::string node = which.out;
  while (!node.empty() && (node.back() == '\n' || node.back() == '\r')) node.pop_back();

  test::ServerProcess::Options o;
  o.args = {"--api-key", "test-key-123", "--served-model-name", "stories"};
  test::ServerProcess s(o);
  const auto r = test::run_command({node, node_dir + "/openai_client_test.mjs", "http://127.0.0.1:" + std::to_string(s.port()) + "/v1",
                                    "test-key-123", "stories", test::shared_path("reference/stories260K-greedy.jsonl")},
                                   300.0);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << "\nserver log:\n" << s.log();
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace strata
