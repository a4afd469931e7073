// Walks a parsed template and produces its output: scopes (a fresh scope per loop iteration,
// macro call and with-block, as in Jinja2), Jinja's attribute and item lookup rules, Python
// operator semantics, macros with caller(), loop controls, and the limits of RenderOptions.
// Filters, tests, methods and globals live in their own files and call back into the
// Interpreter for what they need (calling values, applying other filters or tests, limits).
// Thread-safety: one Interpreter per render, used by one thread.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace strata::jinja {

// Variables of one scope; lookups walk to the parent.
struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);
};

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body` with the given variables. Throws RaiseException and TemplateRuntimeError as
  // Template::render documents.
  std::string render(const Body& body, const Template::Variables& variables);

  // ---- services for filters, tests, methods and globals ----
  const RenderOptions& options() const { return options_; }
  // Calls a callable value (macro, global, bound method, recursive loop).
  Value call(const Value& callee, CallArgs args);
  Value apply_filter(std::string_view name, const Value& input, CallArgs args);
  bool apply_test(std::string_view name, const Value& input, CallArgs args);
  // Jinja2's environment.getattr / getitem: attribute first or item first, undefined (with
  // Jinja's hint) when missing; strict failure when `obj` itself is undefined.
  Value get_attr(const Value& obj, std::string_view name);
  Value get_item(const Value& obj, const Value& key);
  // Accounts work against max_steps.
  void charge(uint64_t steps);
  // Fail when a string (bytes) or list/dict (items) about to be built would exceed the limits;
  // charge their size against max_steps.
  void check_bytes(size_t bytes);
  void check_items(size_t items);
  // Records that `container` now holds another container, so that reference cycles built by
  // templates (a list appended to itself) are broken when the render ends.
  void note_mutation(const Value& container, const Value& inserted);
  // The position of the expression being evaluated (for raise_exception).
  SourcePos position() const { return pos_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  class LoopContext;
  class DepthGuard;

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_inner(const Stmt& s);
  Flow exec_for(const ForStmt& s);
  void run_loop(const ForStmt& s, std::vector<Value> items, int depth);
  void exec_set(const SetStmt& s);
  Value make_macro(const MacroStmt& m);
  void exec_call_block(const CallBlockStmt& s);
  void assign(const Target& t, const Value& v, Frame& frame);
  // Renders `body` into a string of its own / in the scope `frame`.
  std::string capture(const Body& body);
  Flow exec_scoped(const Body& body, std::shared_ptr<Frame> frame);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_call(const CallExpr& e, const Value* caller);
  Value eval_filter(const FilterExpr& e, const Value* block_input);
  Value eval_binary(const BinaryExpr& e);
  Value eval_compare(const CompareExpr& e);
  Value eval_slice(const SliceExpr& e);
  CallArgs eval_args(const Arguments& a);
  Value lookup(const std::string& name);
  Value call_macro(const MacroStmt& m, const std::shared_ptr<Frame>& closure, CallArgs& args);

  void append(std::string_view s);

  const RenderOptions& options_;
  std::shared_ptr<Frame> globals_;
  std::shared_ptr<Frame> root_;
  std::shared_ptr<Frame> current_;
  std::string* out_ = nullptr;
  SourcePos pos_;
  uint64_t steps_ = 0;
  uint64_t iterations_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  // Containers that were mutated to hold other containers (see note_mutation).
  std::vector<std::pair<std::weak_ptr<void>, ValueKind>> mutated_;
  size_t mutated_compact_at_ = 1024;
};

}  // namespace strata::jinja
