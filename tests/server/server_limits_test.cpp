// Black-box tests of numeric fields at the edges of their types: integers written as JSON floats
// (9223372036854775808.0 = 2^63 is one past int64 although double(INT64_MAX) compares equal to it),
// the extremes of int64 and uint64, and numbers JSON cannot carry (NaN, infinities, 1e400). Every
// value outside a field's type is a 400 naming the field, never an overflowing conversion (the
// sanitizer build runs these against the UBSan binary); every value inside it is served.
#include <gtest/gtest.h>

#include "server/server_process.h"

namespace strata {
namespace {

using test::Json;
using test::ServerProcess;

struct Case {
  const char* name;
  const char* path;
  std::string body;
  int status;
  const char* param;  // expected error.param for 400; nullptr = not checked (invalid JSON has none)
};

std::string completion(const std::string& fields) {
  return "{\"prompt\": \"Once upon a time\", \"max_tokens\": 2, " + fields + "}";
}
std::string chat(const std::string& fields) {
  return "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2, " + fields + "}";
}

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      // seed: integer literals in [-2^63, 2^64), or integral floats in [-2^63, 2^63).
      {"seed 2^63 as a float", "/v1/completions", completion("\"seed\": 9223372036854775808.0"), 400, "seed"},
      {"seed 2^63 as a float in chat", "/v1/chat/completions", chat("\"seed\": 9223372036854775808.0"), 400, "seed"},
      {"seed 2^63 in exponent form", "/v1/completions", completion("\"seed\": 9.223372036854775808e18"), 400, "seed"},
      {"seed 2^64 as a float", "/v1/completions", completion("\"seed\": 18446744073709551616.0"), 400, "seed"},
      {"seed 2^64 as an integer literal", "/v1/completions", completion("\"seed\": 18446744073709551616"), 400, "seed"},
      {"seed 1e300", "/v1/completions", completion("\"seed\": 1e300"), 400, "seed"},
      {"seed -1e300", "/v1/completions", completion("\"seed\": -1e300"), 400, "seed"},
      {"seed just below -2^63", "/v1/completions", completion("\"seed\": -9223372036854777856.0"), 400, "seed"},
      {"seed 2^63 - 1024 as a float", "/v1/completions", completion("\"seed\": 9223372036854774784.0"), 200, nullptr},
      {"seed -2^63 as a float", "/v1/completions", completion("\"seed\": -9223372036854775808.0"), 200, nullptr},
      {"seed -2^63 as an integer", "/v1/completions", completion("\"seed\": -9223372036854775808"), 200, nullptr},
      {"seed 2^63 - 1 as an integer", "/v1/completions", completion("\"seed\": 9223372036854775807"), 200, nullptr},
      {"seed 2^64 - 1 as an integer", "/v1/completions", completion("\"seed\": 18446744073709551615"), 200, nullptr},
      {"seed 1e18", "/v1/completions", completion("\"seed\": 1e18"), 200, nullptr},
      // Not JSON: NaN and infinities have no literal, 1e400 overflows a double.
      {"seed NaN", "/v1/completions", completion("\"seed\": NaN"), 400, nullptr},
      {"seed Infinity", "/v1/completions", completion("\"seed\": Infinity"), 400, nullptr},
      {"seed -Infinity", "/v1/completions", completion("\"seed\": -Infinity"), 400, nullptr},
      {"seed 1e400", "/v1/completions", completion("\"seed\": 1e400"), 400, nullptr},
      // The 32-bit fields at the same edges.
      {"max_tokens 2^63 as a float", "/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 9223372036854775808.0}", 400,
       "max_tokens"},
      {"max_tokens 2^31 as a float", "/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 2147483648.0}", 400, "max_tokens"},
      {"max_completion_tokens -2^63 as a float", "/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_completion_tokens\": -9223372036854775808.0}", 400,
       "max_completion_tokens"},
      {"n 2^63 as a float", "/v1/completions", completion("\"n\": 9223372036854775808.0"), 400, "n"},
      {"n 2^64 - 1", "/v1/completions", completion("\"n\": 18446744073709551615"), 400, "n"},
      {"n 2.0", "/v1/completions", completion("\"n\": 2.0"), 200, nullptr},
      {"top_k 2^63 as a float", "/v1/completions", completion("\"top_k\": 9223372036854775808.0"), 400, "top_k"},
      {"top_k -1.0 (off)", "/v1/completions", completion("\"top_k\": -1.0"), 200, nullptr},
      {"priority 2^63 as a float", "/v1/completions", completion("\"priority\": 9223372036854775808.0"), 400, "priority"},
      {"priority -2^31 as a float", "/v1/completions", completion("\"priority\": -2147483648.0"), 200, nullptr},
      {"priority -2^31 - 1", "/v1/completions", completion("\"priority\": -2147483649"), 400, "priority"},
      {"logprobs 2^63 as a float", "/v1/completions", completion("\"logprobs\": 9223372036854775808.0"), 400, "logprobs"},
      {"best_of 2^63 as a float", "/v1/completions", completion("\"best_of\": 9223372036854775808.0"), 400, "best_of"},
      {"top_logprobs 2^63 as a float", "/v1/chat/completions",
       chat("\"logprobs\": true, \"top_logprobs\": 9223372036854775808.0"), 400, "top_logprobs"},
      {"stop_token_ids 2^63 as a float", "/v1/completions", completion("\"stop_token_ids\": [9223372036854775808.0]"), 400,
       "stop_token_ids"},
      {"stop_token_ids 2^64 - 1", "/v1/completions", completion("\"stop_token_ids\": [18446744073709551615]"), 400,
       "stop_token_ids"},
      {"prompt token 2^63 as a float", "/v1/completions", "{\"prompt\": [9223372036854775808.0]}", 400, "prompt"},
      {"prompt token 2^64 - 1", "/v1/completions", "{\"prompt\": [18446744073709551615]}", 400, "prompt"},
      {"prompt token -2^63", "/v1/completions", "{\"prompt\": [-9223372036854775808]}", 400, "prompt"},
      {"logit_bias 1e300", "/v1/completions", completion("\"logit_bias\": {\"5\": 1e300}"), 400, "logit_bias"},
      {"logit_bias key 2^63", "/v1/completions", completion("\"logit_bias\": {\"9223372036854775808\": 1}"), 400, "logit_bias"},
      {"temperature 1e300", "/v1/completions", completion("\"temperature\": 1e300"), 400, "temperature"},
      {"temperature -1e-320 (a denormal)", "/v1/completions", completion("\"temperature\": -1e-320"), 200, nullptr},
      {"detokenize 2^63 as a float", "/detokenize", "{\"tokens\": [9223372036854775808.0]}", 400, "tokens"},
      {"detokenize -2^63 as a float", "/detokenize", "{\"tokens\": [-9223372036854775808.0]}", 400, "tokens"},
      {"detokenize 2^64 - 1", "/detokenize", "{\"tokens\": [18446744073709551615]}", 400, "tokens"},
  };
  return kCases;
}

TEST(ServerLimits, NumbersAtTheEdgesOfTheirTypes) {
  ServerProcess s;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto r = s.client()->Post(c.path, c.body, "application/json");
    ASSERT_TRUE(r) << "no answer; server log:\n" << s.log();
    EXPECT_EQ(r->status, c.status) << r->body;
    if (c.status != 400) continue;
    const Json j = Json::parse(r->body);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << j;
    if (c.param != nullptr) {
      EXPECT_EQ(j["error"]["param"], c.param) << j;
    }
  }
  auto h = s.client()->Get("/health");
  ASSERT_TRUE(h) << s.log();
  EXPECT_EQ(h->status, 200);
}

// Seeds are taken modulo 2^64: every spelling of one value samples the same tokens.
TEST(ServerLimits, EverySpellingOfASeedSamplesTheSameTokens) {
  ServerProcess s;
  auto text = [&](const std::string& seed) {
    const std::string body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 1.0, \"seed\": " + seed + "}";
    auto r = s.client()->Post("/v1/completions", body, "application/json");
    EXPECT_TRUE(r);
    if (!r) return std::string();
    EXPECT_EQ(r->status, 200) << seed << ": " << r->body;
    return Json::parse(r->body)["choices"][0]["text"].get<std::string>();
  };
  // -2^63 = 2^63 (mod 2^64).
  const std::string a = text("9223372036854775808");
  EXPECT_EQ(text("-9223372036854775808"), a);
  EXPECT_EQ(text("-9223372036854775808.0"), a);
  EXPECT_EQ(text("-9.223372036854775808e18"), a);
  // -1 = 2^64 - 1.
  const std::string b = text("18446744073709551615");
  EXPECT_EQ(text("-1"), b);
  EXPECT_EQ(text("-1.0"), b);
  // 2^63 - 1024 is a double; 42 a small one.
  EXPECT_EQ(text("9223372036854774784.0"), text("9223372036854774784"));
  EXPECT_EQ(text("42.0"), text("42"));
  // Distinct seeds usually differ: the test would pass vacuously if the seed were ignored.
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace strata
