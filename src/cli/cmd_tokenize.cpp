#include "cli/cli.h"

namespace strata::cli {

void add_tokenize_commands(Cli&) {}  // filled in by the tokenizer work

}  // namespace strata::cli
