// GET /: a human-readable status page of the server (HTML).
// Thread-safety: returns a view of static storage; callable from any thread.
#pragma once

#include <string_view>

namespace strata::server {

std::string_view status_page_html();

}  // namespace strata::server
