#include "jinja/methods.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "jinja/interpreter.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

constexpr std::array<std::string_view, 40> kStrMethods = {
    "capitalize", "casefold", "center",   "count",      "endswith",     "find",       "format",  "index",
    "isalnum",    "isalpha",  "isdigit",  "isnumeric",  "isdecimal",    "islower",    "isspace", "istitle",
    "isupper",    "join",     "ljust",    "lower",      "lstrip",       "partition",  "removeprefix",
    "removesuffix", "replace", "rfind",   "rindex",     "rjust",        "rpartition", "rsplit",  "rstrip",
    "split",      "splitlines", "startswith", "strip",  "swapcase",     "title",      "upper",   "zfill",
    "format_map"};
constexpr std::array<std::string_view, 11> kListMethods = {"append", "extend", "insert", "pop",  "remove", "index",
                                                           "count",  "copy",   "clear",  "reverse", "sort"};
constexpr std::array<std::string_view, 9> kDictMethods = {"items", "keys",   "values", "get",  "pop",
                                                          "setdefault", "update", "copy", "clear"};

template <size_t N>
bool in(const std::array<std::string_view, N>& names, std::string_view n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

const std::string& str_arg(const Value& v, std::string_view method) {
  if (!v.is_string()) eval_fail("{}() argument must be str, not {}", method, v.type_name());
  return v.str();
}

std::optional<std::string_view> opt_str(const Value& v, std::string_view method) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  return std::string_view(str_arg(v, method));
}

int64_t int_arg(const Value& v, std::string_view method) {
  if (!v.is_int() && !v.is_bool()) eval_fail("{}() argument must be int, not {}", method, v.type_name());
  return v.get_int();
}

Value str_list(std::vector<std::string> parts, bool markup) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.push_back(markup ? Value::markup(std::move(p)) : Value::string(std::move(p)));
  return Value::new_list(std::move(items));
}

// Pads `s` to `width` code points: align '<', '>' or '^'.
std::string pad(std::string s, size_t width, char align, std::string_view fill = " ") {
  size_t len = text::length(s);
  if (len >= width) return s;
  size_t total = width - len;
  size_t left = align == '>' ? total : align == '^' ? total / 2 : 0;
  size_t right = total - left;
  std::string out;
  for (size_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (size_t i = 0; i < right; ++i) out += fill;
  return out;
}

// Code point offset -> byte offset, for Python's find()/index() results.
int64_t cp_index(std::string_view s, size_t byte_pos) { return static_cast<int64_t>(text::length(s.substr(0, byte_pos))); }

// str.format's format spec: [[fill]align][sign][#][0][width][,][.precision][type].
std::string format_spec(const Value& v, std::string_view spec) {
  std::string fill = " ";
  char align = '\0';
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = std::string(1, spec[0]);
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = '-';
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '#') ++i;
  if (i < spec.size() && spec[i] == '0') {
    if (!align) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  size_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + static_cast<size_t>(spec[i++] - '0');
  if (width > 10000) eval_fail("format width too large");
  if (i < spec.size() && spec[i] == ',') ++i;
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) precision = precision * 10 + (spec[i++] - '0');
    if (precision > 1000) eval_fail("format precision too large");
  }
  char type = i < spec.size() ? spec[i++] : '\0';
  if (i != spec.size()) eval_fail("invalid format specifier '{}'", spec);
  std::string body;
  bool numeric = v.is_number();
  if (type == 's' || (type == '\0' && !numeric)) {
    if (numeric && type == 's') eval_fail("unknown format code 's' for object of type '{}'", v.type_name());
    body = v.to_string();
    if (precision >= 0) body = body.substr(0, text::byte_offset(body, static_cast<size_t>(precision)));
    return pad(body, width, align ? (align == '=' ? '<' : align) : '<', fill);
  }
  if (!numeric) eval_fail("unknown format code '{}' for object of type '{}'", type, v.type_name());
  char buf[512];
  bool is_int = v.is_int() || v.is_bool();
  if (type == '\0' && is_int) type = 'd';
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    if (!is_int) eval_fail("unknown format code '{}' for object of type 'float'", type);
    int64_t n = v.get_int();
    uint64_t mag = n < 0 ? static_cast<uint64_t>(-(n + 1)) + 1 : static_cast<uint64_t>(n);
    if (type == 'b') {
      body.clear();
      do {
        body.insert(body.begin(), static_cast<char>('0' + (mag & 1)));
        mag >>= 1;
      } while (mag);
    } else {
      std::snprintf(buf, sizeof(buf), type == 'd' ? "%llu" : type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo",
                    static_cast<unsigned long long>(mag));
      body = buf;
    }
    if (n < 0) body.insert(body.begin(), '-');
  } else if (type == '\0') {
    body = precision >= 0 ? (std::snprintf(buf, sizeof(buf), "%.*g", precision, v.get_float()), std::string(buf))
                          : v.to_string();
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G' || type == '%') {
    double d = v.get_float() * (type == '%' ? 100.0 : 1.0);
    char fmt_str[8] = {'%', '.', '*', type == '%' ? 'f' : type, '\0'};
    std::snprintf(buf, sizeof(buf), fmt_str, precision < 0 ? 6 : precision, d);
    body = buf;
    if (type == '%') body += '%';
  } else {
    eval_fail("unknown format code '{}'", type);
  }
  if (sign != '-' && body[0] != '-') body.insert(body.begin(), sign);
  if (align == '=' && body.size() < width) {
    size_t sign_len = (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    std::string padding;
    for (size_t k = body.size(); k < width; ++k) padding += fill;
    return body.substr(0, sign_len) + padding + body.substr(sign_len);
  }
  return pad(body, width, align ? align : '>', fill);
}

// str.format(*args, **kwargs).
std::string brace_format(Interpreter& in, std::string_view f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      eval_fail("Single '}}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string_view::npos) eval_fail("Single '{{' encountered in format string");
    std::string_view field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conv = '\0';
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) eval_fail("invalid conversion in format string");
      conv = field[bang + 1];
      field = field.substr(0, bang);
    }
    size_t name_end = std::min(field.find('.'), field.find('['));
    std::string_view head = field.substr(0, name_end);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      size_t idx = head.empty() ? auto_index++ : static_cast<size_t>(std::stoul(std::string(head)));
      if (idx >= args.positional.size()) eval_fail("Replacement index {} out of range for positional args tuple", idx);
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, val] : args.keyword) {
        if (k == head) {
          v = val;
          found = true;
        }
      }
      if (!found) eval_fail("KeyError: '{}'", head);
    }
    std::string_view rest = name_end == std::string_view::npos ? std::string_view() : field.substr(name_end);
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t end = std::min(rest.find('.', 1), rest.find('[', 1));
        v = in.get_attr(v, rest.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1));
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
      } else {
        size_t end = rest.find(']');
        if (end == std::string_view::npos) eval_fail("Missing ']' in format string");
        std::string_view key = rest.substr(1, end - 1);
        bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
        v = in.get_item(v, numeric ? Value::integer(std::stoll(std::string(key))) : Value::string(key));
        rest = rest.substr(end + 1);
      }
    }
    if (conv == 'r' || conv == 'a') v = Value::string(v.repr());
    else if (conv == 's') v = Value::string(v.to_string());
    else if (conv) eval_fail("Unknown conversion specifier {}", conv);
    out += format_spec(v, spec);
    in.check_bytes(out.size());
  }
  return out;
}

Value str_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  const std::string& s = self.str();
  bool mk = self.is_markup();
  auto make = [&](std::string r) { return mk ? Value::markup(std::move(r)) : Value::string(std::move(r)); };
  std::string fn = "str." + std::string(name);
  ArgReader a(fn, args);
  if (name == "format" || name == "format_map") {
    if (name == "format_map") {
      Value m = a.get(0, "mapping");
      a.finish();
      if (!m.is_dict()) eval_fail("format_map() argument must be a mapping");
      CallArgs kw;
      for (const auto& [k, v] : m.dict().entries()) kw.keyword.emplace_back(k.to_string(), v);
      return make(brace_format(in, s, kw));
    }
    return make(brace_format(in, s, args));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars = opt_str(a.get(0, "chars"), fn);
    a.finish();
    auto side = name == "strip" ? text::StripSide::kBoth : name == "lstrip" ? text::StripSide::kLeft : text::StripSide::kRight;
    return make(std::string(text::strip(s, side, chars)));
  }
  if (name == "split" || name == "rsplit") {
    auto sep = opt_str(a.get(0, "sep"), fn);
    Value maxsplit = a.get(1, "maxsplit", Value::integer(-1));
    a.finish();
    if (sep && sep->empty()) eval_fail("empty separator");
    int64_t n = int_arg(maxsplit, fn);
    return str_list(name == "split" ? text::split(s, sep, n) : text::rsplit(s, sep, n), mk);
  }
  if (name == "splitlines") {
    bool keep = a.get(0, "keepends", Value::boolean(false)).truthy();
    a.finish();
    return str_list(text::splitlines(s, keep), mk);
  }
  if (name == "startswith" || name == "endswith") {
    Value prefix = a.get(0, "prefix");
    a.finish();
    std::vector<Value> options = prefix.is_tuple() ? prefix.list().items : std::vector<Value>{prefix};
    for (const Value& p : options) {
      const std::string& ps = str_arg(p, fn);
      bool hit = name == "startswith" ? s.compare(0, ps.size(), ps) == 0 && s.size() >= ps.size()
                                      : s.size() >= ps.size() && s.compare(s.size() - ps.size(), ps.size(), ps) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" ||
      name == "casefold") {
    a.finish();
    if (name == "upper") return make(text::upper(s));
    if (name == "lower" || name == "casefold") return make(text::lower(s));
    if (name == "title") return make(text::py_title(s));
    if (name == "capitalize") return make(text::capitalize(s));
    return make(text::swapcase(s));
  }
  if (name == "replace") {
    const std::string& from = str_arg(a.get(0, "old"), fn);
    const std::string& to = str_arg(a.get(1, "new"), fn);
    int64_t count = int_arg(a.get(2, "count", Value::integer(-1)), fn);
    a.finish();
    size_t estimate = s.size() + (from.empty() ? s.size() + 1 : s.size() / from.size()) * to.size();
    in.check_bytes(estimate);
    return make(text::replace(s, from, to, count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const std::string& sub = str_arg(a.get(0, "sub"), fn);
    a.finish();
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(text::length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") eval_fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index(s, p));
  }
  if (name == "join") {
    Value items = a.get(0, "iterable");
    a.finish();
    std::string out;
    bool first = true;
    for (const Value& v : iterate(items)) {
      if (!v.is_string()) eval_fail("sequence item: expected str instance, {} found", v.type_name());
      if (!first) out += s;
      first = false;
      out += v.str();
      in.check_bytes(out.size());
    }
    return make(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    int64_t width = int_arg(a.get(0, "width"), fn);
    std::string fill = name == "zfill" ? "0" : str_arg(a.get(1, "fillchar", Value::string(" ")), fn);
    a.finish();
    in.check_bytes(static_cast<size_t>(std::max<int64_t>(0, width)));
    if (text::length(fill) != 1) eval_fail("The fill character must be exactly one character long");
    size_t w = static_cast<size_t>(std::max<int64_t>(0, width));
    if (name == "zfill") {
      if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
        std::string body = pad(s.substr(1), w > 0 ? w - 1 : 0, '>', "0");
        return make(s.substr(0, 1) + body);
      }
      return make(pad(s, w, '>', "0"));
    }
    if (name == "center") {
      // Python centers with the extra space on the right unless the padding is odd and the
      // length is odd too.
      size_t len = text::length(s);
      if (len >= w) return make(s);
      size_t total = w - len;
      size_t left = total / 2 + (total & w & 1);
      std::string out;
      for (size_t i = 0; i < left; ++i) out += fill;
      out += s;
      for (size_t i = left; i < total; ++i) out += fill;
      return make(std::move(out));
    }
    return make(pad(s, w, name == "ljust" ? '<' : '>', fill));
  }
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = str_arg(a.get(0, "sep"), fn);
    a.finish();
    if (sep.empty()) eval_fail("empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return name == "partition" ? Value::new_tuple({make(s), make(""), make("")}) : Value::new_tuple({make(""), make(""), make(s)});
    }
    return Value::new_tuple({make(s.substr(0, p)), make(sep), make(s.substr(p + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& x = str_arg(a.get(0, name == "removeprefix" ? "prefix" : "suffix"), fn);
    a.finish();
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0 && s.size() >= x.size()) return make(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return make(s.substr(0, s.size() - x.size()));
    return make(s);
  }
  a.finish();
  // Predicates.
  if (name == "isupper") return Value::boolean(text::is_upper(s));
  if (name == "islower") return Value::boolean(text::is_lower(s));
  if (s.empty()) return Value::boolean(false);
  std::vector<std::string> cps = text::chars(s);
  auto all = [&](auto pred) {
    return std::all_of(cps.begin(), cps.end(), [&](const std::string& c) {
      size_t len = 0;
      return pred(text::decode_at(c, 0, &len));
    });
  };
  if (name == "isspace") return Value::boolean(all(text::is_space));
  if (name == "isalpha") return Value::boolean(all(text::is_alpha_cp));
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return Value::boolean(all(text::is_digit_cp));
  if (name == "isalnum") return Value::boolean(all([](char32_t c) { return text::is_alpha_cp(c) || text::is_digit_cp(c); }));
  if (name == "istitle") return Value::boolean(text::py_title(s) == s && (text::is_upper(s) || text::lower(s) != s));
  eval_fail("'str' object has no attribute '{}'", name);
}

Value list_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  List& l = self.list();
  std::string fn = std::string(l.tuple ? "tuple." : "list.") + std::string(name);
  ArgReader a(fn, args);
  if (name == "index" || name == "count") {
    Value x = a.get(0, "value");
    a.finish();
    int64_t n = 0;
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (!equals(l.items[i], x)) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") eval_fail("{} is not in list", x.repr());
    return Value::integer(n);
  }
  if (l.tuple) eval_fail("'tuple' object has no attribute '{}'", name);
  if (name == "append") {
    Value x = a.get(0, "object");
    a.finish();
    in.check_items(l.items.size() + 1);
    in.note_mutation(self, x);
    l.items.push_back(std::move(x));
    return Value::none();
  }
  if (name == "extend") {
    Value x = a.get(0, "iterable");
    a.finish();
    std::vector<Value> more = iterate(x);
    in.check_items(l.items.size() + more.size());
    for (const Value& v : more) in.note_mutation(self, v);
    l.items.insert(l.items.end(), more.begin(), more.end());
    return Value::none();
  }
  if (name == "insert") {
    int64_t i = int_arg(a.get(0, "index"), fn);
    Value x = a.get(1, "object");
    a.finish();
    int64_t n = static_cast<int64_t>(l.items.size());
    if (i < 0) i = std::max<int64_t>(0, i + n);
    i = std::min(i, n);
    in.check_items(l.items.size() + 1);
    in.note_mutation(self, x);
    l.items.insert(l.items.begin() + i, std::move(x));
    return Value::none();
  }
  if (name == "pop") {
    int64_t i = int_arg(a.get(0, "index", Value::integer(-1)), fn);
    a.finish();
    int64_t n = static_cast<int64_t>(l.items.size());
    if (n == 0) eval_fail("pop from empty list");
    if (i < 0) i += n;
    if (i < 0 || i >= n) eval_fail("pop index out of range");
    Value v = l.items[static_cast<size_t>(i)];
    l.items.erase(l.items.begin() + i);
    return v;
  }
  if (name == "remove") {
    Value x = a.get(0, "value");
    a.finish();
    for (auto it = l.items.begin(); it != l.items.end(); ++it) {
      if (equals(*it, x)) {
        l.items.erase(it);
        return Value::none();
      }
    }
    eval_fail("list.remove(x): x not in list");
  }
  if (name == "copy") {
    a.finish();
    return Value::new_list(l.items);
  }
  if (name == "clear") {
    a.finish();
    l.items.clear();
    return Value::none();
  }
  if (name == "reverse") {
    a.finish();
    std::reverse(l.items.begin(), l.items.end());
    return Value::none();
  }
  if (name == "sort") {
    bool reverse = a.get(0, "reverse", Value::boolean(false)).truthy();
    a.finish();
    std::stable_sort(l.items.begin(), l.items.end(), [](const Value& x, const Value& y) { return compare(x, y) < 0; });
    if (reverse) std::reverse(l.items.begin(), l.items.end());
    return Value::none();
  }
  eval_fail("'list' object has no attribute '{}'", name);
}

Value dict_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  Dict& d = self.dict();
  std::string fn = "dict." + std::string(name);
  ArgReader a(fn, args);
  if (name == "items" || name == "keys" || name == "values") {
    a.finish();
    std::vector<Value> out;
    out.reserve(d.size());
    for (const auto& [k, v] : d.entries()) {
      if (name == "items") out.push_back(Value::new_tuple({k, v}));
      else out.push_back(name == "keys" ? k : v);
    }
    return Value::new_list(std::move(out));
  }
  if (name == "get") {
    Value key = a.get(0, "key");
    Value def = a.get(1, "default", Value::none());
    a.finish();
    const Value* v = d.find(key);
    return v ? *v : def;
  }
  if (name == "pop") {
    Value key = a.get(0, "key");
    bool has_default = a.has(1, "default");
    Value def = a.get(1, "default");
    a.finish();
    if (const Value* v = d.find(key)) {
      Value out = *v;
      d.erase(key);
      return out;
    }
    if (!has_default) eval_fail("KeyError: {}", key.repr());
    return def;
  }
  if (name == "setdefault") {
    Value key = a.get(0, "key");
    Value def = a.get(1, "default", Value::none());
    a.finish();
    if (const Value* v = d.find(key)) return *v;
    in.note_mutation(self, def);
    d.set(key, def);
    return def;
  }
  if (name == "update") {
    Value other = a.get(0, "other", Value::none());
    std::vector<std::pair<std::string, Value>> kw = std::move(args.keyword);
    args.keyword.clear();
    a.finish();
    if (other.is_dict()) {
      for (const auto& [k, v] : other.dict().entries()) {
        in.note_mutation(self, v);
        d.set(k, v);
      }
    } else if (!other.is_none()) {
      for (const Value& pair : iterate(other)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) eval_fail("dictionary update sequence element has length {}; 2 is required", kv.size());
        in.note_mutation(self, kv[1]);
        d.set(kv[0], kv[1]);
      }
    }
    for (auto& [k, v] : kw) {
      in.note_mutation(self, v);
      d.set(Value::string(k), v);
    }
    in.check_items(d.size());
    return Value::none();
  }
  if (name == "copy") {
    a.finish();
    return Value::new_dict(d);
  }
  if (name == "clear") {
    a.finish();
    d.clear();
    return Value::none();
  }
  eval_fail("'dict' object has no attribute '{}'", name);
}

}  // namespace

bool has_method(const Value& obj, std::string_view name) {
  if (obj.is_string()) return in(kStrMethods, name);
  if (obj.is_list()) return in(kListMethods, name);
  if (obj.is_dict()) return in(kDictMethods, name);
  return false;
}

Value call_method(Interpreter& interp, const Value& obj, std::string_view name, CallArgs& args) {
  if (obj.is_string()) return str_method(interp, obj, name, args);
  if (obj.is_list()) return list_method(interp, obj, name, args);
  if (obj.is_dict()) return dict_method(interp, obj, name, args);
  eval_fail("'{}' object has no attribute '{}'", obj.type_name(), name);
}

Value bound_method(const Value& obj, std::string_view name) {
  std::string n(name);
  return Value::callable(n, [obj, n](Interpreter& in, CallArgs& args) { return call_method(in, obj, n, args); });
}

std::string percent_format(std::string_view f, const Value& args) {
  std::vector<Value> positional;
  const Dict* mapping = nullptr;
  // Python treats any non-tuple argument with __getitem__ (dict, list) as a possible mapping
  // and then does not complain about unused arguments.
  bool lenient = !args.is_tuple() && (args.is_dict() || args.is_list());
  if (args.is_tuple()) {
    positional = args.list().items;
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.dict();
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  auto next_arg = [&]() -> const Value& {
    if (next >= positional.size()) eval_fail("not enough arguments for format string");
    return positional[next++];
  };
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) eval_fail("incomplete format");
    const Value* value = nullptr;
    if (f[i] == '(') {
      size_t close = f.find(')', i);
      if (close == std::string_view::npos || !mapping) eval_fail("format requires a mapping");
      value = mapping->find(f.substr(i + 1, close - i - 1));
      if (!value) eval_fail("KeyError: '{}'", f.substr(i + 1, close - i - 1));
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) flags += f[i++];
    int width = 0;
    int precision = -1;
    if (i < f.size() && f[i] == '*') {
      width = static_cast<int>(next_arg().get_int());
      ++i;
    }
    while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i]))) width = width * 10 + (f[i++] - '0');
    if (i < f.size() && f[i] == '.') {
      ++i;
      precision = 0;
      while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i]))) precision = precision * 10 + (f[i++] - '0');
    }
    if (width > 10000 || precision > 1000) eval_fail("format width or precision too large");
    if (i >= f.size()) eval_fail("incomplete format");
    char type = f[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    const Value& v = value ? *value : next_arg();
    std::string body;
    char buf[1200];
    std::string spec = "%" + flags + (width ? std::to_string(width) : "") + (precision >= 0 ? "." + std::to_string(precision) : "");
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        body = type == 's' ? v.to_string() : v.repr();
        if (precision >= 0) body = body.substr(0, text::byte_offset(body, static_cast<size_t>(precision)));
        bool left = flags.find('-') != std::string::npos;
        body = pad(body, static_cast<size_t>(width), left ? '<' : '>');
        break;
      }
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        if (!v.is_number()) eval_fail("%{} format: a real number is required, not {}", type, v.type_name());
        double d = v.get_float();
        long long n = v.is_float() ? static_cast<long long>(std::trunc(d)) : static_cast<long long>(v.get_int());
        if (v.is_float() && (type == 'x' || type == 'X' || type == 'o')) eval_fail("%{} format: an integer is required, not float", type);
        std::snprintf(buf, sizeof(buf), (spec + "ll" + (type == 'i' || type == 'u' ? 'd' : type)).c_str(), n);
        body = buf;
        break;
      }
      case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
        if (!v.is_number()) eval_fail("must be real number, not {}", v.type_name());
        std::snprintf(buf, sizeof(buf), (spec + type).c_str(), v.get_float());
        body = buf;
        break;
      }
      case 'c': {
        if (v.is_string() && text::length(v.str()) == 1) {
          body = v.str();
        } else if (v.is_int()) {
          text::append_utf8(body, static_cast<char32_t>(v.get_int()));
        } else {
          eval_fail("%c requires int or char");
        }
        break;
      }
      default:
        eval_fail("unsupported format character '{}'", type);
    }
    out += body;
  }
  if (!used_mapping && !lenient && next < positional.size())
    eval_fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace strata::jinja
