#include "bench_client/bench_dataset.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "core/jsonl.h"

namespace strata::bench {
namespace {

// Common short English words: one token each in most vocabularies, so that without a tokenizer
// a word count is a fair stand-in for a token count.
constexpr std::array<std::string_view, 160> kWords = {
    "the",   "of",    "and",   "to",    "in",    "is",    "you",   "that",  "it",    "he",    "was",   "for",
    "on",    "are",   "as",    "with",  "his",   "they",  "at",    "be",    "this",  "have",  "from",  "or",
    "one",   "had",   "by",    "word",  "but",   "not",   "what",  "all",   "were",  "we",    "when",  "your",
    "can",   "said",  "there", "use",   "an",    "each",  "which", "she",   "do",    "how",   "their", "if",
    "will",  "up",    "other", "about", "out",   "many",  "then",  "them",  "these", "so",    "some",  "her",
    "would", "make",  "like",  "him",   "into",  "time",  "has",   "look",  "two",   "more",  "write", "go",
    "see",   "number", "no",   "way",   "could", "people", "my",   "than",  "first", "water", "been",  "call",
    "who",   "oil",   "its",   "now",   "find",  "long",  "down",  "day",   "did",   "get",   "come",  "made",
    "may",   "part",  "over",  "new",   "sound", "take",  "only",  "little", "work", "know",  "place", "year",
    "live",  "me",    "back",  "give",  "most",  "very",  "after", "thing", "our",   "just",  "name",  "good",
    "man",   "think", "say",   "great", "where", "help",  "much",  "mean",  "old",   "any",   "same",  "tell",
    "boy",   "girl",  "dog",   "cat",   "sun",   "tree",  "house", "play",  "happy", "big",   "small", "red",
    "blue",  "green", "ball",  "park",  "friend", "mom",  "dad",   "bird",  "fish",  "cake",  "toy",   "car",
    "box",   "door",  "sky",   "rain"};

// Words that end a prompt when one ordinary word would overshoot the length: one token almost
// everywhere, including small SentencePiece vocabularies.
constexpr std::array<std::string_view, 12> kFillers = {"a", "I", "to", "of", "in", "it", "is", "on", "at", "he", "we", "an"};

class Generator {
 public:
  Generator(uint64_t seed, const TokenCounter& count) : rng_(seed), count_(count) {}

  // `prefix` followed by random words, exactly `target` long by the counter when the vocabulary
  // allows (else the longest text not over it). Counts grow with words, which lets the overshoot
  // of multi-token words be undone by bisection instead of one word at a time.
  std::string text(const std::string& prefix, int32_t target) {
    std::vector<std::string_view> words;
    auto render = [&](size_t m) {
      std::string s = prefix;
      for (size_t i = 0; i < m; ++i) {
        if (!s.empty()) s.push_back(' ');
        s.append(words[i]);
      }
      return s;
    };
    int32_t n = count_(render(0));
    while (n < target) {
      for (int32_t k = n; k < target; ++k) words.push_back(kWords[rng_() % kWords.size()]);
      const int32_t before = n;
      n = count_(render(words.size()));
      if (n <= before) break;  // a counter that ignores words cannot reach the target
    }
    if (n > target) {
      size_t lo = 0, hi = words.size();  // count(render(lo)) <= target < count(render(hi))
      while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        (count_(render(mid)) <= target ? lo : hi) = mid;
      }
      words.resize(lo);
      n = count_(render(lo));
    }
    std::string s = render(words.size());
    while (n < target) {
      bool placed = false;
      const size_t start = rng_() % kFillers.size();
      for (size_t i = 0; i < kFillers.size() && !placed; ++i) {
        std::string t = s;
        if (!t.empty()) t.push_back(' ');
        t.append(kFillers[(start + i) % kFillers.size()]);
        const int32_t c = count_(t);
        if (c > n && c <= target) {
          s = std::move(t);
          n = c;
          placed = true;
        }
      }
      if (!placed) break;
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
  const TokenCounter& count_;
};

void validate(const DatasetOptions& o) {
  if (o.num_prompts < 1) fail("--num-prompts must be >= 1, got {}", o.num_prompts);
  if (o.output_len < 1) fail("--output-len must be >= 1, got {}", o.output_len);
  if (o.kind == DatasetKind::kFile) return;
  if (!(o.range_ratio >= 0 && o.range_ratio < 1)) fail("--random-range-ratio must be in [0, 1), got {}", o.range_ratio);
  if (o.input_len < 1) fail("--input-len must be >= 1, got {}", o.input_len);
  if (o.kind == DatasetKind::kSharedPrefix && (o.shared_prefix_len < 1 || o.shared_prefix_len > o.input_len)) {
    fail("--shared-prefix-len must be in [1, --input-len = {}], got {}", o.input_len, o.shared_prefix_len);
  }
  if (o.kind == DatasetKind::kMultiTurn && o.turns < 1) fail("--turns must be >= 1, got {}", o.turns);
}

// Lengths of synthetic requests around the asked ones (DatasetOptions::range_ratio), from their
// own generator so that a ratio of 0 leaves the prompts exactly as before.
class LengthDraw {
 public:
  LengthDraw(uint64_t seed, double ratio) : rng_(seed ^ 0x6c656e6774687321ULL), ratio_(ratio) {}
  // A length around `len`, at least `min_len`.
  int32_t operator()(int32_t len, int32_t min_len = 1) {
    if (ratio_ <= 0) return std::max(len, min_len);
    const auto lo = static_cast<int64_t>(std::lround(len * (1 - ratio_)));
    const auto hi = static_cast<int64_t>(std::lround(len * (1 + ratio_)));
    const int64_t v = lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
    return static_cast<int32_t>(std::max<int64_t>(v, min_len));
  }

 private:
  std::mt19937_64 rng_;
  double ratio_;
};

Dataset read_dataset_file(const DatasetOptions& o, const TokenCounter& count) {
  Dataset d;
  strata::read_jsonl(o.path, [&](const nlohmann::json& j, size_t line_no) {
    if (!j.is_object()) fail("{}:{}: expected a JSON object", o.path, line_no);
    Turn t;
    t.max_tokens = o.output_len;
    if (j.contains("max_tokens")) {
      if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<int64_t>() < 1) {
        fail("{}:{}: \"max_tokens\" must be a positive integer", o.path, line_no);
      }
      t.max_tokens = j["max_tokens"].get<int32_t>();
    }
    if (j.contains("prompt") && j["prompt"].is_string()) {
      t.prompt = j["prompt"].get<std::string>();
      t.prompt_len = count(t.prompt);
    } else if (j.contains("messages") && j["messages"].is_array() && !j["messages"].empty()) {
      for (const auto& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string()) {
          fail("{}:{}: each message needs string \"role\" and \"content\"", o.path, line_no);
        }
        t.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
        t.prompt_len += count(t.messages.back().content);
      }
    } else {
      fail("{}:{}: needs a string \"prompt\" or a non-empty \"messages\" array", o.path, line_no);
    }
    std::string id;
    if (j.contains("conversation_id")) {
      const auto& v = j["conversation_id"];
      if (v.is_string() && !v.get<std::string>().empty()) {
        id = v.get<std::string>();
      } else if (v.is_number_integer()) {
        id = std::to_string(v.get<int64_t>());
      } else {
        fail("{}:{}: \"conversation_id\" must be a non-empty string or an integer", o.path, line_no);
      }
    }
    d.conversations.push_back({{std::move(t)}, std::move(id), ""});
    return static_cast<int32_t>(d.conversations.size()) < o.num_prompts;
  });
  if (d.conversations.empty()) fail("--dataset '{}' holds no requests", o.path);
  return d;
}

}  // namespace

int32_t count_words(std::string_view text) {
  int32_t n = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

size_t Dataset::num_requests() const {
  size_t n = 0;
  for (const auto& c : conversations) n += c.turns.size();
  return n;
}

std::string shared_prefix_text(const DatasetOptions& o) {
  validate(o);
  const TokenCounter count = o.counter ? o.counter : TokenCounter(count_words);
  Generator g(o.seed, count);
  return g.text("", o.shared_prefix_len);
}

Dataset make_dataset(const DatasetOptions& o) {
  validate(o);
  const TokenCounter count = o.counter ? o.counter : TokenCounter(count_words);
  if (o.kind == DatasetKind::kFile) return read_dataset_file(o, count);
  Generator g(o.seed, count);
  LengthDraw len(o.seed, o.range_ratio);
  Dataset d;
  auto turn = [&](std::string prompt) {
    Turn t;
    t.prompt = std::move(prompt);
    t.prompt_len = count(t.prompt);
    t.max_tokens = len(o.output_len);
    return t;
  };
  switch (o.kind) {
    case DatasetKind::kRandom:
      for (int32_t i = 0; i < o.num_prompts; ++i) d.conversations.push_back({{turn(g.text("", len(o.input_len)))}, "", ""});
      break;
    case DatasetKind::kSharedPrefix: {
      // Same generator state as shared_prefix_text(): the prefix is drawn first.
      const std::string prefix = g.text("", o.shared_prefix_len);
      for (int32_t i = 0; i < o.num_prompts; ++i) {
        d.conversations.push_back({{turn(g.text(prefix, len(o.input_len, o.shared_prefix_len)))}, "", ""});
      }
      break;
    }
    case DatasetKind::kMultiTurn:
      for (int32_t left = o.num_prompts; left > 0; left -= o.turns) {
        Conversation c;
        for (int32_t k = 0; k < std::min(left, o.turns); ++k) c.turns.push_back(turn(g.text("", len(o.input_len))));
        d.conversations.push_back(std::move(c));
      }
      break;
    case DatasetKind::kFile:
      break;
  }
  return d;
}

std::vector<QosShare> parse_qos_mix(std::string_view s) {
  auto bad = [&](std::string_view why) -> std::vector<QosShare> {
    fail("--qos-mix '{}' is not NAME=WEIGHT,NAME=WEIGHT,... ({}); example: interactive=0.3,batch=0.7", s, why);
  };
  std::vector<QosShare> mix;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    const std::string_view entry = s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) return bad("an entry has no '='");
    const std::string_view name = entry.substr(0, eq);
    if (name.empty()) return bad("an empty class name");
    for (char c : name) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return bad("class names are letters, digits, '_' and '-'");
    }
    const std::string number(entry.substr(eq + 1));
    char* end = nullptr;
    const double w = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(w) || !(w > 0)) {
      return bad("weights are finite numbers > 0");
    }
    for (const QosShare& q : mix) {
      if (q.name == name) return bad("a class is named twice");
    }
    mix.push_back({std::string(name), w});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return mix;
}

void assign_qos(Dataset& d, const std::vector<QosShare>& mix, uint64_t seed) {
  const size_t n = d.conversations.size();
  if (mix.empty()) {
    for (auto& c : d.conversations) c.qos.clear();
    return;
  }
  double total = 0;
  for (const QosShare& q : mix) total += q.weight;
  // Largest remainders: floor(share * n) each, then one more to the largest fractions (ties to
  // the earlier class) until the counts sum to n.
  std::vector<size_t> count(mix.size());
  std::vector<std::pair<double, size_t>> rest;
  size_t given = 0;
  for (size_t i = 0; i < mix.size(); ++i) {
    const double exact = mix[i].weight / total * static_cast<double>(n);
    count[i] = static_cast<size_t>(std::floor(exact));
    given += count[i];
    rest.push_back({exact - std::floor(exact), i});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < n; ++k, ++given) ++count[rest[k % rest.size()].second];
  std::vector<size_t> classes;
  classes.reserve(n);
  for (size_t i = 0; i < mix.size(); ++i) classes.insert(classes.end(), count[i], i);
  // Fisher-Yates with our own index draw (std::shuffle's differs between standard libraries).
  std::mt19937_64 rng(seed ^ 0x716f732d6d697821ULL);
  for (size_t i = n; i > 1; --i) std::swap(classes[i - 1], classes[rng() % i]);
  for (size_t c = 0; c < n; ++c) d.conversations[c].qos = mix[classes[c]].name;
}

DatasetKind parse_dataset_kind(std::string_view s) {
  if (s == "random") return DatasetKind::kRandom;
  if (s == "shared-prefix") return DatasetKind::kSharedPrefix;
  if (s == "multi-turn") return DatasetKind::kMultiTurn;
  return DatasetKind::kFile;
}

std::string_view dataset_kind_name(DatasetKind k) {
  switch (k) {
    case DatasetKind::kRandom: return "random";
    case DatasetKind::kSharedPrefix: return "shared-prefix";
    case DatasetKind::kMultiTurn: return "multi-turn";
    case DatasetKind::kFile: return "file";
  }
  return "?";
}

}  // namespace strata::bench
