#include <cstdio>
#include <exception>

#include "cli/cli.h"
#include "core/error.h"

int main(int argc, char** argv) {
  using namespace strata::cli;
  Cli cli;
  cli.app.require_subcommand(1);
  cli.app.set_version_flag("--version", "strata 0.1.0");
  add_gguf_commands(cli);
  add_tokenize_commands(cli);
  add_template_commands(cli);
  add_generate_commands(cli);
  add_bench_commands(cli);
  add_eval_commands(cli);
  add_serve_commands(cli);
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.app.exit(e);
  } catch (const CLI::ParseError& e) {
    cli.app.exit(e);
    return kExitBadInput;
  }
  if (!cli.run) return kExitBadInput;
  try {
    return cli.run();
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return kExitFailure;
  }
}
