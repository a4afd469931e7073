#include "jinja/json.h"

#include <algorithm>
#include <cmath>

#include "jinja/text.h"

namespace strata::jinja {
namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) eval_fail("JSON value nested too deeply (more than {} levels)", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      // Python ints are unbounded; past int64 the nearest float is the best we can hold.
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value::new_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.set(Value::string(k), from_json_at(v, depth + 1));
      return Value::new_dict(std::move(d));
    }
    default:
      eval_fail("unsupported JSON value (binary data)");
  }
}

class Writer {
 public:
  explicit Writer(const JsonDumpOptions& o) : opt_(o) {
    item_sep_ = o.item_separator ? *o.item_separator : (o.indent ? "," : ", ");
  }

  void write(const Value& v, int depth) {
    if (depth > kMaxValueDepth)
      eval_fail("value nested too deeply for tojson (more than {} levels, or self-referencing)", kMaxValueDepth);
    switch (v.kind()) {
      case ValueKind::kNone:
        out_ += "null";
        return;
      case ValueKind::kBool:
        out_ += v.get_bool() ? "true" : "false";
        return;
      case ValueKind::kInt:
        out_ += std::to_string(v.get_int());
        return;
      case ValueKind::kFloat:
        write_float(v.get_float());
        return;
      case ValueKind::kString:
        text::append_json_string(out_, v.str(), opt_.ensure_ascii);
        return;
      case ValueKind::kList:
        write_list(v.list().items, depth);
        return;
      case ValueKind::kDict:
        write_dict(v.dict(), depth);
        return;
      default:
        break;
    }
    eval_fail("Object of type {} is not JSON serializable", v.type_name());
  }

  std::string take() { return std::move(out_); }

 private:
  void write_float(double d) {
    if (std::isnan(d)) {
      out_ += "NaN";
    } else if (std::isinf(d)) {
      out_ += d < 0 ? "-Infinity" : "Infinity";
    } else {
      out_ += text::float_repr(d);
    }
  }

  void newline(int depth) {
    if (!opt_.indent) return;
    out_ += '\n';
    for (int i = 0; i < depth; ++i) out_ += *opt_.indent;
  }

  void write_list(const std::vector<Value>& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += item_sep_;
      newline(depth + 1);
      write(items[i], depth + 1);
    }
    newline(depth);
    out_ += ']';
  }

  // Python converts non-string keys: True -> "true", None -> "null", 1.5 -> "1.5".
  std::string key_string(const Value& k) {
    switch (k.kind()) {
      case ValueKind::kString: return k.str();
      case ValueKind::kNone: return "null";
      case ValueKind::kBool: return k.get_bool() ? "true" : "false";
      case ValueKind::kInt: return std::to_string(k.get_int());
      case ValueKind::kFloat: {
        double d = k.get_float();
        if (std::isnan(d)) return "NaN";
        if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
        return text::float_repr(d);
      }
      default: eval_fail("keys must be str, int, float, bool or None, not {}", k.type_name());
    }
  }

  void write_dict(const Dict& d, int depth) {
    if (d.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    entries.reserve(d.size());
    for (const auto& [k, v] : d.entries()) entries.emplace_back(key_string(k), &v);
    if (opt_.sort_keys)
      std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out_ += item_sep_;
      newline(depth + 1);
      text::append_json_string(out_, entries[i].first, opt_.ensure_ascii);
      out_ += opt_.key_separator;
      write(*entries[i].second, depth + 1);
    }
    newline(depth);
    out_ += '}';
  }

  const JsonDumpOptions& opt_;
  std::string item_sep_;
  std::string out_;
};

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  Writer w(options);
  w.write(v, 0);
  return w.take();
}

}  // namespace strata::jinja
