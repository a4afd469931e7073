// POST /v1/completions and POST /v1/chat/completions: parse and validate the body, check the
// model name, admit (429 beyond --max-queue in flight), submit to the engine, then answer with one
// JSON response, or stream Server-Sent Events (`data: {chunk}\n\n` ... `data: [DONE]\n\n`).
//
// The answer is a DeferredResponse (http_message.h): the engine thread hands each event to the
// connection's strand and never waits on a client, so a slow client never stalls generation and no
// thread is held per request. A client that goes away (streamed or not) cancels its request, which
// frees its KV blocks within one engine step.
// Thread-safety: called concurrently from the I/O threads; each call owns its request.
#pragma once

#include "server/http_message.h"

#include "server/request_fields.h"
#include "server/server_context.h"

namespace strata::server {

// Precondition: ctx.host().ready(). Throws ApiError for every refusal (the caller answers and
// counts it); counts the outcome itself when it answers.
void handle_generation(ServerContext& ctx, Api api, const HttpRequest& req, HttpResponse& res);

}  // namespace strata::server
