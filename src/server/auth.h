// API-key authentication: `Authorization: Bearer <key>`, compared in constant time so that response
// timing does not reveal how much of a guessed key was right. A server may hold several keys, each
// with a default QoS class and a tenant (`--api-key KEY[:QOS[:TENANT]]`, `--api-keys-file`): the
// class applies to the key's requests without a `qos` field, the tenant replaces the request's
// `user` as its fairness tenant. Keys are secrets: no message, log line or metric shows one.
// Thread-safety: pure functions; an ApiKeys value is read-only once the server starts.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sched/sequence.h"

namespace strata::server {

struct ApiKey {
  std::string key;
  std::optional<QosClass> qos;  // the class of its requests without a `qos` field (else --qos-default)
  std::string tenant;           // the fairness tenant of its requests ("": the request's `user`)
};

// True when `a` equals `b`; the time taken depends only on b's length (pass the secret as `b`).
bool constant_time_equal(std::string_view a, std::string_view b);

// True when `authorization` (the header's value, "" when absent) is "Bearer <key>" with the
// scheme matched case-insensitively, as RFC 6750 allows. Precondition: key is not empty.
bool bearer_matches(std::string_view authorization, std::string_view key);

// The key `authorization` presents, or null. Every key is compared in full whatever matched, so
// the time taken depends only on the keys' lengths and count. Precondition: no key is empty.
const ApiKey* match_bearer(std::string_view authorization, std::span<const ApiKey> keys);

// Parses "KEY", "KEY:QOS" or "KEY:QOS:TENANT" (QOS: interactive, batch or empty for the server's
// default; TENANT: letters, digits, '_', '-', '.', at most 64). The key may not hold ':' or
// whitespace. On error returns nullopt and sets *error to a message that does not contain the key.
std::optional<ApiKey> parse_api_key(std::string_view spec, std::string* error);

// The keys of an --api-keys-file: one spec a line as above; blank lines and lines starting with
// '#' are skipped; surrounding whitespace is ignored. On error returns nullopt and sets *error
// ("line N: ...", without the key).
std::optional<std::vector<ApiKey>> parse_api_keys_file(std::string_view text, std::string* error);

// Whether two of `keys` are the same key (compared in constant time).
bool has_duplicate_keys(std::span<const ApiKey> keys);

}  // namespace strata::server
