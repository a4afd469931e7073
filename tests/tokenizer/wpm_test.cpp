// WordPiece (bert-bge vocabulary) as llama.cpp b4748 does it (llm_tokenizer_wpm_session):
//  1. each code point is replaced by the FIRST code point of its NFD (unicode_cpts_normalize_nfd's
//     table keeps only that one): "é" -> "e", "Å" -> "A", the Hangul syllable "가" -> its leading jamo
//     U+1100; a combining mark written as its own code point (Devanagari vowel signs and virama,
//     "e" + U+0301) is not removed;
//  2. whitespace ends a word; U+0000, U+FFFD and category C* (not Cn) are dropped; the rest is
//     lowercased; punctuation, ASCII symbols and CJK ideographs are one-character words;
//  3. each word gets the "▁" prefix and is matched greedily, longest vocabulary entry first, from its
//     start; if some position matches nothing, the whole word becomes [UNK] (100).
// The vocabulary (BERT uncased, "##x" stored as "x" and "x" as "▁x") has no entry starting with the
// virama U+094D, the vowel signs U+0941 or U+0947, or U+0301, but has "ि" (U+093F, 29877), "ा"
// (U+093E, 29876) and "ी" (U+0940) as continuations.
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

constexpr TokenId kUnk = 100;

std::unique_ptr<Tokenizer> bert() {
  const auto file = GgufFile::open(test::shared_path("tokenizer/ggml-vocab-bert-bge.gguf"));
  return Tokenizer::from_gguf(*file);
}

TEST(Wpm, DevanagariWordWithAViramaIsUnknown) {
  const auto tok = bert();
  ASSERT_EQ(tok->unk(), kUnk);
  // "नमस्ते" = न म स ् त े: "▁न" (1327), "म" (29867), "स" (29874) match, then nothing starts with
  // "्" (U+094D): the whole word is [UNK].
  EXPECT_EQ(tok->encode("\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", false, false),
            (Ids{kUnk}));
  // "हिन्दी" = ह ि न ् द ी: "▁ह", "ि", "न" match, then "्": [UNK].
  EXPECT_EQ(tok->encode("\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80", false, false),
            (Ids{kUnk}));
  // Only that word is unknown: 7592 "▁hello", [UNK], 2088 "▁world".
  EXPECT_EQ(tok->encode("hello \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 world", false, false),
            (Ids{7592, kUnk, 2088}));
  // "नमस्ते, दुनिया!": punctuation splits words; "दुनिया" fails at "ु" (U+0941) after "▁द".
  // 1010 "▁,", 999 "▁!".
  EXPECT_EQ(tok->encode("\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87, "
                        "\xE0\xA4\xA6\xE0\xA5\x81\xE0\xA4\xA8\xE0\xA4\xBF\xE0\xA4\xAF\xE0\xA4\xBE!",
                        false, false),
            (Ids{kUnk, 1010, kUnk, 999}));
  // With [CLS] ... [SEP].
  EXPECT_EQ(tok->encode("\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80", true, false),
            (Ids{101, kUnk, 102}));
}

TEST(Wpm, DevanagariVowelSignsInTheVocabularyStayInTheWord) {
  const auto tok = bert();
  // "किताब" = क ि त ा ब: 1315 "▁क", 29877 "ि", 29859 "त", 29876 "ा", 29865 "ब" (the signs are kept,
  // not stripped as accents).
  EXPECT_EQ(tok->encode("\xE0\xA4\x95\xE0\xA4\xBF\xE0\xA4\xA4\xE0\xA4\xBE\xE0\xA4\xAC", false, false),
            (Ids{1315, 29877, 29859, 29876, 29865}));
  // "भारत" = भ ा र त: 1330 "▁भ", 29876 "ा", 29869 "र", 29859 "त".
  EXPECT_EQ(tok->encode("\xE0\xA4\xAD\xE0\xA4\xBE\xE0\xA4\xB0\xE0\xA4\xA4", false, false),
            (Ids{1330, 29876, 29869, 29859}));
  // "नम" has no mark: 1327 "▁न", 29867 "म".
  EXPECT_EQ(tok->encode("\xE0\xA4\xA8\xE0\xA4\xAE", false, false), (Ids{1327, 29867}));
}

TEST(Wpm, OnlyTheFirstCodePointOfTheDecompositionIsKept) {
  const auto tok = bert();
  // Precomposed "café": "é" -> "e", 7668 "▁cafe".
  EXPECT_EQ(tok->encode("caf\xC3\xA9", false, false), (Ids{7668}));
  // "cafe" + U+0301 written on its own: "▁cafe" matches, then nothing starts with U+0301: [UNK].
  EXPECT_EQ(tok->encode("cafe\xCC\x81", false, false), (Ids{kUnk}));
  // "ÅNGSTRÖM" -> "angstrom": 17076 "▁ang", 15687 "strom".
  EXPECT_EQ(tok->encode("\xC3\x85NGSTR\xC3\x96M", false, false), (Ids{17076, 15687}));
  // "가" (U+AC00) decomposes to U+1100 U+1161; only U+1100 is kept: 1455 "▁ᄀ" (a full NFD would
  // give 1455 30006 "ᅡ").
  EXPECT_EQ(tok->encode("\xEA\xB0\x80", false, false), (Ids{1455}));
}

TEST(Wpm, LatinWordsStillSplitIntoSubwords) {
  const auto tok = bert();
  EXPECT_EQ(tok->encode("tokenization", false, false), (Ids{19204, 3989}));  // "▁token" "ization"
  EXPECT_EQ(tok->encode("Hello, world!", false, false), (Ids{7592, 1010, 2088, 999}));
}

}  // namespace
}  // namespace strata
