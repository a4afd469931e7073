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

void set_finish_reason(Json& choice, std::optional<FinishReason> finish) {
  if (finish == FinishReason::kAbort) {
    choice["finish_reason"] = nullptr;
    choice["stop_reason"] = std::string(finish_reason_name(FinishReason::kAbort));
    return;
  }
  choice["finish_reason"] = finish ? Json(std::string(finish_reason_name(*finish))) : Json(nullptr);
}

double reported_logprob(float logprob) {
  // Written so that NaN (never expected) also becomes the floor rather than a JSON null.
  return logprob > kMinReportedLogprob ? static_cast<double>(logprob) : static_cast<double>(kMinReportedLogprob);
}

}  // namespace strata::server
