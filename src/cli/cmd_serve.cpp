// `strata serve`: the OpenAI-compatible HTTP server (src/server/). This file only turns flags into
// a ServerConfig; what runs is server/serve.h.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/common_flags.h"
#include "core/error.h"
#include "core/units.h"
#include "server/serve.h"

namespace strata::cli {
namespace {

struct ServeOptions {
  ModelFlags model;
  KvFlags kv;
  EngineFlags engine;
  server::ServerConfig server;
  std::string max_body = "8MiB";
  std::string chat_template_file;
  std::string qos_default = "interactive";
  std::vector<std::string> api_keys;  // --api-key KEY[:QOS[:TENANT]], repeatable
  std::string api_keys_file;
};

// The server's keys from --api-key, --api-keys-file, else $STRATA_API_KEY (a plain key). Error
// messages never show a key.
std::vector<server::ApiKey> load_api_keys(const ServeOptions& o) {
  std::vector<server::ApiKey> keys;
  for (const std::string& spec : o.api_keys) {
    std::string why;
    auto k = server::parse_api_key(spec, &why);
    if (!k) fail("--api-key: {}", why);
    keys.push_back(std::move(*k));
  }
  if (!o.api_keys_file.empty()) {
    std::ifstream in(o.api_keys_file, std::ios::binary);
    if (!in) fail("cannot read --api-keys-file '{}'", o.api_keys_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string why;
    auto file_keys = server::parse_api_keys_file(ss.str(), &why);
    if (!file_keys) fail("--api-keys-file '{}': {}", o.api_keys_file, why);
    if (file_keys->empty()) fail("--api-keys-file '{}' holds no key", o.api_keys_file);
    for (auto& k : *file_keys) keys.push_back(std::move(k));
  }
  if (keys.empty()) {
    if (const char* env = std::getenv("STRATA_API_KEY"); env != nullptr && *env != '\0') keys.push_back({env, std::nullopt, ""});
  }
  if (server::has_duplicate_keys(keys)) fail("--api-key / --api-keys-file: the same key is given twice");
  return keys;
}

int run_serve(ServeOptions o) {
  server::ServerConfig& cfg = o.server;
  // Everything that can be wrong with the flags is reported before the port is opened.
  cfg.device = o.model.backend_options().device;
  cfg.engine = o.engine.to_config(o.kv, cfg.device);
  cfg.model_path = o.model.model;
  cfg.n_threads = o.model.threads;
  cfg.tensor_parallel = o.model.tensor_parallel;
  cfg.api_keys = load_api_keys(o);
  // The monitor reports the tenants the operator named (keys, --tenant-weight) one by one.
  std::vector<std::string>& tenants = cfg.engine.monitor.tenants;
  auto add_tenant = [&](const std::string& t) {
    if (!t.empty() && std::find(tenants.begin(), tenants.end(), t) == tenants.end()) tenants.push_back(t);
  };
  for (const server::ApiKey& k : cfg.api_keys) add_tenant(k.tenant);
  for (const auto& [t, w] : cfg.engine.sched.tenant_weights) add_tenant(t);
  const auto body = parse_bytes(o.max_body);
  if (!body || *body == 0) fail("--max-body-bytes '{}' is not a size (examples: 8MiB, 65536)", o.max_body);
  cfg.max_body_bytes = *body;
  const auto qos = qos_class_from_name(o.qos_default);
  if (!qos) fail("--qos-default '{}' is not one of interactive, batch", o.qos_default);
  cfg.qos_default = *qos;
  if (!(cfg.shutdown_timeout_s >= 0 && cfg.shutdown_timeout_s <= 86400)) fail("--shutdown-timeout-s must be in [0, 86400]");
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    if (!in) fail("cannot read --chat-template '{}'", o.chat_template_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    cfg.chat_template_source = ss.str();
  }
  return server::run_server(cfg);
}

}  // namespace

void add_serve_commands(Cli& cli) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = cli.app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API (completions, chat, /metrics)");
  add_model_flags(cmd, o->model);
  cmd->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "Port to listen on (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->api_keys,
                  "Require 'Authorization: Bearer KEY' on the API routes; KEY[:QOS[:TENANT]] gives the key's requests a "
                  "default QoS class (interactive|batch; a request's 'qos' field overrides it) and a fairness tenant "
                  "(replacing 'user'); repeatable (default: $STRATA_API_KEY; no authentication when no key is given)")
      ->allow_extra_args(false);
  cmd->add_option("--api-keys-file", o->api_keys_file,
                  "File of API keys, one KEY[:QOS[:TENANT]] a line ('#' comments and blank lines skipped), besides --api-key");
  cmd->add_option("--served-model-name", o->server.served_model_name,
                  "Model name in responses and /v1/models (default: the model file's name without .gguf)");
  cmd->add_option("--max-queue", o->server.max_queue, "Generation requests in flight (waiting + running) before 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--http-threads", o->server.http_threads,
                  "I/O threads of the HTTP front end; they serve every connection and stream (no thread per stream)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-connections", o->server.max_connections,
                  "Open connections at most; one more is answered 503 and closed (the open-file limit is raised to fit)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template file overriding the model's tokenizer.chat_template");
  cmd->add_option("--max-body-bytes", o->max_body, "Largest request body accepted (413 beyond), e.g. 8MiB")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout-s", o->server.shutdown_timeout_s,
                  "On SIGINT/SIGTERM, how long in-flight requests may run before they are cancelled")
      ->capture_default_str();
  cmd->add_option("--qos-default", o->qos_default,
                  "QoS class of requests without a 'qos' field: interactive or batch")
      ->capture_default_str();
  add_engine_flags(cmd, o->engine);
  add_kv_flags(cmd, o->kv);
  cmd->callback([&cli, o] { cli.run = [o] { return run_serve(*o); }; });
}

}  // namespace strata::cli
