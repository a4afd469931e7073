// The `strata` command line: each file cmd_*.cpp adds its subcommands to the app.
// A subcommand's CLI11 callback stores the function to run in Cli::run; main() calls it after
// parsing and uses its return value as the exit code. Exit codes: 0 success, 1 runtime failure
// (or a template's raise_exception), 2 bad usage or bad input (malformed files included).
// Thread-safety: used by the main thread only.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace strata::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

struct Cli {
  CLI::App app{"Strata: an LLM inference server built around its KV cache", "strata"};
  std::function<int()> run;
};

void add_gguf_commands(Cli& cli);
void add_tokenize_commands(Cli& cli);
void add_template_commands(Cli& cli);
void add_generate_commands(Cli& cli);
void add_bench_commands(Cli& cli);
// `bench serve` (cmd_bench_serve.cpp), added to the `bench` command by add_bench_commands.
void add_bench_serve_command(Cli& cli, CLI::App* bench);
void add_eval_commands(Cli& cli);
void add_serve_commands(Cli& cli);

}  // namespace strata::cli
