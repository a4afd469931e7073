// The incremental detokenizer used for streaming: it must never emit a broken UTF-8 sequence, must
// hold back a character split over several tokens until it is complete, and must lose nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "support/test_support.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata {
namespace {

using Ids = std::vector<TokenId>;

std::unique_ptr<Tokenizer> vocab(const std::string& name) {
  const auto file = GgufFile::open(test::shared_path("tokenizer/ggml-vocab-" + name + ".gguf"));
  return Tokenizer::from_gguf(*file);
}

std::string concat_pieces(const Tokenizer& tok, const Ids& ids) {
  std::string s;
  for (TokenId id : ids) s += tok.token_to_piece(id, false);
  return s;
}

TEST(IncrementalDetokenizer, HoldsBackACharacterSplitOverByteTokens) {
  const auto spm = vocab("llama-spm");
  // From the llama-spm vectors: the llama emoji has no token and is spelled with 4 byte tokens.
  const Ids ids = spm->encode(" this is \xF0\x9F\xA6\x99.cpp", false, false);
  ASSERT_EQ(ids, (Ids{29871, 445, 338, 29871, 243, 162, 169, 156, 29889, 8223}));
  IncrementalDetokenizer detok(*spm);
  std::vector<std::string> chunks;
  for (TokenId id : ids) chunks.push_back(detok.push(id));
  chunks.push_back(detok.flush());
  EXPECT_EQ(chunks[4], "") << "first byte of the emoji is held";
  EXPECT_EQ(chunks[5], "");
  EXPECT_EQ(chunks[6], "");
  EXPECT_EQ(chunks[7], "\xF0\x9F\xA6\x99") << "the whole emoji comes out with its last byte";
  std::string all;
  for (const auto& c : chunks) {
    EXPECT_TRUE(utf8::is_valid(c)) << c;
    all += c;
  }
  EXPECT_EQ(all, "  this is \xF0\x9F\xA6\x99.cpp") << "pieces as they are, spaces included";
  EXPECT_EQ(detok.pending_bytes(), 0u);
}

TEST(IncrementalDetokenizer, EveryChunkIsValidUtf8OnEveryVocabulary) {
  const std::string text =
      "Hello \xF0\x9F\x98\x81 caf\xC3\xA9 \xE6\x88\x91\xE6\x83\xB3 \xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE "
      "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B \xF0\x9F\x9A\x80\xF0\x9F\xA6\x99";
  for (const std::string name : {"llama-spm", "gpt-2", "deepseek-llm", "falcon", "starcoder", "phi-3"}) {
    const auto tok = vocab(name);
    const Ids ids = tok->encode(text, false, false);
    IncrementalDetokenizer detok(*tok);
    std::string all;
    for (TokenId id : ids) {
      const std::string chunk = detok.push(id);
      EXPECT_TRUE(utf8::is_valid(chunk)) << name << " after token " << id;
      all += chunk;
    }
    all += detok.flush();
    EXPECT_EQ(all, concat_pieces(*tok, ids)) << name;
  }
}

TEST(IncrementalDetokenizer, BytesThatCannotFormACharacterBecomeReplacementCharacters) {
  const auto spm = vocab("llama-spm");
  const TokenId b_ff = 3 + 0xFF;  // <0xFF>
  const TokenId b_e2 = 3 + 0xE2;
  const TokenId b_82 = 3 + 0x82;
  const TokenId b_ac = 3 + 0xAC;
  ASSERT_EQ(spm->token_text(b_ff), "<0xFF>");
  IncrementalDetokenizer detok(*spm);
  EXPECT_EQ(detok.push(b_ff), "\xEF\xBF\xBD") << "0xFF never starts a character";
  EXPECT_EQ(detok.push(b_e2), "");
  EXPECT_EQ(detok.push(b_82), "");
  EXPECT_EQ(detok.pending_bytes(), 2u);
  EXPECT_EQ(detok.push(b_ac), "\xE2\x82\xAC") << "euro sign completed";
  EXPECT_EQ(detok.push(b_e2), "");
  EXPECT_EQ(detok.push(15043), "\xEF\xBF\xBD Hello") << "an interrupted sequence is replaced, the rest kept";
  EXPECT_EQ(detok.push(b_e2), "");
  EXPECT_EQ(detok.push(b_82), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD") << "flush ends an incomplete character";
  EXPECT_EQ(detok.pending_bytes(), 0u);
  EXPECT_THROW(detok.push(32000), Error);
}

TEST(IncrementalDetokenizer, SpecialTokensAreRenderedOnlyWhenAsked) {
  const auto spm = vocab("llama-spm");
  IncrementalDetokenizer hidden(*spm);
  EXPECT_EQ(hidden.push(1), "");
  EXPECT_EQ(hidden.push(2), "");
  IncrementalDetokenizer shown(*spm, /*render_special=*/true);
  EXPECT_EQ(shown.push(1), "<s>");
  EXPECT_EQ(shown.push(2), "</s>");
}

}  // namespace
}  // namespace strata
