// `strata serve` as a function: listen first, load the model on another thread (so /health says
// 503 until it is ready), serve until SIGINT/SIGTERM, then drain: refuse new generation requests
// (503), let the ones in flight finish for up to shutdown_timeout_s, cancel the rest, stop.
// Thread-safety: call from the main thread, once per process (it installs signal handlers).
#pragma once

#include "server/server_config.h"

namespace strata::server {

// Returns the exit code (0 after a signal-initiated shutdown). Throws strata::Error when the
// address cannot be bound or the model cannot be loaded.
int run_server(const ServerConfig& config);

}  // namespace strata::server
