// Which special tokens are split out of raw text, in which mode, and the whitespace they eat: the
// rule of llama.cpp b4748 (tokenizer_st_partition), on the shared vocabularies.
//
// The rule, from llama-vocab.cpp: every token whose attribute is CONTROL, USER_DEFINED or UNKNOWN is
// a candidate, longest text first. With parse_special = false, CONTROL and UNKNOWN tokens are skipped;
// USER_DEFINED tokens are still split out (as Hugging Face does for added tokens that are not
// special). The attribute is the GGUF's tokenizer.ggml.token_type, except that b4748 makes a token
// CONTROL when its text is one of its EOT/EOM/FIM/end-of-generation names ("<|end|>", "<|eot_id|>",
// "<｜fim▁begin｜>", ...); "</s>" is not among them. For a model named "phi3"/"phi-3" it sets RSTRIP on
// every candidate and on "</s>", then clears it on "<unk>", "<s>" and "<|endoftext|>": an RSTRIP
// token eats the whitespace after it, an LSTRIP token (none here) the whitespace before it. An SPM
// text piece that follows a split-out token gets a fresh space prefix.
//
// Every expected id list below was also checked against llama.cpp b4748 itself (llama_tokenize with
// a vocab-only load of the same GGUF).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

using Ids = std::vector<TokenId>;

std::unique_ptr<Tokenizer> vocab(const std::string& name) {
  const auto file = GgufFile::open(test::shared_path("tokenizer/ggml-vocab-" + name + ".gguf"));
  return Tokenizer::from_gguf(*file);
}

// Phi-3's GGUF (general.name "Phi3") types "</s>" (id 2) USER_DEFINED (token_type 4), while "<s>",
// "<unk>", "<|endoftext|>" and the chat tokens "<|user|>", "<|end|>", ... are CONTROL (3).
TEST(SpecialSplit, Phi3UserDefinedEndOfSentenceIsSplitOutWithoutParseSpecial) {
  const auto phi3 = vocab("phi-3");
  ASSERT_EQ(phi3->token_text(2), "</s>");
  EXPECT_TRUE(phi3->token_attr(2) & token_attr::kUserDefined);
  EXPECT_FALSE(phi3->is_control(2)) << "b4748 does not make \"</s>\" a control token";
  EXPECT_TRUE(phi3->token_attr(2) & token_attr::kRstrip) << "the phi3 rule sets rstrip on \"</s>\"";

  for (const bool parse_special : {false, true}) {
    // "Hello" -> " Hello" -> 15043 "▁Hello"; "</s>" -> 2; its rstrip eats " ", and "world" gets the
    // space prefix again -> 3186 "▁world".
    EXPECT_EQ(phi3->encode("Hello</s> world", false, parse_special), (Ids{15043, 2, 3186})) << parse_special;
    EXPECT_EQ(phi3->encode("</s>", false, parse_special), (Ids{2})) << parse_special;
    // 263 "▁a", 2, 289 "▁b".
    EXPECT_EQ(phi3->encode("a</s>b", false, parse_special), (Ids{263, 2, 289})) << parse_special;
    // No lstrip: "x  " -> "▁x▁▁" = 921 "▁x" 259 "▁▁"; rstrip eats "\n " -> 343 "▁y".
    EXPECT_EQ(phi3->encode("x  </s>\n y", false, parse_special), (Ids{921, 259, 2, 343})) << parse_special;
    EXPECT_EQ(phi3->encode("</s></s>", false, parse_special), (Ids{2, 2})) << parse_special;
  }
  // With BOS: the text after BOS still starts with a space prefix, "</s>" is still split out.
  EXPECT_EQ(phi3->encode("Hello</s> world", true, false), (Ids{1, 15043, 2, 3186}));
}

TEST(SpecialSplit, Phi3ControlTokensStayTextWithoutParseSpecial) {
  const auto phi3 = vocab("phi-3");
  ASSERT_EQ(phi3->token_text(32007), "<|end|>");
  ASSERT_TRUE(phi3->is_control(32007));
  // Plain text: " a <|end|> b" -> 263 "▁a", 529 "▁<", 29989 "|", 355 "end", 29989 "|", 29958 ">", 289 "▁b".
  EXPECT_EQ(phi3->encode("a <|end|> b", false, false), (Ids{263, 529, 29989, 355, 29989, 29958, 289}));
  // Parsed: "a " -> "▁a▁" = 263 "▁a" 29871 "▁"; 32007; its rstrip eats " " -> 289 "▁b".
  EXPECT_EQ(phi3->encode("a <|end|> b", false, true), (Ids{263, 29871, 32007, 289}));
  // "<s>" (CONTROL) and "<unk>" (UNKNOWN) are text unless parsed; neither strips.
  EXPECT_EQ(phi3->encode("<s>Hello", false, false), (Ids{529, 29879, 29958, 10994}));  // "▁<" "s" ">" "Hello"
  EXPECT_EQ(phi3->encode("<s>Hello", false, true), (Ids{1, 15043}));
  EXPECT_EQ(phi3->encode("<unk>", false, false), (Ids{529, 2960, 29958}));  // "▁<" "unk" ">"
  EXPECT_EQ(phi3->encode("<unk>", false, true), (Ids{0}));
  // "<|user|>" is CONTROL with rstrip: parsed, it eats the "\n" after it.
  EXPECT_EQ(phi3->encode("Hi<|user|>\nthere", false, false), (Ids{6324, 29966, 29989, 1792, 29989, 29958, 13, 12711}));
  EXPECT_EQ(phi3->encode("Hi<|user|>\nthere", false, true), (Ids{6324, 32010, 727}));
}

// deepseek-coder's GGUF types its FIM tokens USER_DEFINED, but their texts are b4748's FIM names, so
// b4748 makes them CONTROL: they are text unless special tokens are parsed. Its "<|User|>" (also
// USER_DEFINED, no such name) is split out in both modes.
TEST(SpecialSplit, TokensNamedAsFimBecomeControl) {
  const auto coder = vocab("deepseek-coder");
  const std::string begin = "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>";  // <｜fim▁begin｜>
  ASSERT_EQ(coder->token_text(32016), begin);
  EXPECT_TRUE(coder->is_control(32016));
  EXPECT_EQ(coder->encode(begin, false, true), (Ids{32016}));
  const Ids plain = coder->encode(begin, false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(coder->decode(plain, false), begin);
  EXPECT_EQ(coder->encode("a<|User|>b", false, false), coder->encode("a<|User|>b", false, true));
  EXPECT_EQ(coder->encode("<|User|>", false, false), (Ids{32019}));
}

}  // namespace
}  // namespace strata
