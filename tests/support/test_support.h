// Helpers shared by tests: paths of the shared reference data and running the strata binary.
// Thread-safety: all functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/random_model.h"

namespace strata::test {

// A small random model's spec: hidden 256, 8 heads over 2 KV heads (GQA 4), feed-forward 512,
// context 512.
RandomModelSpec small_model_spec(const std::string& arch, GgmlType dtype, uint32_t n_layer, uint64_t seed);

// Absolute path of a file under ../shared (e.g. "models/stories260K.gguf").
std::string shared_path(const std::string& rel);

// Absolute path of the built strata executable.
std::string strata_bin();

// A fresh empty directory under the system temp dir, removed by the caller if wanted.
std::string make_temp_dir(const std::string& prefix);

struct CommandResult {
  int exit_code = -1;  // the process's exit status; 128+N when killed by signal N
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs argv (argv[0] is the program path) without a shell, with stdin from /dev/null, and an
// optional wall-clock limit after which the child is killed (exit_code is then 128+SIGKILL).
CommandResult run_command(const std::vector<std::string>& argv, double timeout_s = 120.0);

// Reads a whole file as bytes; throws std::runtime_error when it cannot be read.
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);

// Opens for reading and writing the first file that process `pid` (0: this process) holds open
// whose path contains `name_part`, through /proc/PID/fd: the way to reach a KV spill file, which
// the cold store unlinks at once, and damage it behind the store's back. -1 when none is found.
int reopen_open_file(int pid, const std::string& name_part);

}  // namespace strata::test
