// `strata tokenize` and `strata detokenize`: a model's tokenizer on the command line.
#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool add_special = false;
  bool parse_special = false;
  bool json = false;
};

struct DetokenizeOptions {
  std::string model;
  std::string ids;
  bool render_special = false;
};

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  const auto file = GgufFile::open(path);
  return Tokenizer::from_gguf(*file);
}

// The file's exact bytes: nothing stripped, no newline translation.
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read --file '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("error reading --file '{}'", path);
  return ss.str();
}

void write_out(std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout); }

int run_tokenize(const TokenizeOptions& o, bool has_text, bool has_file) {
  if (has_text == has_file) fail("give the text to tokenize with exactly one of --text or --file");
  const std::string text = has_file ? read_bytes(o.file) : o.text;
  const auto tok = load_tokenizer(o.model);
  const std::vector<TokenId> ids = tok->encode(text, o.add_special, o.parse_special);
  if (o.json) {
    nlohmann::ordered_json j;
    j["tokens"] = ids;
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    // Pieces show special tokens by name; a piece holding part of a character is shown with U+FFFD.
    for (const TokenId id : ids) pieces.push_back(tok->token_to_piece(id, /*render_special=*/true));
    j["pieces"] = std::move(pieces);
    j["n_tokens"] = ids.size();
    write_out(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    write_out("\n");
    return kExitOk;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  write_out(line);
  return kExitOk;
}

// Ids separated by spaces (commas and other whitespace are accepted too).
std::vector<TokenId> parse_ids(const std::string& s, int32_t n_vocab) {
  std::vector<TokenId> ids;
  size_t pos = 0;
  while (pos < s.size()) {
    while (pos < s.size() && (std::isspace(static_cast<unsigned char>(s[pos])) || s[pos] == ',')) ++pos;
    if (pos >= s.size()) break;
    size_t end = pos;
    while (end < s.size() && !std::isspace(static_cast<unsigned char>(s[end])) && s[end] != ',') ++end;
    const std::string_view item(s.data() + pos, end - pos);
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc() || ptr != item.data() + item.size()) fail("--ids: '{}' is not a token id", item);
    if (value < 0 || value >= n_vocab) {
      fail("--ids: token id {} is out of range: the vocabulary has {} tokens (ids 0..{})", item, n_vocab, n_vocab - 1);
    }
    ids.push_back(static_cast<TokenId>(value));
    pos = end;
  }
  return ids;
}

int run_detokenize(const DetokenizeOptions& o) {
  const auto tok = load_tokenizer(o.model);
  const std::vector<TokenId> ids = parse_ids(o.ids, tok->n_vocab());
  write_out(tok->decode(ids, o.render_special));
  write_out("\n");
  return kExitOk;
}

}  // namespace

void add_tokenize_commands(Cli& cli) {
  auto t = std::make_shared<TokenizeOptions>();
  CLI::App* tok = cli.app.add_subcommand(
      "tokenize", "Print the token ids of a text, separated by spaces on one line (or as JSON with --json)");
  tok->add_option("-m,--model", t->model, "GGUF model or vocabulary file whose tokenizer is used")->required();
  CLI::Option* text = tok->add_option("--text", t->text, "The text to tokenize, as given");
  CLI::Option* file = tok->add_option("--file", t->file, "Tokenize this file's exact bytes (no newline stripped)");
  text->excludes(file);
  tok->add_flag("--add-special", t->add_special,
                "Add the BOS/EOS tokens the vocabulary asks for (tokenizer.ggml.add_bos_token/add_eos_token)");
  tok->add_flag("--parse-special", t->parse_special,
                "Turn special-token texts in the input (e.g. <|im_start|>) into their ids instead of plain text");
  tok->add_flag("--json", t->json, "Print a JSON object with \"tokens\", \"pieces\" (each token's text) and \"n_tokens\"");
  tok->callback([&cli, t, text, file] {
    const bool has_text = text->count() > 0;
    const bool has_file = file->count() > 0;
    cli.run = [t, has_text, has_file] { return run_tokenize(*t, has_text, has_file); };
  });

  auto d = std::make_shared<DetokenizeOptions>();
  CLI::App* detok = cli.app.add_subcommand("detokenize", "Print the text of a list of token ids");
  detok->add_option("-m,--model", d->model, "GGUF model or vocabulary file whose tokenizer is used")->required();
  detok->add_option("--ids", d->ids, "Token ids separated by spaces, e.g. \"1 403 407\"")->required();
  detok->add_flag("--render-special", d->render_special,
                  "Show control tokens such as BOS/EOS by their text instead of leaving them out");
  detok->callback([&cli, d] { cli.run = [d] { return run_detokenize(*d); }; });
}

}  // namespace strata::cli
