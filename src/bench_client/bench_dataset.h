// The requests a serving benchmark sends: synthetic prompts of a given length (random words, a
// prefix shared by every prompt, multi-turn conversations) or prompts read from a JSONL file;
// lengths may vary around the asked one (range_ratio, as vLLM's --random-range-ratio), and each
// conversation may carry a QoS class drawn from a mix (assign_qos: the request's "qos" field).
//
// Lengths are measured by a TokenCounter. With a model's tokenizer the prompts have exactly the
// asked number of tokens (as encoded without special tokens, so the server adds BOS / the chat
// template on top); without one, words stand in for tokens (short common English words are about
// one token each in every mainstream vocabulary), which keeps the tool usable against any server.
//
// Generation is deterministic: the same options and seed give the same prompts, byte for byte.
// Thread-safety: pure functions; a Dataset is a plain value.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::bench {

// Number of tokens in a text. Must be deterministic; called from the calling thread only.
using TokenCounter = std::function<int32_t(std::string_view)>;

// The default counter: whitespace-separated words.
int32_t count_words(std::string_view text);

struct ChatMessage {
  std::string role;
  std::string content;
};

// One request. For the completions endpoint `prompt` is sent; for chat, `messages` when given
// (a JSONL line's own list), else the conversation's history followed by a user message `prompt`.
struct Turn {
  std::string prompt;
  std::vector<ChatMessage> messages;
  int32_t max_tokens = 0;
  int32_t prompt_len = 0;  // the counter's length of prompt/messages (this turn's new text only)
};

// Turns sent one after another, each with the earlier turns and the server's replies as history
// (multi-turn); the other datasets have conversations of one turn. `id` groups conversations for
// `--route conversation` (a JSONL line's "conversation_id"); "" when the dataset gives none, and
// then the routing key is the start of the first turn's text.
struct Conversation {
  std::vector<Turn> turns;
  std::string id;
  std::string qos;  // the "qos" field of every request of the conversation; "" sends none
};

struct Dataset {
  std::vector<Conversation> conversations;
  size_t num_requests() const;
};

enum class DatasetKind { kRandom, kSharedPrefix, kMultiTurn, kFile };

struct DatasetOptions {
  DatasetKind kind = DatasetKind::kRandom;
  std::string path;              // kFile: a JSONL file
  int32_t num_prompts = 100;     // requests in total (a file may hold fewer)
  int32_t input_len = 256;       // prompt length; for multi-turn, of each user turn
  int32_t output_len = 128;      // max_tokens of each request (a file line may override it)
  int32_t shared_prefix_len = 0; // kSharedPrefix: leading length common to all prompts, in [1, input_len]
  int32_t turns = 3;             // kMultiTurn: turns per conversation (the last one may be shorter)
  // Synthetic datasets: each prompt's length and max_tokens drawn uniformly from
  // [round(L * (1 - r)), round(L * (1 + r))] (at least 1; shared-prefix prompts at least the
  // prefix) from the seed, independently of the words; 0 keeps every length exact. In [0, 1).
  double range_ratio = 0;
  uint64_t seed = 0;
  TokenCounter counter;          // null: count_words
};

// Builds the dataset. Throws strata::Error naming the problem for invalid options (lengths < 1,
// prefix out of range) and for unreadable or malformed files (with the line number).
// JSONL lines: {"prompt": "..."} or {"messages": [{"role": ..., "content": ...}, ...]}, each with
// an optional integer "max_tokens" and an optional string or integer "conversation_id" (lines with
// the same id are routed to the same server by `--route conversation`); blank lines are skipped.
Dataset make_dataset(const DatasetOptions& o);

// The text common to every prompt of a kSharedPrefix dataset made with the same options (exposed
// so tests and reports can check and show it).
std::string shared_prefix_text(const DatasetOptions& o);

// One class of a --qos-mix and its share of the conversations.
struct QosShare {
  std::string name;  // sent as the request's "qos" field (strata: interactive | batch)
  double weight = 0;  // > 0; shares are weight / sum of weights
};

// Parses a --qos-mix value "NAME=WEIGHT,NAME=WEIGHT,...": names non-empty of [A-Za-z0-9_-], each
// once, weights finite and > 0. Throws strata::Error naming --qos-mix otherwise.
std::vector<QosShare> parse_qos_mix(std::string_view s);

// Gives every conversation of `d` a class of `mix`: each class gets round(share * n) of them
// (largest remainders, so the counts sum to n), placed by a shuffle drawn from `seed` (the same
// seed gives the same classes on every platform). An empty mix clears the classes.
void assign_qos(Dataset& d, const std::vector<QosShare>& mix, uint64_t seed);

// Parses a --dataset value: random | shared-prefix | multi-turn, anything else is a file path.
DatasetKind parse_dataset_kind(std::string_view s);
std::string_view dataset_kind_name(DatasetKind k);

}  // namespace strata::bench
