// Behaviour of strata::Tokenizer that callers rely on: BOS/EOS/SEP handling, special-token parsing,
// decode and round trips, pieces, end-of-generation ids, errors for vocabularies it cannot handle.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "support/test_support.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

using Ids = std::vector<TokenId>;

std::unique_ptr<Tokenizer> load(const std::string& rel) {
  const auto file = GgufFile::open(test::shared_path(rel));
  return Tokenizer::from_gguf(*file);
}

std::unique_ptr<Tokenizer> vocab(const std::string& name) { return load("tokenizer/ggml-vocab-" + name + ".gguf"); }

// The test strings of a vocabulary's .inp file (see tokenizer_vectors_test.cpp for the format).
std::vector<std::string> inputs(const std::string& name) {
  const std::string raw = test::read_file(test::shared_path("tokenizer/ggml-vocab-" + name + ".gguf.inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      out.push_back(raw.substr(pos));
      break;
    }
    out.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

// A GGUF holding only tokenizer metadata, kept in memory for the life of the parsed file.
struct MemoryGguf {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  explicit MemoryGguf(const GgufWriter& w) : bytes(w.write_memory()), file(GgufFile::parse(bytes, "<test vocab>")) {}
};

GgufWriter bpe_writer(const std::string& pre, const std::vector<std::string>& tokens,
                      const std::vector<std::string>& merges) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::str(pre));
  w.set("tokenizer.ggml.tokens", GgufValue::array_of_strings(tokens));
  w.set("tokenizer.ggml.merges", GgufValue::array_of_strings(merges));
  return w;
}

TEST(Tokenizer, Stories260KPromptsMatchTheReference) {
  const auto tok = load("models/stories260K.gguf");
  std::ifstream in(test::shared_path("reference/stories260K-greedy.jsonl"));
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const Ids expected = j["prompt_tokens"].get<Ids>();
    EXPECT_EQ(tok->encode(j["prompt"].get<std::string>(), /*add_special=*/true, /*parse_special=*/false), expected)
        << j["prompt"];
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(tok->encode("Once upon a time", true, false), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
}

TEST(Tokenizer, AddSpecialFollowsTheVocabularyFlags) {
  const auto spm = vocab("llama-spm");  // add_bos_token = true, add_eos_token = false
  EXPECT_EQ(spm->encode("Hello world", false, false), (Ids{15043, 3186}));
  EXPECT_EQ(spm->encode("Hello world", true, false), (Ids{1, 15043, 3186}));
  EXPECT_EQ(spm->encode("", true, false), (Ids{1}));
  EXPECT_EQ(spm->encode("", false, false), Ids{});

  const auto gpt2 = vocab("gpt-2");  // no add_bos_token key: llama.cpp's BPE default is no BOS
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(gpt2->encode("Hello world", true, false), gpt2->encode("Hello world", false, false));

  const auto ds = vocab("deepseek-llm");  // add_bos_token = true
  const Ids with = ds->encode("Hello world", true, false);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.front(), 100000);
  EXPECT_EQ(Ids(with.begin() + 1, with.end()), ds->encode("Hello world", false, false));

  const auto bert = vocab("bert-bge");  // WPM: [CLS] ... [SEP]
  EXPECT_EQ(bert->encode("Hello world", true, false), (Ids{101, 7592, 2088, 102}));
}

TEST(Tokenizer, ControlTokensAreParsedOnlyWhenAsked) {
  const auto gpt2 = vocab("gpt-2");
  const TokenId eot = 50256;
  ASSERT_EQ(gpt2->token_text(eot), "<|endoftext|>");
  const Ids parsed = gpt2->encode("Hi<|endoftext|>there", false, true);
  const Ids hi = gpt2->encode("Hi", false, false);
  const Ids there = gpt2->encode("there", false, false);
  Ids expected = hi;
  expected.push_back(eot);
  expected.insert(expected.end(), there.begin(), there.end());
  EXPECT_EQ(parsed, expected);
  const Ids plain = gpt2->encode("Hi<|endoftext|>there", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_GT(plain.size(), parsed.size());
  EXPECT_EQ(gpt2->decode(plain, false), "Hi<|endoftext|>there") << "the text survives as text";

  // SPM: a special token is followed by a fresh space prefix, as in llama.cpp.
  const auto spm = vocab("llama-spm");
  EXPECT_EQ(spm->encode("<s>Hello", false, true), (Ids{1, 15043}));
  const Ids spm_plain = spm->encode("<s>Hello", false, false);
  EXPECT_EQ(std::count(spm_plain.begin(), spm_plain.end(), 1), 0);
}

TEST(Tokenizer, UserDefinedTokensAreAlwaysSplitOut) {
  const auto coder = vocab("deepseek-coder");
  const TokenId user = 32019;
  ASSERT_EQ(coder->token_text(user), "<|User|>");
  ASSERT_TRUE(coder->token_attr(user) & token_attr::kUserDefined);
  EXPECT_EQ(coder->encode("<|User|>", false, false), (Ids{user}));
  EXPECT_EQ(coder->encode("<|User|>", false, true), (Ids{user}));
}

TEST(Tokenizer, Phi3SpecialTokensEatTheWhitespaceAfterThem) {
  // llama.cpp sets rstrip on Phi-3's special tokens (the GGUF does not carry the attribute).
  const auto phi3 = vocab("phi-3");
  ASSERT_EQ(phi3->token_text(32010), "<|user|>");
  EXPECT_EQ(phi3->encode("<|user|>\nHello", false, true), (Ids{32010, 15043}));
  EXPECT_TRUE(phi3->is_eog(32007)) << "<|end|>";
  EXPECT_TRUE(phi3->is_eog(32000)) << "<|endoftext|> is the EOS";
  EXPECT_FALSE(phi3->is_eog(32010));
}

TEST(Tokenizer, PiecesAndDecode) {
  const auto spm = vocab("llama-spm");
  EXPECT_EQ(spm->token_to_piece(15043, false), " Hello");
  EXPECT_EQ(spm->token_to_piece(13, false), "\n") << "<0x0A> byte token";
  EXPECT_EQ(spm->token_to_piece(1, false), "");
  EXPECT_EQ(spm->token_to_piece(1, true), "<s>");
  EXPECT_EQ(spm->nl(), 13);
  EXPECT_EQ(spm->decode(Ids{15043, 3186}, false), "Hello world") << "the added space prefix is dropped";
  EXPECT_EQ(spm->decode(Ids{1, 15043, 3186}, false), "Hello world");
  EXPECT_EQ(spm->decode(Ids{1, 15043, 3186}, true), "<s> Hello world");
  EXPECT_THROW(spm->decode(Ids{15043, 32000}, false), Error);
  EXPECT_THROW(spm->decode(Ids{-1}, false), Error);

  const auto gpt2 = vocab("gpt-2");
  EXPECT_EQ(gpt2->nl(), 198);
  EXPECT_EQ(gpt2->token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(gpt2->token_to_piece(50256, false), "");
  const Ids hello = gpt2->encode(" Hello", false, false);
  ASSERT_EQ(hello.size(), 1u);
  EXPECT_EQ(gpt2->token_to_piece(hello[0], false), " Hello");
  EXPECT_EQ(gpt2->token_text(hello[0]), "\xC4\xA0Hello") << "byte-level spelling of the space";
  // GPT-2 cleans up tokenization spaces when decoding.
  EXPECT_EQ(gpt2->decode(gpt2->encode("Hello , world !", false, false), false), "Hello, world!");
}

TEST(Tokenizer, CleanUpTokenizationSpaces) {
  std::string s = "Hello , world ! Is it ? Yes . I ' m sure he 's here , they 're , we 've , don 't , I 'd , we 'll";
  clean_up_tokenization_spaces(s);
  EXPECT_EQ(s, "Hello, world! Is it? Yes. I'm sure he's here, they're, we've, don 't, I 'd, we 'll");
  std::string empty;
  clean_up_tokenization_spaces(empty);
  EXPECT_EQ(empty, "");
}

// decode(encode(x)) gives x back on lossless vocabularies; those that clean up tokenization spaces
// give the cleaned-up x.
TEST(Tokenizer, RoundTripOnLosslessVocabularies) {
  for (const std::string name : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "mpt",
                                 "starcoder", "refact"}) {
    const auto tok = vocab(name);
    for (const std::string& text : inputs(name)) {
      std::string expected = text;
      if (tok->vocab().flags().clean_spaces) clean_up_tokenization_spaces(expected);
      EXPECT_EQ(tok->decode(tok->encode(text, false, false), false), expected) << name << ": \"" << text << "\"";
      EXPECT_EQ(tok->decode(tok->encode(text, true, false), false), expected) << name << " with BOS: \"" << text << "\"";
    }
  }
}

TEST(Tokenizer, SpmKeepsInvalidUtf8ThroughByteTokens) {
  const auto spm = vocab("llama-spm");
  const std::string bytes = "a\xFF\xC3(b\xE2\x82";
  EXPECT_EQ(spm->decode(spm->encode(bytes, false, false), false), bytes);
}

TEST(Tokenizer, BpeReadsInvalidUtf8AsReplacementCharacters) {
  // llama.cpp's BPE pre-tokenizer decodes the text first; an ill-formed byte becomes U+FFFD.
  const auto gpt2 = vocab("gpt-2");
  EXPECT_EQ(gpt2->decode(gpt2->encode("a\xFF" "b", false, false), false), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(gpt2->encode("a\xFF" "b", false, false), gpt2->encode("a\xEF\xBF\xBD" "b", false, false));
}

TEST(Tokenizer, MergesApplyInRankOrder) {
  // "abc": the rank-0 merge (b c) wins over (a b), then (a bc) finishes the word.
  MemoryGguf g(bpe_writer("gpt-2", {"a", "b", "c", "ab", "bc", "abc"}, {"b c", "a b", "a bc"}));
  const auto tok = Tokenizer::from_gguf(*g.file);
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{5}));
  EXPECT_EQ(tok->encode("ab", false, false), (Ids{3}));
  EXPECT_EQ(tok->encode("cab", false, false), (Ids{2, 3}));
  EXPECT_EQ(tok->decode(Ids{2, 3}, false), "cab");
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordTokens) {
  // llama3 pre-tokenizers use a word as is when it is a token, even without a merge path to it.
  const std::vector<std::string> tokens = {"a", "b", "c", "abc"};
  MemoryGguf llama3(bpe_writer("llama-bpe", tokens, {"a b"}));
  GgufWriter w = bpe_writer("llama-bpe", tokens, {"a b"});
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  MemoryGguf no_bos(w);
  EXPECT_EQ(Tokenizer::from_gguf(*no_bos.file)->encode("abc", true, false), (Ids{3}));
  // llama3 defaults to adding a BOS token, and this vocabulary has none: the file is rejected.
  try {
    Tokenizer::from_gguf(*llama3.file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_bos_token is true, but tokenizer.ggml.bos_token_id is not set"),
              std::string::npos)
        << e.what();
  }
  MemoryGguf gpt2(bpe_writer("gpt-2", tokens, {"a b"}));
  EXPECT_EQ(Tokenizer::from_gguf(*gpt2.file)->encode("abc", false, false), (Ids{0, 1, 2}))
      << "without ignore_merges only merges build tokens (\"a b\" makes \"ab\", not a token here)";
}

TEST(Tokenizer, UnknownPreTokenizerTypeIsAnError) {
  MemoryGguf g(bpe_writer("no-such-pre", {"a", "b", "ab"}, {"a b"}));
  try {
    Tokenizer::from_gguf(*g.file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown pre-tokenizer type 'no-such-pre'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.ggml.pre"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama-bpe"), std::string::npos) << "lists the known types: " << msg;
  }
  MemoryGguf kimi(bpe_writer("kimi-k2", {"a", "b", "ab"}, {"a b"}));
  try {
    Tokenizer::from_gguf(*kimi.file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'kimi-k2'"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, MissingOrMalformedTokenizerMetadataIsAnError) {
  const auto expect_error = [](const GgufWriter& w, const std::string& needle) {
    MemoryGguf g(w);
    try {
      Tokenizer::from_gguf(*g.file);
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GgufWriter none;
  none.set("general.architecture", GgufValue::str("llama"));
  expect_error(none, "tokenizer.ggml.model is missing");

  GgufWriter unknown_model;
  unknown_model.set("tokenizer.ggml.model", GgufValue::str("sentencepiece-unigram"));
  unknown_model.set("tokenizer.ggml.tokens", GgufValue::array_of_strings({"a"}));
  expect_error(unknown_model, "unsupported tokenizer model 'sentencepiece-unigram'");

  GgufWriter no_tokens;
  no_tokens.set("tokenizer.ggml.model", GgufValue::str("llama"));
  expect_error(no_tokens, "tokenizer.ggml.tokens is missing");

  GgufWriter short_scores;
  short_scores.set("tokenizer.ggml.model", GgufValue::str("llama"));
  short_scores.set("tokenizer.ggml.tokens", GgufValue::array_of_strings({"<unk>", "<s>", "</s>", "a"}));
  short_scores.set("tokenizer.ggml.scores", GgufValue::array_of_f32({0.0f, 0.0f}));
  expect_error(short_scores, "tokenizer.ggml.scores");

  GgufWriter no_merges;
  no_merges.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  no_merges.set("tokenizer.ggml.pre", GgufValue::str("gpt-2"));
  no_merges.set("tokenizer.ggml.tokens", GgufValue::array_of_strings({"a"}));
  expect_error(no_merges, "tokenizer.ggml.merges is missing");
}

TEST(Tokenizer, EveryKnownPreTokenizerTypeBuilds) {
  std::string names = "default";
  // The list in the error message is the list of supported types.
  MemoryGguf g(bpe_writer("?", {"a"}, {}));
  try {
    Tokenizer::from_gguf(*g.file);
  } catch (const Error& e) {
    const std::string msg = e.what();
    names = msg.substr(msg.find("known types: ") + 13);
  }
  size_t count = 0;
  for (size_t pos = 0; pos < names.size();) {
    size_t end = names.find(", ", pos);
    if (end == std::string::npos) end = names.size();
    const std::string pre = names.substr(pos, end - pos);
    GgufWriter w = bpe_writer(pre, {"a", "b", "ab", "<s>"}, {"a b"});
    w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(3));
    MemoryGguf m(w);
    const auto tok = Tokenizer::from_gguf(*m.file);
    EXPECT_EQ(tok->encode("ab", false, false), (Ids{2})) << pre;
    ++count;
    pos = end + 2;
  }
  EXPECT_GE(count, 60u);
}

TEST(Tokenizer, EncodeIsThreadSafe) {
  const auto tok = vocab("deepseek-llm");
  const std::vector<std::string> texts = inputs("deepseek-llm");
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(tok->encode(t, true, true));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t k = 0; k < texts.size(); ++k) mismatches[static_cast<size_t>(i)] += tok->encode(texts[k], true, true) != expected[k];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace strata
