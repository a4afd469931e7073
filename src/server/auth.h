// API-key authentication: `Authorization: Bearer <key>`, compared in constant time so that response
// timing does not reveal how much of a guessed key was right.
// Thread-safety: pure functions.
#pragma once

#include <string_view>

namespace strata::server {

// True when `a` equals `b`; the time taken depends only on b's length (pass the secret as `b`).
bool constant_time_equal(std::string_view a, std::string_view b);

// True when `authorization` (the header's value, "" when absent) is "Bearer <key>" with the
// scheme matched case-insensitively, as RFC 6750 allows. Precondition: key is not empty.
bool bearer_matches(std::string_view authorization, std::string_view key);

}  // namespace strata::server
