#include "jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "jinja/interpreter.h"
#include "jinja/json.h"
#include "jinja/methods.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

// Jinja's soft_str: str(value), but a Markup value stays Markup.
Value soft_str(const Value& v) { return v.is_string() ? v : Value::string(v.to_string()); }
Value same_kind(const Value& like, std::string s) { return like.is_markup() ? Value::markup(std::move(s)) : Value::string(std::move(s)); }

int64_t int_param(const Value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return v.get_int();
  if (v.is_float()) return static_cast<int64_t>(v.get_float());
  eval_fail("{} must be an integer, not {}", what, v.type_name());
}

// "a.b.0" -> getitem("a"), getitem("b"), getitem(0); or a single int.
std::vector<Value> attribute_parts(const Value& attribute) {
  if (attribute.is_undefined() || attribute.is_none()) return {};
  if (!attribute.is_string()) return {attribute};
  std::vector<Value> parts;
  for (std::string& p : text::split(attribute.str(), std::string_view("."))) {
    bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits ? Value::integer(std::strtoll(p.c_str(), nullptr, 10)) : Value::string(std::move(p)));
  }
  return parts;
}

Value get_path(Interpreter& in, Value item, const std::vector<Value>& parts, const Value& default_value) {
  for (const Value& part : parts) {
    item = in.get_item(item, part);
    if (!default_value.is_undefined() && !default_value.is_none() && item.is_undefined()) item = default_value;
  }
  return item;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(text::lower(v.str())) : v; }

// Sort key for sort/dictsort/unique/min/max: the attribute(s), lowercased unless case-sensitive.
Value sort_key(Interpreter& in, const Value& item, const Value& attribute, bool case_sensitive, bool multi) {
  auto one = [&](const Value& attr) {
    Value v = get_path(in, item, attribute_parts(attr), Value());
    return case_sensitive ? v : ignore_case(v);
  };
  if (multi && attribute.is_string() && attribute.str().find(',') != std::string::npos) {
    std::vector<Value> keys;
    for (std::string& a : text::split(attribute.str(), std::string_view(","))) keys.push_back(one(Value::string(std::move(a))));
    return Value::new_list(std::move(keys));
  }
  return one(attribute);
}

std::vector<Value> sorted_by_key(Interpreter& in, std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  in.charge(items.size());
  // Python's sorted(reverse=True) keeps equal elements in their original order too.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? compare(keys[b], keys[a]) < 0 : compare(keys[a], keys[b]) < 0;
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

// ---- filters ----

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("abs"), args).finish();
  if (v.is_float()) return Value::number(std::fabs(v.get_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.get_int() == INT64_MIN) eval_fail("integer overflow");
    return Value::integer(std::llabs(v.get_int()));
  }
  eval_fail("bad operand type for abs(): '{}'", v.type_name());
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("attr", args);
  Value name = a.get(0, "name");
  a.finish();
  if (!name.is_string()) eval_fail("attribute name must be a string");
  if (v.is_undefined()) eval_fail("{}", v.undefined_message());
  if (v.is_object() || has_method(v, name.str())) return in.get_attr(v, name.str());
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(v), name.str()));
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("batch", args);
  int64_t n = int_param(a.get(0, "linecount"), "linecount");
  Value fill = a.get(1, "fill_with", Value::none());
  a.finish();
  if (n <= 0) eval_fail("batch linecount must be positive");
  std::vector<Value> out, cur;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::new_list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (!fill.is_none()) {
      in.check_items(static_cast<size_t>(n));
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    }
    out.push_back(Value::new_list(std::move(cur)));
  }
  return Value::new_list(std::move(out));
}

Value f_slice(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("slice", args);
  int64_t slices = int_param(a.get(0, "slices"), "slices");
  Value fill = a.get(1, "fill_with", Value::none());
  a.finish();
  if (slices <= 0) eval_fail("slice count must be positive");
  in.check_items(static_cast<size_t>(slices));
  std::vector<Value> seq = iterate(v);
  int64_t len = static_cast<int64_t>(seq.size());
  int64_t per = len / slices, extra = len % slices, offset = 0;
  std::vector<Value> out;
  for (int64_t s = 0; s < slices; ++s) {
    int64_t start = offset + s * per;
    if (s < extra) ++offset;
    int64_t end = offset + (s + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && s >= extra) part.push_back(fill);
    out.push_back(Value::new_list(std::move(part)));
  }
  return Value::new_list(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("capitalize"), args).finish();
  Value s = soft_str(v);
  return same_kind(s, text::capitalize(s.str()));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("center", args);
  Value width = a.get(0, "width", Value::integer(80));
  a.finish();
  CallArgs call;
  call.positional.push_back(width);
  return call_method(in, soft_str(v), "center", call);
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader a("default", args);
  Value def = a.get(0, "default_value", Value::string(""));
  bool boolean = a.get(1, "boolean", Value::boolean(false)).truthy();
  a.finish();
  if (v.is_undefined() || (boolean && !v.truthy())) return def;
  return v;
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("dictsort", args);
  bool case_sensitive = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  Value by = a.get(1, "by", Value::string("key"));
  bool reverse = a.get(2, "reverse", Value::boolean(false)).truthy();
  a.finish();
  if (!v.is_dict()) eval_fail("dictsort expects a mapping, got {}", v.type_name());
  if (!by.is_string() || (by.str() != "key" && by.str() != "value"))
    eval_fail("You can only sort by either \"key\" or \"value\"");
  size_t pos = by.str() == "key" ? 0 : 1;
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.dict().entries()) {
    items.push_back(Value::new_tuple({k, val}));
    const Value& key = pos == 0 ? k : val;
    keys.push_back(case_sensitive ? key : ignore_case(key));
  }
  return Value::new_list(sorted_by_key(in, std::move(items), keys, reverse));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("escape"), args).finish();
  if (v.is_markup()) return v;
  return Value::markup(text::html_escape(v.to_string()));
}

Value f_forceescape(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("forceescape"), args).finish();
  return Value::markup(text::html_escape(v.to_string()));
}

Value f_first(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("first"), args).finish();
  if (v.is_list()) {
    if (!v.list().items.empty()) return v.list().items.front();
  } else {
    std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("last"), args).finish();
  std::vector<Value> items = iterate(v);  // a dict's last key, as reversed(dict) gives
  if (!items.empty()) return items.back();
  return Value::undefined("No last item, sequence was empty.");
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan spellings.
std::optional<double> parse_float(std::string_view s) {
  std::string t(text::strip(s, text::StripSide::kBoth));
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(t[i + 1])))
      continue;
    clean.push_back(t[i]);
  }
  if (clean.empty() || clean.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader a("float", args);
  Value def = a.get(0, "default", Value::number(0.0));
  a.finish();
  // float(undefined) fails (Undefined.__float__), unlike other unconvertible values.
  if (v.is_undefined()) eval_fail("{}", v.undefined_message());
  if (v.is_number()) return Value::number(v.get_float());
  if (v.is_string()) {
    if (auto d = parse_float(v.str())) return Value::number(*d);
  }
  return def;
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader a("int", args);
  Value def = a.get(0, "default", Value::integer(0));
  int64_t base = int_param(a.get(1, "base", Value::integer(10)), "base");
  a.finish();
  if (v.is_undefined()) eval_fail("{}", v.undefined_message());
  if (v.is_int() || v.is_bool()) return Value::integer(v.get_int());
  auto from_double = [&](double d) {
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.is_float()) return from_double(v.get_float());
  if (!v.is_string()) return def;
  std::string t(text::strip(v.str(), text::StripSide::kBoth));
  std::string clean;
  for (char c : t)
    if (c != '_') clean.push_back(c);
  if (base < 0 || base == 1 || base > 36) return def;
  if (!clean.empty()) {
    errno = 0;
    char* end = nullptr;
    int b = static_cast<int>(base);
    std::string digits = clean;
    bool neg = false;
    if (digits[0] == '-' || digits[0] == '+') {
      neg = digits[0] == '-';
      digits = digits.substr(1);
    }
    // Python accepts a 0x/0o/0b prefix matching the base, and base 0 infers it.
    if (digits.size() > 2 && digits[0] == '0') {
      char p = static_cast<char>(digits[1] | 0x20);
      int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (pb && (b == 0 || b == pb)) {
        digits = digits.substr(2);
        b = pb;
      }
    }
    if (b == 0) b = 10;
    long long r = std::strtoll(digits.c_str(), &end, b);
    if (!digits.empty() && end == digits.c_str() + digits.size() && errno == 0 &&
        (std::isalnum(static_cast<unsigned char>(digits[0]))))
      return Value::integer(neg ? -r : r);
  }
  if (auto d = parse_float(v.str())) return from_double(*d);
  return def;
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("indent", args);
  Value width = a.get(0, "width", Value::integer(4));
  bool first = a.get(1, "first", Value::boolean(false)).truthy();
  bool blank = a.get(2, "blank", Value::boolean(false)).truthy();
  a.finish();
  std::string indention;
  if (width.is_string()) {
    indention = width.str();
  } else {
    int64_t w = int_param(width, "width");
    in.check_bytes(static_cast<size_t>(std::max<int64_t>(0, w)));
    indention.assign(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
  }
  // Jinja2 appends "\n" to the value itself, which only strings survive.
  if (!v.is_string()) {
    if (v.is_undefined()) eval_fail("{}", v.undefined_message());
    eval_fail("unsupported operand type(s) for +=: '{}' and 'str'", v.type_name());
  }
  const Value& s = v;
  std::vector<std::string> lines = text::splitlines(s.str() + "\n");
  in.check_bytes(s.str().size() + lines.size() * indention.size());
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (first) out = indention + out;
  return same_kind(s, std::move(out));
}

Value f_items(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("items"), args).finish();
  if (v.is_undefined()) return Value::new_list();
  if (!v.is_dict()) eval_fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().entries()) out.push_back(Value::new_tuple({k, val}));
  return Value::new_list(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("join", args);
  Value d = a.get(0, "d", Value::string(""));
  Value attribute = a.get(1, "attribute", Value::none());
  a.finish();
  std::vector<Value> parts = attribute_parts(attribute);
  std::string sep = d.to_string();
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    Value x = parts.empty() ? item : get_path(in, item, parts, Value());
    out += x.is_string() ? x.str() : x.to_string();
    in.check_bytes(out.size());
  }
  return Value::string(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("length"), args).finish();
  return Value::integer(static_cast<int64_t>(length(v)));
}

Value f_list(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("list"), args).finish();
  return Value::new_list(iterate(v));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("lower"), args).finish();
  Value s = soft_str(v);
  return same_kind(s, text::lower(s.str()));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("upper"), args).finish();
  Value s = soft_str(v);
  return same_kind(s, text::upper(s.str()));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (!v.truthy()) return Value::new_list();
  bool by_attribute = args.positional.empty() && std::any_of(args.keyword.begin(), args.keyword.end(),
                                                             [](const auto& kv) { return kv.first == "attribute"; });
  if (by_attribute) {
    ArgReader a("map", args);
    Value attribute = a.get(99, "attribute");
    Value def = a.get(99, "default", Value::none());
    a.finish();
    std::vector<Value> parts = attribute_parts(attribute);
    for (const Value& item : iterate(v)) out.push_back(get_path(in, item, parts, def));
    return Value::new_list(std::move(out));
  }
  if (args.positional.empty()) eval_fail("map requires a filter argument");
  Value name = args.positional[0];
  if (!name.is_string()) eval_fail("map filter name must be a string");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(v)) out.push_back(in.apply_filter(name.str(), item, rest));
  return Value::new_list(std::move(out));
}

// select/reject/selectattr/rejectattr share this: an optional attribute, then a test name and
// its arguments (no test: truthiness).
Value select_or_reject(Interpreter& in, const Value& v, CallArgs& args, bool select, bool by_attr) {
  if (!v.truthy()) return Value::new_list();
  size_t off = 0;
  std::vector<Value> parts;
  if (by_attr) {
    if (args.positional.empty()) eval_fail("Missing parameter for attribute name");
    parts = attribute_parts(args.positional[0]);
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > off) {
    if (!args.positional[off].is_string()) eval_fail("test name must be a string");
    test = args.positional[off].str();
    test_args.positional.assign(args.positional.begin() + static_cast<long>(off) + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value x = by_attr ? get_path(in, item, parts, Value()) : item;
    bool hit = test ? in.apply_test(*test, x, test_args) : x.truthy();
    if (hit == select) out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& args) { return select_or_reject(in, v, args, true, false); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& args) { return select_or_reject(in, v, args, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& args) { return select_or_reject(in, v, args, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& args) { return select_or_reject(in, v, args, false, true); }

Value min_or_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max, std::string_view name) {
  ArgReader a(name, args);
  bool case_sensitive = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  a.finish();
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], attribute, case_sensitive, false);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(in, items[i], attribute, case_sensitive, false);
    int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_min(Interpreter& in, const Value& v, CallArgs& args) { return min_or_max(in, v, args, false, "min"); }
Value f_max(Interpreter& in, const Value& v, CallArgs& args) { return min_or_max(in, v, args, true, "max"); }

Value f_pprint(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("pprint"), args).finish();
  return Value::string(v.repr());
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("replace", args);
  std::string old_s = a.get(0, "old").to_string();
  std::string new_s = a.get(1, "new").to_string();
  Value count = a.get(2, "count", Value::none());
  a.finish();
  std::string s = v.to_string();
  int64_t n = count.is_none() ? -1 : int_param(count, "count");
  in.check_bytes(s.size() + (old_s.empty() ? s.size() + 1 : s.size() / old_s.size()) * new_s.size());
  return Value::string(text::replace(s, old_s, new_s, n));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("reverse"), args).finish();
  if (v.is_string()) {
    std::vector<std::string> chars = text::chars(v.str());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return same_kind(v, std::move(out));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::new_list(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader a("round", args);
  int64_t precision = int_param(a.get(0, "precision", Value::integer(0)), "precision");
  Value method = a.get(1, "method", Value::string("common"));
  a.finish();
  if (!method.is_string() || (method.str() != "common" && method.str() != "ceil" && method.str() != "floor"))
    eval_fail("method must be common, ceil or floor");
  if (!v.is_number()) eval_fail("type {} doesn't define __round__ method", v.type_name());
  if (precision > 300 || precision < -300) eval_fail("round precision out of range");
  double x = v.get_float();
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method.str() == "ceil") return Value::number(std::ceil(x * scale) / scale);
  if (method.str() == "floor") return Value::number(std::floor(x * scale) / scale);
  if (v.is_int() || v.is_bool()) {
    if (precision >= 0) return Value::integer(v.get_int());
    return Value::integer(static_cast<int64_t>(std::nearbyint(x * scale) / scale));
  }
  if (!std::isfinite(x)) return v;
  if (precision >= 0) {
    // printf rounds the exact binary value half-to-even, as Python's round() does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
    return Value::number(std::strtod(buf, nullptr));
  }
  return Value::number(std::nearbyint(x * scale) / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("safe"), args).finish();
  return v.is_markup() ? v : Value::markup(v.to_string());
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("sort", args);
  bool reverse = a.get(0, "reverse", Value::boolean(false)).truthy();
  bool case_sensitive = a.get(1, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = a.get(2, "attribute", Value::none());
  a.finish();
  std::vector<Value> items = iterate(v);
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) keys.push_back(sort_key(in, item, attribute, case_sensitive, true));
  return Value::new_list(sorted_by_key(in, std::move(items), keys, reverse));
}

Value f_string(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("string"), args).finish();
  return soft_str(v);
}

Value f_striptags(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("striptags"), args).finish();
  std::string s = v.to_string();
  std::string no_tags;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      size_t end = s.find("-->", i + 4);
      if (end != std::string::npos) {
        i = end + 3;
        continue;
      }
    }
    if (s[i] == '<') {
      size_t end = s.find('>', i + 1);
      if (end != std::string::npos) {
        i = end + 1;
        continue;
      }
    }
    no_tags.push_back(s[i++]);
  }
  std::string joined;
  for (const std::string& w : text::split(no_tags, std::nullopt)) joined += (joined.empty() ? "" : " ") + w;
  static const std::pair<std::string_view, std::string_view> kEntities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#34;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities) joined = text::replace(joined, from, to);
  return Value::string(std::move(joined));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("sum", args);
  Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value::integer(0));
  a.finish();
  std::vector<Value> parts = attribute_parts(attribute);
  for (const Value& item : iterate(v)) {
    Value x = parts.empty() ? item : get_path(in, item, parts, Value());
    if (!x.is_number() || !total.is_number())
      eval_fail("unsupported operand type(s) for +: '{}' and '{}'", total.type_name(), x.type_name());
    if (total.is_float() || x.is_float()) {
      total = Value::number(total.get_float() + x.get_float());
    } else {
      int64_t r = 0;
      if (__builtin_add_overflow(total.get_int(), x.get_int(), &r)) eval_fail("integer overflow");
      total = Value::integer(r);
    }
  }
  return total;
}

Value f_title(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("title"), args).finish();
  // Jinja's title: words start after '-', whitespace or an opening bracket.
  Value s = soft_str(v);
  const std::string& str = s.str();
  std::string out;
  bool word_start = true;
  size_t len = 0;
  for (size_t i = 0; i < str.size(); i += len) {
    char32_t cp = text::decode_at(str, i, &len);
    bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || text::is_space(cp);
    std::string_view ch(str.data() + i, len);
    if (sep) {
      out.append(ch);
      word_start = true;
    } else {
      out += word_start ? text::upper(ch) : text::lower(ch);
      word_start = false;
    }
  }
  return same_kind(s, std::move(out));
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("tojson", args);
  Value ensure_ascii = a.get(0, "ensure_ascii", Value::boolean(false));
  Value indent = a.get(1, "indent", Value::none());
  Value separators = a.get(2, "separators", Value::none());
  Value sort_keys = a.get(3, "sort_keys", Value::boolean(false));
  a.finish();
  JsonDumpOptions o;
  o.ensure_ascii = ensure_ascii.truthy();
  o.sort_keys = sort_keys.truthy();
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    int64_t n = int_param(indent, "indent");
    if (n > 1000) eval_fail("tojson indent too large");
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
  }
  if (separators.is_list()) {
    const auto& s = separators.list().items;
    if (s.size() != 2 || !s[0].is_string() || !s[1].is_string()) eval_fail("separators must be a pair of strings");
    o.item_separator = s[0].str();
    o.key_separator = s[1].str();
  }
  std::string out = to_json(v, o);
  in.check_bytes(out.size());
  return Value::string(std::move(out));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader a("trim", args);
  Value chars = a.get(0, "chars", Value::none());
  a.finish();
  Value s = soft_str(v);
  std::optional<std::string_view> set;
  if (chars.is_string()) set = std::string_view(chars.str());
  return same_kind(s, std::string(text::strip(s.str(), text::StripSide::kBoth, set)));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader a("truncate", args);
  int64_t len = int_param(a.get(0, "length", Value::integer(255)), "length");
  bool killwords = a.get(1, "killwords", Value::boolean(false)).truthy();
  std::string end = a.get(2, "end", Value::string("...")).to_string();
  int64_t leeway = int_param(a.get(3, "leeway", Value::integer(5)), "leeway");
  a.finish();
  int64_t end_len = static_cast<int64_t>(text::length(end));
  if (len < end_len) eval_fail("expected length >= {}, got {}", end_len, len);
  if (leeway < 0) eval_fail("expected leeway >= 0, got {}", leeway);
  // Anything with a length that is short enough comes back unchanged, as in Jinja2.
  if (static_cast<int64_t>(length(v)) <= len + leeway) return v;
  if (!v.is_string()) eval_fail("'{}' object has no attribute 'rsplit'", v.type_name());
  const std::string& s = v.str();
  std::string head = s.substr(0, text::byte_offset(s, static_cast<size_t>(len - end_len)));
  if (killwords) return Value::string(head + end);
  return Value::string(text::rsplit(head, std::string_view(" "), 1)[0] + end);
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& args) {
  ArgReader a("unique", args);
  bool case_sensitive = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  a.finish();
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(in, item, attribute, case_sensitive, false);
    if (key.is_dict() || (key.is_list() && !key.is_tuple())) eval_fail("unhashable type: '{}'", key.type_name());
    in.charge(seen.size());
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader(std::string_view("wordcount"), args).finish();
  std::string s = v.to_string();
  int64_t words = 0;
  bool in_word = false;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    char32_t cp = text::decode_at(s, i, &len);
    bool w = cp == '_' || text::is_digit_cp(cp) || text::is_alpha_cp(cp);
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value::integer(words);
}

Value f_format(Interpreter& in, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty())
    eval_fail("can't handle positional and keyword arguments at the same time");
  Value params;
  if (!args.keyword.empty()) {
    Dict d;
    for (const auto& [k, val] : args.keyword) d.set(Value::string(k), val);
    params = Value::new_dict(std::move(d));
  } else {
    params = Value::new_tuple(args.positional);
  }
  std::string out = percent_format(v.to_string(), params);
  in.check_bytes(out.size());
  return same_kind(v, std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& table() {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", f_abs},           {"attr", f_attr},         {"batch", f_batch},
      {"capitalize", f_capitalize}, {"center", f_center}, {"count", f_length},
      {"d", f_default},         {"default", f_default},   {"dictsort", f_dictsort},
      {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_forceescape}, {"format", f_format},
      {"indent", f_indent},     {"int", f_int},           {"items", f_items},
      {"join", f_join},         {"last", f_last},         {"length", f_length},
      {"list", f_list},         {"lower", f_lower},       {"map", f_map},
      {"max", f_max},           {"min", f_min},           {"pprint", f_pprint},
      {"reject", f_reject},     {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse},   {"round", f_round},       {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr}, {"slice", f_slice},
      {"sort", f_sort},         {"string", f_string},     {"striptags", f_striptags},
      {"sum", f_sum},           {"title", f_title},       {"tojson", f_tojson},
      {"trim", f_trim},         {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return kFilters;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& t = table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace strata::jinja
