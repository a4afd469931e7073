#include "redis/redis_cluster.h"

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <numeric>
#include <utility>

#include "redis/crc16.h"

namespace strata::redis {
namespace {

bool parse_number(std::string_view s, long long lo, long long hi, long long& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= lo && out <= hi;
}

RedisError protocol_error(const RedisEndpoint& node, std::string_view what) {
  return RedisError(RedisError::Kind::kProtocol, fmt::format("redis {}: {}", node.to_string(), what));
}

}  // namespace

std::optional<ClusterRedirect> parse_redirect(std::string_view error, std::string_view default_host) {
  ClusterRedirect r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  long long slot = 0;
  if (!parse_number(error.substr(0, space), 0, kClusterSlots - 1, slot)) return std::nullopt;
  const std::string_view addr = error.substr(space + 1);
  const size_t colon = addr.rfind(':');
  long long port = 0;
  if (colon == std::string_view::npos || !parse_number(addr.substr(colon + 1), 1, 65535, port)) {
    return std::nullopt;
  }
  std::string_view host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  r.slot = static_cast<uint16_t>(slot);
  r.endpoint.host = std::string(host.empty() || host == "?" ? default_host : host);
  r.endpoint.port = static_cast<int>(port);
  return r;
}

RedisCluster::RedisCluster(const RedisUrl& url, std::chrono::milliseconds connect_timeout)
    : describe_(url.redacted()),
      user_(url.user),
      password_(url.password),
      connect_timeout_(connect_timeout),
      slots_(kClusterSlots, -1) {
  for (const RedisEndpoint& seed : url.nodes) node_index(seed);
}

RedisCluster::~RedisCluster() = default;

int RedisCluster::node_index(const RedisEndpoint& endpoint) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].endpoint == endpoint) return static_cast<int>(i);
  }
  nodes_.push_back(Node{endpoint, std::make_unique<RedisConnection>(RedisConnection::Options{
                                      endpoint, user_, password_, 0, connect_timeout_})});
  return static_cast<int>(nodes_.size() - 1);
}

std::string RedisCluster::slot_owner(uint16_t slot) const {
  const int node = slot < kClusterSlots ? slots_[slot] : -1;
  return node < 0 ? std::string() : nodes_[node].endpoint.to_string();
}

void RedisCluster::apply_slot_map(const RedisReply& reply, const std::string& answering_host) {
  // Entries: [start, end, [host, port, id, ...], replicas...].
  const RedisEndpoint answering{answering_host, 0};
  if (reply.type != RedisReply::Type::kArray) throw protocol_error(answering, "CLUSTER SLOTS: not an array");
  std::vector<std::pair<std::pair<int, int>, RedisEndpoint>> ranges;
  for (const RedisReply& e : reply.elements) {
    if (e.type != RedisReply::Type::kArray || e.elements.size() < 3 ||
        e.elements[0].type != RedisReply::Type::kInteger || e.elements[1].type != RedisReply::Type::kInteger ||
        e.elements[2].type != RedisReply::Type::kArray || e.elements[2].elements.size() < 2 ||
        e.elements[2].elements[0].type != RedisReply::Type::kString ||
        e.elements[2].elements[1].type != RedisReply::Type::kInteger) {
      throw protocol_error(answering, "CLUSTER SLOTS: malformed entry");
    }
    const long long start = e.elements[0].integer;
    const long long end = e.elements[1].integer;
    const long long port = e.elements[2].elements[1].integer;
    if (start < 0 || end < start || end >= kClusterSlots || port < 1 || port > 65535) {
      throw protocol_error(answering, "CLUSTER SLOTS: slot range or port out of range");
    }
    const std::string& host = e.elements[2].elements[0].str;
    ranges.push_back({{static_cast<int>(start), static_cast<int>(end)},
                      RedisEndpoint{host.empty() || host == "?" ? answering_host : host, static_cast<int>(port)}});
  }
  std::vector<int> slots(kClusterSlots, -1);
  for (const auto& [range, endpoint] : ranges) {
    const int node = node_index(endpoint);
    for (int s = range.first; s <= range.second; ++s) slots[s] = node;
  }
  slots_ = std::move(slots);
  have_map_ = true;
  ++map_refreshes_;
}

void RedisCluster::refresh_slots(Clock::time_point deadline, const std::vector<bool>& avoid) {
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const bool avoided = i < avoid.size() && avoid[i];
      if (avoided == (pass == 1)) order.push_back(static_cast<int>(i));
    }
  }
  const std::vector<Argv> cmd{{"CLUSTER", "SLOTS"}};
  std::optional<RedisError> last;
  for (const int i : order) {
    const std::string host = nodes_[i].endpoint.host;
    try {
      const std::vector<RedisReply> r = nodes_[i].conn->execute(cmd, deadline);
      if (r[0].is_error()) {
        throw RedisError(RedisError::Kind::kReply,
                         fmt::format("redis {}: CLUSTER SLOTS: {}", nodes_[i].endpoint.to_string(), r[0].str));
      }
      apply_slot_map(r[0], host);
      return;
    } catch (const RedisError& e) {
      last = e;
      if (e.kind() == RedisError::Kind::kTimeout) break;  // the deadline has passed for every node
    }
  }
  throw RedisError(last->kind(), fmt::format("no cluster node gave its slot map; last: {}", last->what()));
}

std::vector<std::optional<RedisReply>> RedisCluster::run(std::span<const Argv> cmds, std::span<const int> slots,
                                                         Clock::time_point deadline) {
  const size_t n = cmds.size();
  std::vector<std::optional<RedisReply>> out(n);
  failed_keys_ = 0;
  if (n == 0) return out;

  struct Item {
    int redirects = 0;
    bool retried = false;  // retried once after its node failed
    int ask_node = -1;     // send ASKING + the command to this node next time
  };
  std::vector<Item> items(n);
  size_t failed = 0;
  std::optional<RedisError> last_error;
  auto fail_item = [&](const RedisError& e) {
    ++failed;
    last_error = e;
  };

  if (!have_map_) {
    try {
      refresh_slots(deadline, {});
    } catch (const RedisError& e) {
      last_error = e;  // the keys fail below: no slot has a node
    }
  }

  std::vector<size_t> todo(n);
  std::iota(todo.begin(), todo.end(), 0);
  while (!todo.empty()) {
    // Group by node: (item, asking) in the caller's order.
    std::map<int, std::vector<std::pair<size_t, bool>>> groups;
    for (const size_t i : todo) {
      int node = items[i].ask_node;
      const bool asking = node >= 0;
      items[i].ask_node = -1;
      if (!asking) node = slots[i] < 0 ? 0 : slots_[slots[i]];
      if (node < 0) {
        fail_item(last_error && !have_map_
                      ? *last_error
                      : RedisError(RedisError::Kind::kConnect,
                                   fmt::format("redis cluster: slot {} is not served by any known node", slots[i])));
        continue;
      }
      groups[node].emplace_back(i, asking);
    }

    // Send to every node, then read every node's replies.
    std::map<int, RedisError> node_errors;
    std::map<int, size_t> sent;
    for (const auto& [node, ops] : groups) {
      std::vector<Argv> batch;
      batch.reserve(ops.size());
      for (const auto& [i, asking] : ops) {
        if (asking) batch.push_back({"ASKING"});
        batch.push_back(cmds[i]);
      }
      try {
        nodes_[node].conn->send(batch, deadline);
        sent[node] = batch.size();
      } catch (const RedisError& e) {
        node_errors.emplace(node, e);
      }
    }
    std::vector<size_t> next;
    std::vector<std::pair<uint16_t, int>> moved;
    bool refresh = false;
    for (const auto& [node, count] : sent) {
      std::vector<RedisReply> replies;
      try {
        replies = nodes_[node].conn->receive(count, deadline);
      } catch (const RedisError& e) {
        node_errors.emplace(node, e);
        continue;
      }
      const std::string host = nodes_[node].endpoint.host;
      size_t r = 0;
      for (const auto& [i, asking] : groups[node]) {
        if (asking) ++r;  // ASKING's OK (an error here shows again in the command's reply)
        RedisReply& reply = replies[r++];
        if (reply.is_error()) {
          if (std::optional<ClusterRedirect> redirect = parse_redirect(reply.str, host)) {
            if (++items[i].redirects > kMaxRedirects) {
              fail_item(RedisError(RedisError::Kind::kReply,
                                   fmt::format("redis cluster: slot {}: more than {} redirects (last: {})",
                                               redirect->slot, kMaxRedirects, reply.str)));
              continue;
            }
            ++redirects_;
            const int target = node_index(redirect->endpoint);
            if (redirect->ask) {
              items[i].ask_node = target;
            } else {
              moved.emplace_back(redirect->slot, target);
              refresh = true;
            }
            next.push_back(i);
            continue;
          }
        }
        out[i] = std::move(reply);
      }
    }
    std::vector<bool> avoid(nodes_.size(), false);
    for (const auto& [node, error] : node_errors) {
      avoid[node] = true;
      for (const auto& [i, asking] : groups[node]) {
        if (!items[i].retried && Clock::now() < deadline) {
          items[i].retried = true;
          next.push_back(i);
          refresh = true;
        } else {
          fail_item(error);
        }
      }
    }
    if (refresh) {
      try {
        refresh_slots(deadline, avoid);
      } catch (const RedisError& e) {
        last_error = e;
      }
      // The node that sent MOVED knows best, even when the map just fetched lags behind it.
      for (const auto& [slot, node] : moved) slots_[slot] = node;
    }
    todo = std::move(next);
  }
  failed_keys_ = failed;
  if (failed == n) throw *last_error;
  return out;
}

std::vector<std::optional<std::string>> RedisCluster::get_many(std::span<const std::string> keys,
                                                               Clock::time_point deadline) {
  std::vector<Argv> cmds;
  std::vector<int> slots;
  cmds.reserve(keys.size());
  slots.reserve(keys.size());
  for (const std::string& k : keys) {
    cmds.push_back({"GET", k});
    slots.push_back(key_slot(k));
  }
  std::vector<std::optional<RedisReply>> replies = run(cmds, slots, deadline);
  std::vector<std::optional<std::string>> out(keys.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    if (!replies[i] || replies[i]->is_nil()) continue;
    if (replies[i]->type != RedisReply::Type::kString) {
      throw RedisError(replies[i]->is_error() ? RedisError::Kind::kReply : RedisError::Kind::kProtocol,
                       fmt::format("redis cluster: GET: {}", replies[i]->render().substr(0, 200)));
    }
    out[i] = std::move(replies[i]->str);
  }
  return out;
}

std::vector<bool> RedisCluster::set_nx_many(std::span<const std::pair<std::string, std::string>> items,
                                            std::chrono::milliseconds ttl, Clock::time_point deadline) {
  const std::string ttl_ms = std::to_string(ttl.count());
  std::vector<Argv> cmds;
  std::vector<int> slots;
  cmds.reserve(items.size());
  slots.reserve(items.size());
  for (const auto& [k, v] : items) {
    if (ttl.count() > 0) {
      cmds.push_back({"SET", k, v, "NX", "PX", ttl_ms});
    } else {
      cmds.push_back({"SET", k, v, "NX"});
    }
    slots.push_back(key_slot(k));
  }
  const std::vector<std::optional<RedisReply>> replies = run(cmds, slots, deadline);
  std::vector<bool> out(items.size(), false);
  for (size_t i = 0; i < replies.size(); ++i) {
    if (!replies[i] || replies[i]->is_nil()) continue;
    if (replies[i]->type != RedisReply::Type::kStatus) {
      throw RedisError(replies[i]->is_error() ? RedisError::Kind::kReply : RedisError::Kind::kProtocol,
                       fmt::format("redis cluster: SET: {}", replies[i]->render().substr(0, 200)));
    }
    out[i] = true;
  }
  return out;
}

void RedisCluster::ping(Clock::time_point deadline) {
  if (!have_map_) refresh_slots(deadline, {});
  std::vector<bool> serving(nodes_.size(), false);
  for (const int node : slots_) {
    if (node >= 0) serving[node] = true;
  }
  const std::vector<Argv> cmd{{"PING"}};
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!serving[i]) continue;
    const std::vector<RedisReply> r = nodes_[i].conn->execute(cmd, deadline);
    if (r[0].is_error()) {
      throw RedisError(RedisError::Kind::kReply,
                       fmt::format("redis {}: PING: {}", nodes_[i].endpoint.to_string(), r[0].str));
    }
  }
}

std::string RedisCluster::command(std::span<const std::string> argv, Clock::time_point deadline) {
  if (argv.empty()) fail("redis: empty command");
  const std::vector<Argv> cmds{Argv(argv.begin(), argv.end())};
  const std::vector<int> slots{argv.size() >= 2 ? static_cast<int>(key_slot(argv[1])) : -1};
  const std::vector<std::optional<RedisReply>> replies = run(cmds, slots, deadline);
  const RedisReply& r = *replies[0];  // run() threw if the one item failed
  if (r.is_error()) throw RedisError(RedisError::Kind::kReply, fmt::format("redis cluster: {}: {}", argv[0], r.str));
  return r.render();
}

}  // namespace strata::redis
