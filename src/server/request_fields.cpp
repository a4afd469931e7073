#include "server/request_fields.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "sched/scheduler_config.h"
#include "server/json_fields.h"

namespace strata::server {
namespace {

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::vector<std::string> parse_stop(const Json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) throw bad_request(fmt::format("'stop' must be a string or an array of strings, got {}", json_type_name(v)), "stop");
  // Checked before copying so that a huge list costs nothing (validate repeats the limit).
  if (v.size() > kMaxStopStrings)
    throw bad_request(fmt::format("stop: at most {} stop strings, got {}", kMaxStopStrings, v.size()), "stop");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) throw bad_request(fmt::format("'stop[{}]' must be a string, got {}", i, json_type_name(v[i])), "stop");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::map<TokenId, float> parse_logit_bias(const Json& v) {
  if (!v.is_object())
    throw bad_request(fmt::format("'logit_bias' must be an object mapping token ids to numbers, got {}", json_type_name(v)), "logit_bias");
  std::map<TokenId, float> out;
  for (const auto& [key, bias] : v.items()) {
    int64_t id = -1;
    const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || ptr != key.data() + key.size() || id < 0 || id > kInt32Max)
      throw bad_request(fmt::format("logit_bias: key '{}' is not a token id", key), "logit_bias");
    if (!bias.is_number())
      throw bad_request(fmt::format("logit_bias: the bias of token {} must be a number, got {}", key, json_type_name(bias)), "logit_bias");
    const double d = bias.get<double>();
    // Out-of-range values are validate()'s to report; keep them out of range without overflowing float.
    out[static_cast<TokenId>(id)] = d > 1e9 ? 1e9f : d < -1e9 ? -1e9f : static_cast<float>(d);
  }
  return out;
}

}  // namespace

void parse_common_fields(const Json& body, GenerationRequest& out) {
  SamplingParams& p = out.request.params;
  if (out.api == Api::kChat) {
    auto max_completion = get_int(body, "max_completion_tokens", kInt32Min, kInt32Max);
    auto legacy = get_int(body, "max_tokens", kInt32Min, kInt32Max);
    if (max_completion) p.max_tokens = static_cast<int32_t>(*max_completion);
    else if (legacy) p.max_tokens = static_cast<int32_t>(*legacy);
  } else {
    auto max_tokens = get_int(body, "max_tokens", kInt32Min, kInt32Max);
    p.max_tokens = max_tokens ? static_cast<int32_t>(*max_tokens) : kDefaultCompletionMaxTokens;
  }
  if (auto v = get_float(body, "temperature")) p.temperature = *v;
  if (auto v = get_float(body, "top_p")) p.top_p = *v;
  // vLLM's clients send -1 for "off"; our off is 0.
  if (auto v = get_int(body, "top_k", kInt32Min, kInt32Max)) p.top_k = *v == -1 ? 0 : static_cast<int32_t>(*v);
  if (auto v = get_float(body, "min_p")) p.min_p = *v;
  if (auto v = get_float(body, "presence_penalty")) p.presence_penalty = *v;
  if (auto v = get_float(body, "frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = get_float(body, "repetition_penalty")) p.repetition_penalty = *v;
  if (auto v = get_int(body, "n", kInt32Min, kInt32Max)) p.n = static_cast<int32_t>(*v);
  // OpenAI documents seeds as 64-bit integers; negative ones are taken modulo 2^64. Integer
  // literals up to 2^64 - 1 are taken as they are; anything else (negative, integral floats such as
  // 5.0) must fit int64, so 9223372036854775808.0 = 2^63 is a 400 rather than an overflowing cast.
  if (const Json* v = find_field(body, "seed")) {
    if (v->is_number_unsigned()) p.seed = v->get<uint64_t>();
    else p.seed = static_cast<uint64_t>(as_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  }
  if (const Json* v = find_field(body, "stop")) p.stop = parse_stop(*v);
  if (const Json* v = find_field(body, "stop_token_ids")) {
    if (!v->is_array()) throw bad_request(fmt::format("'stop_token_ids' must be an array of token ids, got {}", json_type_name(*v)), "stop_token_ids");
    if (v->size() > kMaxStopTokenIds)
      throw bad_request(fmt::format("stop_token_ids: at most {} ids, got {}", kMaxStopTokenIds, v->size()), "stop_token_ids");
    for (const Json& id : *v) p.stop_token_ids.push_back(static_cast<TokenId>(as_int(id, "stop_token_ids", 0, kInt32Max)));
  }
  if (const Json* v = find_field(body, "logit_bias")) p.logit_bias = parse_logit_bias(*v);
  if (auto v = get_bool(body, "ignore_eos")) p.ignore_eos = *v;

  out.stream = get_bool(body, "stream").value_or(false);
  if (const Json* so = find_field(body, "stream_options")) {
    if (!so->is_object()) throw bad_request(fmt::format("'stream_options' must be an object, got {}", json_type_name(*so)), "stream_options");
    if (!out.stream) throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    out.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  if (auto v = get_string(body, "user")) out.request.tenant = *v;
  if (auto v = get_int(body, "priority", kInt32Min, kInt32Max)) out.request.priority = static_cast<int32_t>(*v);
  // A request may lower its own cached-token budget under --kv-evict (ignored without a policy).
  if (auto v = get_int(body, "kv_budget", 1, kInt32Max)) out.request.kv_budget = static_cast<int32_t>(*v);
  if (auto v = get_string(body, "qos")) {
    const auto c = qos_class_from_name(*v);
    if (!c) throw bad_request(fmt::format("'qos' must be \"interactive\" or \"batch\", got \"{}\"", *v), "qos");
    out.request.qos = *c;
    out.qos_given = true;
  }
}

void validate_params(const SamplingParams& params, int32_t n_vocab) {
  if (auto err = params.validate(n_vocab)) throw bad_request(*err, param_of_message(*err));
}

void reject_unsupported_fields(const Json& body, Api api) {
  for (const char* key : {"tools", "tool_choice", "functions", "function_call"}) {
    if (find_field(body, key)) throw bad_request(fmt::format("'{}' is not supported by this server", key), key);
  }
  if (const Json* rf = find_field(body, "response_format")) {
    const bool text = rf->is_object() && rf->contains("type") && (*rf)["type"] == "text";
    if (!text) throw bad_request("'response_format' is not supported by this server (only {\"type\": \"text\"})", "response_format");
  }
  if (api == Api::kCompletions) {
    if (const Json* suffix = find_field(body, "suffix")) {
      if (!suffix->is_string() || !suffix->get<std::string>().empty())
        throw bad_request("'suffix' is not supported by this server", "suffix");
    }
    // best_of > n would need server-side ranking of samples, which this server does not do.
    if (auto best_of = get_int(body, "best_of", 0, std::numeric_limits<int32_t>::max())) {
      const int64_t n = get_int(body, "n", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()).value_or(1);
      if (*best_of != n) throw bad_request("'best_of' other than 'n' is not supported by this server", "best_of");
    }
  }
}

}  // namespace strata::server
