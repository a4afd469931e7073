#include "cli/cli.h"

namespace strata::cli {

void add_template_commands(Cli&) {}  // filled in by the chat-template work

}  // namespace strata::cli
