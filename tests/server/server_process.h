// Black-box server tests: a `strata serve` child process on a free loopback port, plus the small
// HTTP pieces the tests need beyond httplib::Client (a raw connection for reading a stream part-way
// and hanging up, SSE and Prometheus parsing).
// Thread-safety: a ServerProcess is driven by one thread; its client() may be used from several
// (each call makes its own httplib::Client).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace strata::test {

using Json = nlohmann::json;

// A port that was free a moment ago (the kernel's pick for port 0).
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

struct ServerOptions {
  std::vector<std::string> args;           // after `serve --model M --host 127.0.0.1 --port P`
  std::map<std::string, std::string> env;  // added to the environment (STRATA_API_KEY is removed first)
  std::string model = shared_path("models/stories260K.gguf");
  bool wait_ready = true;  // wait until /health answers 200
};

class ServerProcess {
 public:
  using Options = ServerOptions;

  // Small engine settings every test server shares: one compute thread (ctest runs tests in
  // parallel) and a KV pool far above what stories260K needs; STRATA_TEST_DEVICE=cuda runs every
  // test server on the GPU (the black-box API tests on the device machine).
  static std::vector<std::string> default_args() {
    std::vector<std::string> a = {"-t", "1", "--kv-memory", "64MiB"};
    if (const char* d = std::getenv("STRATA_TEST_DEVICE"); d != nullptr && *d != '\0') {
      a.push_back("--device");
      a.push_back(d);
    }
    return a;
  }

  explicit ServerProcess(Options o = {}) : options_(std::move(o)) {
    dir_ = make_temp_dir("strata-serve");
    log_path_ = dir_ + "/server.log";
    // A port found free can be taken before the server binds it; try a few.
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_loopback_port();
      spawn();
      if (!options_.wait_ready) return;
      if (wait_health(200, 120.0)) return;
      if (running() || log().find("cannot listen") == std::string::npos) break;
    }
    ADD_FAILURE() << "strata serve did not become ready on port " << port_ << "; its log:\n" << log();
  }

  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  std::string log() const {
    try {
      return read_file(log_path_);
    } catch (const std::exception&) {
      return "";
    }
  }

  std::unique_ptr<httplib::Client> client(time_t timeout_s = 120) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(timeout_s, 0);
    c->set_write_timeout(timeout_s, 0);
    c->set_connection_timeout(10, 0);
    return c;
  }

  // True while the child has not exited (reaps it when it has, keeping its exit code).
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0) return true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    pid_ = -1;
    return false;
  }

  // Waits (polling) until GET /health answers `status`; false when the process exits or time runs out.
  bool wait_health(int status, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      if (!running()) return false;
      auto c = client(5);
      if (auto r = c->Get("/health"); r && r->status == status) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `sig`; returns the exit code once the process is gone (128+N when killed by signal N),
  // or nullopt if it is still running after `timeout_s`.
  std::optional<int> signal_and_wait(int sig, double timeout_s) {
    if (pid_ > 0) ::kill(pid_, sig);
    return wait_exit(timeout_s);
  }

  std::optional<int> wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (running()) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
  }

 private:
  void spawn() {
    std::vector<std::string> argv = {strata_bin(), "serve", "--model", options_.model, "--host", "127.0.0.1", "--port",
                                     std::to_string(port_)};
    for (const auto& a : default_args()) argv.push_back(a);
    for (const auto& a : options_.args) argv.push_back(a);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv(*e);
      const std::string key = kv.substr(0, kv.find('='));
      if (key != "STRATA_API_KEY" && !options_.env.count(key)) env.push_back(kv);
    }
    for (const auto& [k, v] : options_.env) env.push_back(k + "=" + v);
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) throw std::runtime_error("cannot open " + log_path_);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int devnull = ::open("/dev/null", O_RDONLY);
      ::dup2(devnull, 0);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::execve(cargv[0], cargv.data(), cenv.data());
      ::_exit(127);
    }
    ::close(log_fd);
  }

  Options options_;
  std::string dir_, log_path_;
  int port_ = 0;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

// The server's /metrics page as series -> value (a failed fetch is a test failure and an empty map).
inline std::map<std::string, double> metrics(ServerProcess& s);

// One HTTP/1.1 exchange over a plain socket, read as far as the test wants: for hanging up in the
// middle of a stream, which httplib::Client cannot do on purpose.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect failed");
    timeval tv{120, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConnection() { close(); }

  void post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra_headers +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    send_all(req);
  }
  void send_all(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += static_cast<size_t>(n);
    }
  }
  // Reads until `count` occurrences of `needle` have arrived (or the peer closes); returns all bytes.
  std::string read_until(const std::string& needle, size_t count) {
    auto occurrences = [&] {
      size_t n = 0;
      for (size_t p = received_.find(needle); p != std::string::npos; p = received_.find(needle, p + needle.size())) ++n;
      return n;
    };
    char buf[4096];
    while (occurrences() < count) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string received_;
};

// The JSON payloads of an SSE body's `data:` lines, in order; `done` is set when `data: [DONE]`
// was the last one.
struct SseEvents {
  std::vector<Json> chunks;
  bool done = false;
  size_t events_after_done = 0;
};
inline SseEvents parse_sse(const std::string& body) {
  SseEvents out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (out.done) ++out.events_after_done;
    if (data == "[DONE]") out.done = true;
    else out.chunks.push_back(Json::parse(data));
  }
  return out;
}

// Sample values of a Prometheus text page by series ("name" or "name{labels}" as written).
inline std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

inline std::map<std::string, double> metrics(ServerProcess& s) {
  auto r = s.client()->Get("/metrics");
  EXPECT_TRUE(r && r->status == 200);
  return r ? parse_prometheus(r->body) : std::map<std::string, double>{};
}

// The reference greedy continuations of stories260K (../shared/reference).
struct GreedyReference {
  std::string prompt;
  std::vector<int> prompt_tokens;
  std::vector<int> tokens;
  std::string content;
};
inline std::vector<GreedyReference> greedy_references() {
  std::vector<GreedyReference> out;
  std::istringstream in(read_file(shared_path("reference/stories260K-greedy.jsonl")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const Json j = Json::parse(line);
    out.push_back({j["prompt"], j["prompt_tokens"].get<std::vector<int>>(), j["tokens"].get<std::vector<int>>(), j["content"]});
  }
  return out;
}

}  // namespace strata::test
