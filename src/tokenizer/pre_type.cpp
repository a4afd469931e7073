#include "tokenizer/pre_type.h"

#include <algorithm>

namespace strata {
namespace {

// Where llama.cpp had to approximate a tokenizer.json pattern for std::regex (tekken, gpt-4o,
// tiny_aya: case classes \p{Lu}/\p{Ll} emulated with lookaheads, marks dropped), the original
// pattern is used: PCRE2 implements it, and it is what the model was trained with. The other patterns
// are llama.cpp's (its `(?i:'s|...)` rewrites as `'[sS]|...` are exact).

constexpr std::string_view kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";

constexpr std::string_view kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kJais2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re";

constexpr std::string_view kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kQwen35 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Letters of the cased scripts, as deepseek-llm's tokenizer.json spells them.
constexpr std::string_view kDeepseekLlmLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";

constexpr std::string_view kDeepseekLlmPunct = R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
constexpr std::string_view kCjkHangul = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
constexpr std::string_view kCjkKana = R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";

constexpr std::string_view kDeepseekV3Words =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kSpark25Words =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)re";

constexpr std::string_view kPoro = R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)re";

constexpr std::string_view kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kYoutuCjk =
    R"re([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";
constexpr std::string_view kYoutuWords =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kGraniteEmbMulti =
    R"re([^\r\n\p{L}\p{N}]?(?:(?=[\p{L}\p{M}])[^a-z])*(?:(?=[\p{L}\p{M}])[^A-Z])+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?(?:(?=[\p{L}\p{M}])[^a-z])+(?:(?=[\p{L}\p{M}])[^A-Z])*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kBailingMoe =
    R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re";

constexpr std::string_view kSeedCoder =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kUfakzeka =
    R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kExaoneMoe =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re";

constexpr std::string_view kMiniCpm5 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::string_view kTinyAya =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

struct Entry {
  std::vector<std::string_view> names;  // the first is the canonical id
  PreTokenizerType type;
};

PreTokenizerType make(std::vector<std::string_view> regexes, bool clean_spaces = true, bool ignore_merges = false,
                      bool add_bos = false, bool no_bos = false) {
  PreTokenizerType t;
  t.regexes = std::move(regexes);
  t.clean_spaces = clean_spaces;
  t.ignore_merges = ignore_merges;
  t.add_bos = add_bos;
  t.no_bos = no_bos;
  return t;
}

constexpr bool kKeepSpaces = false;  // clean_spaces = false

std::vector<Entry> build_table() {
  std::vector<Entry> t;
  const std::vector<std::string_view> starcoder = {R"re(\p{N})re", kGpt2};
  t.push_back({{"default"},
               make({R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", R"re([0-9][0-9][0-9])re"})});
  t.push_back({{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                "jina-v5-nano"},
               make({kLlama3}, true, /*ignore_merges=*/true, /*add_bos=*/true)});
  t.push_back({{"dbrx"}, make({kLlama3})});
  t.push_back({{"smaug-bpe"}, make({kLlama3})});
  t.push_back({{"chatglm-bpe", "glm4"}, make({kLlama3}, true, false, false, /*no_bos=*/true)});
  t.push_back({{"jais-2"}, make({kJais2})});
  t.push_back({{"deepseek-llm"},
               make({R"re([\r\n])re", kDeepseekLlmLetters, kDeepseekLlmPunct, R"re(\s+$)re", kCjkHangul,
                     R"re(\p{N}+)re"},
                    kKeepSpaces)});
  t.push_back({{"deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"},
               make({R"re(\p{N}{1,3})re", kCjkKana, kDeepseekV3Words}, kKeepSpaces)});
  t.push_back({{"spark2_5"}, make({R"re(\p{N}{1,3})re", kCjkKana, kSpark25Words, R"re(\p{N})re"}, kKeepSpaces)});
  t.push_back({{"youtu"}, make({kYoutuCjk, kYoutuWords}, kKeepSpaces, /*ignore_merges=*/true)});
  t.push_back({{"deepseek-coder"},
               make({R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjkHangul, R"re(\p{N})re"},
                    kKeepSpaces)});
  t.push_back({{"falcon"}, make({R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, R"re([0-9][0-9][0-9])re"})});
  t.push_back({{"starcoder"}, make(starcoder)});
  t.push_back({{"refact"}, make(starcoder)});
  t.push_back({{"command-r"}, make(starcoder, kKeepSpaces)});
  t.push_back({{"smollm"}, make(starcoder, kKeepSpaces)});
  t.push_back({{"codeshell"}, make(starcoder)});
  t.push_back({{"exaone"}, make(starcoder)});
  t.push_back({{"minerva-7b"}, make(starcoder)});
  t.push_back({{"mellum2"}, make(starcoder)});
  t.push_back({{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4"},
               make({kGpt2})});
  t.push_back({{"mpt"}, make({kGpt2})});
  t.push_back({{"olmo"}, make({kGpt2})});
  t.push_back({{"jais"}, make({kGpt2})});
  t.push_back({{"trillion"}, make({kGpt2}, kKeepSpaces)});
  t.push_back({{"granite-docling"}, make({kGpt2}, kKeepSpaces)});
  t.push_back({{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"}, make({kQwen2}, kKeepSpaces)});
  t.push_back({{"stablelm2"}, make({kQwen2})});
  t.push_back({{"megrez"}, make({kQwen2})});
  t.push_back({{"hunyuan", "grok-2", "solar-open"}, make({kQwen2}, kKeepSpaces)});
  t.push_back({{"qwen35"}, make({kQwen35}, kKeepSpaces)});
  t.push_back({{"poro-chat"}, make({kPoro}, kKeepSpaces)});
  t.push_back({{"bloom"}, make({kPoro})});
  t.push_back({{"gpt3-finnish"}, make({kPoro})});
  t.push_back({{"viking"}, make({kPoro, R"re(\p{N})re"}, kKeepSpaces)});
  t.push_back({{"tekken"}, make({kTekken}, kKeepSpaces, /*ignore_merges=*/true, /*add_bos=*/true)});
  t.push_back({{"chameleon"},
               make({R"re(<sentinel:[0-9]+>)re", R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re",
                     R"re(([\t\n]|    |  ))re", R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2},
                    kKeepSpaces, false, /*add_bos=*/true)});
  t.push_back({{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, make({kGpt4o}, kKeepSpaces)});
  t.push_back({{"granite-embed-multi-97m"}, make({kGraniteEmbMulti}, kKeepSpaces, /*ignore_merges=*/true)});
  // tokenizer.json's \b follows a digit here, so it means "no word character next"; spelled out
  // because PCRE2's \w (with UCP) also counts other numbers such as U+00B2 as word characters, and
  // the Unicode (onig) \w the pattern was written for does not.
  t.push_back({{"tiny_aya", "cohere2moe"},
               make({R"re(\d{1,3}(?=(?:\d{3})*(?![\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])))re", kTinyAya},
                    kKeepSpaces)});
  t.push_back({{"superbpe"}, make({R"re(\p{N}+)re", R"re((?=(\d{3})+(?!\d)))re"}, kKeepSpaces)});
  t.push_back({{"bailingmoe", "bailingmoe2", "llada-moe"}, make({kBailingMoe}, kKeepSpaces)});
  t.push_back({{"seed-coder"}, make({kSeedCoder}, kKeepSpaces)});
  t.push_back({{"ufakzeka"}, make({kUfakzeka}, kKeepSpaces)});
  t.push_back({{"laguna"}, make({R"re([^\n]+|[\n]+)re", kQwen2}, kKeepSpaces)});
  t.push_back({{"exaone-moe"}, make({kExaoneMoe})});
  t.push_back({{"minicpm5"}, make({R"re(\p{N}{1,3})re", kMiniCpm5}, true, /*ignore_merges=*/true)});
  for (Entry& e : t) e.type.id = e.names.front();
  return t;
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = build_table();
  return t;
}

// Types llama.cpp implements with custom code (digit grouping, Han handling, SPM-style BPE on raw
// bytes, DNA k-mers) rather than regexes alone.
constexpr std::string_view kUnsupported[] = {"kimi-k2", "afmoe", "gemma4", "granite-embed-multi-311m",
                                             "sarvam-moe", "whitespace"};

}  // namespace

const PreTokenizerType* find_pre_tokenizer_type(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const Entry& e : table()) {
    if (std::find(e.names.begin(), e.names.end(), pre) != e.names.end()) return &e.type;
  }
  return nullptr;
}

bool is_unsupported_pre_tokenizer_type(std::string_view pre) {
  return std::find(std::begin(kUnsupported), std::end(kUnsupported), pre) != std::end(kUnsupported);
}

std::string known_pre_tokenizer_names() {
  std::string out;
  for (const Entry& e : table()) {
    for (std::string_view n : e.names) {
      if (!out.empty()) out += ", ";
      out += n;
    }
  }
  return out;
}

}  // namespace strata
