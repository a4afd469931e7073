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
#include <mutex>
#include <stdexcept>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "server/http_server.h"
#include "server/model_host.h"
#include "server/server_context.h"
#include "server/shutdown_signal.h"

namespace strata::server {
namespace {

// After the engine has drained, streamed responses may still be writing their last chunks.
constexpr auto kFlushGrace = std::chrono::seconds(5);

// A model file that cannot be opened, is not GGUF, or is a GGUF the loader would refuse (truncated,
// a vocabulary without weights, tensors missing or misshapen, no usable tokenizer or template) fails
// the start before anything listens: a runtime failure (exit 1), not bad usage. The full load, which
// maps the weights onto the backend, runs in the background while /health says 503.
void check_model_file(const ModelHost::Options& options) {
  const std::string& path = options.model_path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0)
    throw std::runtime_error(fmt::format("cannot read the model '{}': {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return;  // a pipe or device: the loader says what is wrong with it
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  if (!in || magic != kGgufMagic) throw std::runtime_error(fmt::format("the model '{}' is not a GGUF file", path));
  // A --chat-template that does not parse is bad input (exit 2), like the flag's other errors.
  if (options.chat_template_source) ModelHost::check_chat_template(*options.chat_template_source);
  try {
    ModelHost::check_model(options);
  } catch (const Error& e) {
    const std::string what = e.what();  // most messages begin with the file's path already
    throw std::runtime_error(what.rfind(path, 0) == 0 ? fmt::format("cannot serve the model {}", what)
                                                      : fmt::format("cannot serve the model '{}': {}", path, what));
  }
}

}  // namespace

int run_server(const ServerConfig& config) {
  // A client that closes its connection must turn our next write into an error, not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
  ShutdownSignal signals;

  ModelHost::Options host_options{config.model_path, config.n_threads, config.engine, config.chat_template_source, config.device,
                                    config.tensor_parallel};
  // A failed engine (a forward pass that threw: a failed tensor-parallel rank) stops the server
  // with its message and a non-zero exit.
  std::mutex failure_mutex;
  std::string engine_failure;
  host_options.engine.on_failure = [&](const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(failure_mutex);
      engine_failure = message;
    }
    signals.notify();
  };
  check_model_file(host_options);
  ModelHost host(host_options);
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
  {
    std::unique_lock<std::mutex> lock(failure_mutex);
    if (!engine_failure.empty()) {
      const std::string message = engine_failure;
      lock.unlock();
      fmt::print(stderr, "strata serve: the engine failed, stopping: {}\n", message);
      std::fflush(stderr);
      http.wait_idle(std::chrono::steady_clock::now() + kFlushGrace);  // the failed requests' answers
      http.stop();
      host.shutdown_engine(/*drain=*/false, std::chrono::milliseconds(0));
      fail("the engine failed: {}", message);
    }
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
