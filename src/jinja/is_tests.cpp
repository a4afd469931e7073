#include "jinja/is_tests.h"

#include <cmath>
#include <unordered_map>

#include "jinja/filters.h"
#include "jinja/interpreter.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

// The single argument most tests take (`is equalto x`, `is in seq`).
Value one_arg(std::string_view test, CallArgs& args, std::string_view name) {
  ArgReader a(test, args);
  if (!a.has(0, name)) eval_fail("test '{}' requires an argument", test);
  Value v = a.get(0, name);
  a.finish();
  return v;
}

void no_args(std::string_view test, CallArgs& args) { ArgReader(test, args).finish(); }

// Python's `value % 2` (floor modulo, floats included).
double mod2(const Value& v, std::string_view test) {
  if (v.is_undefined()) eval_fail("{}", v.undefined_message());
  if (v.is_int() || v.is_bool()) {
    int64_t r = v.get_int() % 2;
    return static_cast<double>(r < 0 ? r + 2 : r);
  }
  if (!v.is_float()) eval_fail("test '{}' needs a number, not {}", test, v.type_name());
  double r = std::fmod(v.get_float(), 2.0);
  return r < 0 ? r + 2.0 : r;
}

bool t_odd(Interpreter&, const Value& v, CallArgs& a) { no_args("odd", a); return mod2(v, "odd") == 1.0; }
bool t_even(Interpreter&, const Value& v, CallArgs& a) { no_args("even", a); return mod2(v, "even") == 0.0; }

bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  Value n = one_arg("divisibleby", a, "num");
  if (!n.is_number()) eval_fail("divisibleby needs a number");
  if (n.is_float() || v.is_float()) {
    if (n.get_float() == 0.0) eval_fail("float modulo");
    return std::fmod(v.get_float(), n.get_float()) == 0.0;
  }
  if (n.get_int() == 0) eval_fail("integer division or modulo by zero");
  if (!v.is_number()) eval_fail("divisibleby needs a number, not {}", v.type_name());
  return v.get_int() % n.get_int() == 0;
}

bool t_defined(Interpreter&, const Value& v, CallArgs& a) { no_args("defined", a); return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) { no_args("undefined", a); return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs& a) { no_args("none", a); return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) { no_args("boolean", a); return v.is_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs& a) { no_args("false", a); return v.is_bool() && !v.get_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs& a) { no_args("true", a); return v.is_bool() && v.get_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs& a) { no_args("integer", a); return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs& a) { no_args("float", a); return v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs& a) { no_args("number", a); return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs& a) { no_args("string", a); return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) { no_args("mapping", a); return v.is_dict(); }
bool t_escaped(Interpreter&, const Value& v, CallArgs& a) { no_args("escaped", a); return v.is_markup(); }
bool t_lower(Interpreter&, const Value& v, CallArgs& a) { no_args("lower", a); return text::is_lower(v.to_string()); }
bool t_upper(Interpreter&, const Value& v, CallArgs& a) { no_args("upper", a); return text::is_upper(v.to_string()); }

bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("callable", a);
  // Jinja2's Undefined defines __call__ (to fail), so Python's callable() says yes.
  return v.is_callable() || v.is_undefined() || (v.is_object() && v.object().is_callable());
}

bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("iterable", a);
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() ||
         (v.is_object() && v.object().type_name() == "LoopContext");
}

bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_args("sequence", a);
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  Value other = one_arg("sameas", a, "other");
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case ValueKind::kNone:
    case ValueKind::kUndefined:
      return v.is_none();  // None is a singleton; two undefined objects are distinct
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
      return equals(v, other);
    default:
      return v.identity() == other.identity();
  }
}

bool t_in(Interpreter&, const Value& v, CallArgs& a) { return contains(one_arg("in", a, "seq"), v); }
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return equals(v, one_arg("eq", a, "b")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !equals(v, one_arg("ne", a, "b")); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return compare(v, one_arg("lt", a, "b"), "<") < 0; }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return compare(v, one_arg("le", a, "b"), "<=") <= 0; }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return compare(v, one_arg("gt", a, "b"), ">") > 0; }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return compare(v, one_arg("ge", a, "b"), ">=") >= 0; }

bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_args("filter", a);
  return v.is_string() && find_filter(v.str()) != nullptr;
}

bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_args("test", a);
  return v.is_string() && find_test(v.str()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn>& table() {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"odd", t_odd},           {"even", t_even},         {"divisibleby", t_divisibleby},
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean},   {"false", t_false},       {"true", t_true},
      {"integer", t_integer},   {"float", t_float},       {"number", t_number},
      {"string", t_string},     {"mapping", t_mapping},   {"escaped", t_escaped},
      {"lower", t_lower},       {"upper", t_upper},       {"callable", t_callable},
      {"iterable", t_iterable}, {"sequence", t_sequence}, {"sameas", t_sameas},
      {"in", t_in},             {"filter", t_filter},     {"test", t_test},
      {"==", t_eq},             {"eq", t_eq},             {"equalto", t_eq},
      {"!=", t_ne},             {"ne", t_ne},             {"<", t_lt},
      {"lt", t_lt},             {"lessthan", t_lt},       {"<=", t_le},
      {"le", t_le},             {">", t_gt},              {"gt", t_gt},
      {"greaterthan", t_gt},    {">=", t_ge},             {"ge", t_ge},
  };
  return kTests;
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& t = table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace strata::jinja
