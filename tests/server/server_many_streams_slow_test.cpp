// 2,000 concurrent streaming connections against `strata serve` on stories260K (issue 18): every
// stream completes with its exact token count, /health answers every probe during the load, and
// afterwards descriptors, threads and memory are back where they were. The probe latencies are
// printed (and recorded in docs/PERFORMANCE.md), not asserted.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::ServerProcess;
using Clock = std::chrono::steady_clock;

int64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

size_t entries(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

struct Stream {
  int fd = -1;
  std::string out;  // the request, then what is left to send
  std::string in;
  bool done = false;
};

// Runs `n` streaming completions of `max_tokens` each at once over non-blocking sockets; returns
// how many ended with [DONE] and the exact usage.
int run_streams(int port, int n, int max_tokens) {
  const std::string body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": " + std::to_string(max_tokens) +
                           ", \"ignore_eos\": true, \"stream\": true, \"stream_options\": {\"include_usage\": true}}";
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string want_usage = "\"completion_tokens\":" + std::to_string(max_tokens) + ",";
  std::vector<Stream> streams(static_cast<size_t>(n));
  for (Stream& s : streams) {
    s.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (s.fd < 0) {
      ADD_FAILURE() << "socket() failed: " << std::strerror(errno);
      return 0;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
      ADD_FAILURE() << "connect() failed: " << std::strerror(errno);
    }
    s.out = req;
  }
  int complete = 0, open = n;
  std::vector<pollfd> fds;
  std::vector<size_t> index;
  char buf[16384];
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (open > 0 && Clock::now() < deadline) {
    fds.clear();
    index.clear();
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i].done) continue;
      fds.push_back({streams[i].fd, static_cast<short>(POLLIN | (streams[i].out.empty() ? 0 : POLLOUT)), 0});
      index.push_back(i);
    }
    if (::poll(fds.data(), fds.size(), 1000) < 0) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      Stream& s = streams[index[k]];
      if (fds[k].revents & POLLOUT) {
        const ssize_t w = ::send(s.fd, s.out.data(), s.out.size(), MSG_NOSIGNAL);
        if (w > 0) s.out.erase(0, static_cast<size_t>(w));
      }
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t r = ::recv(s.fd, buf, sizeof buf, 0);
        if (r > 0) s.in.append(buf, static_cast<size_t>(r));
        const bool ended = s.in.find("data: [DONE]\n\n") != std::string::npos;
        if (ended || r == 0 || (r < 0 && errno != EAGAIN)) {
          if (ended && s.in.rfind("HTTP/1.1 200 OK", 0) == 0 && s.in.find(want_usage) != std::string::npos) ++complete;
          s.done = true;
          ::close(s.fd);
          --open;
        }
      }
    }
  }
  for (Stream& s : streams) {
    if (!s.done) ::close(s.fd);
  }
  return complete;
}

TEST(ServerManyStreams, TwoThousandConcurrentStreamsAllCompleteAndHealthAnswersThroughout) {
  constexpr int kStreams = 2000, kMaxTokens = 64;
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < kStreams + 200) GTEST_SKIP() << "the open-file hard limit is " << lim.rlim_max;
  lim.rlim_cur = lim.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);

  ServerProcess::Options o;
  o.args = {"--max-queue", "4096", "--max-seqs", "256"};
  ServerProcess s(o);
  const std::string proc = "/proc/" + std::to_string(s.pid());
  // The idle level: after a first wave of the same load, which touches the KV pool's pages (a
  // fixed reservation, resident once used) and sizes the allocator's pools.
  ASSERT_EQ(run_streams(s.port(), kStreams, kMaxTokens), kStreams);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const int64_t rss_idle = rss_kib(s.pid());
  const size_t fds_idle = entries(proc + "/fd");
  const size_t threads_idle = entries(proc + "/task");

  std::atomic<bool> stop{false};
  std::vector<double> probe_ms;
  double worst_ms = 0, worst_at_s = 0;  // the slowest probe and when it was sent, from the wave's start
  const auto wave_start = Clock::now();
  int probe_failures = 0;
  size_t threads_peak = threads_idle, fds_peak = fds_idle;
  std::thread prober([&] {
    auto c = s.client(/*timeout_s=*/30);
    while (!stop.load()) {
      const auto t0 = Clock::now();
      auto r = c->Get("/health");
      probe_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (probe_ms.back() > worst_ms) {
        worst_ms = probe_ms.back();
        worst_at_s = std::chrono::duration<double>(t0 - wave_start).count();
      }
      if (!r || r->status != 200) ++probe_failures;
      threads_peak = std::max(threads_peak, entries(proc + "/task"));
      fds_peak = std::max(fds_peak, entries(proc + "/fd"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const auto t0 = Clock::now();
  const int complete = run_streams(s.port(), kStreams, kMaxTokens);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  stop.store(true);
  prober.join();

  EXPECT_EQ(complete, kStreams);
  EXPECT_EQ(probe_failures, 0);
  ASSERT_FALSE(probe_ms.empty());
  std::sort(probe_ms.begin(), probe_ms.end());
  const auto m = test::metrics(s);
  EXPECT_EQ(m.at("strata_requests_total{status=\"success\"}"), 2 * kStreams);
  EXPECT_EQ(m.at("strata_requests_in_flight"), 0);
  // Bounded: no thread per connection; every descriptor given back.
  EXPECT_EQ(threads_peak, threads_idle);
  EXPECT_GE(fds_peak, fds_idle + kStreams / 2) << "the load was not concurrent";
  size_t fds_after = 0;
  for (int i = 0; i < 500 && (fds_after = entries(proc + "/fd")) > fds_idle; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(fds_after, fds_idle);
  // The server gives freed memory back within a few seconds of a wave of connections closing.
  int64_t rss_after = rss_kib(s.pid());
  for (int i = 0; i < 100 && rss_after > rss_idle * 11 / 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rss_after = rss_kib(s.pid());
  }
  EXPECT_LE(rss_after, rss_idle * 11 / 10) << "idle " << rss_idle << " KiB, after " << rss_after << " KiB";
  std::printf("[ many streams ] %d streams x %d tokens in %.2f s (%.0f tok/s); /health probes: %zu, p50 %.1f ms, p99 %.1f ms, "
              "max %.1f ms (sent %.2f s into the wave); threads %zu; fds idle %zu peak %zu; RSS idle %lld KiB, after %lld KiB\n",
              kStreams, kMaxTokens, seconds, kStreams * kMaxTokens / seconds, probe_ms.size(), probe_ms[probe_ms.size() / 2],
              probe_ms[probe_ms.size() * 99 / 100], probe_ms.back(), worst_at_s, threads_idle, fds_idle, fds_peak,
              static_cast<long long>(rss_idle), static_cast<long long>(rss_after));
}

}  // namespace
}  // namespace strata
