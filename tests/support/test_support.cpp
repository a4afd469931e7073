#include "support/test_support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace strata::test {

std::string shared_path(const std::string& rel) {
  return (std::filesystem::path(STRATA_SHARED_DIR) / rel).lexically_normal().string();
}

// STRATA_TEST_BIN overrides the build's binary (the GPU machine runs a carried copy elsewhere).
std::string strata_bin() {
  const char* b = std::getenv("STRATA_TEST_BIN");
  return b != nullptr && *b != '\0' ? b : STRATA_BIN;
}

std::string make_temp_dir(const std::string& prefix) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
  return templ;
}

CommandResult run_command(const std::vector<std::string>& argv, double timeout_s) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandResult r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  bool open_fds[2] = {true, true};
  bool killed = false;
  char buf[65536];
  while (open_fds[0] || open_fds[1]) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      kill(pid, SIGKILL);
      killed = true;
    }
    for (int i = 0; i < 2; ++i) fds[i].fd = open_fds[i] ? (i == 0 ? out_pipe[0] : err_pipe[0]) : -1;
    int n = poll(fds, 2, killed ? 1000 : static_cast<int>(std::max<int64_t>(1, left.count())));
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (!open_fds[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got <= 0) {
        open_fds[i] = false;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      }
    }
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int reopen_open_file(int pid, const std::string& name_part) {
  const std::string dir = "/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/fd";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(e.path(), link_ec).string();
    if (!link_ec && target.find(name_part) != std::string::npos) {
      const int fd = ::open(e.path().c_str(), O_RDWR);
      if (fd >= 0) return fd;
    }
  }
  return -1;
}

RandomModelSpec small_model_spec(const std::string& arch, GgmlType dtype, uint32_t n_layer, uint64_t seed) {
  RandomModelSpec spec;
  spec.arch = arch;
  spec.n_layer = n_layer;
  spec.n_embd = 256;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.n_ff = 512;
  spec.n_ctx = 512;
  spec.dtype = dtype;
  spec.seed = seed;
  return spec;
}

}  // namespace strata::test
