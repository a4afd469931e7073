// Black-box tests of how `strata serve` refuses requests: malformed JSON, wrong types, values out
// of range, unknown roles and routes, wrong methods, wrong model names, oversized bodies, missing
// or wrong API keys, a full queue, a model still loading. Every refusal has its exact status and
// OpenAI's error body, and the server keeps serving afterwards.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

struct BadRequest {
  const char* name;
  const char* method;
  const char* path;
  std::string body;
  int status;
  const char* param;  // expected error.param; nullptr = not checked
};

// A body from a JSON literal written in the table (so it can be invalid on purpose).
std::string completion(const std::string& fields) { return "{\"prompt\": \"Once upon a time\", " + fields + "}"; }
std::string chat(const std::string& fields) {
  return "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], " + fields + "}";
}
std::string chat_messages(const std::string& messages) { return "{\"messages\": " + messages + "}"; }

std::string long_prompt() {
  std::string p;
  for (int i = 0; i < 1100; ++i) p += " dog";  // about 2200 tokens; the context is 2048
  return "{\"prompt\": \"" + p + "\"}";
}
std::string deep_json() {
  std::string s = "{\"prompt\": ";
  for (int i = 0; i < 100; ++i) s += "[";
  for (int i = 0; i < 100; ++i) s += "]";
  return s + "}";
}
std::string seventeen_stops() {
  std::string s = "\"stop\": [";
  for (int i = 0; i < 17; ++i) s += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  return s + "]";
}

const std::vector<BadRequest>& bad_requests() {
  static const std::vector<BadRequest> kCases = {
      // Not JSON, or not an object.
      {"truncated JSON", "POST", "/v1/completions", "{\"prompt\": \"x\"", 400, nullptr},
      {"JSON array body", "POST", "/v1/completions", "[1, 2]", 400, nullptr},
      {"empty body", "POST", "/v1/completions", "", 400, nullptr},
      {"plain text body", "POST", "/v1/chat/completions", "hello", 400, nullptr},
      {"invalid UTF-8 in a string", "POST", "/v1/completions", "{\"prompt\": \"caf\xc3\x28\"}", 400, nullptr},
      {"unpaired surrogate escape", "POST", "/v1/completions", "{\"prompt\": \"\\ud800\"}", 400, nullptr},
      {"nesting 100 deep", "POST", "/v1/completions", deep_json(), 400, nullptr},
      {"number overflowing a double", "POST", "/v1/completions", completion("\"temperature\": 1e400"), 400, nullptr},
      // prompt
      {"missing prompt", "POST", "/v1/completions", "{\"max_tokens\": 4}", 400, "prompt"},
      {"prompt is a number", "POST", "/v1/completions", "{\"prompt\": 5}", 400, "prompt"},
      {"prompt is a list of strings", "POST", "/v1/completions", "{\"prompt\": [\"a\", \"b\"]}", 400, "prompt"},
      {"prompt is an empty array", "POST", "/v1/completions", "{\"prompt\": []}", 400, "prompt"},
      {"prompt token outside the vocabulary", "POST", "/v1/completions", "{\"prompt\": [1, 512]}", 400, "prompt"},
      {"negative prompt token", "POST", "/v1/completions", "{\"prompt\": [-1]}", 400, "prompt"},
      {"nested token arrays", "POST", "/v1/completions", "{\"prompt\": [[1, 2]]}", 400, "prompt"},
      {"fractional token id", "POST", "/v1/completions", "{\"prompt\": [1.5]}", 400, "prompt"},
      {"prompt longer than the context", "POST", "/v1/completions", long_prompt(), 400, "prompt"},
      // max_tokens
      {"negative max_tokens", "POST", "/v1/completions", completion("\"max_tokens\": -5"), 400, "max_tokens"},
      {"zero max_tokens", "POST", "/v1/completions", completion("\"max_tokens\": 0"), 400, "max_tokens"},
      {"max_tokens as a string", "POST", "/v1/completions", completion("\"max_tokens\": \"10\""), 400, "max_tokens"},
      {"fractional max_tokens", "POST", "/v1/completions", completion("\"max_tokens\": 1.5"), 400, "max_tokens"},
      {"huge max_tokens", "POST", "/v1/completions", completion("\"max_tokens\": 1e30"), 400, "max_tokens"},
      {"max_tokens beyond uint64", "POST", "/v1/completions", completion("\"max_tokens\": 99999999999999999999999"), 400,
       "max_tokens"},
      // sampling values
      {"negative temperature", "POST", "/v1/completions", completion("\"temperature\": -1"), 400, "temperature"},
      {"temperature as a string", "POST", "/v1/completions", completion("\"temperature\": \"hot\""), 400, "temperature"},
      {"top_p zero", "POST", "/v1/completions", completion("\"top_p\": 0"), 400, "top_p"},
      {"top_p above one", "POST", "/v1/completions", completion("\"top_p\": 1.5"), 400, "top_p"},
      {"negative top_k", "POST", "/v1/completions", completion("\"top_k\": -5"), 400, "top_k"},
      {"min_p above one", "POST", "/v1/completions", completion("\"min_p\": 2"), 400, "min_p"},
      {"presence_penalty above two", "POST", "/v1/completions", completion("\"presence_penalty\": 3"), 400, "presence_penalty"},
      {"frequency_penalty below minus two", "POST", "/v1/completions", completion("\"frequency_penalty\": -3"), 400,
       "frequency_penalty"},
      {"zero repetition_penalty", "POST", "/v1/completions", completion("\"repetition_penalty\": 0"), 400, "repetition_penalty"},
      {"n zero", "POST", "/v1/completions", completion("\"n\": 0"), 400, "n"},
      {"n too big", "POST", "/v1/completions", completion("\"n\": 129"), 400, "n"},
      {"n as a string", "POST", "/v1/completions", completion("\"n\": \"2\""), 400, "n"},
      {"logprobs too big", "POST", "/v1/completions", completion("\"logprobs\": 6"), 400, "logprobs"},
      {"negative logprobs", "POST", "/v1/completions", completion("\"logprobs\": -1"), 400, "logprobs"},
      {"logprobs as a boolean in completions", "POST", "/v1/completions", completion("\"logprobs\": true"), 400, "logprobs"},
      {"stop list too long", "POST", "/v1/completions", completion(seventeen_stops()), 400, "stop"},
      {"empty stop string", "POST", "/v1/completions", completion("\"stop\": [\"\"]"), 400, "stop"},
      {"stop as a number", "POST", "/v1/completions", completion("\"stop\": 5"), 400, "stop"},
      {"stop list with a number", "POST", "/v1/completions", completion("\"stop\": [\"a\", 1]"), 400, "stop"},
      {"logit_bias as an array", "POST", "/v1/completions", completion("\"logit_bias\": [1]"), 400, "logit_bias"},
      {"logit_bias key not a token id", "POST", "/v1/completions", completion("\"logit_bias\": {\"abc\": 1}"), 400,
       "logit_bias"},
      {"logit_bias value out of range", "POST", "/v1/completions", completion("\"logit_bias\": {\"5\": 500}"), 400,
       "logit_bias"},
      {"logit_bias token outside the vocabulary", "POST", "/v1/completions", completion("\"logit_bias\": {\"99999\": 1}"), 400,
       "logit_bias"},
      {"seed as a string", "POST", "/v1/completions", completion("\"seed\": \"x\""), 400, "seed"},
      {"fractional seed", "POST", "/v1/completions", completion("\"seed\": 1.5"), 400, "seed"},
      {"stream as a string", "POST", "/v1/completions", completion("\"stream\": \"yes\""), 400, "stream"},
      {"stream_options without stream", "POST", "/v1/completions", completion("\"stream_options\": {\"include_usage\": true}"),
       400, "stream_options"},
      {"echo with logprobs", "POST", "/v1/completions", completion("\"echo\": true, \"logprobs\": 1"), 400, "echo"},
      {"user as a number", "POST", "/v1/completions", completion("\"user\": 7"), 400, "user"},
      {"fractional priority", "POST", "/v1/completions", completion("\"priority\": 0.5"), 400, "priority"},
      {"kv_budget zero", "POST", "/v1/completions", completion("\"kv_budget\": 0"), 400, "kv_budget"},
      {"kv_budget as a string", "POST", "/v1/completions", completion("\"kv_budget\": \"64\""), 400, "kv_budget"},
      {"stop_token_ids outside the vocabulary", "POST", "/v1/completions", completion("\"stop_token_ids\": [100000]"), 400,
       "stop_token_ids"},
      {"tools are not supported", "POST", "/v1/completions", completion("\"tools\": []"), 400, "tools"},
      {"suffix is not supported", "POST", "/v1/completions", completion("\"suffix\": \"end\""), 400, "suffix"},
      {"best_of above n", "POST", "/v1/completions", completion("\"best_of\": 3"), 400, "best_of"},
      // model
      {"unknown model", "POST", "/v1/completions", completion("\"model\": \"gpt-4\""), 404, "model"},
      {"model as a number", "POST", "/v1/completions", completion("\"model\": 3"), 400, "model"},
      {"unknown model in chat", "POST", "/v1/chat/completions", chat("\"model\": \"llama\""), 404, "model"},
      // chat messages
      {"missing messages", "POST", "/v1/chat/completions", "{\"max_tokens\": 3}", 400, "messages"},
      {"empty messages", "POST", "/v1/chat/completions", chat_messages("[]"), 400, "messages"},
      {"messages as a string", "POST", "/v1/chat/completions", chat_messages("\"hi\""), 400, "messages"},
      {"message not an object", "POST", "/v1/chat/completions", chat_messages("[\"hi\"]"), 400, "messages"},
      {"message without role", "POST", "/v1/chat/completions", chat_messages("[{\"content\": \"hi\"}]"), 400, "messages"},
      {"unknown role", "POST", "/v1/chat/completions", chat_messages("[{\"role\": \"wizard\", \"content\": \"hi\"}]"), 400,
       "messages"},
      {"role as a number", "POST", "/v1/chat/completions", chat_messages("[{\"role\": 1, \"content\": \"hi\"}]"), 400,
       "messages"},
      {"user message without content", "POST", "/v1/chat/completions", chat_messages("[{\"role\": \"user\"}]"), 400,
       "messages"},
      {"content as a number", "POST", "/v1/chat/completions", chat_messages("[{\"role\": \"user\", \"content\": 5}]"), 400,
       "messages"},
      {"image content part", "POST", "/v1/chat/completions",
       chat_messages("[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}]}]"), 400,
       "messages"},
      {"tool_calls in a message", "POST", "/v1/chat/completions",
       chat_messages("[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}]"), 400, "messages"},
      {"top_logprobs without logprobs", "POST", "/v1/chat/completions", chat("\"top_logprobs\": 2"), 400, "top_logprobs"},
      {"top_logprobs too big", "POST", "/v1/chat/completions", chat("\"logprobs\": true, \"top_logprobs\": 21"), 400,
       "top_logprobs"},
      {"logprobs as an integer in chat", "POST", "/v1/chat/completions", chat("\"logprobs\": 1"), 400, "logprobs"},
      {"negative max_completion_tokens", "POST", "/v1/chat/completions", chat("\"max_completion_tokens\": -1"), 400,
       "max_tokens"},
      {"response_format json", "POST", "/v1/chat/completions", chat("\"response_format\": {\"type\": \"json_object\"}"), 400,
       "response_format"},
      // routes and methods
      {"unknown route", "POST", "/v1/nothing", "{}", 404, nullptr},
      {"unknown GET route", "GET", "/v2/models", "", 404, nullptr},
      {"GET on completions", "GET", "/v1/completions", "", 405, nullptr},
      {"PUT on chat completions", "PUT", "/v1/chat/completions", "{}", 405, nullptr},
      {"DELETE on health", "DELETE", "/health", "", 405, nullptr},
      {"POST on metrics", "POST", "/metrics", "{}", 405, nullptr},
      {"unknown model id", "GET", "/v1/models/gpt-4", "", 404, "model"},
      // utility routes
      {"tokenize without content", "POST", "/tokenize", "{}", 400, "content"},
      {"tokenize content as a number", "POST", "/tokenize", "{\"content\": 1}", 400, "content"},
      {"detokenize tokens not an array", "POST", "/detokenize", "{\"tokens\": 5}", 400, "tokens"},
      {"detokenize token outside the vocabulary", "POST", "/detokenize", "{\"tokens\": [1, 9999]}", 400, "tokens"},
      {"apply-template without messages", "POST", "/apply-template", "{}", 400, "messages"},
  };
  return kCases;
}

// Checks the OpenAI error body; returns it.
Json expect_error_body(const httplib::Result& r, int status, const char* param) {
  EXPECT_TRUE(r);
  if (!r) return Json();
  EXPECT_EQ(r->status, status) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  Json j;
  try {
    j = Json::parse(r->body);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "error body is not JSON: " << r->body;
    return Json();
  }
  EXPECT_TRUE(j.contains("error") && j["error"].is_object()) << j;
  const Json& e = j["error"];
  EXPECT_TRUE(e.contains("message") && e["message"].is_string() && !e["message"].get<std::string>().empty()) << j;
  EXPECT_TRUE(e.contains("type") && e["type"].is_string()) << j;
  EXPECT_TRUE(e.contains("param") && (e["param"].is_string() || e["param"].is_null())) << j;
  EXPECT_TRUE(e.contains("code") && (e["code"].is_string() || e["code"].is_null())) << j;
  if (param != nullptr) {
    EXPECT_EQ(e["param"], param) << j;
  }
  return j;
}

httplib::Result send(httplib::Client& c, const std::string& method, const std::string& path, const std::string& body,
                     const httplib::Headers& headers = {}) {
  if (method == "GET") return c.Get(path.c_str(), headers);
  if (method == "POST") return c.Post(path.c_str(), headers, body, "application/json");
  if (method == "PUT") return c.Put(path.c_str(), headers, body, "application/json");
  return c.Delete(path.c_str(), headers, body, "application/json");
}

void expect_still_serving(ServerProcess& s) {
  auto c = s.client();
  auto h = c->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto r = c->Post("/v1/completions", Json({{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}}).dump(),
                   "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
}

TEST(ServerErrors, EveryMalformedRequestGetsItsStatusAndAnErrorBody) {
  ServerProcess s;
  ASSERT_GE(bad_requests().size(), 50u);
  std::set<std::string> names;
  for (const BadRequest& b : bad_requests()) {
    SCOPED_TRACE(b.name);
    EXPECT_TRUE(names.insert(b.name).second) << "duplicate case name";
    auto c = s.client();
    const Json j = expect_error_body(send(*c, b.method, b.path, b.body), b.status, b.param);
    if (b.status == 400) {
      EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    }
  }
  // Specific messages users see.
  auto c = s.client();
  Json j = expect_error_body(send(*c, "POST", "/v1/completions", completion("\"top_p\": 1.5")), 400, "top_p");
  EXPECT_EQ(j["error"]["message"], "top_p must be in (0, 1], got 1.5");
  j = expect_error_body(send(*c, "POST", "/v1/chat/completions", chat_messages("[{\"role\": \"wizard\", \"content\": \"x\"}]")),
                        400, "messages");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("unknown role 'wizard'"), std::string::npos);
  j = expect_error_body(send(*c, "POST", "/v1/completions", long_prompt()), 400, "prompt");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("the context is 2048 tokens"), std::string::npos) << j;
  j = expect_error_body(send(*c, "POST", "/v1/completions", completion("\"model\": \"gpt-4\"")), 404, "model");
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  auto m = c->Get("/v1/completions");
  expect_error_body(m, 405, nullptr);
  EXPECT_EQ(m->get_header_value("Allow"), "POST");

  expect_still_serving(s);
  auto page = c->Get("/metrics");
  ASSERT_TRUE(page);
  const auto metrics = test::parse_prometheus(page->body);
  EXPECT_EQ(metrics.at("strata_kv_blocks_used{tier=\"hot\"}"), 0);
  EXPECT_EQ(metrics.at("strata_requests_total{status=\"success\"}"), 1);
  EXPECT_GE(metrics.at("strata_requests_total{status=\"error\"}"), 60);
}

TEST(ServerErrors, OversizedBodiesGet413) {
  ServerProcess::Options o;
  o.args = {"--max-body-bytes", "4096"};
  ServerProcess s(o);
  auto c = s.client();
  const std::string big = "{\"prompt\": \"" + std::string(5000, 'a') + "\"}";
  const Json j = expect_error_body(c->Post("/v1/completions", big, "application/json"), 413, nullptr);
  EXPECT_EQ(j["error"]["code"], "request_too_large");
  // Just under the limit is fine (and a long prompt of spaces is still within the context).
  const std::string ok = Json({{"prompt", std::string(3000, ' ') + "Once"}, {"max_tokens", 2}}).dump();
  ASSERT_LT(ok.size(), 4096u);
  auto r = c->Post("/v1/completions", ok, "application/json");
  ASSERT_TRUE(r);
  EXPECT_NE(r->status, 413);
  expect_still_serving(s);
}

TEST(ServerErrors, ApiKeyIsRequiredOnTheApiRoutesOnly) {
  ServerProcess::Options o;
  o.args = {"--api-key", "sekret-42"};
  ServerProcess s(o);
  auto c = s.client();
  const std::string body = Json({{"prompt", "Hi"}, {"max_tokens", 2}}).dump();
  Json j = expect_error_body(c->Post("/v1/completions", body, "application/json"), 401, nullptr);
  EXPECT_EQ(j["error"]["code"], "invalid_api_key");
  for (const std::string header : {"Bearer sekret-43", "Bearer sekret-4", "Bearer sekret-421", "sekret-42", "Basic sekret-42", "Bearer "}) {
    SCOPED_TRACE(header);
    expect_error_body(c->Post("/v1/completions", {{"Authorization", header}}, body, "application/json"), 401, nullptr);
  }
  expect_error_body(c->Get("/v1/models"), 401, nullptr);
  expect_error_body(c->Post("/tokenize", "{\"content\": \"x\"}", "application/json"), 401, nullptr);
  for (const std::string header : {"Bearer sekret-42", "bearer sekret-42"}) {
    auto r = c->Post("/v1/completions", {{"Authorization", header}}, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << header << ": " << r->body;
  }
  // Health, metrics and the status page stay public (load balancers, Prometheus).
  for (const char* path : {"/health", "/metrics", "/"}) {
    auto r = c->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << path;
  }
}

TEST(ServerErrors, ApiKeyFromTheEnvironment) {
  ServerProcess::Options o;
  o.env = {{"STRATA_API_KEY", "from-env"}};
  ServerProcess s(o);
  auto c = s.client();
  expect_error_body(c->Get("/v1/models"), 401, nullptr);
  auto r = c->Get("/v1/models", {{"Authorization", "Bearer from-env"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerErrors, RequestsBeyondMaxQueueGet429) {
  ServerProcess::Options o;
  o.args = {"--max-queue", "1"};
  ServerProcess s(o);
  // One request that runs until it is cancelled by hanging up: n samples up to the context.
  test::RawConnection first(s.port());
  first.post("/v1/completions",
             Json({{"prompt", "Once upon a time"}, {"max_tokens", 500}, {"n", 64}, {"ignore_eos", true}, {"stream", true}}).dump());
  const std::string head = first.read_until("data: ", 2);
  ASSERT_NE(head.find("200 OK"), std::string::npos) << head;
  ASSERT_EQ(head.find("[DONE]"), std::string::npos) << "the first request must still be in flight";
  auto c = s.client();
  const Json j = expect_error_body(c->Post("/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 2}", "application/json"), 429,
                                   nullptr);
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  expect_error_body(c->Post("/v1/chat/completions", chat("\"max_tokens\": 2"), "application/json"), 429, nullptr);
  // Utility routes are not generation requests and are not limited.
  auto t = c->Post("/tokenize", "{\"content\": \"x\"}", "application/json");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 200);
  first.close();
  // Once the first request is cancelled, there is room again.
  int status = 0, rejected = 2;
  for (int i = 0; i < 1000 && status != 200; ++i) {
    auto r = c->Post("/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 2}", "application/json");
    ASSERT_TRUE(r);
    status = r->status;
    if (status != 200) {
      EXPECT_EQ(status, 429);
      ++rejected;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_EQ(status, 200);
  auto page = c->Get("/metrics");
  ASSERT_TRUE(page);
  EXPECT_EQ(test::parse_prometheus(page->body).at("strata_requests_total{status=\"rejected\"}"), rejected);
}

TEST(ServerErrors, WhileTheModelLoadsHealthAndRequestsAre503) {
  // A FIFO as the model file: opening it blocks until the test writes, so "loading" lasts as long
  // as the test wants; then the load fails (not a regular file) and the server exits 2.
  const std::string dir = test::make_temp_dir("strata-fifo");
  const std::string fifo = dir + "/model.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ServerProcess::Options o;
  o.model = fifo;
  o.wait_ready = false;
  ServerProcess s(o);
  ASSERT_TRUE(s.wait_health(503, 60.0)) << s.log();
  auto c = s.client();
  Json j = expect_error_body(c->Get("/health"), 503, nullptr);
  EXPECT_EQ(j["error"]["code"], "model_loading");
  j = expect_error_body(c->Post("/v1/completions", "{\"prompt\": \"Hi\"}", "application/json"), 503, nullptr);
  EXPECT_EQ(j["error"]["code"], "model_loading");
  expect_error_body(c->Post("/v1/chat/completions", chat(""), "application/json"), 503, nullptr);
  expect_error_body(c->Post("/tokenize", "{\"content\": \"x\"}", "application/json"), 503, nullptr);
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(test::parse_prometheus(m->body).at("strata_model_ready"), 0);
  EXPECT_EQ(test::parse_prometheus(m->body).at("strata_requests_total{status=\"rejected\"}"), 2);
  // Still routed while loading: unknown routes are 404.
  expect_error_body(c->Get("/nope"), 404, nullptr);

  const int w = ::open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(w, 0);
  ::close(w);
  const auto code = s.wait_exit(60.0);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);
  EXPECT_NE(s.log().find("is not a regular file"), std::string::npos) << s.log();
  std::filesystem::remove_all(dir);
}

// Exit codes: 2 for bad usage (flags), 1 for runtime failures (a busy port, an unreadable model),
// both with a message before anything says "listening".
TEST(ServerErrors, BadFlagsExitTwoAndABusyPortOrAMissingModelExitOne) {
  auto r = test::run_command({test::strata_bin(), "serve", "--model", test::shared_path("models/stories260K.gguf"), "--port",
                              "0", "--max-body-bytes", "lots"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--max-body-bytes 'lots'"), std::string::npos) << r.err;
  r = test::run_command({test::strata_bin(), "serve", "--model", test::shared_path("models/stories260K.gguf"), "--port", "0",
                         "--chat-template", "/nonexistent.jinja"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot read --chat-template"), std::string::npos) << r.err;

  ServerProcess first;
  r = test::run_command({test::strata_bin(), "serve", "--model", test::shared_path("models/stories260K.gguf"), "--host", "127.0.0.1",
                         "--port", std::to_string(first.port())});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;

  r = test::run_command({test::strata_bin(), "serve", "--model", "/nonexistent/model.gguf", "--port", "0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot read the model '/nonexistent/model.gguf'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
  r = test::run_command({test::strata_bin(), "serve", "--model", test::shared_path("README.md"), "--port", "0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not a GGUF file"), std::string::npos) << r.err;
}

// A GGUF the loader would refuse is found before anything says "listening" (it used to be found by
// the background load, after "listening", with exit 2): a runtime failure naming the problem. A
// --chat-template that does not parse stays bad usage (exit 2), also before "listening".
TEST(ServerErrors, AModelTheLoaderWouldRefuseFailsBeforeListening) {
  const std::string dir = test::make_temp_dir("strata-bad-model");
  const std::string model = test::read_file(test::shared_path("models/stories260K.gguf"));
  test::write_file(dir + "/truncated.gguf", model.substr(0, model.size() / 2));
  test::write_file(dir + "/bad.jinja", "{% for m in messages %}{{ m.content }");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      // A vocabulary-only GGUF (no weights), as a user might pick from a folder of GGUFs.
      {{"--model", test::shared_path("tokenizer/ggml-vocab-llama-spm.gguf")}, 1, "missing tensor 'token_embd.weight'"},
      {{"--model", dir + "/truncated.gguf"}, 1, "truncated or corrupt file"},
      {{"--model", test::shared_path("models/stories260K.gguf"), "--chat-template", dir + "/bad.jinja"}, 2,
       "the chat template of --chat-template: template syntax error"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[1]);
    std::vector<std::string> argv = {test::strata_bin(), "serve", "--port", "0"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const auto r = test::run_command(argv, 60.0);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
