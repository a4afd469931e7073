#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <optional>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_type.h"

namespace strata {
namespace {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : int64_t {
  kTypeUndefined = 0,
  kTypeNormal = 1,
  kTypeUnknown = 2,
  kTypeControl = 3,
  kTypeUserDefined = 4,
  kTypeUnused = 5,
  kTypeByte = 6,
};

uint32_t attr_of_type(int64_t type) {
  switch (type) {
    case kTypeNormal: return token_attr::kNormal;
    case kTypeUnknown: return token_attr::kUnknown;
    case kTypeControl: return token_attr::kControl;
    case kTypeUserDefined: return token_attr::kUserDefined;
    case kTypeUnused: return token_attr::kUnused;
    case kTypeByte: return token_attr::kByte;
    default: return token_attr::kUndefined;
  }
}

const GgufArray* find_array(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return nullptr;
  if (v->type() != GgufType::kArray) fail("{}: {} must be an array, found a {}", f.source(), key, gguf_type_name(v->type()));
  return &v->as_array();
}

std::optional<std::string> find_string(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type() != GgufType::kString) fail("{}: {} must be a string, found a {}", f.source(), key, gguf_type_name(v->type()));
  return v->as_string();
}

std::optional<bool> find_bool(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type() != GgufType::kBool) fail("{}: {} must be a bool, found a {}", f.source(), key, gguf_type_name(v->type()));
  return v->as_bool();
}

// A special token id key: out-of-range values (such as u32 -1 for "none") leave the default, as in
// llama.cpp, because files in the wild carry them.
void read_special_id(const GgufFile& f, std::string_view key, int32_t n_vocab, TokenId& id) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return;
  if (!v->is_integer()) fail("{}: {} must be a token id, found {}", f.source(), key, v->to_string());
  if (v->type() == GgufType::kUint64 && v->as_uint() > static_cast<uint64_t>(INT64_MAX)) return;
  const int64_t raw = v->as_int();
  if (raw >= 0 && raw < n_vocab) id = static_cast<TokenId>(raw);
}

bool one_of(std::string_view s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

std::string lowercase_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string_view vocab_type_name(VocabType type) {
  switch (type) {
    case VocabType::kSpm: return "SPM";
    case VocabType::kBpe: return "BPE";
    case VocabType::kWpm: return "WPM";
  }
  return "?";
}

TokenId Vocab::find(std::string_view text) const {
  const auto it = ids_.find(text);
  return it == ids_.end() ? kNoToken : it->second;
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

bool Vocab::is_eog(TokenId id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

Vocab Vocab::from_gguf(const GgufFile& f) {
  Vocab v;
  const std::optional<std::string> model = find_string(f, "tokenizer.ggml.model");
  if (!model) fail("{}: no tokenizer in this file (tokenizer.ggml.model is missing)", f.source());
  v.model_ = *model;
  v.pre_ = find_string(f, "tokenizer.ggml.pre").value_or("");

  // Defaults per tokenizer model, as llama.cpp sets them before reading the file's keys.
  SpecialTokens& sp = v.special_;
  VocabFlags& fl = v.flags_;
  if (v.model_ == "llama") {
    v.type_ = VocabType::kSpm;
    sp.bos = 1;
    sp.eos = 2;
    sp.unk = 0;
    fl.add_space_prefix = true;
    fl.add_bos = true;
  } else if (v.model_ == "bert") {
    v.type_ = VocabType::kWpm;
    sp.bos = 101;
    sp.unk = 100;
    sp.sep = 102;
    sp.pad = 0;
    sp.mask = 103;
    fl.clean_spaces = true;
    fl.add_bos = true;
    fl.add_sep = true;
  } else if (v.model_ == "gpt2") {
    v.type_ = VocabType::kBpe;
    sp.bos = 11;
    sp.eos = 11;
    v.pre_type_ = find_pre_tokenizer_type(v.pre_);
    if (v.pre_type_ == nullptr) {
      if (is_unsupported_pre_tokenizer_type(v.pre_)) {
        fail("{}: pre-tokenizer type '{}' (tokenizer.ggml.pre) needs custom code that Strata does not implement",
             f.source(), v.pre_);
      }
      fail("{}: unknown pre-tokenizer type '{}' (tokenizer.ggml.pre); known types: {}", f.source(), v.pre_,
           known_pre_tokenizer_names());
    }
    fl.clean_spaces = v.pre_type_->clean_spaces;
    fl.ignore_merges = v.pre_type_->ignore_merges;
    fl.add_bos = v.pre_type_->add_bos;
    if (v.pre_type_->no_bos) sp.bos = kNoToken;
  } else if (v.model_ == "no_vocab" || v.model_ == "none") {
    fail("{}: the model has no vocabulary (tokenizer.ggml.model = '{}')", f.source(), v.model_);
  } else {
    fail("{}: unsupported tokenizer model '{}' (tokenizer.ggml.model); supported: llama (SPM), gpt2 (BPE), bert (WPM)",
         f.source(), v.model_);
  }
  if (auto b = find_bool(f, "tokenizer.ggml.add_space_prefix")) fl.add_space_prefix = *b;

  // Tokens, scores, types.
  const GgufArray* tokens = find_array(f, "tokenizer.ggml.tokens");
  if (tokens == nullptr) fail("{}: no tokenizer in this file (tokenizer.ggml.tokens is missing)", f.source());
  if (tokens->elem_type != GgufType::kString) {
    fail("{}: tokenizer.ggml.tokens must be an array of strings, found {}", f.source(), gguf_type_name(tokens->elem_type));
  }
  const size_t n = tokens->items.size();
  if (n == 0) fail("{}: tokenizer.ggml.tokens is empty", f.source());
  if (n >= static_cast<size_t>(INT32_MAX)) fail("{}: tokenizer.ggml.tokens has too many tokens ({})", f.source(), n);
  const GgufArray* scores = find_array(f, "tokenizer.ggml.scores");
  if (scores != nullptr && (scores->items.size() < n || (n > 0 && !scores->items[0].is_float() && !scores->items[0].is_integer()))) {
    fail("{}: tokenizer.ggml.scores must hold a number for each of the {} tokens", f.source(), n);
  }
  const GgufArray* types = find_array(f, "tokenizer.ggml.token_type");
  if (types != nullptr && (types->items.size() < n || !types->items[0].is_integer())) {
    fail("{}: tokenizer.ggml.token_type must hold an integer for each of the {} tokens", f.source(), n);
  }
  v.texts_.resize(n);
  v.scores_.assign(n, 0.0f);
  v.attrs_.assign(n, token_attr::kNormal);
  v.ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string text = tokens->items[i].as_string();
    if (text.empty()) text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp: keep ids, keep texts unique
    // Duplicate texts: the later id wins the text -> id map, as in llama.cpp releases before it rejected them.
    v.ids_[text] = static_cast<TokenId>(i);
    v.max_token_length_ = std::max(v.max_token_length_, text.size());
    v.texts_[i] = std::move(text);
    if (scores != nullptr) v.scores_[i] = static_cast<float>(scores->items[i].as_float());
    if (types != nullptr) v.attrs_[i] = attr_of_type(types->items[i].as_int());
  }
  const auto n_vocab = static_cast<int32_t>(n);

  if (v.type_ == VocabType::kBpe) {
    const GgufArray* merges = find_array(f, "tokenizer.ggml.merges");
    if (merges == nullptr) fail("{}: BPE tokenizer without merges (tokenizer.ggml.merges is missing)", f.source());
    if (merges->elem_type != GgufType::kString && !merges->items.empty()) {
      fail("{}: tokenizer.ggml.merges must be an array of strings, found {}", f.source(), gguf_type_name(merges->elem_type));
    }
    v.merges_.reserve(merges->items.size());
    for (const GgufValue& m : merges->items) v.merges_.push_back(m.as_string());
  }

  // Byte fallback tokens.
  for (int b = 0; b < 256; ++b) {
    TokenId id = kNoToken;
    if (v.type_ == VocabType::kSpm) {
      id = v.find(fmt::format("<0x{:02X}>", b));
      if (id == kNoToken) id = v.find(std::string(1, static_cast<char>(b)));
    } else {
      id = v.find(byte_level::encode_byte(static_cast<uint8_t>(b)));
    }
    v.byte_tokens_[static_cast<size_t>(b)] = id;
  }

  // Special ids: defaults outside the vocabulary are dropped, then the file's keys override.
  for (TokenId* id : {&sp.bos, &sp.eos, &sp.unk, &sp.sep, &sp.pad, &sp.mask}) {
    if (*id >= n_vocab) *id = kNoToken;
  }
  read_special_id(f, "tokenizer.ggml.bos_token_id", n_vocab, sp.bos);
  read_special_id(f, "tokenizer.ggml.eos_token_id", n_vocab, sp.eos);
  read_special_id(f, "tokenizer.ggml.eot_token_id", n_vocab, sp.eot);
  read_special_id(f, "tokenizer.ggml.eom_token_id", n_vocab, sp.eom);
  read_special_id(f, "tokenizer.ggml.unknown_token_id", n_vocab, sp.unk);
  read_special_id(f, "tokenizer.ggml.seperator_token_id", n_vocab, sp.sep);
  read_special_id(f, "tokenizer.ggml.padding_token_id", n_vocab, sp.pad);
  read_special_id(f, "tokenizer.ggml.mask_token_id", n_vocab, sp.mask);
  read_special_id(f, "tokenizer.ggml.fim_pre_token_id", n_vocab, sp.fim_pre);
  read_special_id(f, "tokenizer.ggml.fim_suf_token_id", n_vocab, sp.fim_suf);
  read_special_id(f, "tokenizer.ggml.fim_mid_token_id", n_vocab, sp.fim_mid);
  read_special_id(f, "tokenizer.ggml.fim_pad_token_id", n_vocab, sp.fim_pad);
  read_special_id(f, "tokenizer.ggml.fim_rep_token_id", n_vocab, sp.fim_rep);
  read_special_id(f, "tokenizer.ggml.fim_sep_token_id", n_vocab, sp.fim_sep);
  read_special_id(f, "tokenizer.ggml.prefix_token_id", n_vocab, sp.fim_pre);  // deprecated spellings
  read_special_id(f, "tokenizer.ggml.suffix_token_id", n_vocab, sp.fim_suf);
  read_special_id(f, "tokenizer.ggml.middle_token_id", n_vocab, sp.fim_mid);

  if (auto b = find_bool(f, "tokenizer.ggml.add_bos_token")) fl.add_bos = *b;
  if (auto b = find_bool(f, "tokenizer.ggml.add_eos_token")) fl.add_eos = *b;
  if (auto b = find_bool(f, "tokenizer.ggml.add_sep_token")) fl.add_sep = *b;
  if (fl.add_bos && sp.bos == kNoToken) {
    fail("{}: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set", f.source());
  }
  if (fl.add_eos && sp.eos == kNoToken) {
    fail("{}: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set", f.source());
  }
  if (fl.add_sep && sp.sep == kNoToken) {
    fail("{}: tokenizer.ggml.add_sep_token is true, but tokenizer.ggml.seperator_token_id is not set", f.source());
  }
  if (auto b = find_bool(f, "tokenizer.ggml.normalizer.lowercase")) fl.lowercase = *b;
  fl.strip_accents = fl.lowercase;
  if (auto b = find_bool(f, "tokenizer.ggml.normalizer.strip_accents")) fl.strip_accents = *b;

  v.detect_special_tokens();
  v.collect_eog_tokens();

  for (TokenId id = 0; id < n_vocab; ++id) {
    if (v.has_attr(id, token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown)) {
      v.special_tokens_.push_back(id);
    }
  }
  std::stable_sort(v.special_tokens_.begin(), v.special_tokens_.end(),
                   [&](TokenId a, TokenId b) { return v.text(a).size() > v.text(b).size(); });
  v.apply_model_specific_attrs(f);
  return v;
}

// llama.cpp finds EOT, EOM and FIM tokens by their text when the file does not name them. A token
// found by a name llama.cpp b4748 knows becomes a control token, as there; a name that later releases
// added (`later`) finds the token but leaves its type alone, so such a token written in plain text is
// split out or not exactly as b4748 does it. Scanning ids in order makes the choice deterministic
// (llama.cpp takes the first in hash order).
void Vocab::detect_special_tokens() {
  struct Rule {
    TokenId* id;
    std::initializer_list<std::string_view> texts;
    std::initializer_list<std::string_view> later;
  };
  const Rule rules[] = {
      {&special_.eot,
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
        "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"},
       {"<|end_of_text|>", "_<EOT>", "[EOT]", "<end_of_utterance>"}},
      {&special_.eom, {"<|eom_id|>"}, {}},
      {&special_.fim_pre,
       {"<|fim_prefix|>", "<fim-prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>"},
       {"<fim_prefix>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"}},
      {&special_.fim_suf,
       {"<|fim_suffix|>", "<fim-suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>"},
       {"<fim_suffix>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"}},
      {&special_.fim_mid,
       {"<|fim_middle|>", "<fim-middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>"},
       {"<fim_middle>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"}},
      {&special_.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<PAD>"}, {"<fim_pad>", "[PAD]"}},
      {&special_.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"}, {"<reponame>"}},
      {&special_.fim_sep, {"<|file_sep|>"}, {}},
  };
  for (const Rule& rule : rules) {
    if (*rule.id != kNoToken) continue;
    for (TokenId id = 0; id < size(); ++id) {
      const bool known = one_of(text(id), rule.texts);
      if (!known && !one_of(text(id), rule.later)) continue;
      *rule.id = id;
      if (known && !has_attr(id, token_attr::kControl)) attrs_[static_cast<size_t>(id)] = token_attr::kControl;
      break;
    }
  }
  // Control tokens named "unused" are placeholders.
  for (TokenId id = 0; id < size(); ++id) {
    if (has_attr(id, token_attr::kControl) && text(id).find("unused") != std::string::npos) {
      attrs_[static_cast<size_t>(id)] |= token_attr::kUnused;
    }
  }
}

void Vocab::collect_eog_tokens() {
  std::vector<TokenId> eog;
  for (TokenId id : {special_.fim_pad, special_.fim_rep, special_.fim_sep, special_.eos, special_.eot, special_.eom}) {
    if (id != kNoToken) eog.push_back(id);
  }
  for (TokenId id = 0; id < size(); ++id) {
    const std::string& t = text(id);
    // The names llama.cpp b4748 ends generation at, making them control tokens; then the names later
    // releases added, which end generation here without changing the token's type (see
    // detect_special_tokens: Phi-3's "</s>" is a user-defined token that b4748 splits out of text).
    if (one_of(t, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"})) {
      eog.push_back(id);
      if (!has_attr(id, token_attr::kControl)) attrs_[static_cast<size_t>(id)] = token_attr::kControl;
    } else if (one_of(t, {"<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "</s>", "_<EOT>", "[EOT]", "[EOS]",
                          "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                          "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["})) {
      eog.push_back(id);
    }
    // gpt-oss's channel markers are rendered in the text.
    if (one_of(t, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      attrs_[static_cast<size_t>(id)] = token_attr::kUserDefined;
    }
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  const auto find_text = [&](std::string_view t) {
    const auto it = std::find_if(eog.begin(), eog.end(), [&](TokenId id) { return text(id) == t; });
    return it == eog.end() ? kNoToken : *it;
  };
  // Harmony (gpt-oss) and solar-open end a message with <|end|> but a turn with <|return|>/<|call|>
  // (<|calls|>/<|flush|>): there <|end|> is not end-of-generation.
  const TokenId end = find_text("<|end|>");
  const bool has_call = find_text("<|call|>") != kNoToken || find_text("<|calls|>") != kNoToken;
  if (end != kNoToken && has_call && (find_text("<|return|>") != kNoToken || find_text("<|flush|>") != kNoToken)) {
    eog.erase(std::find(eog.begin(), eog.end(), end));
    attrs_[static_cast<size_t>(end)] = token_attr::kUserDefined;
  }
  // Gemma 4 uses </s> inside tool responses.
  const TokenId s_end = find_text("</s>");
  if (s_end != kNoToken && find_text("<|tool_response>") != kNoToken) {
    eog.erase(std::find(eog.begin(), eog.end(), s_end));
    attrs_[static_cast<size_t>(s_end)] = token_attr::kNormal;
  }
  eog_ = std::move(eog);
}

// Per-model strip attributes llama.cpp sets by name because GGUF files do not carry them.
void Vocab::apply_model_specific_attrs(const GgufFile& f) {
  const std::string name = lowercase_ascii(find_string(f, "general.name").value_or(""));
  const std::string arch = f.architecture();
  const auto set = [&](std::string_view t, uint32_t bit, bool on) {
    const TokenId id = find(t);
    if (id == kNoToken) return;
    auto& a = attrs_[static_cast<size_t>(id)];
    a = on ? (a | bit) : (a & ~bit);
  };
  const auto contains_any = [](const std::string& s, std::initializer_list<std::string_view> subs) {
    return std::any_of(subs.begin(), subs.end(), [&](std::string_view sub) { return s.find(sub) != std::string::npos; });
  };
  if (contains_any(pre_, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", token_attr::kLstrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (TokenId id : special_tokens_) attrs_[static_cast<size_t>(id)] |= token_attr::kRstrip;
    set("</s>", token_attr::kRstrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, token_attr::kRstrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set("[MASK]", token_attr::kLstrip, true);
  }
}

}  // namespace strata

