// Black-box tests of the KV and engine flags every model-running command shares
// (src/cli/common_flags.cpp): each bad value exits 2 with a message naming its flag, before any
// model is loaded or port opened; each good value is accepted and generates.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/server_process.h"
#include "support/test_support.h"

namespace strata {
namespace {

using test::Json;
using test::run_command;
using test::shared_path;
using test::strata_bin;

const std::string kModel = shared_path("models/stories260K.gguf");

class FlagsCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("strata-flags");
    file_ = dir_ + "/plain-file";
    test::write_file(file_, "not a directory\n");
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string dir_, file_;
};
std::string FlagsCli::dir_, FlagsCli::file_;

struct BadFlag {
  std::vector<std::string> args;
  std::string message;  // expected in stderr; names the flag
};

// `DIR` in args is replaced by a writable temp dir, `FILE` by a regular file.
std::vector<BadFlag> bad_flags() {
  return {
      {{"--kv-block-size", "0"}, "--kv-block-size"},
      {{"--kv-block-size", "-16"}, "--kv-block-size"},
      {{"--kv-block-size", "5000"}, "--kv-block-size"},
      {{"--kv-block-size", "sixteen"}, "--kv-block-size"},
      {{"--kv-dtype", "f8"}, "--kv-dtype 'f8' is not one of f32, f16, bf16"},
      {{"--kv-dtype", "int8"}, "--kv-dtype 'int8' is not one of f32, f16, bf16"},
      {{"--kv-dtype", "F16"}, "--kv-dtype 'F16'"},
      {{"--kv-memory", "2XB"}, "--kv-memory '2XB' is not a size"},
      {{"--kv-memory", "0"}, "--kv-memory '0' is not a size"},
      {{"--kv-memory", "-1GiB"}, "--kv-memory '-1GiB' is not a size"},
      {{"--kv-memory", "1.2.3M"}, "--kv-memory '1.2.3M' is not a size"},
      {{"--kv-memory", "GiB"}, "--kv-memory 'GiB' is not a size"},
      {{"--kv-blocks", "0"}, "--kv-blocks must be positive, got 0"},
      {{"--kv-blocks", "-3"}, "--kv-blocks must be positive, got -3"},
      {{"--kv-blocks", "many"}, "--kv-blocks"},
      {{"--kv-hot-tokens", "-1"}, "--kv-hot-tokens must be >= 0, got -1"},
      {{"--kv-hot-tokens", "x"}, "--kv-hot-tokens"},
      {{"--kv-warm-dtype", "int3"}, "--kv-warm-dtype 'int3' is not one of none, int8, fp8, int4"},
      {{"--kv-warm-dtype", "f16"}, "--kv-warm-dtype 'f16' is not one of none, int8, fp8, int4"},
      {{"--kv-warm-fraction", "0"}, "--kv-warm-fraction must be in (0, 1), got 0"},
      {{"--kv-warm-fraction", "1"}, "--kv-warm-fraction must be in (0, 1), got 1"},
      {{"--kv-warm-fraction", "-0.5"}, "--kv-warm-fraction must be in (0, 1)"},
      {{"--kv-warm-fraction", "nan"}, "--kv-warm-fraction"},
      {{"--kv-warm-fraction", "half"}, "--kv-warm-fraction"},
      {{"--kv-spill-dir", "DIR"}, "--kv-spill-dir and --kv-spill-size go together"},
      {{"--kv-spill-size", "1GiB"}, "--kv-spill-dir and --kv-spill-size go together"},
      {{"--kv-spill-dir", "DIR", "--kv-spill-size", "2XB"}, "--kv-spill-size '2XB' is not a size"},
      {{"--kv-spill-dir", "DIR", "--kv-spill-size", "0"}, "--kv-spill-size '0' is not a size"},
      {{"--kv-spill-dir", "/nonexistent/strata-spill", "--kv-spill-size", "4MiB"}, "--kv-spill-dir '/nonexistent/strata-spill'"},
      {{"--kv-spill-dir", "FILE", "--kv-spill-size", "4MiB"}, "--kv-spill-dir 'FILE'"},
      {{"--kv-spill-dir", "/proc", "--kv-spill-size", "4MiB"}, "--kv-spill-dir '/proc'"},
      {{"--preempt", "sometimes"}, "--preempt 'sometimes' is not one of auto, swap, recompute"},
      {{"--kv-host-memory", "2XB"}, "--kv-host-memory '2XB' is not a size"},
      {{"--kv-host-memory", "0"}, "--kv-host-memory '0' is not a size"},
      {{"--kv-host-memory", "-1GiB"}, "--kv-host-memory '-1GiB' is not a size"},
      {{"--kv-host-memory", "100"}, "--kv-host-memory 100 B is smaller than one KV block"},
      {{"--preempt", "swap"}, "--preempt swap needs a cold tier (--kv-host-memory or --kv-spill-dir)"},
      {{"--kv-offload"}, "--kv-offload needs --kv-host-memory"},
      {{"--scheduling", "lottery"}, "--scheduling 'lottery' is not one of fcfs, priority, fair, drf"},
      {{"--scheduling", "FAIR"}, "--scheduling 'FAIR'"},
      {{"--qos-window-ms", "-1"}, "--qos-window-ms must be in [0, 10000]"},
      {{"--qos-window-ms", "nan"}, "--qos-window-ms must be in [0, 10000]"},
      {{"--qos-interactive-ttft-ms", "0"}, "--qos-interactive-ttft-ms must be in (0, 86400000]"},
      {{"--qos-batch-ttft-ms", "-5"}, "--qos-batch-ttft-ms must be in (0, 86400000]"},
      {{"--controller", "pi"}, "--controller 'pi' is not one of off, pid"},
      {{"--controller-kv-target", "0"}, "--controller-kv-target must be in (0, 1]"},
      {{"--controller-kv-target", "1.5"}, "--controller-kv-target must be in (0, 1]"},
      {{"--controller-tpot-slo-ms", "0"}, "--controller-tpot-slo-ms must be in (0, 600000]"},
      {{"--controller-kv-gains", "1,2"}, "--controller-kv-gains '1,2' is not KP,KI,KD"},
      {{"--controller-kv-gains", "1,-2,0"}, "--controller-kv-gains '1,-2,0'"},
      {{"--controller-tpot-gains", "1,2,x"}, "--controller-tpot-gains '1,2,x'"},
      {{"--controller-horizon-tokens", "0"}, "--controller-horizon-tokens must be in [1, 16777216]"},
      {{"--controller-horizon-tokens", "many"}, "--controller-horizon-tokens"},
      {{"--controller-reserve-max", "1"}, "--controller-reserve-max must be in [0, 1)"},
      {{"--controller-reserve-max", "-0.1"}, "--controller-reserve-max must be in [0, 1)"},
      {{"--tenant-weight", "alice"}, "--tenant-weight 'alice' is not NAME=WEIGHT"},
      {{"--tenant-weight", "alice=0"}, "--tenant-weight 'alice=0' is not NAME=WEIGHT"},
      {{"--tenant-weight", "alice=-2"}, "--tenant-weight 'alice=-2'"},
      {{"--tenant-weight", "alice=heavy"}, "--tenant-weight 'alice=heavy'"},
      {{"--tenant-weight", "alice=2x"}, "--tenant-weight 'alice=2x'"},
      {{"--tenant-weight", "alice="}, "--tenant-weight 'alice='"},
      {{"--tenant-weight", "=2"}, "--tenant-weight '=2'"},
      {{"--tenant-weight", "alice=inf"}, "--tenant-weight 'alice=inf'"},
      {{"--tenant-weight", "a=1", "--tenant-weight", "b=nan"}, "--tenant-weight 'b=nan'"},
      {{"--max-seqs", "0"}, "--max-seqs"},
      {{"--max-seqs", "-1"}, "--max-seqs"},
      {{"--max-seqs", "lots"}, "--max-seqs"},
      {{"--max-batched-tokens", "0"}, "--max-batched-tokens"},
      {{"--max-batched-tokens", "-512"}, "--max-batched-tokens"},
      {{"--batch-wait-ms", "-1"}, "--batch-wait-ms must be in [0, 10000]"},
      {{"--batch-wait-ms", "20000"}, "--batch-wait-ms must be in [0, 10000]"},
      {{"--batch-wait-ms", "nan"}, "--batch-wait-ms must be in [0, 10000]"},
      {{"--batch-wait-ms", "soon"}, "--batch-wait-ms"},
      {{"--kv-watermark", "-0.1"}, "--kv-watermark must be in [0, 1)"},
      {{"--kv-watermark", "1"}, "--kv-watermark must be in [0, 1)"},
      {{"--kv-watermark", "nan"}, "--kv-watermark must be in [0, 1)"},
      {{"--ctx", "-1"}, "--ctx must be >= 0"},
      {{"--ctx", "long"}, "--ctx"},
      {{"--threads", "-2"}, "--threads"},
  };
}

std::vector<std::string> substitute(std::vector<std::string> args, const std::string& dir, const std::string& file) {
  for (auto& a : args) {
    if (a == "DIR") a = dir;
    if (a == "FILE") a = file;
  }
  return args;
}

std::string substitute(std::string message, const std::string& dir, const std::string& file) {
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"DIR", dir}, {"FILE", file}}) {
    if (const size_t p = message.find("'" + key + "'"); p != std::string::npos) message.replace(p + 1, key.size(), value);
  }
  return message;
}

TEST_F(FlagsCli, EveryBadValueExitsTwoNamingItsFlag) {
  for (const auto& c : bad_flags()) {
    std::vector<std::string> argv = {strata_bin(), "generate", "--model", kModel, "-t", "1", "-p", "Once", "-n", "1"};
    for (const auto& a : substitute(c.args, dir_, file_)) argv.push_back(a);
    const std::string message = substitute(c.message, dir_, file_);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    SCOPED_TRACE(joined);
    auto r = run_command(argv, 60);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << "expected '" << message << "' in: " << r.err;
    EXPECT_EQ(r.out, "") << "nothing may be generated";
  }
}

// The same flags on the other commands that take them: the message comes before the model loads
// (so a missing model is not reported first) and, for serve, before the port is opened.
TEST_F(FlagsCli, OtherCommandsReportBadFlagsBeforeLoadingTheModel) {
  const std::vector<std::vector<std::string>> commands = {
      {"serve", "--port", "0"},
      {"bench", "offline", "--num-prompts", "1"},
      {"eval", "ppl", "--file", std::string(STRATA_SOURCE_DIR) + "/tests/data/stories260K-t1.txt"},
  };
  const std::vector<BadFlag> cases = {
      {{"--kv-memory", "2XB"}, "--kv-memory '2XB' is not a size"},
      {{"--kv-spill-dir", "/nonexistent/strata-spill", "--kv-spill-size", "4MiB"}, "--kv-spill-dir '/nonexistent/strata-spill'"},
      {{"--kv-spill-dir", "DIR"}, "--kv-spill-dir and --kv-spill-size go together"},
      {{"--kv-host-memory", "lots"}, "--kv-host-memory 'lots' is not a size"},
      {{"--kv-warm-dtype", "int3"}, "--kv-warm-dtype 'int3'"},
      {{"--scheduling", "lottery"}, "--scheduling 'lottery'"},
      {{"--tenant-weight", "alice=2x"}, "--tenant-weight 'alice=2x'"},
  };
  for (const auto& cmd : commands) {
    for (const auto& c : cases) {
      const bool engine_flag = c.args[0] == "--scheduling" || c.args[0] == "--tenant-weight";
      if (cmd[0] == "eval" && engine_flag) continue;  // eval takes KV flags only
      std::vector<std::string> argv = {strata_bin()};
      argv.insert(argv.end(), cmd.begin(), cmd.end());
      for (const auto& a : {std::string("--model"), std::string("/nonexistent.gguf"), std::string("-t"), std::string("1")}) argv.push_back(a);
      for (const auto& a : substitute(c.args, dir_, file_)) argv.push_back(a);
      SCOPED_TRACE(cmd[0] + " " + c.args[0]);
      auto r = run_command(argv, 60);
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
    }
  }
}

// API keys: every bad spec names the flag (and the file's line) but never shows a key, and is
// reported before the model loads or the port opens.
TEST_F(FlagsCli, ServeApiKeyErrorsNameTheFlagButNeverTheKey) {
  const std::string bad_file = dir_ + "/keys-bad.txt";
  test::write_file(bad_file, "# team keys\nsekrit-2:batch:team-b\n\nsekrit-3:fast\n");
  const std::string empty_file = dir_ + "/keys-empty.txt";
  test::write_file(empty_file, "# nothing yet\n\n");
  const std::string dup_file = dir_ + "/keys-dup.txt";
  test::write_file(dup_file, "sekrit-1:interactive\n");
  const std::vector<BadFlag> cases = {
      {{"--api-key", "sekrit-1:urgent"}, "--api-key: the QoS class 'urgent' is not one of interactive, batch"},
      {{"--api-key", ":batch"}, "--api-key: the key is empty"},
      {{"--api-key", ""}, "--api-key: the key is empty"},
      {{"--api-key", "sekrit-1:batch:team a"}, "--api-key: the tenant 'team a' is not 1-64 letters"},
      {{"--api-key", "sekrit-1::"}, "--api-key: the tenant '' is not"},
      {{"--api-key", "sekrit-1", "--api-key", "sekrit-1:batch"}, "the same key is given twice"},
      {{"--api-key", "sekrit-1", "--api-keys-file", dup_file}, "the same key is given twice"},
      {{"--api-keys-file", "/nonexistent/keys.txt"}, "cannot read --api-keys-file '/nonexistent/keys.txt'"},
      {{"--api-keys-file", bad_file}, "--api-keys-file '" + bad_file + "': line 4: the QoS class 'fast'"},
      {{"--api-keys-file", empty_file}, "--api-keys-file '" + empty_file + "' holds no key"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {strata_bin(), "serve", "--port", "0", "--model", "/nonexistent.gguf", "-t", "1"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(c.args[0] + " " + c.args[1]);
    auto r = run_command(argv, 60);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    for (const char* key : {"sekrit-1", "sekrit-2", "sekrit-3"}) EXPECT_EQ(r.err.find(key), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
  }
  // The suite's directory is shared: another test checks that it holds only its own file.
  for (const std::string& f : {bad_file, empty_file, dup_file}) std::filesystem::remove(f);
}

struct GoodFlag {
  std::vector<std::string> args;
  bool exact = true;  // the greedy tokens must equal the reference's
};

TEST_F(FlagsCli, EveryGoodValueIsAcceptedAndGenerates) {
  const auto ref = test::greedy_references()[0];
  const std::vector<GoodFlag> cases = {
      {{"--kv-block-size", "1"}},
      {{"--kv-block-size", "8"}},
      {{"--kv-block-size", "4096"}},
      {{"--kv-dtype", "f32"}},
      {{"--kv-dtype", "f16"}},
      {{"--kv-dtype", "bf16"}, false},
      {{"--kv-memory", "2MiB"}},
      {{"--kv-memory", "1000000"}},
      {{"--kv-memory", "512K"}},
      {{"--kv-memory", "1.5M"}},
      {{"--kv-memory", "1GB"}},
      {{"--kv-memory", " 3 mib "}},
      {{"--kv-blocks", "64"}},
      {{"--no-prefix-cache"}},
      {{"--kv-hot-tokens", "0"}},
      {{"--kv-hot-tokens", "0", "--kv-warm-dtype", "int8"}, false},
      {{"--kv-hot-tokens", "16", "--kv-warm-dtype", "fp8"}, false},
      {{"--kv-hot-tokens", "0", "--kv-warm-dtype", "int4"}, false},
      {{"--kv-warm-dtype", "none"}},
      {{"--kv-warm-fraction", "0.5", "--kv-warm-dtype", "int8"}, false},
      {{"--kv-spill-dir", "DIR", "--kv-spill-size", "4MiB"}},
      {{"--kv-spill-dir", "DIR", "--kv-spill-size", "4MiB", "--preempt", "swap"}},
      {{"--kv-host-memory", "4MiB"}},
      {{"--kv-host-memory", "4MiB", "--preempt", "swap"}},
      {{"--kv-host-memory", "1MiB", "--kv-spill-dir", "DIR", "--kv-spill-size", "4MiB", "--preempt", "swap", "--kv-blocks", "4"}},
      {{"--preempt", "auto"}},
      {{"--preempt", "recompute"}},
      {{"--scheduling", "fcfs"}},
      {{"--scheduling", "priority"}},
      {{"--scheduling", "fair", "--tenant-weight", "alice=2", "--tenant-weight", "bob=0.5"}},
      {{"--tenant-weight", "team-a.x=1e-3"}},
      {{"--max-seqs", "1"}},
      {{"--max-batched-tokens", "1"}},
      {{"--max-batched-tokens", "3", "--max-seqs", "2"}},
      {{"--batch-wait-ms", "0"}},
      {{"--batch-wait-ms", "2.5"}},
      {{"--kv-watermark", "0"}},
      {{"--kv-watermark", "0.5"}},
      {{"--ctx", "0"}},
      {{"--ctx", "64"}},
      {{"-c", "128"}},
  };
  const int n = 8;
  const std::vector<int> expected(ref.tokens.begin(), ref.tokens.begin() + n);
  for (const auto& c : cases) {
    std::vector<std::string> argv = {strata_bin(), "generate", "--model", kModel, "-t", "1", "-p", ref.prompt,
                                     "-n", std::to_string(n), "--temperature", "0", "--json"};
    for (const auto& a : substitute(c.args, dir_, file_)) argv.push_back(a);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    SCOPED_TRACE(joined);
    auto r = run_command(argv, 60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j["tokens"].size(), static_cast<size_t>(n));
    if (c.exact) {
      EXPECT_EQ(j["tokens"].get<std::vector<int>>(), expected);
    }
  }
  // The spill files (and any probe of the directory) are deleted on exit.
  for (const auto& e : std::filesystem::directory_iterator(dir_)) EXPECT_EQ(e.path().string(), file_);
}

TEST_F(FlagsCli, HelpListsEverySharedFlag) {
  const std::vector<std::vector<std::string>> commands = {{"generate"}, {"serve"}, {"bench", "offline"}};
  for (const auto& cmd : commands) {
    std::vector<std::string> argv = {strata_bin()};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    argv.push_back("--help");
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const char* flag : {"--kv-block-size", "--kv-dtype", "--kv-memory", "--kv-blocks", "--no-prefix-cache", "--kv-hot-tokens",
                             "--kv-warm-dtype", "--kv-warm-fraction", "--kv-host-memory", "--kv-spill-dir", "--kv-spill-size", "--preempt",
                             "--scheduling", "--tenant-weight", "--max-seqs", "--max-batched-tokens", "--batch-wait-ms",
                             "--kv-watermark", "--ctx"}) {
      EXPECT_NE(r.out.find(flag), std::string::npos) << cmd[0] << " --help lacks " << flag;
    }
  }
}

}  // namespace
}  // namespace strata
