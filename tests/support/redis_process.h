// Test fixtures that run real Redis servers: RedisServerProcess (one redis-server on a free
// loopback port, in its own temp dir, no persistence) and RedisClusterProcess (three such servers
// with cluster mode on, joined with `redis-cli --cluster create`). Tests call
// STRATA_REQUIRE_REDIS() first: it skips the test, with the reason, where redis-server or
// redis-cli is not on the PATH. Header-only; failures to start throw std::runtime_error.
// Thread-safety: an object is used by one thread at a time.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace strata::test {

// The absolute path of `program` on the PATH, empty when it is not there.
inline std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t colon = dirs.find(':', pos);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = dirs.substr(pos, colon - pos);
    pos = colon + 1;
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// Empty when the Redis tests can run, else why not.
inline std::string redis_unavailable_reason() {
  if (find_on_path("redis-server").empty()) return "redis-server is not on the PATH (apt-get install redis-server)";
  if (find_on_path("redis-cli").empty()) return "redis-cli is not on the PATH (apt-get install redis-tools)";
  return {};
}

#define STRATA_REQUIRE_REDIS()                                                         \
  do {                                                                                 \
    const std::string strata_redis_reason = ::strata::test::redis_unavailable_reason(); \
    if (!strata_redis_reason.empty()) GTEST_SKIP() << strata_redis_reason;             \
  } while (0)

namespace redis_detail {

// True when 127.0.0.1:port can be bound now.
inline bool port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A loopback port that was free a moment ago (bind port 0, read it, close). With cluster_bus, the
// port is at most 55535 and port + 10000 (the cluster bus) is free too.
inline int pick_port(bool cluster_bus) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    if (port <= 0) continue;
    if (cluster_bus && (port > 55535 || !port_free(port + 10000))) continue;
    return port;
  }
  throw std::runtime_error("no free loopback port found");
}

// Sends an inline command to 127.0.0.1:port and returns the first line of the reply ("" when
// nothing came within timeout_ms).
inline std::string inline_command(int port, const std::string& line, int timeout_ms) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = line + "\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      char buf[512];
      while (reply.find("\r\n") == std::string::npos) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
        const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
        if (got <= 0) break;
        reply.append(buf, static_cast<size_t>(got));
      }
    }
  }
  ::close(fd);
  const size_t eol = reply.find("\r\n");
  return eol == std::string::npos ? std::string() : reply.substr(0, eol);
}

}  // namespace redis_detail

class RedisServerProcess {
 public:
  // Starts redis-server on a free loopback port with `extra_args` appended (e.g. {"--requirepass",
  // "pw"} or the cluster options) and waits until it answers PING.
  explicit RedisServerProcess(std::vector<std::string> extra_args = {})
      : extra_args_(std::move(extra_args)), dir_(make_temp_dir("strata-redis")) {
    for (const std::string& a : extra_args_) {
      if (a == "--cluster-enabled") cluster_ = true;
    }
    std::string last_error;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = redis_detail::pick_port(cluster_);
      try {
        start();
        return;
      } catch (const std::runtime_error& e) {
        last_error = e.what();  // most likely the port was taken meanwhile: try another
      }
    }
    std::filesystem::remove_all(dir_);
    throw std::runtime_error("redis-server did not start: " + last_error);
  }

  ~RedisServerProcess() {
    kill(SIGKILL);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  RedisServerProcess(const RedisServerProcess&) = delete;
  RedisServerProcess& operator=(const RedisServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  const std::string& dir() const { return dir_; }
  // redis://127.0.0.1:PORT (no credentials: add them for a server started with --requirepass).
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Sends `sig` (SIGKILL, SIGTERM) and reaps the process; the data is gone (no persistence).
  void kill(int sig = SIGKILL) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::kill(pid_, SIGCONT);  // a stopped server acts on SIGTERM only once continued
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
  }

  // SIGSTOP / SIGCONT: the server keeps its sockets but answers nothing while paused.
  void pause() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

  // Kills the server if it runs and starts it again on the same port and dir (a cluster node
  // keeps its identity through nodes.conf).
  void restart() {
    kill(SIGKILL);
    start();
  }

 private:
  void start() {
    const std::string server = find_on_path("redis-server");
    if (server.empty()) throw std::runtime_error("redis-server is not on the PATH");
    std::vector<std::string> argv{server, "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", dir_,
                                  "--daemonize", "no", "--logfile", ""};
    argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
    const std::string log = dir_ + "/redis.log";
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      const int in = ::open("/dev/null", O_RDONLY);
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (in >= 0) ::dup2(in, 0);
      if (out >= 0) {
        ::dup2(out, 1);
        ::dup2(out, 2);
      }
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server on port " + std::to_string(port_) + " exited: " + log_tail());
      }
      const std::string reply = redis_detail::inline_command(port_, "PING", 200);
      // +PONG, or -NOAUTH when a password is required: either way the server answers.
      if (reply == "+PONG" || reply.starts_with("-NOAUTH")) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(SIGKILL);
    throw std::runtime_error("redis-server on port " + std::to_string(port_) + " did not answer PING: " + log_tail());
  }

  std::string log_tail() const {
    try {
      const std::string log = read_file(dir_ + "/redis.log");
      return log.size() > 600 ? log.substr(log.size() - 600) : log;
    } catch (const std::runtime_error&) {
      return "(no log)";
    }
  }

  std::vector<std::string> extra_args_;
  std::string dir_;
  bool cluster_ = false;
  int port_ = 0;
  pid_t pid_ = -1;
};

class RedisClusterProcess {
 public:
  // `masters` cluster-enabled servers (no replicas), the slots split evenly between them in the
  // order of node(): node(0) 0..5460, node(1) 5461..10922, node(2) 10923..16383 for three.
  // cluster-require-full-coverage is off, so the other masters keep serving when one is down.
  explicit RedisClusterProcess(int masters = 3) {
    for (int i = 0; i < masters; ++i) {
      nodes_.push_back(std::make_unique<RedisServerProcess>(std::vector<std::string>{
          "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
          "--cluster-require-full-coverage", "no"}));
    }
    std::vector<std::string> create{find_on_path("redis-cli"), "--cluster", "create"};
    for (const auto& n : nodes_) create.push_back(n->address());
    create.insert(create.end(), {"--cluster-replicas", "0", "--cluster-yes"});
    const CommandResult r = run_command(create, 60);
    if (r.exit_code != 0) {
      throw std::runtime_error("redis-cli --cluster create failed: " + r.out + r.err);
    }
    wait_ok();
  }

  int size() const { return static_cast<int>(nodes_.size()); }
  RedisServerProcess& node(int i) { return *nodes_.at(i); }
  // redis-cluster://127.0.0.1:p1,127.0.0.1:p2,...
  std::string url() const {
    std::string u = "redis-cluster://";
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (i > 0) u += ',';
      u += nodes_[i]->address();
    }
    return u;
  }

  // Waits until every running node reports cluster_state:ok.
  void wait_ok(double timeout_s = 20) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    const std::string cli = find_on_path("redis-cli");
    while (true) {
      bool all_ok = true;
      std::string last;
      for (const auto& n : nodes_) {
        if (!n->running()) continue;
        const CommandResult r = run_command({cli, "-p", std::to_string(n->port()), "cluster", "info"}, 5);
        if (r.out.find("cluster_state:ok") == std::string::npos) {
          all_ok = false;
          last = r.out + r.err;
          break;
        }
      }
      if (all_ok) return;
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("the Redis cluster did not reach cluster_state:ok: " + last);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  std::vector<std::unique_ptr<RedisServerProcess>> nodes_;
};

}  // namespace strata::test
