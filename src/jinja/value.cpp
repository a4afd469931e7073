#include "jinja/value.h"

#include <algorithm>
#include <cmath>

#include "jinja/text.h"

namespace strata::jinja {
namespace {

// Dicts at least this large get a hash index for string keys; smaller ones are scanned.
constexpr size_t kDictIndexThreshold = 16;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) eval_fail("value nested too deeply (more than {} levels, or self-referencing)", kMaxValueDepth);
}

bool is_hashable(const Value& v) {
  if (v.is_list()) {
    if (!v.is_tuple()) return false;
    return std::all_of(v.list().items.begin(), v.list().items.end(), is_hashable);
  }
  return !v.is_dict();  // Jinja2's Undefined defines __hash__
}

bool equals_at(const Value& a, const Value& b, int depth);

bool dict_equals(const Dict& a, const Dict& b, int depth) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a.entries()) {
    const Value* other = b.find(k);
    if (!other || !equals_at(v, *other, depth + 1)) return false;
  }
  return true;
}

bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.get_float() == b.get_float();
    return a.get_int() == b.get_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.str() == b.str();
    case ValueKind::kList: {
      const List& x = a.list();
      const List& y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals_at(x.items[i], y.items[i], depth + 1)) return false;
      return true;
    }
    case ValueKind::kDict:
      return dict_equals(a.dict(), b.dict(), depth);
    case ValueKind::kObject: {
      const Dict* x = a.object().attributes();
      const Dict* y = b.object().attributes();
      if (x && y) return dict_equals(*x, *y, depth);
      return a.identity() == b.identity();
    }
    default:
      return a.identity() == b.identity();
  }
}

std::string repr_at(const Value& v, int depth);

std::string repr_dict(const Dict& d, int depth) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, val] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    out += repr_at(k, depth + 1);
    out += ": ";
    out += repr_at(val, depth + 1);
  }
  out += "}";
  return out;
}

std::string repr_at(const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kString:
      return v.is_markup() ? "Markup(" + text::repr(v.str()) + ")" : text::repr(v.str());
    case ValueKind::kList: {
      const List& l = v.list();
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += repr_at(l.items[i], depth + 1);
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      out += l.tuple ? ")" : "]";
      return out;
    }
    case ValueKind::kDict:
      return repr_dict(v.dict(), depth);
    case ValueKind::kObject:
      if (const Dict* attrs = v.object().attributes()) return "<Namespace " + repr_dict(*attrs, depth) + ">";
      return v.object().repr();
    default:
      return v.to_string();
  }
}

int compare_at(const Value& a, const Value& b, std::string_view op, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.get_float();
      double y = b.get_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.get_int();
    int64_t y = b.get_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_undefined()) eval_fail("{}", a.undefined_message());
  if (b.is_undefined()) eval_fail("{}", b.undefined_message());
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals_at(x[i], y[i], depth + 1)) continue;
      return compare_at(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  eval_fail("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(), b.type_name());
}

}  // namespace

// ---- Dict ----

void Dict::index_if_large() const {
  if (indexed_ || entries_.size() < kDictIndexThreshold) return;
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].first.is_string()) index_.emplace(entries_[i].first.str(), i);
  indexed_ = true;
}

const Value* Dict::find(std::string_view key) const {
  index_if_large();
  if (indexed_) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : entries_)
    if (!k.is_string() && equals(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (!is_hashable(key)) eval_fail("unhashable type: '{}'", key.type_name());
  if (const Value* existing = find(key)) {
    *const_cast<Value*>(existing) = std::move(value);
    return;
  }
  entries_.emplace_back(std::move(key), std::move(value));
  if (indexed_ && entries_.back().first.is_string()) index_.emplace(entries_.back().first.str(), entries_.size() - 1);
}

bool Dict::erase(const Value& key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (equals(it->first, key)) {
      entries_.erase(it);
      indexed_ = false;
      index_.clear();
      return true;
    }
  }
  return false;
}

void Dict::clear() {
  entries_.clear();
  index_.clear();
  indexed_ = false;
}

bool Object::set_attr(std::string_view, const Value&) { return false; }

Value Object::call(Interpreter&, CallArgs&) { eval_fail("'{}' object is not callable", type_name()); }

// ---- Value ----

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.i_ = 0;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.i_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.f_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = ValueKind::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::new_list(std::vector<Value> items) {
  Value v;
  v.kind_ = ValueKind::kList;
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  v.ptr_ = std::move(l);
  return v;
}

Value Value::new_tuple(std::vector<Value> items) {
  Value v = new_list(std::move(items));
  v.list().tuple = true;
  return v;
}

Value Value::new_dict(Dict d) {
  Value v;
  v.kind_ = ValueKind::kDict;
  v.ptr_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::new_object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = ValueKind::kObject;
  v.ptr_ = std::move(o);
  return v;
}

Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn, bool is_macro) {
  Value v;
  v.kind_ = ValueKind::kCallable;
  v.ptr_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn), is_macro});
  return v;
}

double Value::get_float() const {
  if (is_float()) return f_;
  return static_cast<double>(get_int());
}

std::string Value::undefined_message() const {
  if (ptr_) return *static_cast<const std::string*>(ptr_.get());
  return "value is undefined";
}

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return b_;
    case ValueKind::kInt:
      return i_ != 0;
    case ValueKind::kFloat:
      return f_ != 0.0;
    case ValueKind::kString:
      return !str().empty();
    case ValueKind::kList:
      return !list().items.empty();
    case ValueKind::kDict:
      return !dict().empty();
    case ValueKind::kObject:
      return object().truthy();
    case ValueKind::kCallable:
      return true;
  }
  return false;
}

std::string Value::to_string() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return b_ ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(i_);
    case ValueKind::kFloat:
      return text::float_repr(f_);
    case ValueKind::kString:
      return str();
    case ValueKind::kCallable:
      return callable().is_macro ? fmt::format("<Macro '{}'>", callable().name)
                                 : fmt::format("<built-in function {}>", callable().name);
    default:
      return repr_at(*this, 0);
  }
}

std::string Value::repr() const { return repr_at(*this, 0); }

std::string_view Value::type_name() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "Undefined";
    case ValueKind::kNone: return "NoneType";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kString: return markup_ ? "Markup" : "str";
    case ValueKind::kList: return list().tuple ? "tuple" : "list";
    case ValueKind::kDict: return "dict";
    case ValueKind::kObject: return object().type_name();
    case ValueKind::kCallable: return callable().is_macro ? "Macro" : "builtin_function_or_method";
  }
  return "object";
}

// ---- free functions ----

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

int compare(const Value& a, const Value& b, std::string_view op) { return compare_at(a, b, op, 0); }

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kString:
      if (!needle.is_string())
        eval_fail("'in <string>' requires string as left operand, not {}", needle.type_name());
      return haystack.str().find(needle.str()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& item : haystack.list().items)
        if (equals(item, needle)) return true;
      return false;
    case ValueKind::kDict:
      if (!is_hashable(needle)) eval_fail("unhashable type: '{}'", needle.type_name());
      return haystack.dict().find(needle) != nullptr;
    case ValueKind::kObject:
      if (const Dict* attrs = haystack.object().attributes()) return attrs->find(needle) != nullptr;
      break;
    default:
      break;
  }
  eval_fail("argument of type '{}' is not iterable", haystack.type_name());
}

size_t length(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return 0;
    case ValueKind::kString:
      return text::length(v.str());
    case ValueKind::kList:
      return v.list().items.size();
    case ValueKind::kDict:
      return v.dict().size();
    case ValueKind::kObject:
      if (const Dict* attrs = v.object().attributes()) return attrs->size();
      break;
    default:
      break;
  }
  eval_fail("object of type '{}' has no len()", v.type_name());
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return {};
    case ValueKind::kString: {
      std::vector<Value> out;
      for (std::string& c : text::chars(v.str())) out.push_back(v.is_markup() ? Value::markup(std::move(c)) : Value::string(std::move(c)));
      return out;
    }
    case ValueKind::kList:
      return v.list().items;
    case ValueKind::kDict: {
      std::vector<Value> out;
      out.reserve(v.dict().size());
      for (const auto& kv : v.dict().entries()) out.push_back(kv.first);
      return out;
    }
    default:
      break;
  }
  eval_fail("'{}' object is not iterable", v.type_name());
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return fmt::format("{} object", v.type_name());
}

// ---- ArgReader ----

bool ArgReader::has(size_t pos, std::string_view name) const {
  if (pos < args_.positional.size()) return true;
  for (const auto& kv : args_.keyword)
    if (kv.first == name) return true;
  return false;
}

Value ArgReader::get(size_t pos, std::string_view name, Value def) {
  keyword_used_.resize(args_.keyword.size(), false);
  if (pos < args_.positional.size()) {
    positional_used_ = std::max(positional_used_, pos + 1);
    for (const auto& kv : args_.keyword)
      if (kv.first == name) eval_fail("{}() got multiple values for argument '{}'", function_, name);
    return args_.positional[pos];
  }
  for (size_t i = 0; i < args_.keyword.size(); ++i) {
    if (args_.keyword[i].first == name) {
      keyword_used_[i] = true;
      return args_.keyword[i].second;
    }
  }
  return def;
}

std::vector<Value> ArgReader::rest(size_t pos) {
  std::vector<Value> out;
  for (size_t i = pos; i < args_.positional.size(); ++i) out.push_back(args_.positional[i]);
  positional_used_ = std::max(positional_used_, args_.positional.size());
  return out;
}

void ArgReader::finish() {
  keyword_used_.resize(args_.keyword.size(), false);
  if (args_.positional.size() > positional_used_)
    eval_fail("{}() takes at most {} positional argument{} ({} given)", function_, positional_used_,
              positional_used_ == 1 ? "" : "s", args_.positional.size());
  for (size_t i = 0; i < args_.keyword.size(); ++i)
    if (!keyword_used_[i]) eval_fail("{}() got an unexpected keyword argument '{}'", function_, args_.keyword[i].first);
}

}  // namespace strata::jinja
