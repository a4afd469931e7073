#include "server/serve.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "gguf/gguf_file.h"
#include "server/http_server.h"
#include "server/model_host.h"
#include "server/server_context.h"
#include "server/shutdown_signal.h"

namespace strata::server {
namespace {

// After the engine has drained, streamed responses may still be writing their last chunks.
constexpr auto kFlushGrace = std::chrono::seconds(5);

// A model file that cannot be opened or is not GGUF fails the start before anything listens (the
// full load runs in the background while /health says 503).
void check_model_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0)
    throw std::runtime_error(fmt::format("cannot read the model '{}': {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return;  // a pipe or device: the loader says what is wrong with it
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  if (!in || magic != kGgufMagic) throw std::runtime_error(fmt::format("the model '{}' is not a GGUF file", path));
}

}  // namespace

int run_server(const ServerConfig& config) {
  // A client that closes its connection must turn our next write into an error, not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
  ShutdownSignal signals;

  check_model_file(config.model_path);
  ModelHost host(ModelHost::Options{config.model_path, config.n_threads, config.engine, config.chat_template_source, config.device});
  ServerContext ctx(config, host);
  HttpServer http(ctx);
  http.bind();
  http.start();
  fmt::print(stderr, "strata serve: listening on http://{}:{} (model {} loading)\n", config.host, http.port(), ctx.model_name());
  std::fflush(stderr);

  // Runs on the loader thread, which `host` joins before `signals` (declared earlier) goes away.
  host.start([&host, &signals, name = ctx.model_name()] {
    if (host.ready()) {
      fmt::print(stderr, "strata serve: model {} ready\n", name);
      std::fflush(stderr);
    } else {
      signals.notify();
    }
  });

  const int sig = signals.wait();
  if (host.state() == ModelHost::State::kFailed) {
    http.stop();
    host.wait_loaded();
    host.rethrow_failure();
  }
  fmt::print(stderr, "strata serve: signal {} received, draining (up to {} s)\n", sig, config.shutdown_timeout_s);
  std::fflush(stderr);
  ctx.begin_draining();
  host.wait_loaded();  // a signal during loading: let it finish, then stop cleanly
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.shutdown_timeout_s * 1000.0));
  host.shutdown_engine(/*drain=*/true, timeout);
  http.wait_idle(std::chrono::steady_clock::now() + kFlushGrace);
  http.stop();
  fmt::print(stderr, "strata serve: stopped\n");
  return 0;
}

}  // namespace strata::server
