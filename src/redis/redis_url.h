// A Redis connection URL: one node (`redis://[user:password@]host[:port][/db]`) or the seed nodes of
// a Redis Cluster (`redis-cluster://[user:password@]host:port,host:port,...`). Credentials may be
// percent-encoded; IPv6 hosts are written in brackets (`[::1]:6379`). The password never appears in
// an error message or in redacted().
// Thread-safety: a plain value; parse() may be called from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::redis {

struct RedisEndpoint {
  std::string host;  // name or address, without brackets
  int port = 6379;

  std::string to_string() const;  // "host:port", "[::1]:port" for IPv6
  bool operator==(const RedisEndpoint&) const = default;
};

struct RedisUrl {
  bool cluster = false;
  std::vector<RedisEndpoint> nodes;  // exactly one unless cluster; seeds when cluster
  std::string user;                  // empty: the default user
  std::string password;              // empty: no AUTH
  int db = 0;                        // always 0 for a cluster

  // Throws strata::Error naming the problem (the URL in the message is redacted).
  static RedisUrl parse(std::string_view url);

  // The URL with the credentials replaced by `***`: "redis://***@127.0.0.1:6379/0".
  std::string redacted() const;
};

}  // namespace strata::redis
