// Everything `strata serve` is configured with, as one value.
// Thread-safety: a plain value; read-only once the server starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "server/auth.h"

namespace strata::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port (printed at start)
  std::vector<ApiKey> api_keys;   // --api-key, --api-keys-file, $STRATA_API_KEY; none = no authentication
  QosClass qos_default = QosClass::kInteractive;  // --qos-default: the class of requests without a `qos` field
  std::string served_model_name;  // "" = the model file's name without .gguf
  int32_t max_queue = 256;        // generation requests in flight (waiting + running) before 429
  int32_t http_threads = 2;       // I/O threads serving every connection (none is held by a stream)
  int32_t max_connections = 8192; // open connections beyond this are answered 503 and closed
  uint64_t max_body_bytes = uint64_t{8} << 20;
  double shutdown_timeout_s = 30;  // how long SIGINT/SIGTERM lets in-flight requests finish

  std::string model_path;
  int n_threads = 0;
  DeviceKind device = DeviceKind::kAuto;  // --device
  int tensor_parallel = 1;                 // --tensor-parallel
  EngineConfig engine;
  std::optional<std::string> chat_template_source;  // the text of --chat-template FILE
};

}  // namespace strata::server
