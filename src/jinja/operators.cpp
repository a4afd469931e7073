#include "jinja/operators.h"

#include <cmath>
#include <limits>

#include "jinja/interpreter.h"
#include "jinja/methods.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

// Python ints are unbounded; ours stop at 64 bits and say so instead of wrapping.
[[noreturn]] void int_overflow() { eval_fail("integer overflow (values beyond 64 bits are not supported)"); }
int64_t add_int(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) int_overflow();
  return r;
}
int64_t sub_int(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) int_overflow();
  return r;
}
int64_t mul_int(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) int_overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) eval_fail("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) eval_fail("integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) eval_fail("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value add_strings(const Value& a, const Value& b) {
  // Markup + str escapes the str (markupsafe), in either order.
  if (a.is_markup() || b.is_markup()) {
    std::string l = a.is_markup() ? a.str() : text::html_escape(a.str());
    std::string r = b.is_markup() ? b.str() : text::html_escape(b.str());
    return Value::markup(l + r);
  }
  return Value::string(a.str() + b.str());
}

std::string_view binary_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
  }
  return "?";
}

// Python slice bounds for a sequence of length n.
std::vector<size_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto as_index = [](const Value& v) {
    if (!v.is_int() && !v.is_bool()) eval_fail("slice indices must be integers or None");
    return v.get_int();
  };
  int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : as_index(step_v);
  if (step == 0) eval_fail("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t def) {
    if (v.is_none() || v.is_undefined()) return def;
    int64_t i = as_index(v);
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  std::vector<size_t> out;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = start; i > stop; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace

Value binary_op(Interpreter& in, BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) eval_fail("{}", a.undefined_message());
  if (b.is_undefined()) eval_fail("{}", b.undefined_message());
  bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  bool nums = a.is_number() && b.is_number();
  switch (op) {
    case BinaryOp::kAdd:
      if (ints) return Value::integer(add_int(a.get_int(), b.get_int()));
      if (nums) return Value::number(a.get_float() + b.get_float());
      if (a.is_string() && b.is_string()) {
        in.check_bytes(a.str().size() + b.str().size());
        return add_strings(a, b);
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        in.check_items(a.list().items.size() + b.list().items.size());
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return a.is_tuple() ? Value::new_tuple(std::move(items)) : Value::new_list(std::move(items));
      }
      if (a.is_string() || a.is_list())
        eval_fail("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name());
      break;
    case BinaryOp::kSub:
      if (ints) return Value::integer(sub_int(a.get_int(), b.get_int()));
      if (nums) return Value::number(a.get_float() - b.get_float());
      break;
    case BinaryOp::kMul: {
      if (ints) return Value::integer(mul_int(a.get_int(), b.get_int()));
      if (nums) return Value::number(a.get_float() * b.get_float());
      const Value* seq = (a.is_string() || a.is_list()) ? &a : (b.is_string() || b.is_list()) ? &b : nullptr;
      const Value* count = seq == &a ? &b : &a;
      if (seq && (count->is_int() || count->is_bool())) {
        int64_t times = std::max<int64_t>(0, count->get_int());
        size_t unit = seq->is_string() ? seq->str().size() : seq->list().items.size();
        // Checked before multiplying, so a huge count cannot overflow the size computation.
        size_t limit = seq->is_string() ? in.options().max_output_bytes : in.options().max_container_items;
        size_t total = unit == 0 ? 0 : (static_cast<uint64_t>(times) > limit / unit + 1 ? limit + 1 : unit * static_cast<size_t>(times));
        if (seq->is_string()) in.check_bytes(total);
        else in.check_items(total);
        if (seq->is_string()) {
          std::string out;
          out.reserve(unit * static_cast<size_t>(times));
          for (int64_t i = 0; i < times; ++i) out += seq->str();
          return seq->is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
        }
        std::vector<Value> items;
        for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq->list().items.begin(), seq->list().items.end());
        return seq->is_tuple() ? Value::new_tuple(std::move(items)) : Value::new_list(std::move(items));
      }
      break;
    }
    case BinaryOp::kDiv:
      if (nums) {
        if (b.get_float() == 0.0) eval_fail("division by zero");
        return Value::number(a.get_float() / b.get_float());
      }
      break;
    case BinaryOp::kFloorDiv:
      if (ints) return Value::integer(floor_div(a.get_int(), b.get_int()));
      if (nums) {
        if (b.get_float() == 0.0) eval_fail("float floor division by zero");
        return Value::number(std::floor(a.get_float() / b.get_float()));
      }
      break;
    case BinaryOp::kMod:
      if (ints) return Value::integer(floor_mod(a.get_int(), b.get_int()));
      if (nums) {
        double y = b.get_float();
        if (y == 0.0) eval_fail("float modulo");
        double m = std::fmod(a.get_float(), y);
        if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
        return Value::number(m);
      }
      if (a.is_string()) {
        std::string s = percent_format(a.str(), b);
        in.check_bytes(s.size());
        return Value::string(std::move(s));
      }
      break;
    case BinaryOp::kPow:
      if (ints && b.get_int() >= 0) {
        // Square-and-multiply; once the base squared overflows, so does the result.
        int64_t base = a.get_int();
        int64_t exp = b.get_int();
        int64_t acc = 1;
        while (exp > 0) {
          if (exp & 1) acc = mul_int(acc, base);
          exp >>= 1;
          if (exp) base = mul_int(base, base);
        }
        return Value::integer(acc);
      }
      if (nums) {
        if (a.get_float() == 0.0 && b.get_float() < 0) eval_fail("0.0 cannot be raised to a negative power");
        double r = std::pow(a.get_float(), b.get_float());
        if (std::isinf(r) && std::isfinite(a.get_float()) && std::isfinite(b.get_float()))
          eval_fail("(34, 'Numerical result out of range')");
        return Value::number(r);
      }
      break;
  }
  eval_fail("unsupported operand type(s) for {}: '{}' and '{}'", binary_symbol(op), a.type_name(), b.type_name());
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) eval_fail("{}", obj.undefined_message());
  if (obj.is_string()) {
    std::vector<std::string> chars = text::chars(obj.str());
    std::string out;
    for (size_t i : slice_indices(static_cast<int64_t>(chars.size()), start, stop, step)) out += chars[i];
    return obj.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
  }
  if (obj.is_list()) {
    const auto& items = obj.list().items;
    std::vector<Value> out;
    for (size_t i : slice_indices(static_cast<int64_t>(items.size()), start, stop, step)) out.push_back(items[i]);
    return obj.is_tuple() ? Value::new_tuple(std::move(out)) : Value::new_list(std::move(out));
  }
  // Jinja2 compiles slices to plain Python subscription, so there is no undefined fallback.
  if (obj.is_dict()) eval_fail("unhashable type: 'slice'");
  eval_fail("'{}' object is not subscriptable", obj.type_name());
}

Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case ValueKind::kUndefined:
      eval_fail("{}", obj.undefined_message());
    case ValueKind::kDict:
      if (has_method(obj, name)) return bound_method(obj, name);
      if (const Value* v = obj.dict().find(name)) return *v;
      break;
    case ValueKind::kString:
    case ValueKind::kList:
      if (has_method(obj, name)) return bound_method(obj, name);
      break;
    case ValueKind::kObject:
      return obj.object().get_attr(name);
    default:
      break;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case ValueKind::kUndefined:
      eval_fail("{}", obj.undefined_message());
    case ValueKind::kDict:
      if ((key.is_list() && !key.is_tuple()) || key.is_dict()) eval_fail("unhashable type: '{}'", key.type_name());
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case ValueKind::kList:
    case ValueKind::kString:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.get_int();
        if (obj.is_list()) {
          int64_t n = static_cast<int64_t>(obj.list().items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.list().items[static_cast<size_t>(i)];
        } else {
          int64_t n = static_cast<int64_t>(text::length(obj.str()));
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            size_t b = text::byte_offset(obj.str(), static_cast<size_t>(i));
            size_t len = 0;
            text::decode_at(obj.str(), b, &len);
            std::string c = obj.str().substr(b, len);
            return obj.is_markup() ? Value::markup(std::move(c)) : Value::string(std::move(c));
          }
        }
      }
      break;
    case ValueKind::kObject:
      if (key.is_string()) return obj.object().get_attr(key.str());
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), key.repr()));
}

}  // namespace strata::jinja
