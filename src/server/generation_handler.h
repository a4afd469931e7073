// POST /v1/completions and POST /v1/chat/completions: parse and validate the body, check the
// model name, admit (429 beyond --max-queue in flight), submit to the engine, then answer with one
// JSON response, or stream Server-Sent Events (`data: {chunk}\n\n` ... `data: [DONE]\n\n`).
//
// The engine thread only queues events on the request's handle; this code reads them on the HTTP
// thread, so a slow client never stalls generation. A streaming client that goes away (a write
// fails) cancels its request, which frees its KV blocks within one engine step.
// Thread-safety: called concurrently from HTTP threads; each call owns its request.
#pragma once

#include <httplib.h>

#include "server/request_fields.h"
#include "server/server_context.h"

namespace strata::server {

// Precondition: ctx.host().ready(). Throws ApiError for every refusal (the caller answers and
// counts it); counts the outcome itself when it answers.
void handle_generation(ServerContext& ctx, Api api, const httplib::Request& req, httplib::Response& res);

}  // namespace strata::server
