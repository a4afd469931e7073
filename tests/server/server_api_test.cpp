// Black-box tests of `strata serve`'s OpenAI-compatible API on stories260K: completions and chat,
// streamed and not, against the shared greedy references and `strata generate`; logprobs, stop
// strings, seeds, echo, logit_bias; the utility routes; /metrics; concurrent clients.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

Json post_json(ServerProcess& s, const std::string& path, const Json& body, int expect_status = 200) {
  auto c = s.client();
  auto r = c->Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << "request failed: " << httplib::to_string(r.error());
  if (!r) return Json();
  EXPECT_EQ(r->status, expect_status) << r->body;
  if (r->get_header_value("Content-Type").rfind("application/json", 0) != 0) {
    ADD_FAILURE() << "not JSON: " << r->get_header_value("Content-Type");
    return Json();
  }
  return Json::parse(r->body);
}

test::SseEvents post_stream(ServerProcess& s, const std::string& path, const Json& body) {
  auto c = s.client();
  auto r = c->Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << "request failed";
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  return test::parse_sse(r->body);
}

constexpr const char* kHotUsed = "strata_kv_blocks_used{tier=\"hot\"}";

using test::metrics;

// Greedy completion of `prompt` (a string or token ids), non-streamed.
Json greedy(ServerProcess& s, const Json& prompt, int max_tokens, Json extra = Json::object()) {
  Json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  body.update(extra);
  return post_json(s, "/v1/completions", body);
}

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  ServerProcess& server() { return *server_; }
  static ServerProcess* server_;
};
ServerProcess* ServerApi::server_ = nullptr;

TEST_F(ServerApi, GreedyCompletionsReproduceTheReferenceTokens) {
  const auto refs = test::greedy_references();
  ASSERT_EQ(refs.size(), 3u);
  for (const auto& ref : refs) {
    SCOPED_TRACE(ref.prompt);
    const Json r = greedy(server(), ref.prompt, static_cast<int>(ref.tokens.size()), {{"logprobs", 0}});
    ASSERT_TRUE(r.is_object());
    EXPECT_TRUE(r["id"].get<std::string>().starts_with("cmpl-"));
    EXPECT_EQ(r["object"], "text_completion");
    EXPECT_TRUE(r["created"].is_number_integer());
    EXPECT_EQ(r["model"], "stories260K");
    ASSERT_EQ(r["choices"].size(), 1u);
    const Json& c = r["choices"][0];
    EXPECT_EQ(c["index"], 0);
    EXPECT_EQ(c["text"], ref.content);
    EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(r["usage"]["prompt_tokens"], ref.prompt_tokens.size());
    EXPECT_EQ(r["usage"]["completion_tokens"], ref.tokens.size());
    EXPECT_EQ(r["usage"]["total_tokens"], ref.prompt_tokens.size() + ref.tokens.size());

    // Token by token: pieces that add up to the text, at their offsets.
    const Json& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), ref.tokens.size());
    ASSERT_EQ(lp["token_logprobs"].size(), ref.tokens.size());
    ASSERT_EQ(lp["text_offset"].size(), ref.tokens.size());
    std::string joined;
    for (size_t i = 0; i < ref.tokens.size(); ++i) {
      EXPECT_EQ(lp["text_offset"][i], joined.size());
      joined += lp["tokens"][i].get<std::string>();
      EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
      // logprobs 0: only the sampled token.
      ASSERT_EQ(lp["top_logprobs"][i].size(), 1u);
      EXPECT_TRUE(lp["top_logprobs"][i].contains(lp["tokens"][i].get<std::string>()));
    }
    EXPECT_EQ(joined, ref.content);
    // The reference ids themselves, decoded after their prompt (decode drops the space prefix
    // SPM adds only at the very start).
    std::vector<int> all = ref.prompt_tokens;
    all.insert(all.end(), ref.tokens.begin(), ref.tokens.end());
    const Json d = post_json(server(), "/detokenize", {{"tokens", all}});
    EXPECT_EQ(d["content"], ref.prompt + ref.content);

    // The prompt as token ids gives the same continuation.
    const Json by_ids = greedy(server(), ref.prompt_tokens, static_cast<int>(ref.tokens.size()));
    EXPECT_EQ(by_ids["choices"][0]["text"], ref.content);
  }
}

TEST_F(ServerApi, GreedyCompletionsEqualStrataGenerate) {
  const std::string prompt = "The dog and the cat";
  auto g = test::run_command({test::strata_bin(), "generate", "--model", test::shared_path("models/stories260K.gguf"), "-t", "1",
                              "--temperature", "0", "-n", "48", "--json", "-p", prompt});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const Json expected = Json::parse(g.out);
  const Json r = greedy(server(), prompt, 48);
  EXPECT_EQ(r["choices"][0]["text"], expected["text"]);
  EXPECT_EQ(r["choices"][0]["finish_reason"], expected["finish_reason"]);
  EXPECT_EQ(r["usage"]["prompt_tokens"], expected["prompt_tokens"].size());
  EXPECT_EQ(r["usage"]["completion_tokens"], expected["tokens"].size());
}

TEST_F(ServerApi, StreamedCompletionEqualsTheWholeOne) {
  const auto ref = test::greedy_references()[1];
  const Json body = {{"prompt", ref.prompt}, {"max_tokens", 64}, {"temperature", 0}, {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  const auto ev = post_stream(server(), "/v1/completions", body);
  ASSERT_TRUE(ev.done);
  EXPECT_EQ(ev.events_after_done, 0u);
  ASSERT_GE(ev.chunks.size(), 3u);
  std::string text;
  std::string id = ev.chunks[0]["id"];
  EXPECT_TRUE(id.starts_with("cmpl-"));
  for (size_t i = 0; i + 1 < ev.chunks.size(); ++i) {
    const Json& c = ev.chunks[i];
    EXPECT_EQ(c["id"], id);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null()) << c;
    ASSERT_EQ(c["choices"].size(), 1u);
    text += c["choices"][0]["text"].get<std::string>();
    const bool last = i + 2 == ev.chunks.size();
    EXPECT_EQ(c["choices"][0]["finish_reason"].is_null(), !last) << c;
  }
  EXPECT_EQ(text, ref.content);
  EXPECT_EQ(ev.chunks[ev.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  const Json& usage_chunk = ev.chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], ref.prompt_tokens.size());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 64);
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], ref.prompt_tokens.size() + 64);

  // Without include_usage: no usage field, no usage chunk.
  const auto plain = post_stream(server(), "/v1/completions", {{"prompt", ref.prompt}, {"max_tokens", 8}, {"stream", true}});
  ASSERT_TRUE(plain.done);
  for (const Json& c : plain.chunks) {
    EXPECT_FALSE(c.contains("usage"));
    EXPECT_EQ(c["choices"].size(), 1u);
  }
}

TEST_F(ServerApi, StopStringsEndTheTextBeforeTheMatch) {
  const auto ref = test::greedy_references()[0];  // "..., there was a little girl named Lily. ..."
  const Json r = greedy(server(), ref.prompt, 64, {{"stop", {"Lily", "never appears"}}});
  const std::string expected = ref.content.substr(0, ref.content.find("Lily"));
  EXPECT_EQ(r["choices"][0]["text"], expected);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const Json single = greedy(server(), ref.prompt, 64, {{"stop", "Lily"}});
  EXPECT_EQ(single["choices"][0]["text"], expected);
  // Streamed, the held-back text never leaks past the stop string.
  Json body = {{"prompt", ref.prompt}, {"max_tokens", 64}, {"temperature", 0}, {"stop", "Lily"}, {"stream", true}};
  const auto ev = post_stream(server(), "/v1/completions", body);
  std::string text;
  for (const Json& c : ev.chunks) text += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, expected);
  EXPECT_EQ(ev.chunks.back()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerApi, SeedsMakeSamplingReproducibleAndNGivesIndexedChoices) {
  const Json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 1.0}, {"seed", 1234}, {"n", 3}};
  const Json a = post_json(server(), "/v1/completions", body);
  const Json b = post_json(server(), "/v1/completions", body);
  ASSERT_EQ(a["choices"].size(), 3u);
  std::set<std::string> distinct;
  int64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]);
    distinct.insert(a["choices"][i]["text"].get<std::string>());
  }
  total = a["usage"]["completion_tokens"];
  EXPECT_GT(distinct.size(), 1u) << "n samples of one seed use different streams";
  EXPECT_LE(total, 3 * 24);
  EXPECT_GE(total, 3);
  // Streamed with n = 2: every chunk names its choice, each choice finishes once.
  Json sb = body;
  sb["n"] = 2;
  sb["stream"] = true;
  const auto ev = post_stream(server(), "/v1/completions", sb);
  std::map<int, std::string> texts;
  std::map<int, int> finishes;
  for (const Json& c : ev.chunks) {
    const int index = c["choices"][0]["index"];
    texts[index] += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) ++finishes[index];
  }
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(texts[0], a["choices"][0]["text"]);
  EXPECT_EQ(texts[1], a["choices"][1]["text"]);
}

TEST_F(ServerApi, LogprobsEchoAndLogitBias) {
  const auto ref = test::greedy_references()[0];
  const Json r = greedy(server(), ref.prompt, 8, {{"logprobs", 3}});
  const Json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const Json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 3u);
    EXPECT_LE(top.size(), 4u);
    const double chosen = lp["token_logprobs"][i];
    // Greedy: the chosen token is the most likely one.
    for (const auto& [tok, v] : top.items()) EXPECT_LE(v.get<double>(), chosen + 1e-6) << tok;
    EXPECT_DOUBLE_EQ(top[lp["tokens"][i].get<std::string>()].get<double>(), chosen);
  }

  const Json echoed = greedy(server(), ref.prompt, 8, {{"echo", true}});
  EXPECT_EQ(echoed["choices"][0]["text"], ref.prompt + ref.content.substr(0, r["choices"][0]["text"].get<std::string>().size()));

  // Banning the greedy first token (",", id 432) changes the first token.
  const Json banned = greedy(server(), ref.prompt, 4, {{"logit_bias", {{"432", -100}}}, {"logprobs", 0}});
  EXPECT_NE(banned["choices"][0]["logprobs"]["tokens"][0], ",");
  // +100 on one token restricts sampling to it.
  const Json forced = greedy(server(), ref.prompt, 3, {{"logit_bias", {{"291", 100}}}, {"logprobs", 0}});
  const Json piece = post_json(server(), "/tokenize", {{"content", "The"}, {"with_pieces", true}});
  ASSERT_EQ(piece["tokens"].size(), 1u);
  EXPECT_EQ(piece["tokens"][0]["id"], 291);
  for (const Json& t : forced["choices"][0]["logprobs"]["tokens"]) EXPECT_EQ(t, piece["tokens"][0]["piece"]);
}

TEST_F(ServerApi, ChatCompletionsRenderTheTemplateAndStream) {
  const Json messages = Json::array({{{"role", "system"}, {"content", "You tell stories."}},
                                     {{"role", "user"}, {"content", "Tell me about a dog."}}});
  // stories260K has no chat template: ChatML, no BOS text in it, so BOS is added.
  const Json rendered = post_json(server(), "/apply-template", {{"messages", messages}});
  EXPECT_EQ(rendered["prompt"],
            "<|im_start|>system\nYou tell stories.<|im_end|>\n<|im_start|>user\nTell me about a dog.<|im_end|>\n"
            "<|im_start|>assistant\n");
  const Json ids = post_json(server(), "/tokenize", {{"content", rendered["prompt"]}, {"add_special", true}});
  ASSERT_EQ(ids["tokens"][0], 1);

  const Json body = {{"messages", messages}, {"max_completion_tokens", 40}, {"temperature", 0}, {"model", "stories260K"}};
  const Json r = post_json(server(), "/v1/chat/completions", body);
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("chatcmpl-"));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["model"], "stories260K");
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  const std::string content = r["choices"][0]["message"]["content"];
  EXPECT_FALSE(content.empty());
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["usage"]["prompt_tokens"], ids["tokens"].size());
  EXPECT_EQ(r["usage"]["total_tokens"], r["usage"]["prompt_tokens"].get<int>() + r["usage"]["completion_tokens"].get<int>());
  // The same prompt through /v1/completions gives the same text.
  const Json same = greedy(server(), ids["tokens"], 40);
  EXPECT_EQ(same["choices"][0]["text"], content);

  Json sb = body;
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  const auto ev = post_stream(server(), "/v1/chat/completions", sb);
  ASSERT_TRUE(ev.done);
  ASSERT_GE(ev.chunks.size(), 3u);
  EXPECT_EQ(ev.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(ev.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (size_t i = 1; i + 1 < ev.chunks.size(); ++i) {
    const Json& delta = ev.chunks[i]["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("role"));
    if (delta.contains("content")) streamed += delta["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(ev.chunks[ev.chunks.size() - 2]["choices"][0]["finish_reason"], r["choices"][0]["finish_reason"]);
  EXPECT_TRUE(ev.chunks.back()["choices"].empty());
  EXPECT_EQ(ev.chunks.back()["usage"]["completion_tokens"], r["usage"]["completion_tokens"]);
}

TEST_F(ServerApi, ChatLogprobsFollowOpenAIsShape) {
  const Json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"temperature", 0},
                     {"logprobs", true}, {"top_logprobs", 3}};
  const Json r = post_json(server(), "/v1/chat/completions", body);
  const Json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), r["usage"]["completion_tokens"].get<size_t>());
  std::string joined;
  for (const Json& e : content) {
    const std::string token = e["token"];
    joined += token;
    std::vector<int> bytes(token.begin(), token.end());
    for (int& b : bytes) b &= 0xff;
    EXPECT_EQ(e["bytes"].get<std::vector<int>>(), bytes);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Best first, and greedy picked the best.
    EXPECT_EQ(e["top_logprobs"][0]["token"], token);
    EXPECT_DOUBLE_EQ(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][1]["logprob"].get<double>(), e["top_logprobs"][2]["logprob"].get<double>());
  }
  EXPECT_EQ(joined, r["choices"][0]["message"]["content"]);
}

TEST_F(ServerApi, TokenizeDetokenizeAndModels) {
  const auto ref = test::greedy_references()[0];
  const Json t = post_json(server(), "/tokenize", {{"content", ref.prompt}, {"add_special", true}});
  EXPECT_EQ(t["tokens"].get<std::vector<int>>(), ref.prompt_tokens);
  const Json plain = post_json(server(), "/tokenize", {{"content", ref.prompt}});
  EXPECT_EQ(plain["tokens"].get<std::vector<int>>(), std::vector<int>(ref.prompt_tokens.begin() + 1, ref.prompt_tokens.end()));
  const Json pieces = post_json(server(), "/tokenize", {{"content", "Once upon"}, {"with_pieces", true}});
  ASSERT_EQ(pieces["tokens"].size(), 2u);
  EXPECT_EQ(pieces["tokens"][0]["id"], 403);
  EXPECT_EQ(pieces["tokens"][0]["piece"], " Once");
  const Json d = post_json(server(), "/detokenize", {{"tokens", ref.prompt_tokens}});
  EXPECT_EQ(d["content"], ref.prompt);

  auto c = server().client();
  auto r = c->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Json models = Json::parse(r->body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "stories260K");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["owned_by"], "strata");
  auto one = c->Get("/v1/models/stories260K");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  // The file's name is accepted as the model too.
  EXPECT_EQ(greedy(server(), "Hi", 2, {{"model", "stories260K.gguf"}})["model"], "stories260K");

  auto health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json::parse(health->body), Json({{"status", "ok"}}));
  auto page = c->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
}

TEST_F(ServerApi, MetricsCountRequestsTokensAndLatencies) {
  const auto before = metrics(server());
  const Json r = greedy(server(), "Once upon a time", 10);
  const Json s = post_json(server(), "/v1/completions", {{"prompt", "x"}, {"max_tokens", -1}}, 400);
  // The blocks of a finished request are freed at the end of the engine step that finished it,
  // which may be just after the response went out: poll until the snapshot shows them free.
  auto after = metrics(server());
  for (int i = 0; i < 3000 && !(after.count(kHotUsed) && after.at(kHotUsed) == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = metrics(server());
  }
  auto delta = [&](const std::string& k) { return after.at(k) - (before.count(k) ? before.at(k) : 0.0); };
  EXPECT_EQ(delta("strata_requests_total{status=\"success\"}"), 1);
  EXPECT_EQ(delta("strata_requests_total{status=\"error\"}"), 1);
  EXPECT_EQ(delta("strata_prompt_tokens_total"), r["usage"]["prompt_tokens"].get<double>());
  EXPECT_EQ(delta("strata_generation_tokens_total"), r["usage"]["completion_tokens"].get<double>());
  for (const std::string h : {"strata_time_to_first_token_seconds", "strata_time_per_output_token_seconds",
                              "strata_e2e_request_latency_seconds"}) {
    EXPECT_EQ(delta(h + "_count"), 1) << h;
    EXPECT_EQ(after.at(h + "_bucket{le=\"+Inf\"}"), after.at(h + "_count")) << h;
    EXPECT_GT(after.at(h + "_sum"), 0) << h;
  }
  EXPECT_EQ(after.at(kHotUsed), 0);
  EXPECT_GT(after.at("strata_kv_capacity_bytes{tier=\"hot\"}"), 0);
  EXPECT_EQ(after.at("strata_model_ready"), 1);
  EXPECT_GE(delta("strata_prefix_cache_queried_tokens_total"), 1);
  for (const std::string k : {"strata_requests_running", "strata_requests_waiting", "strata_requests_swapped",
                              "strata_kv_usage_ratio", "strata_preemptions_total", "strata_kv_spill_out_bytes_total",
                              "strata_kv_spill_in_bytes_total", "strata_prefix_cache_hit_tokens_total",
                              "strata_requests_total{status=\"aborted\"}", "strata_requests_total{status=\"rejected\"}",
                              "strata_kv_bytes{tier=\"warm\"}", "strata_kv_bytes{tier=\"cold\"}"}) {
    EXPECT_TRUE(after.count(k)) << k;
  }
  auto page = server().client()->Get("/metrics");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("# TYPE strata_requests_total counter"), std::string::npos);
  EXPECT_NE(page->body.find("# HELP strata_e2e_request_latency_seconds "), std::string::npos);
  EXPECT_NE(page->body.find("# TYPE strata_e2e_request_latency_seconds histogram"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
}

TEST_F(ServerApi, ConcurrentClientsGetTheSameTextAsSequentialOnes) {
  const auto refs = test::greedy_references();
  std::vector<std::string> prompts;
  for (const auto& r : refs) prompts.push_back(r.prompt);
  prompts.push_back("The cat sat");
  prompts.push_back("Tom had a red");
  std::vector<std::string> sequential;
  for (const auto& p : prompts) sequential.push_back(greedy(server(), p, 48)["choices"][0]["text"]);

  constexpr int kThreads = 8;
  std::vector<std::vector<std::string>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < prompts.size(); ++k) {
        const std::string& p = prompts[(k + static_cast<size_t>(t)) % prompts.size()];
        const bool stream = (t + static_cast<int>(k)) % 2 == 0;
        auto c = server().client();
        const Json body = {{"prompt", p}, {"max_tokens", 48}, {"temperature", 0}, {"stream", stream}};
        auto r = c->Post("/v1/completions", body.dump(), "application/json");
        if (!r || r->status != 200) {
          got[t].push_back("<failed>");
          continue;
        }
        std::string text;
        if (stream) {
          for (const Json& ch : test::parse_sse(r->body).chunks) text += ch["choices"][0]["text"].get<std::string>();
        } else {
          text = Json::parse(r->body)["choices"][0]["text"];
        }
        got[t].push_back(text);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(got[t].size(), prompts.size());
    for (size_t k = 0; k < prompts.size(); ++k) {
      EXPECT_EQ(got[t][k], sequential[(k + static_cast<size_t>(t)) % prompts.size()]) << "thread " << t << " request " << k;
    }
  }
}

TEST(ServerChatTemplate, TemplatesThatWriteBosAreNotGivenASecondOneAndRaiseExceptionIs400) {
  const std::string dir = test::make_temp_dir("strata-tmpl");
  test::write_file(dir + "/t.jinja",
                   "{{ bos_token }}{% if messages[0]['role'] != 'user' %}"
                   "{{ raise_exception('Conversations must start with a user message') }}{% endif %}"
                   "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                   "{% if add_generation_prompt %}[assistant] {% endif %}");
  ServerProcess::Options o;
  o.args = {"--chat-template", dir + "/t.jinja", "--served-model-name", "tiny"};
  ServerProcess s(o);
  const Json messages = Json::array({{{"role", "user"}, {"content", "Once upon a time"}}});
  const Json rendered = post_json(s, "/apply-template", {{"messages", messages}});
  EXPECT_EQ(rendered["prompt"], "<s>[user] Once upon a time\n[assistant] ");
  // "<s>" in the text is parsed as BOS; no second BOS is added.
  const Json ids = post_json(s, "/tokenize", {{"content", rendered["prompt"]}});
  ASSERT_GE(ids["tokens"].size(), 2u);
  EXPECT_EQ(ids["tokens"][0], 1);
  EXPECT_NE(ids["tokens"][1], 1);
  const Json r = post_json(s, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 4}, {"model", "tiny"}});
  EXPECT_EQ(r["usage"]["prompt_tokens"], ids["tokens"].size());
  EXPECT_EQ(r["model"], "tiny");

  const Json bad = Json::array({{{"role", "system"}, {"content", "x"}}, {{"role", "user"}, {"content", "y"}}});
  for (const std::string path : {"/v1/chat/completions", "/apply-template"}) {
    const Json e = post_json(s, path, {{"messages", bad}}, 400);
    EXPECT_EQ(e["error"]["message"], "Conversations must start with a user message") << path;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
