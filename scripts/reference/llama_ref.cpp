// Outside reference for Strata's model tests: runs llama.cpp (the library, through its public
// llama.h API) greedily on a GGUF and prints, per prompt, one JSON line with llama.cpp's own
// prompt tokens, its greedy continuation and the top logits of every step.
//
// Built against a llama.cpp source tree by scripts/reference/build-llama-ref.sh (on the device or
// here); its output is committed under tests/data/reference/ and read by tests/model/.
//   llama_ref MODEL N_PREDICT TOP_K PROMPT...      (one JSON line per PROMPT on stdout)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <algorithm>

#include "llama.h"

static void print_json_string(const std::string& s) {
  std::putchar('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { std::putchar('\\'); std::putchar(c); }
    else if (c < 0x20) std::printf("\\u%04x", c);
    else std::putchar(c);
  }
  std::putchar('"');
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL N_PREDICT TOP_K PROMPT...\n", argv[0]);
    return 2;
  }
  const int n_predict = std::atoi(argv[2]);
  const int top_k = std::atoi(argv[3]);
  llama_backend_init();
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) { std::fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  for (int p = 4; p < argc; ++p) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 1024;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) { std::fprintf(stderr, "cannot create a context\n"); return 1; }
    const std::string prompt = argv[p];
    std::vector<llama_token> toks(prompt.size() + 8);
    int n = llama_tokenize(vocab, prompt.c_str(), (int)prompt.size(), toks.data(), (int)toks.size(),
                           /*add_special=*/true, /*parse_special=*/false);
    if (n < 0) { std::fprintf(stderr, "tokenize failed\n"); return 1; }
    toks.resize(n);
    std::vector<llama_token> out;
    std::vector<std::vector<std::pair<float, int>>> tops;
    std::vector<llama_token> feed = toks;
    for (int step = 0; step < n_predict; ++step) {
      llama_batch b = llama_batch_get_one(feed.data(), (int)feed.size());
      if (llama_decode(ctx, b) != 0) { std::fprintf(stderr, "decode failed\n"); return 1; }
      const float* logits = llama_get_logits_ith(ctx, -1);
      std::vector<std::pair<float, int>> v(n_vocab);
      for (int i = 0; i < n_vocab; ++i) v[i] = {logits[i], i};
      std::partial_sort(v.begin(), v.begin() + top_k, v.end(),
                        [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      v.resize(top_k);
      tops.push_back(v);
      const llama_token next = v[0].second;
      out.push_back(next);
      feed.assign(1, next);
    }
    std::printf("{\"prompt\":");
    print_json_string(prompt);
    std::printf(",\"prompt_tokens\":[");
    for (size_t i = 0; i < toks.size(); ++i) std::printf("%s%d", i ? "," : "", toks[i]);
    std::printf("],\"tokens\":[");
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    std::printf("],\"top_logits\":[");
    for (size_t s = 0; s < tops.size(); ++s) {
      std::printf("%s[", s ? "," : "");
      for (size_t i = 0; i < tops[s].size(); ++i)
        std::printf("%s[%d,%.6g]", i ? "," : "", tops[s][i].second, tops[s][i].first);
      std::printf("]");
    }
    std::printf("]}\n");
    llama_free(ctx);
  }
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
