#include "server/response_formatter.h"

namespace strata::server {

Json usage_json(const Usage& usage) {
  Json u = Json::object();
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  u["prompt_tokens_details"] = Json{{"cached_tokens", usage.cached_tokens}};
  return u;
}

Json finish_json(std::optional<FinishReason> finish) {
  if (!finish) return nullptr;
  return std::string(finish_reason_name(*finish));
}

double reported_logprob(float logprob) {
  // Written so that NaN (never expected) also becomes the floor rather than a JSON null.
  return logprob > kMinReportedLogprob ? static_cast<double>(logprob) : static_cast<double>(kMinReportedLogprob);
}

}  // namespace strata::server
