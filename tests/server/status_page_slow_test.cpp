// The status page (GET /) in a real browser: Debian's headless Chromium loads it from a running
// `strata serve` and from scripted servers whose /metrics fails, and the page must render with no
// JavaScript error. The page sets its title to "strata: ok" after a successful poll and render
// ("strata: unreachable" after a failed one) and counts polls, failures, renders and caught
// errors in <body data-*>; --dump-dom shows both once --virtual-time-budget has let its timers run.
// Needs /usr/bin/chromium (scripts/install-browser-deps.sh); skipped without it.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "server/server_process.h"
#include "server/status_page.h"
#include "support/test_support.h"

namespace strata {
namespace {

constexpr const char* kChromium = "/usr/bin/chromium";

// A scripted server: GET / is the status page, GET /metrics answers from `metrics` per call.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<void(int call, httplib::Response&)> metrics) : metrics_(std::move(metrics)) {
    svr_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const std::string_view html = server::status_page_html();
      res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { metrics_(calls_++, res); });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ScriptedServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }
  int calls() const { return calls_.load(); }

 private:
  std::function<void(int, httplib::Response&)> metrics_;
  httplib::Server svr_;
  std::atomic<int> calls_{0};
  int port_ = 0;
  std::thread thread_;
};

struct BrowserRun {
  test::CommandResult result;
  std::string dom;      // --dump-dom output
  std::string console;  // Chromium's stderr, which carries the page's console ("INFO:CONSOLE")
};

// Runs headless Chromium on `url` with a fresh profile; `extra` selects --dump-dom or --screenshot.
BrowserRun run_browser(const std::string& url, std::vector<std::string> extra, int virtual_ms) {
  const std::string profile = test::make_temp_dir("strata-chromium");
  std::vector<std::string> argv = {kChromium,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--disable-quic",
                                   "--no-first-run",
                                   "--disable-background-networking",
                                   "--disable-component-update",
                                   "--disable-sync",
                                   "--user-data-dir=" + profile,
                                   "--enable-logging=stderr",
                                   "--v=0",
                                   "--virtual-time-budget=" + std::to_string(virtual_ms)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  BrowserRun r;
  r.result = test::run_command(argv, 180.0);
  r.dom = r.result.out;
  r.console = r.result.err;
  std::filesystem::remove_all(profile);
  return r;
}

std::string body_attr(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex("<body[^>]*\\s" + name + "=\"([^\"]*)\""))) return m[1];
  return "<missing>";
}

void expect_no_js_errors(const BrowserRun& r) {
  EXPECT_EQ(r.console.find("Uncaught"), std::string::npos) << r.console;
  EXPECT_EQ(body_attr(r.dom, "data-js-errors"), "0") << r.dom;
}

class StatusPage : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kChromium, X_OK) != 0) {
      GTEST_SKIP() << kChromium << " is missing: run scripts/install-browser-deps.sh to run the status page's browser test";
    }
  }
};

TEST_F(StatusPage, RendersTheLiveMetricsOfARunningServer) {
  test::ServerProcess serve;
  ASSERT_TRUE(serve.running()) << serve.log();
  const BrowserRun r = run_browser(serve.url() + "/", {"--dump-dom"}, 5000);
  ASSERT_EQ(r.result.exit_code, 0) << r.console;
  EXPECT_NE(r.dom.find("<title>strata: ok</title>"), std::string::npos) << r.dom;
  expect_no_js_errors(r);
  EXPECT_EQ(body_attr(r.dom, "data-failures"), "0");
  EXPECT_GE(std::stoi(body_attr(r.dom, "data-renders")), 2) << "polls every second";
  // The cards show numbers read from strata's own metric names, not placeholders.
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"c-kv\">[0-9.]+%<"))) << r.dom;
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"c-running\">0<"))) << r.dom;
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("capacity hot [0-9.]+ [KMG]iB"))) << r.dom;
  EXPECT_NE(r.dom.find("id=\"model\">stories260K<"), std::string::npos) << "model name from /v1/models";
  // The engine monitor's figures, from strata's own gauges; the controller is on by default.
  for (const char* id : {"m-tier-hot", "m-tier-warm", "m-tier-cold", "m-frag", "m-hit"}) {
    EXPECT_TRUE(std::regex_search(r.dom, std::regex(std::string("id=\"") + id + "\"[^>]*>[0-9.]+%<"))) << id << r.dom;
  }
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"m-jain\"[^>]*>[0-9.]+<"))) << r.dom;
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"m-step-compute\">[0-9.]+ ms<"))) << r.dom;
  for (const char* id : {"q-interactive-ttft-p50", "q-interactive-ttft-p99", "q-batch-tpot-p50", "q-batch-tpot-p99"}) {
    EXPECT_TRUE(std::regex_search(r.dom, std::regex(std::string("id=\"") + id + "\">[0-9.]+ ms<"))) << id << r.dom;
  }
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"q-batch-waiting\">0<"))) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-state\">pid<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-knob-max_seqs\">64<"), std::string::npos) << "the flag's value while nothing presses" << r.dom;
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"ctl-kv-demand\">[0-9.]+%<"))) << r.dom;
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"m-xfer-cold-write\">[0-9.]+ B/s<"))) << r.dom;
}

TEST_F(StatusPage, ShowsTheQosClassesAndThePidControllersLoopsAndKnobs) {
  test::ServerOptions options;
  options.args = {"--controller", "pid", "--max-seqs", "48"};
  test::ServerProcess serve(options);
  ASSERT_TRUE(serve.running()) << serve.log();
  const BrowserRun r = run_browser(serve.url() + "/", {"--dump-dom"}, 5000);
  ASSERT_EQ(r.result.exit_code, 0) << r.console;
  expect_no_js_errors(r);
  EXPECT_NE(r.dom.find("id=\"ctl-state\">pid<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-kv-setpoint\">90.0%<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-tpot-setpoint\">200 ms<"), std::string::npos) << r.dom;
  // Idle: no KV pressure, no interactive TPOT (error -1): both loops rest at 0, knobs at the flags.
  EXPECT_NE(r.dom.find("id=\"ctl-kv-output\">0.000<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-tpot-error\">-1.000<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-knob-max_seqs\">48<"), std::string::npos) << r.dom;
}

TEST_F(StatusPage, ScreenshotIsANonTrivialPng) {
  test::ServerProcess serve;
  ASSERT_TRUE(serve.running()) << serve.log();
  const std::string dir = test::make_temp_dir("strata-shot");
  const std::string png = dir + "/status.png";
  const BrowserRun r = run_browser(serve.url() + "/", {"--hide-scrollbars", "--window-size=1200,900", "--screenshot=" + png}, 5000);
  ASSERT_EQ(r.result.exit_code, 0) << r.console;
  // No DOM is dumped with --screenshot; the console (on stderr) still shows uncaught errors.
  EXPECT_EQ(r.console.find("Uncaught"), std::string::npos) << r.console;
  ASSERT_TRUE(std::filesystem::exists(png)) << r.console;
  const std::string bytes = test::read_file(png);
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(16), 1200u);
  EXPECT_EQ(be32(20), 900u);
  // A blank 1200x900 page compresses to a few KB; text, cards and six charts do not.
  EXPECT_GT(bytes.size(), 20000u);
  std::filesystem::remove_all(dir);
}

TEST_F(StatusPage, KeepsPollingThroughAMetricsOutageAndRecovers) {
  // Two failures, one answer that is not Prometheus text at all, then valid metrics.
  ScriptedServer server([](int call, httplib::Response& res) {
    if (call < 2) {
      res.status = 503;
      res.set_content("{\"error\":\"loading\"}", "application/json");
    } else if (call == 2) {
      res.set_content("<html>a proxy error page</html>\n", "text/html");
    } else {
      res.set_content(
          "strata_model_ready 1\nstrata_kv_usage_ratio 0.25\nstrata_kv_bytes{tier=\"hot\"} 1048576\n"
          "strata_kv_capacity_bytes{tier=\"hot\"} 4194304\nstrata_requests_running 3\nstrata_requests_waiting 1\n"
          "strata_requests_swapped 0\nstrata_generation_tokens_total " + std::to_string(100 * call) + "\n"
          "strata_kv_tier_usage_ratio{tier=\"hot\"} 0.8\nstrata_kv_tier_usage_ratio{tier=\"warm\"} 0.25\n"
          "strata_kv_fragmentation_ratio 0.0625\nstrata_fairness_jain_index 0.875\n"
          "strata_kv_tier_blocks{tier=\"host\",state=\"used\"} 3\nstrata_kv_tier_blocks{tier=\"host\",state=\"total\"} 10\n"
          "strata_kv_tier_bytes{tier=\"host\",state=\"used\"} 30720\n"
          "strata_kv_tier_blocks{tier=\"file\",state=\"used\"} 0\nstrata_kv_tier_blocks{tier=\"file\",state=\"total\"} 0\n"
          "strata_kv_transfer_bytes_per_second{link=\"cold\",direction=\"write\"} 3145728\n"
          "strata_kv_transfer_bytes_per_second{link=\"device\",direction=\"to_device\"} 512\n"
          "strata_controller_kv_demand_ratio 0.9375\n"
          "strata_qos_sequences{qos=\"batch\",state=\"waiting\"} 6\n"
          "strata_qos_ttft_seconds{qos=\"interactive\",quantile=\"0.99\"} 0.0425\n"
          "strata_qos_tpot_seconds{qos=\"batch\",quantile=\"0.5\"} 1.25\n"
          "strata_controller_enabled 1\nstrata_controller_output{loop=\"kv_demand\"} 0.5\n"
          "strata_controller_knob{knob=\"batch_reserve\"} 0.155\n",
          "text/plain");
    }
  });
  const BrowserRun r = run_browser(server.url(), {"--dump-dom"}, 8000);
  ASSERT_EQ(r.result.exit_code, 0) << r.console;
  expect_no_js_errors(r);
  EXPECT_EQ(body_attr(r.dom, "data-failures"), "2") << r.dom;
  EXPECT_NE(r.dom.find("<title>strata: ok</title>"), std::string::npos) << r.dom;
  EXPECT_GE(server.calls(), 5);
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"c-kv\">25.0%<"))) << r.dom;
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("id=\"c-running\">3<"))) << r.dom;
  // The monitor's gauges as sent; what is missing (the cold tier, most quantiles) shows a dash.
  EXPECT_NE(r.dom.find("id=\"m-tier-hot\">80.0%<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-tier-warm\">25.0%<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-tier-cold\">–<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-frag\" colspan=\"3\">6.3%<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-jain\" colspan=\"3\">0.88<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"q-batch-waiting\">6<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"q-interactive-ttft-p99\">42.5 ms<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"q-batch-tpot-p50\">1250 ms<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"q-batch-tpot-p99\">–<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-state\">pid<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-kv-output\">0.500<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-knob-batch_reserve\">15.5%<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"ctl-kv-demand\">93.8%<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-xfer-cold-write\">3.00 MiB/s<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-xfer-device-to_device\">512 B/s<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-xfer-remote-read\">–<"), std::string::npos) << r.dom;
  // Blocks used / total per tier with the bytes used; a tier of no blocks (or not sent) is a dash.
  EXPECT_NE(r.dom.find("id=\"m-blocks-host\">3 / 10 (30.0 KiB)<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-blocks-file\">–<"), std::string::npos) << r.dom;
  EXPECT_NE(r.dom.find("id=\"m-blocks-warm\">–<"), std::string::npos) << r.dom;
}

TEST_F(StatusPage, ShowsUnreachableWhenMetricsCannotBeFetchedAtAll) {
  // Opened as a file, the page's fetches of /metrics fail: it must say so and keep going.
  const std::string dir = test::make_temp_dir("strata-page-file");
  const std::string path = dir + "/status.html";
  test::write_file(path, std::string(server::status_page_html()));
  const BrowserRun r = run_browser("file://" + path, {"--dump-dom"}, 4000);
  ASSERT_EQ(r.result.exit_code, 0) << r.console;
  EXPECT_NE(r.console.find("CONSOLE"), std::string::npos) << "the page's console must reach stderr, else the check is void";
  expect_no_js_errors(r);
  EXPECT_NE(r.dom.find("<title>strata: unreachable</title>"), std::string::npos) << r.dom;
  EXPECT_GE(std::stoi(body_attr(r.dom, "data-failures")), 2) << "keeps retrying";
  EXPECT_EQ(body_attr(r.dom, "data-renders"), "0");
  EXPECT_NE(r.dom.find("Cannot read /metrics"), std::string::npos) << r.dom;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
