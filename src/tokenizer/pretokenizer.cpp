#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/error.h"
#include "tokenizer/utf8.h"

namespace strata {
namespace {

// Byte length of the non-ASCII White_Space character at p (see unicode::is_whitespace), else 0.
size_t non_ascii_space_length(const unsigned char* p, size_t left) {
  if (p[0] == 0xC2) return left >= 2 && (p[1] == 0x85 || p[1] == 0xA0) ? 2 : 0;
  if (left < 3) return 0;
  if (p[0] == 0xE1) return p[1] == 0x9A && p[2] == 0x80 ? 3 : 0;
  if (p[0] == 0xE2) {
    if (p[1] == 0x80) return (p[2] >= 0x80 && p[2] <= 0x8A) || p[2] == 0xA8 || p[2] == 0xA9 || p[2] == 0xAF ? 3 : 0;
    return p[1] == 0x81 && p[2] == 0x9F ? 3 : 0;
  }
  if (p[0] == 0xE3) return p[1] == 0x80 && p[2] == 0x80 ? 3 : 0;
  return 0;
}

// The text the regexes see: `text` with every non-ASCII whitespace character replaced by U+000B,
// and where each of its byte offsets comes from. Empty `to_original` means the two are identical.
struct Shadow {
  std::string_view view;
  std::string storage;
  std::vector<uint32_t> to_original;  // shadow byte offset -> text byte offset (size() + 1 entries)

  explicit Shadow(std::string_view text) : view(text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    size_t first = text.size();
    for (size_t i = 0; i < text.size(); ++i) {
      if (p[i] >= 0xC2 && non_ascii_space_length(p + i, text.size() - i) > 0) {
        first = i;
        break;
      }
    }
    if (first == text.size()) return;
    storage.reserve(text.size());
    to_original.reserve(text.size() + 1);
    for (size_t i = 0; i < text.size();) {
      const size_t n = p[i] >= 0xC2 ? non_ascii_space_length(p + i, text.size() - i) : 0;
      if (n > 0) {
        storage.push_back('\x0B');
        to_original.push_back(static_cast<uint32_t>(i));
        i += n;
      } else {
        storage.push_back(text[i]);
        to_original.push_back(static_cast<uint32_t>(i));
        ++i;
      }
    }
    to_original.push_back(static_cast<uint32_t>(text.size()));
    view = storage;
  }

  size_t original(size_t shadow_offset) const {
    return to_original.empty() ? shadow_offset : to_original[shadow_offset];
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return fmt::format("PCRE2 error {}", code);
  return reinterpret_cast<const char*>(buf);
}

struct Range {
  uint32_t begin;
  uint32_t end;
};

// Per-call PCRE2 state: match data, and a JIT stack grown only when a match needs more than the
// default 32 KiB of machine stack (deep backtracking over very long words).
class MatchState {
 public:
  MatchState() : data_(pcre2_match_data_create(1, nullptr)) {
    STRATA_CHECK(data_ != nullptr, "out of memory creating PCRE2 match data");
  }
  ~MatchState() {
    pcre2_match_data_free(data_);
    pcre2_match_context_free(context_);
    pcre2_jit_stack_free(jit_stack_);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;

  // Returns true and the match's [begin, end) on a match, false when there is none.
  bool match(const pcre2_code* code, std::string_view subject, size_t start, uint32_t options, size_t& begin,
             size_t& end) {
    for (;;) {
      const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                                 options | PCRE2_NO_UTF_CHECK, data_, context_);
      if (rc == PCRE2_ERROR_NOMATCH) return false;
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT && grow_jit_stack()) continue;
      if (rc < 0) fail("pre-tokenizer regex failed on a {}-byte piece of text: {}", subject.size(), pcre2_message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
      begin = ov[0];
      end = ov[1];
      return true;
    }
  }

 private:
  bool grow_jit_stack() {
    constexpr size_t kMaxJitStack = 64u << 20;
    const size_t next = jit_stack_size_ == 0 ? (1u << 20) : jit_stack_size_ * 4;
    if (next > kMaxJitStack) return false;
    if (context_ == nullptr) context_ = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_free(jit_stack_);
    jit_stack_ = pcre2_jit_stack_create(32 * 1024, next, nullptr);
    if (context_ == nullptr || jit_stack_ == nullptr) return false;
    pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
    jit_stack_size_ = next;
    return true;
  }

  pcre2_match_data* data_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* jit_stack_ = nullptr;
  size_t jit_stack_size_ = 0;
};

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::span<const std::string_view> regexes) {
  for (std::string_view r : regexes) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto compiled = std::make_unique<Regex>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(r.data()), r.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_offset, nullptr);
    if (compiled->code == nullptr) {
      fail("pre-tokenizer regex '{}' does not compile (at offset {}): {}", r, err_offset, pcre2_message(err));
    }
    // JIT is an optimisation only: without it (unsupported platform) the interpreter gives the
    // same matches.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(compiled));
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  if (text.size() >= std::numeric_limits<uint32_t>::max()) fail("text of {} bytes is too long to tokenize", text.size());
  const Shadow shadow(text);
  const std::string_view s = shadow.view;
  std::vector<Range> pieces{{0, static_cast<uint32_t>(s.size())}};
  std::vector<Range> next;
  MatchState state;
  for (const auto& regex : regexes_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const Range piece : pieces) {
      const std::string_view subject = s.substr(piece.begin, piece.end - piece.begin);
      size_t start = 0;
      size_t prev_end = 0;
      uint32_t options = 0;
      while (start <= subject.size()) {
        size_t mb = 0;
        size_t me = 0;
        if (!state.match(regex->code, subject, start, options, mb, me)) {
          if (options == 0) break;
          // No non-empty match where the empty one was: move on by one character.
          options = 0;
          if (start >= subject.size()) break;
          start += std::min(utf8::sequence_length(static_cast<unsigned char>(subject[start])), subject.size() - start);
          continue;
        }
        if (mb > prev_end) next.push_back({piece.begin + static_cast<uint32_t>(prev_end), piece.begin + static_cast<uint32_t>(mb)});
        if (me > mb) next.push_back({piece.begin + static_cast<uint32_t>(mb), piece.begin + static_cast<uint32_t>(me)});
        prev_end = me;
        start = me;
        // After an empty match, std::regex_iterator (and so llama.cpp) next tries a non-empty match
        // anchored at the same place.
        options = me == mb ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
      }
      if (prev_end < subject.size()) next.push_back({piece.begin + static_cast<uint32_t>(prev_end), piece.end});
    }
    pieces.swap(next);
  }
  out.reserve(out.size() + pieces.size());
  for (const Range r : pieces) {
    const size_t b = shadow.original(r.begin);
    const size_t e = shadow.original(r.end);
    out.push_back(text.substr(b, e - b));
  }
}

}  // namespace strata
