// `strata template render`: renders a chat template with the variables of one test case, the
// format of ../shared/chat-templates/cases.jsonl (every key except template, case, expected and
// expected_error is a template variable). Prints the rendering exactly, with no newline added.
// Exit codes: 0 rendered; 1 the template called raise_exception (its message on stderr) or
// failed while rendering; 2 bad usage, unreadable files, malformed JSON or template syntax.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "chat/chat_template.h"
#include "cli/cli.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "jinja/template.h"

namespace strata::cli {
namespace {

struct RenderOptions {
  std::string template_path;
  std::string model_path;
  std::string case_json;
  std::string case_file;
};

// Keys of a case line that describe the case rather than feed the template.
bool is_case_metadata(const std::string& key) {
  return key == "template" || key == "case" || key == "expected" || key == "expected_error";
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {} '{}': {}", what, path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read {} '{}'", what, path);
  return ss.str();
}

int bad_input(const std::string& message) {
  std::fprintf(stderr, "strata: error: %s\n", message.c_str());
  return kExitBadInput;
}

int run_render(const RenderOptions& o) {
  if (o.template_path.empty() == o.model_path.empty()) return bad_input("give exactly one of --template FILE or --model GGUF");
  if (o.case_json.empty() == o.case_file.empty()) return bad_input("give exactly one of --case JSON or --case-file FILE");

  jinja::RenderOptions render_options;
  if (const char* now = std::getenv("STRATA_TEMPLATE_NOW"); now && *now) {
    render_options.now = jinja::parse_date(now);
    if (!render_options.now) return bad_input(fmt::format("STRATA_TEMPLATE_NOW must be YYYY-MM-DD, got '{}'", now));
  }

  nlohmann::ordered_json case_obj;
  try {
    const std::string text = o.case_file.empty() ? o.case_json : read_file(o.case_file, "case file");
    case_obj = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return bad_input(fmt::format("the case is not valid JSON: {}", e.what()));
  } catch (const Error& e) {
    return bad_input(e.what());
  }
  if (!case_obj.is_object()) return bad_input("the case must be a JSON object");

  // Variables borrow from case_obj (and the model's tokens) rather than copying them.
  nlohmann::ordered_json bos_token;
  nlohmann::ordered_json eos_token;
  jinja::Template::Variables vars;
  std::string source;
  try {
    if (!o.model_path.empty()) {
      std::unique_ptr<GgufFile> model = GgufFile::open(o.model_path);
      ChatTemplate chat = ChatTemplate::from_gguf(*model);
      source = chat.source();
      // The model's special tokens, unless the case sets its own (later entries win).
      bos_token = chat.bos_token();
      eos_token = chat.eos_token();
      vars.emplace_back("bos_token", &bos_token);
      vars.emplace_back("eos_token", &eos_token);
    } else {
      source = read_file(o.template_path, "template file");
    }
  } catch (const jinja::TemplateSyntaxError& e) {
    return bad_input(e.what());
  } catch (const Error& e) {
    return bad_input(e.what());
  }
  for (const auto& [k, v] : case_obj.items())
    if (!is_case_metadata(k)) vars.emplace_back(k, &v);

  std::string out;
  try {
    out = jinja::Template::parse(source).render_vars(vars, render_options);
  } catch (const jinja::TemplateSyntaxError& e) {
    return bad_input(e.what());
  } catch (const jinja::RaiseException& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return kExitFailure;
  } catch (const jinja::TemplateRuntimeError& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return kExitFailure;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

void add_template_commands(Cli& cli) {
  CLI::App* tmpl = cli.app.add_subcommand("template", "Chat templates (the Jinja dialect of Hugging Face)");
  tmpl->require_subcommand(1);
  CLI::App* render = tmpl->add_subcommand(
      "render",
      "Render a chat template with the variables of one case (a line of cases.jsonl) and print the result "
      "exactly, without an added newline. STRATA_TEMPLATE_NOW=YYYY-MM-DD fixes the date strftime_now() sees.");
  auto o = std::make_shared<RenderOptions>();
  CLI::Option* t = render->add_option("--template", o->template_path, "Jinja template file to render");
  CLI::Option* m = render->add_option(
      "--model", o->model_path,
      "GGUF model whose tokenizer.chat_template to render (ChatML when it has none); its BOS/EOS token texts "
      "are the bos_token/eos_token variables unless the case sets them");
  t->excludes(m);
  CLI::Option* c = render->add_option(
      "--case", o->case_json,
      "the case as JSON object text: every key except template, case, expected and expected_error is a "
      "template variable (messages, add_generation_prompt, bos_token, tools, ...)");
  CLI::Option* cf = render->add_option("--case-file", o->case_file, "file holding the case as one JSON object");
  c->excludes(cf);
  render->callback([&cli, o] { cli.run = [o] { return run_render(*o); }; });
}

}  // namespace strata::cli
