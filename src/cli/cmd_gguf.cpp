#include "cli/cli.h"

namespace strata::cli {

void add_gguf_commands(Cli&) {}

}  // namespace strata::cli
