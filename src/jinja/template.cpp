#include "jinja/template.h"

#include <charconv>

#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace strata::jinja {

struct Template::Parsed {
  Body body;
};

Template Template::parse(std::string_view source) {
  auto parsed = std::make_shared<Parsed>();
  parsed->body = jinja::parse(tokenize(source));
  return Template(std::move(parsed));
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object() && !context.is_null())
    throw TemplateRuntimeError("the render context must be a JSON object", 0, 0);
  Variables vars;
  if (context.is_object())
    for (const auto& [k, v] : context.items()) vars.emplace_back(k, &v);
  return render_vars(vars, options);
}

std::string Template::render_vars(const Variables& variables, const RenderOptions& options) const {
  Interpreter interp(options);
  return interp.render(parsed_->body, variables);
}

std::optional<std::tm> parse_date(std::string_view s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return std::nullopt;
  int y = 0, m = 0, d = 0;
  auto num = [&](size_t at, size_t len, int* out) {
    auto r = std::from_chars(s.data() + at, s.data() + at + len, *out);
    return r.ec == std::errc() && r.ptr == s.data() + at + len;
  };
  if (!num(0, 4, &y) || !num(5, 2, &m) || !num(8, 2, &d)) return std::nullopt;
  if (m < 1 || m > 12 || d < 1 || d > 31) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  tm.tm_hour = 0;
  tm.tm_isdst = 0;
  // timegm normalizes and fills in the weekday and day of the year without touching the
  // process time zone; a date that does not exist (Feb 30) changes and is rejected.
  std::tm norm = tm;
  if (timegm(&norm) == static_cast<std::time_t>(-1)) return std::nullopt;
  if (norm.tm_mday != d || norm.tm_mon != m - 1) return std::nullopt;
  return norm;
}

}  // namespace strata::jinja
