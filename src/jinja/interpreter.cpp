#include "jinja/interpreter.h"

#include <limits>

#include "jinja/filters.h"
#include "jinja/globals.h"
#include "jinja/is_tests.h"
#include "jinja/json.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/template_error.h"
#include "jinja/text.h"

namespace strata::jinja {
namespace {

// Nesting of statement execution and expression evaluation together (macro recursion
// included). Bounds the native stack: a few frames of a few hundred bytes per level.
constexpr int kMaxNesting = 1000;

// Puts a variable back to its old value when a scope ends, exceptions included.
template <typename T>
class Restore {
 public:
  Restore(T& ref, T value) : ref_(ref), saved_(std::move(ref)) { ref_ = std::move(value); }
  ~Restore() { ref_ = std::move(saved_); }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  T& ref_;
  T saved_;
};

}  // namespace

// ---- Frame ----

const Value* Frame::find(std::string_view name) const {
  for (const Frame* f = this; f; f = f->parent.get())
    for (const auto& [k, v] : f->vars)
      if (k == name) return &v;
  return nullptr;
}

void Frame::set(std::string_view name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(value));
}

// ---- the loop object ----

class Interpreter::LoopContext : public Object {
 public:
  LoopContext(std::shared_ptr<const std::vector<Value>> items, int depth, const ForStmt* recursive_stmt)
      : items_(std::move(items)), depth_(depth), stmt_(recursive_stmt) {}

  void set_index(size_t i) { index_ = i; }
  std::string_view type_name() const override { return "LoopContext"; }
  std::string repr() const override { return fmt::format("<LoopContext {}/{}>", index_ + 1, items_->size()); }
  bool truthy() const override { return !items_->empty(); }
  void clear_refs() override { items_ = std::make_shared<const std::vector<Value>>(); }
  bool is_callable() const override { return stmt_ != nullptr; }

  Value get_attr(std::string_view name) const override {
    int64_t n = static_cast<int64_t>(items_->size());
    int64_t i = static_cast<int64_t>(index_);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(depth_);
    if (name == "depth0") return Value::integer(depth_ - 1);
    if (name == "previtem") return i > 0 ? (*items_)[index_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? (*items_)[index_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      size_t at = index_;
      return Value::callable("cycle", [at](Interpreter&, CallArgs& args) {
        if (args.positional.empty()) eval_fail("no items for cycling given");
        return args.positional[at % args.positional.size()];
      });
    }
    if (name == "changed") {
      auto last = last_changed_;
      return Value::callable("changed", [last](Interpreter&, CallArgs& args) {
        Value now = Value::new_list(args.positional);
        if (*last && equals(**last, now)) return Value::boolean(false);
        *last = std::make_shared<Value>(now);
        return Value::boolean(true);
      });
    }
    return Value::undefined(fmt::format("'LoopContext object' has no attribute '{}'", name));
  }

  Value call(Interpreter& interp, CallArgs& args) override;

 private:
  std::shared_ptr<const std::vector<Value>> items_;
  size_t index_ = 0;
  int depth_;
  const ForStmt* stmt_;
  std::shared_ptr<std::shared_ptr<Value>> last_changed_ = std::make_shared<std::shared_ptr<Value>>();
};

class Interpreter::DepthGuard {
 public:
  explicit DepthGuard(Interpreter& in) : in_(in) {
    if (++in_.depth_ > kMaxNesting) {
      --in_.depth_;
      eval_fail("template nesting too deep (more than {} levels of recursion)", kMaxNesting);
    }
  }
  ~DepthGuard() { --in_.depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Interpreter& in_;
};

Value Interpreter::LoopContext::call(Interpreter& interp, CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty()) eval_fail("loop() takes exactly one argument");
  if (interp.call_depth_ >= interp.options_.max_call_depth)
    eval_fail("maximum recursion depth exceeded ({} nested calls)", interp.options_.max_call_depth);
  Restore<int> depth(interp.call_depth_, interp.call_depth_ + 1);
  std::string out;
  Restore<std::string*> output(interp.out_, &out);
  interp.run_loop(*stmt_, iterate(args.positional[0]), depth_ + 1);
  return Value::string(std::move(out));
}

// ---- Interpreter ----

Interpreter::Interpreter(const RenderOptions& options) : options_(options) {}

Interpreter::~Interpreter() {
  // Break reference cycles that mutation may have built, so everything is freed.
  for (auto& [weak, kind] : mutated_) {
    std::shared_ptr<void> p = weak.lock();
    if (!p) continue;
    if (kind == ValueKind::kList) static_cast<List*>(p.get())->items.clear();
    if (kind == ValueKind::kDict) static_cast<Dict*>(p.get())->clear();
    if (kind == ValueKind::kObject) static_cast<Object*>(p.get())->clear_refs();
  }
  // Frames can be long parent chains only through recursion, which is bounded; plain release.
}

std::string Interpreter::render(const Body& body, const Template::Variables& variables) {
  globals_ = std::make_shared<Frame>();
  add_globals(*globals_);
  auto vars = std::make_shared<Frame>();
  vars->parent = globals_;
  for (const auto& [name, json] : variables) {
    try {
      vars->set(name, from_json(*json));
    } catch (const EvalError& e) {
      throw TemplateRuntimeError(fmt::format("bad template variable '{}': {}", name, e.what()), 0, 0);
    }
  }
  root_ = std::make_shared<Frame>();
  root_->parent = vars;
  current_ = root_;
  std::string out;
  out_ = &out;
  exec_body(body);
  return out;
}

void Interpreter::append(std::string_view s) {
  if (out_->size() + s.size() > options_.max_output_bytes)
    eval_fail("output exceeds the limit of {} bytes", options_.max_output_bytes);
  out_->append(s);
}

void Interpreter::charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > options_.max_steps)
    eval_fail("template exceeded the evaluation budget of {} steps (runaway loop or recursion?)", options_.max_steps);
}

void Interpreter::check_bytes(size_t n) {
  if (n > options_.max_output_bytes) eval_fail("string of {} bytes exceeds the limit of {} bytes", n, options_.max_output_bytes);
  charge(n / 32);
}

void Interpreter::check_items(size_t n) {
  if (n > options_.max_container_items)
    eval_fail("list of {} items exceeds the limit of {} items", n, options_.max_container_items);
  charge(n / 8);
}

void Interpreter::note_mutation(const Value& container, const Value& inserted) {
  if (!inserted.is_container()) return;
  mutated_.emplace_back(container.storage(), container.kind());
  if (mutated_.size() >= mutated_compact_at_) {
    std::erase_if(mutated_, [](const auto& e) { return e.first.expired(); });
    mutated_compact_at_ = std::max<size_t>(1024, mutated_.size() * 2);
  }
}

std::string Interpreter::capture(const Body& body) {
  std::string buf;
  Restore<std::string*> output(out_, &buf);
  exec_body(body);
  return buf;
}

Interpreter::Flow Interpreter::exec_scoped(const Body& body, std::shared_ptr<Frame> frame) {
  Restore<std::shared_ptr<Frame>> scope(current_, std::move(frame));
  return exec_body(body);
}

// ---- statements ----

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const StmtPtr& s : body) {
    Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  try {
    DepthGuard guard(*this);
    charge(1);
    return exec_inner(s);
  } catch (const EvalError& e) {
    throw TemplateRuntimeError(e.what(), s.pos.line, s.pos.column);
  }
}

Interpreter::Flow Interpreter::exec_inner(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::kText:
      append(static_cast<const TextStmt&>(s).text);
      return Flow::kNormal;
    case StmtKind::kPrint: {
      Value v = eval(*static_cast<const ExprStmt&>(s).expr);
      if (v.is_string()) {
        append(v.str());
      } else {
        append(v.to_string());
      }
      return Flow::kNormal;
    }
    case StmtKind::kDo:
      eval(*static_cast<const ExprStmt&>(s).expr);
      return Flow::kNormal;
    case StmtKind::kIf: {
      const auto& st = static_cast<const IfStmt&>(s);
      for (const auto& [cond, body] : st.branches)
        if (eval(*cond).truthy()) return exec_body(body);
      return exec_body(st.else_body);
    }
    case StmtKind::kFor:
      return exec_for(static_cast<const ForStmt&>(s));
    case StmtKind::kSet:
      exec_set(static_cast<const SetStmt&>(s));
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      const auto& st = static_cast<const SetBlockStmt&>(s);
      Value v = Value::string(capture(st.body));
      if (st.filter) v = eval_filter(static_cast<const FilterExpr&>(*st.filter), &v);
      assign(st.target, v, *current_);
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      const auto& m = static_cast<const MacroStmt&>(s);
      current_->set(m.name, make_macro(m));
      return Flow::kNormal;
    }
    case StmtKind::kCallBlock:
      exec_call_block(static_cast<const CallBlockStmt&>(s));
      return Flow::kNormal;
    case StmtKind::kFilterBlock: {
      const auto& st = static_cast<const FilterBlockStmt&>(s);
      Value v = Value::string(capture(st.body));
      Value r = eval_filter(static_cast<const FilterExpr&>(*st.filter), &v);
      append(r.is_string() ? r.str() : r.to_string());
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      const auto& st = static_cast<const WithStmt&>(s);
      auto frame = std::make_shared<Frame>();
      frame->parent = current_;
      for (const auto& [target, expr] : st.assignments) assign(target, eval(*expr), *frame);
      return exec_scoped(st.body, std::move(frame));
    }
    case StmtKind::kScope: {
      auto frame = std::make_shared<Frame>();
      frame->parent = current_;
      return exec_scoped(static_cast<const ScopeStmt&>(s).body, std::move(frame));
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& s) {
  run_loop(s, iterate(eval(*s.iter)), 1);
  return Flow::kNormal;
}

void Interpreter::run_loop(const ForStmt& s, std::vector<Value> items, int depth) {
  // Every iteration gets a fresh scope, so a `set` in the body does not outlive it (Jinja2).
  const std::shared_ptr<Frame> outer = current_;
  auto child = [&outer] {
    auto f = std::make_shared<Frame>();
    f->parent = outer;
    return f;
  };
  if (s.filter) {
    // `for x in xs if cond`: the condition sees the loop variables but not `loop`, and
    // loop.index/length count only the items that pass.
    std::vector<Value> kept;
    for (Value& item : items) {
      auto frame = child();
      assign(s.target, item, *frame);
      Restore<std::shared_ptr<Frame>> scope(current_, std::move(frame));
      if (eval(*s.filter).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_scoped(s.else_body, child());
    return;
  }
  auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
  auto loop = std::make_shared<LoopContext>(shared_items, depth, s.recursive ? &s : nullptr);
  const Value loop_value = Value::new_object(loop);
  for (size_t i = 0; i < shared_items->size(); ++i) {
    if (++iterations_ > options_.max_loop_iterations)
      eval_fail("loop iteration limit of {} exceeded", options_.max_loop_iterations);
    loop->set_index(i);
    auto frame = child();
    frame->vars.emplace_back("loop", loop_value);
    assign(s.target, (*shared_items)[i], *frame);
    if (exec_scoped(s.body, std::move(frame)) == Flow::kBreak) break;
  }
}

void Interpreter::assign(const Target& t, const Value& v, Frame& frame) {
  switch (t.kind) {
    case Target::Kind::kName:
      frame.set(t.name, v);
      return;
    case Target::Kind::kAttribute: {
      Value ns = lookup(t.name);
      if (!ns.is_object() || !ns.object().set_attr(t.attr, v))
        eval_fail("cannot assign attribute on non-namespace object");
      note_mutation(ns, v);
      return;
    }
    case Target::Kind::kTuple: {
      if (v.is_undefined()) eval_fail("{}", v.undefined_message());
      std::vector<Value> items = iterate(v);
      if (items.size() != t.items.size()) {
        if (items.size() > t.items.size()) eval_fail("too many values to unpack (expected {})", t.items.size());
        eval_fail("not enough values to unpack (expected {}, got {})", t.items.size(), items.size());
      }
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], frame);
      return;
    }
  }
}

void Interpreter::exec_set(const SetStmt& s) { assign(s.target, eval(*s.value), *current_); }

Value Interpreter::make_macro(const MacroStmt& m) {
  // The macro holds its defining scope weakly: that scope holds the macro, and a strong
  // reference both ways would never be freed. A macro that outlives its scope sees the root.
  std::weak_ptr<Frame> closure = current_;
  const MacroStmt* macro = &m;
  return Value::callable(
      m.name,
      [macro, closure](Interpreter& in, CallArgs& args) {
        std::shared_ptr<Frame> f = closure.lock();
        return in.call_macro(*macro, f ? f : in.root_, args);
      },
      true);
}

void Interpreter::exec_call_block(const CallBlockStmt& s) {
  Value caller = make_macro(*s.caller);
  Value r = eval_call(static_cast<const CallExpr&>(*s.call), &caller);
  append(r.is_string() ? r.str() : r.to_string());
}

Value Interpreter::call_macro(const MacroStmt& m, const std::shared_ptr<Frame>& closure, CallArgs& args) {
  if (call_depth_ >= options_.max_call_depth)
    eval_fail("maximum recursion depth exceeded ({} nested macro calls)", options_.max_call_depth);
  Restore<int> depth(call_depth_, call_depth_ + 1);
  auto frame = std::make_shared<Frame>();
  frame->parent = closure;
  // Defaults are evaluated in the macro's scope, so they can refer to earlier parameters.
  Restore<std::shared_ptr<Frame>> scope(current_, frame);
  size_t n = m.params.size();
  std::vector<bool> keyword_used(args.keyword.size(), false);
  for (size_t i = 0; i < n; ++i) {
    const Param& p = m.params[i];
    Value v;
    bool found = false;
    if (i < args.positional.size()) {
      v = args.positional[i];
      found = true;
    }
    for (size_t k = 0; k < args.keyword.size(); ++k) {
      if (args.keyword[k].first != p.name) continue;
      if (found) eval_fail("macro '{}' got multiple values for argument '{}'", m.name, p.name);
      v = args.keyword[k].second;
      keyword_used[k] = true;
      found = true;
    }
    if (!found) {
      v = p.default_value ? eval(*p.default_value) : Value::undefined(fmt::format("parameter '{}' was not provided", p.name));
    }
    frame->set(p.name, std::move(v));
  }
  // As in Jinja2, extra arguments are accepted only by macros that mention varargs/kwargs.
  std::vector<Value> extra;
  for (size_t i = n; i < args.positional.size(); ++i) extra.push_back(args.positional[i]);
  if (!extra.empty() && !m.uses_varargs)
    eval_fail("macro '{}' takes not more than {} argument(s)", m.name, n);
  if (m.uses_varargs) frame->set("varargs", Value::new_tuple(std::move(extra)));
  Dict kwargs;
  for (size_t k = 0; k < args.keyword.size(); ++k) {
    if (keyword_used[k]) continue;
    if (args.keyword[k].first == "caller" && m.uses_caller) {
      frame->set("caller", args.keyword[k].second);
      continue;
    }
    if (!m.uses_kwargs) eval_fail("macro '{}' takes no keyword argument '{}'", m.name, args.keyword[k].first);
    kwargs.set(Value::string(args.keyword[k].first), args.keyword[k].second);
  }
  if (m.uses_kwargs) frame->set("kwargs", Value::new_dict(std::move(kwargs)));
  if (m.uses_caller && !frame->find("caller")) frame->set("caller", Value::undefined("'caller' is undefined"));
  return Value::string(capture(m.body));
}

// ---- expressions ----

Value Interpreter::lookup(const std::string& name) {
  if (const Value* v = current_->find(name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Value Interpreter::eval(const Expr& e) {
  try {
    DepthGuard guard(*this);
    pos_ = e.pos;
    charge(1);
    return eval_inner(e);
  } catch (const EvalError& err) {
    throw TemplateRuntimeError(err.what(), e.pos.line, e.pos.column);
  }
}

CallArgs Interpreter::eval_args(const Arguments& a) {
  CallArgs args;
  args.positional.reserve(a.positional.size());
  for (const ExprPtr& p : a.positional) args.positional.push_back(eval(*p));
  for (const auto& [k, v] : a.keyword) args.keyword.emplace_back(k, eval(*v));
  if (a.star_args) {
    Value extra = eval(*a.star_args);
    for (Value& v : iterate(extra)) args.positional.push_back(std::move(v));
  }
  if (a.star_kwargs) {
    Value extra = eval(*a.star_kwargs);
    if (!extra.is_dict()) eval_fail("argument after ** must be a mapping, not {}", extra.type_name());
    for (const auto& [k, v] : extra.dict().entries()) {
      if (!k.is_string()) eval_fail("keywords must be strings");
      args.keyword.emplace_back(k.str(), v);
    }
  }
  return args;
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return static_cast<const LiteralExpr&>(e).value;
    case ExprKind::kList:
    case ExprKind::kTuple: {
      const auto& s = static_cast<const SequenceExpr&>(e);
      std::vector<Value> items;
      items.reserve(s.items.size());
      for (const ExprPtr& item : s.items) items.push_back(eval(*item));
      return e.kind == ExprKind::kList ? Value::new_list(std::move(items)) : Value::new_tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k);
        d.set(std::move(key), eval(*v));
      }
      return Value::new_dict(std::move(d));
    }
    case ExprKind::kName:
      return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::kGetAttr: {
      const auto& g = static_cast<const GetAttrExpr&>(e);
      return get_attr(eval(*g.object), g.attr);
    }
    case ExprKind::kGetItem: {
      const auto& g = static_cast<const GetItemExpr&>(e);
      Value obj = eval(*g.object);
      return get_item(obj, eval(*g.index));
    }
    case ExprKind::kSlice:
      return eval_slice(static_cast<const SliceExpr&>(e));
    case ExprKind::kCall:
      return eval_call(static_cast<const CallExpr&>(e), nullptr);
    case ExprKind::kFilter:
      return eval_filter(static_cast<const FilterExpr&>(e), nullptr);
    case ExprKind::kTest: {
      const auto& t = static_cast<const TestExpr&>(e);
      Value input = eval(*t.input);
      bool r = apply_test(t.name, input, eval_args(t.args));
      return Value::boolean(t.negated ? !r : r);
    }
    case ExprKind::kNot:
      return Value::boolean(!eval(*static_cast<const UnaryExpr&>(e).operand).truthy());
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = eval(*static_cast<const UnaryExpr&>(e).operand);
      bool neg = e.kind == ExprKind::kNeg;
      if (v.is_undefined()) eval_fail("{}", v.undefined_message());
      if (v.is_float()) return Value::number(neg ? -v.get_float() : v.get_float());
      if (v.is_int() || v.is_bool()) {
        int64_t i = v.get_int();
        if (neg && i == std::numeric_limits<int64_t>::min()) eval_fail("integer overflow");
        return Value::integer(neg ? -i : i);
      }
      eval_fail("bad operand type for unary {}: '{}'", neg ? "-" : "+", v.type_name());
    }
    case ExprKind::kAnd: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value l = eval(*b.left);
      return l.truthy() ? eval(*b.right) : l;
    }
    case ExprKind::kOr: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value l = eval(*b.left);
      return l.truthy() ? l : eval(*b.right);
    }
    case ExprKind::kBinary:
      return eval_binary(static_cast<const BinaryExpr&>(e));
    case ExprKind::kCompare:
      return eval_compare(static_cast<const CompareExpr&>(e));
    case ExprKind::kCondition: {
      const auto& c = static_cast<const ConditionExpr&>(e);
      if (eval(*c.test).truthy()) return eval(*c.then_expr);
      if (c.else_expr) return eval(*c.else_expr);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", e.pos.line));
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const ExprPtr& p : static_cast<const ConcatExpr&>(e).parts) {
        Value v = eval(*p);
        out += v.is_string() ? v.str() : v.to_string();
        check_bytes(out.size());
      }
      return Value::string(std::move(out));
    }
  }
  return Value();
}

Value Interpreter::eval_binary(const BinaryExpr& e) {
  Value a = eval(*e.left);
  Value b = eval(*e.right);
  return binary_op(*this, e.op, a, b);
}

Value Interpreter::eval_compare(const CompareExpr& e) {
  Value left = eval(*e.first);
  for (const auto& [op, expr] : e.rest) {
    Value right = eval(*expr);
    bool ok = false;
    switch (op) {
      case CompareOp::kEq: ok = equals(left, right); break;
      case CompareOp::kNe: ok = !equals(left, right); break;
      case CompareOp::kLt: ok = compare(left, right, "<") < 0; break;
      case CompareOp::kLe: ok = compare(left, right, "<=") <= 0; break;
      case CompareOp::kGt: ok = compare(left, right, ">") > 0; break;
      case CompareOp::kGe: ok = compare(left, right, ">=") >= 0; break;
      case CompareOp::kIn: ok = contains(right, left); break;
      case CompareOp::kNotIn: ok = !contains(right, left); break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_slice(const SliceExpr& e) {
  Value obj = eval(*e.object);
  Value start = e.start ? eval(*e.start) : Value::none();
  Value stop = e.stop ? eval(*e.stop) : Value::none();
  Value step = e.step ? eval(*e.step) : Value::none();
  return slice(obj, start, stop, step);
}

Value Interpreter::eval_call(const CallExpr& e, const Value* caller) {
  // obj.method(args) on str/list/dict calls the method directly, without a bound-method value.
  if (e.callee->kind == ExprKind::kGetAttr) {
    const auto& g = static_cast<const GetAttrExpr&>(*e.callee);
    Value obj = eval(*g.object);
    if ((obj.is_string() || obj.is_list() || obj.is_dict()) && has_method(obj, g.attr)) {
      CallArgs args = eval_args(e.args);
      if (caller) args.keyword.emplace_back("caller", *caller);
      return call_method(*this, obj, g.attr, args);
    }
    Value callee = get_attr(obj, g.attr);
    CallArgs args = eval_args(e.args);
    if (caller) args.keyword.emplace_back("caller", *caller);
    return call(callee, std::move(args));
  }
  Value callee = eval(*e.callee);
  CallArgs args = eval_args(e.args);
  if (caller) args.keyword.emplace_back("caller", *caller);
  return call(callee, std::move(args));
}

Value Interpreter::call(const Value& callee, CallArgs args) {
  if (callee.is_callable()) return callee.callable().fn(*this, args);
  if (callee.is_object() && callee.object().is_callable()) return callee.object().call(*this, args);
  if (callee.is_undefined()) eval_fail("{}", callee.undefined_message());
  eval_fail("'{}' object is not callable", callee.type_name());
}

Value Interpreter::eval_filter(const FilterExpr& e, const Value* block_input) {
  Value input;
  if (e.input) {
    input = e.input->kind == ExprKind::kFilter && block_input
                ? eval_filter(static_cast<const FilterExpr&>(*e.input), block_input)
                : eval(*e.input);
  } else if (block_input) {
    input = *block_input;
  }
  return apply_filter(e.name, input, eval_args(e.args));
}

Value Interpreter::apply_filter(std::string_view name, const Value& input, CallArgs args) {
  FilterFn f = find_filter(name);
  if (!f) eval_fail("no filter named '{}'", name);
  return f(*this, input, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& input, CallArgs args) {
  TestFn t = find_test(name);
  if (!t) eval_fail("no test named '{}'", name);
  return t(*this, input, args);
}

Value Interpreter::get_attr(const Value& obj, std::string_view name) { return jinja::get_attr(obj, name); }

Value Interpreter::get_item(const Value& obj, const Value& key) { return jinja::get_item(obj, key); }

}  // namespace strata::jinja
