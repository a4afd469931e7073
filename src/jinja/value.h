// The values a Jinja template computes with, with Python's semantics: None, bools that are also
// ints, int64 ints, floats, str (UTF-8; optionally Markup, which escapes what is added to it),
// list and tuple, insertion-ordered dict, objects with attributes (namespace(), loop, cycler) and
// callables (macros, globals, bound methods). Lists, dicts and objects are shared by reference
// like Python objects; a deep copy is never made implicitly.
// Undefined is a value too: printing it gives "", iterating it gives nothing, and most other
// uses fail with the hint it carries ("'foo' is undefined"), as Jinja2's default Undefined does.
// Thread-safety: values are not synchronized; one render owns the values it creates. Values
// reachable from a parsed template (constants) are never mutated and may be shared by threads.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata::jinja {

class Value;
class Interpreter;

// Nesting limit for recursive operations on values (repr, ==, tojson, conversion from JSON):
// deeper (or self-referencing) structures fail instead of overflowing the stack.
inline constexpr int kMaxValueDepth = 256;

// Thrown by value operations, filters, tests and methods on bad input. The interpreter adds the
// template position and rethrows it as a TemplateRuntimeError.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void eval_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw EvalError(fmt::format(f, std::forward<Args>(args)...));
}

struct List {
  std::vector<Value> items;
  bool tuple = false;  // a Python tuple: immutable, printed as (a, b)
};

// A Python dict: insertion-ordered, keys compared with Python equality (1 == 1.0 == True).
// String-keyed lookups use a hash index once the dict is large enough for it to pay off.
class Dict {
 public:
  // Defined below Value: clang instantiates vector<pair<Value, Value>>::size() here otherwise.
  size_t size() const;
  bool empty() const;
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or replaces (keeping the original position). Fails for unhashable keys.
  void set(Value key, Value value);
  bool erase(const Value& key);
  void clear();

 private:
  void index_if_large() const;
  std::vector<std::pair<Value, Value>> entries_;
  // string key -> position in entries_; views point into the keys' shared string storage.
  mutable std::unordered_map<std::string_view, size_t> index_;
  mutable bool indexed_ = false;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Objects with attributes: namespace(), loop, cycler(), joiner().
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string_view type_name() const = 0;
  // Undefined (with a hint) when there is no such attribute.
  virtual Value get_attr(std::string_view name) const = 0;
  // False when the object does not allow assigning attributes.
  virtual bool set_attr(std::string_view name, const Value& value);
  virtual std::string repr() const = 0;
  virtual bool truthy() const { return true; }
  // namespace() objects expose their attributes (for tojson, `in`, iteration).
  virtual const Dict* attributes() const { return nullptr; }
  // Drops every reference this object holds (used to break reference cycles after a render).
  virtual void clear_refs() {}
  // Objects that can be called like functions (the loop of a recursive for).
  virtual bool is_callable() const { return false; }
  virtual Value call(Interpreter& interp, CallArgs& args);
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
  bool is_macro = false;
};

enum class ValueKind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject, kCallable };

class Value {
 public:
  Value() : i_(0) {}  // undefined, without a hint

  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value string(std::string_view s) { return string(std::string(s)); }
  static Value string(const char* s) { return string(std::string(s)); }
  // markupsafe.Markup: a str marked safe; adding a plain str to it HTML-escapes that str.
  static Value markup(std::string s);
  static Value new_list(std::vector<Value> items = {});
  static Value new_tuple(std::vector<Value> items);
  static Value new_dict(Dict d = {});
  static Value new_object(std::shared_ptr<Object> o);
  static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn, bool is_macro = false);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }      // not bool
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python numbers include bool
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_markup() const { return kind_ == ValueKind::kString && markup_; }
  bool is_list() const { return kind_ == ValueKind::kList; }  // list or tuple
  bool is_tuple() const { return is_list() && list().tuple; }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_object() const { return kind_ == ValueKind::kObject; }
  bool is_callable() const { return kind_ == ValueKind::kCallable; }
  bool is_container() const { return is_list() || is_dict() || is_object() || is_callable(); }

  bool get_bool() const { return b_; }
  int64_t get_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }  // precondition: int or bool
  double get_float() const;                                          // precondition: is_number()
  const std::string& str() const { return *static_cast<const std::string*>(ptr_.get()); }
  List& list() const { return *static_cast<List*>(ptr_.get()); }
  Dict& dict() const { return *static_cast<Dict*>(ptr_.get()); }
  Object& object() const { return *static_cast<Object*>(ptr_.get()); }
  const Callable& callable() const { return *static_cast<const Callable*>(ptr_.get()); }
  std::shared_ptr<Object> object_ptr() const { return std::static_pointer_cast<Object>(ptr_); }
  // The message that using this undefined value fails with.
  std::string undefined_message() const;
  // Identity of shared containers (Python `is`).
  const void* identity() const { return ptr_.get(); }
  // The shared storage (string, container, object or callable), for weak references.
  const std::shared_ptr<void>& storage() const { return ptr_; }

  bool truthy() const;
  // Python str(): what {{ value }} prints. Undefined prints as "".
  std::string to_string() const;
  // Python repr(), as used inside printed lists and dicts.
  std::string repr() const;
  // Python type name for error messages ("str", "int", "list", "dict", "NoneType", ...).
  std::string_view type_name() const;

 private:
  ValueKind kind_ = ValueKind::kUndefined;
  bool markup_ = false;
  union {
    bool b_;
    int64_t i_;
    double f_;
  };
  std::shared_ptr<void> ptr_;  // string, List, Dict, Object, Callable or the undefined hint
};

inline size_t Dict::size() const { return entries_.size(); }
inline bool Dict::empty() const { return entries_.empty(); }

// Python ==, with 1 == 1.0 == True and structural comparison of lists and dicts.
bool equals(const Value& a, const Value& b);
// Python ordering (<0, 0, >0); throws EvalError for unorderable types ("'<' not supported ...").
int compare(const Value& a, const Value& b, std::string_view op = "<");
// Python `needle in haystack` (substring, element, key). Undefined haystacks contain nothing.
bool contains(const Value& haystack, const Value& needle);
// Python len(); throws EvalError for values without a length.
size_t length(const Value& v);
// The items `for x in v` visits: list items, dict keys, string characters; undefined gives none.
// Throws EvalError for values that are not iterable.
std::vector<Value> iterate(const Value& v);
// "'dict object'"-style description used in Jinja2's undefined hints.
std::string object_type_repr(const Value& v);

// Reads a builtin's arguments the way Python binds them: by position or keyword, with defaults;
// finish() rejects arguments that were not consumed.
class ArgReader {
 public:
  ArgReader(std::string_view function, CallArgs& args) : function_(function), args_(args) {}
  // The argument at `pos` or called `name`; `def` when absent.
  Value get(size_t pos, std::string_view name, Value def = Value());
  bool has(size_t pos, std::string_view name) const;
  // Positional arguments from `pos` on (a *args parameter).
  std::vector<Value> rest(size_t pos);
  void finish();

 private:
  std::string_view function_;
  CallArgs& args_;
  size_t positional_used_ = 0;
  std::vector<bool> keyword_used_;
};

}  // namespace strata::jinja
