#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace strata {

void check_failed(const char* file, int line, const char* cond, std::string_view msg) {
  std::fprintf(stderr, "strata: internal check failed at %s:%d: %s%s%.*s\n", file, line, cond,
               msg.empty() ? "" : ": ", static_cast<int>(msg.size()), msg.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace strata
