// A Jinja template, parsed once and rendered many times: the chat-template dialect of Jinja2 as
// Hugging Face's apply_chat_template runs it (trim_blocks, lstrip_blocks, loopcontrols, a tojson
// that keeps non-ASCII, raise_exception and strftime_now globals). Rendered output is meant to
// be byte-identical to Python Jinja2's.
//
//   auto t = strata::jinja::Template::parse(source);   // throws TemplateSyntaxError
//   std::string s = t.render({{"messages", msgs}, {"add_generation_prompt", true}});
//
// Thread-safety: parse() is a pure function; a parsed Template is immutable and render() may be
// called from many threads at once (each render owns all the values it creates).
// Stack: nesting limits keep parse() and render() under about 512 KiB of stack in release builds
// (a few MiB under the sanitizers), so call them on threads with ordinary (8 MiB) stacks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/template_error.h"

namespace strata::jinja {

struct RenderOptions {
  // The time strftime_now() formats, as local broken-down time; nullopt means "now".
  std::optional<std::tm> now;
  // Limits that turn hostile or runaway templates into a TemplateRuntimeError instead of a
  // crash, a hang or unbounded memory.
  size_t max_output_bytes = size_t{32} << 20;       // the output and any single string value
  size_t max_container_items = size_t{1} << 20;     // any single list or dict
  uint64_t max_loop_iterations = 1'000'000;          // all loops of one render together
  int max_call_depth = 100;                          // nested macro calls (recursion)
  uint64_t max_steps = 100'000'000;                  // evaluation steps (about 1 s of work)
};

// Parses "YYYY-MM-DD" into a broken-down time at midnight of that day (weekday and day of the
// year filled in), for RenderOptions::now. Returns nullopt when malformed or not a real date.
std::optional<std::tm> parse_date(std::string_view yyyy_mm_dd);

class Template {
 public:
  // Parses `source`. Throws TemplateSyntaxError (line and column in what()) when the source is
  // not valid Jinja or uses an unsupported tag (include, import, extends).
  static Template parse(std::string_view source);

  // Renders with the given variables (a JSON object; a non-object is an error). Key order of
  // JSON objects is preserved for iteration and tojson.
  // Throws RaiseException when the template calls raise_exception(msg) (what() == msg), and
  // TemplateRuntimeError for every other failure (undefined values used strictly, type errors,
  // exceeded limits).
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

  // Same, with the variables given one by one as borrowed values (no copy of a large
  // `messages`; nlohmann's copy recurses, converting here does not go deeper than the value
  // limit). A later entry with the same name wins. Pointers must be non-null.
  using Variables = std::vector<std::pair<std::string, const nlohmann::ordered_json*>>;
  std::string render_vars(const Variables& variables, const RenderOptions& options = {}) const;

 private:
  struct Parsed;
  explicit Template(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace strata::jinja
