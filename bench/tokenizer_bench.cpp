// Tokenizer throughput on ~1 MiB of English text, in MB/s (bytes_per_second).
//
// The corpus is built from English text under ../shared: DESIGN.md and README.md, the generated
// story continuations of reference/stories260K-greedy.jsonl ("content"), and the test strings of
// tokenizer/ggml-vocab-llama-spm.gguf.inp, concatenated and repeated until the text reaches 1 MiB
// (then cut at a line break). Repetition does not help the tokenizers: none of them caches words.
//
//   build/bin/tokenizer_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

constexpr size_t kCorpusBytes = 1u << 20;

std::string read(const std::string& rel) {
  std::string path = STRATA_SHARED_DIR;
  path += '/';
  path += rel;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The "content" strings of a JSON-lines file, with JSON escapes for \n and \" undone (enough for
// these files, whose contents are plain English).
std::string json_contents(const std::string& jsonl) {
  std::string out;
  const std::string key = "\"content\": \"";
  for (size_t pos = jsonl.find(key); pos != std::string::npos; pos = jsonl.find(key, pos)) {
    pos += key.size();
    for (; pos < jsonl.size() && jsonl[pos] != '"'; ++pos) {
      if (jsonl[pos] == '\\' && pos + 1 < jsonl.size()) {
        ++pos;
        out.push_back(jsonl[pos] == 'n' ? '\n' : jsonl[pos]);
      } else {
        out.push_back(jsonl[pos]);
      }
    }
    out.push_back('\n');
  }
  return out;
}

const std::string& corpus() {
  static const std::string text = [] {
    std::string seed = read("DESIGN.md");
    seed += '\n';
    seed += read("README.md");
    seed += '\n';
    seed += json_contents(read("reference/stories260K-greedy.jsonl"));
    const std::string inp = read("tokenizer/ggml-vocab-llama-spm.gguf.inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    for (size_t pos = 0; pos < inp.size();) {
      const size_t next = inp.find(sep, pos);
      seed.append(inp, pos, next == std::string::npos ? std::string::npos : next - pos);
      seed += '\n';
      if (next == std::string::npos) break;
      pos = next + sep.size();
    }
    std::string t;
    while (t.size() < kCorpusBytes) t += seed;
    t.resize(kCorpusBytes);
    t.resize(t.rfind('\n') + 1);
    return t;
  }();
  return text;
}

std::unique_ptr<Tokenizer> load(const std::string& rel) {
  std::string path = STRATA_SHARED_DIR;
  path += '/';
  path += rel;
  const auto file = GgufFile::open(path);
  return Tokenizer::from_gguf(*file);
}

void encode_bench(benchmark::State& state, const std::string& rel) {
  const auto tok = load(rel);
  const std::string& text = corpus();
  size_t n_tokens = 0;
  for (auto _ : state) {
    const std::vector<TokenId> ids = tok->encode(text, false, false);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["MiB"] = static_cast<double>(text.size()) / (1u << 20);
}

void decode_bench(benchmark::State& state, const std::string& rel) {
  const auto tok = load(rel);
  const std::string& text = corpus();
  const std::vector<TokenId> ids = tok->encode(text, false, false);
  for (auto _ : state) {
    std::string out = tok->decode(ids, false);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void BM_Encode_LlamaSpm(benchmark::State& s) { encode_bench(s, "tokenizer/ggml-vocab-llama-spm.gguf"); }
void BM_Encode_Gpt2Bpe(benchmark::State& s) { encode_bench(s, "tokenizer/ggml-vocab-gpt-2.gguf"); }
void BM_Encode_DeepseekLlmBpe(benchmark::State& s) { encode_bench(s, "tokenizer/ggml-vocab-deepseek-llm.gguf"); }
void BM_Encode_BertWpm(benchmark::State& s) { encode_bench(s, "tokenizer/ggml-vocab-bert-bge.gguf"); }
void BM_Decode_LlamaSpm(benchmark::State& s) { decode_bench(s, "tokenizer/ggml-vocab-llama-spm.gguf"); }
void BM_Decode_Gpt2Bpe(benchmark::State& s) { decode_bench(s, "tokenizer/ggml-vocab-gpt-2.gguf"); }

BENCHMARK(BM_Encode_LlamaSpm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_Gpt2Bpe)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_DeepseekLlmBpe)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_BertWpm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode_LlamaSpm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode_Gpt2Bpe)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
