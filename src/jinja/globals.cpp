#include "jinja/globals.h"

#include <ctime>

#include "jinja/template_error.h"

namespace strata::jinja {
namespace {

// namespace(): an object whose attributes `{% set ns.x = ... %}` may assign, which is how
// templates carry state out of loops (a loop's own `set` ends with the iteration).
class Namespace : public Object {
 public:
  explicit Namespace(Dict attrs) : attrs_(std::move(attrs)) {}
  std::string_view type_name() const override { return "Namespace"; }
  Value get_attr(std::string_view name) const override {
    if (const Value* v = attrs_.find(name)) return *v;
    return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  bool set_attr(std::string_view name, const Value& v) override {
    attrs_.set(Value::string(name), v);
    return true;
  }
  std::string repr() const override { return "<Namespace>"; }  // Value::repr prints the attributes
  const Dict* attributes() const override { return &attrs_; }
  void clear_refs() override { attrs_.clear(); }

 private:
  Dict attrs_;
};

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view type_name() const override { return "Cycler"; }
  std::string repr() const override { return "<Cycler>"; }
  void clear_refs() override { items_.clear(); }
  Value get_attr(std::string_view name) const override {
    auto* self = const_cast<Cycler*>(this);
    if (name == "current") return items_.empty() ? Value::none() : items_[pos_ % items_.size()];
    if (name == "next") {
      return Value::callable("next", [self](Interpreter&, CallArgs&) {
        if (self->items_.empty()) eval_fail("cycler has no items");
        Value v = self->items_[self->pos_ % self->items_.size()];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      });
    }
    if (name == "reset") {
      return Value::callable("reset", [self](Interpreter&, CallArgs&) {
        self->pos_ = 0;
        return Value::none();
      });
    }
    return Value::undefined(fmt::format("'Cycler object' has no attribute '{}'", name));
  }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

// dict(mapping_or_pairs, **kwargs) as Python builds it.
Dict build_dict(std::string_view fn, CallArgs& args) {
  if (args.positional.size() > 1) eval_fail("{} expected at most 1 positional argument, got {}", fn, args.positional.size());
  Dict d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().entries()) d.set(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) eval_fail("{} update sequence element has length {}; 2 is required", fn, kv.size());
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(Value::string(k), v);
  return d;
}

Value g_range(Interpreter& in, CallArgs& args) {
  if (!args.keyword.empty()) eval_fail("range() takes no keyword arguments");
  std::vector<int64_t> n;
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool()) eval_fail("'{}' object cannot be interpreted as an integer", v.type_name());
    n.push_back(v.get_int());
  }
  if (n.empty() || n.size() > 3) eval_fail("range expected 1 to 3 arguments, got {}", n.size());
  int64_t start = n.size() == 1 ? 0 : n[0];
  int64_t stop = n.size() == 1 ? n[0] : n[1];
  int64_t step = n.size() == 3 ? n[2] : 1;
  if (step == 0) eval_fail("range() arg 3 must not be zero");
  // Count without overflow: work in long double, which holds any int64 difference exactly enough.
  long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  long double count = span <= 0 ? 0 : (span + (std::abs(static_cast<long double>(step)) - 1)) / std::abs(static_cast<long double>(step));
  if (count > kMaxRange) eval_fail("range too big (at most {} items)", kMaxRange);
  size_t items = static_cast<size_t>(count);
  in.check_items(items);
  std::vector<Value> out;
  out.reserve(items);
  // Unsigned arithmetic wraps like two's complement, so start + i*step never overflows here.
  for (size_t i = 0; i < items; ++i)
    out.push_back(Value::integer(static_cast<int64_t>(static_cast<uint64_t>(start) + i * static_cast<uint64_t>(step))));
  return Value::new_list(std::move(out));
}

Value g_namespace(Interpreter&, CallArgs& args) { return Value::new_object(std::make_shared<Namespace>(build_dict("namespace", args))); }

Value g_dict(Interpreter&, CallArgs& args) { return Value::new_dict(build_dict("dict", args)); }

Value g_cycler(Interpreter&, CallArgs& args) {
  if (!args.keyword.empty()) eval_fail("cycler() takes no keyword arguments");
  return Value::new_object(std::make_shared<Cycler>(args.positional));
}

Value g_joiner(Interpreter&, CallArgs& args) {
  ArgReader a("joiner", args);
  std::string sep = a.get(0, "sep", Value::string(", ")).to_string();
  a.finish();
  auto used = std::make_shared<bool>(false);
  return Value::callable("joiner", [sep, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

Value g_raise_exception(Interpreter& in, CallArgs& args) {
  ArgReader a("raise_exception", args);
  Value msg = a.get(0, "message");
  a.finish();
  SourcePos p = in.position();
  throw RaiseException(msg.to_string(), p.line, p.column);
}

Value g_strftime_now(Interpreter& in, CallArgs& args) {
  ArgReader a("strftime_now", args);
  Value f = a.get(0, "format");
  a.finish();
  if (!f.is_string()) eval_fail("strftime_now() argument must be str, not {}", f.type_name());
  if (f.str().size() > 1024) eval_fail("strftime_now() format too long");
  std::tm tm{};
  if (in.options().now) {
    tm = *in.options().now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  if (f.str().empty()) return Value::string("");
  // strftime returns 0 both for "buffer too small" and for an empty result; grow a few times.
  std::string buf(256, '\0');
  for (int attempt = 0; attempt < 6; ++attempt) {
    size_t n = std::strftime(buf.data(), buf.size(), f.str().c_str(), &tm);
    if (n > 0) return Value::string(buf.substr(0, n));
    buf.resize(buf.size() * 4);
  }
  return Value::string("");
}

}  // namespace

void add_globals(Frame& frame) {
  frame.set("range", Value::callable("range", g_range));
  frame.set("namespace", Value::callable("namespace", g_namespace));
  frame.set("dict", Value::callable("dict", g_dict));
  frame.set("cycler", Value::callable("cycler", g_cycler));
  frame.set("joiner", Value::callable("joiner", g_joiner));
  frame.set("raise_exception", Value::callable("raise_exception", g_raise_exception));
  frame.set("strftime_now", Value::callable("strftime_now", g_strftime_now));
}

}  // namespace strata::jinja
