// The syntax tree of a parsed Jinja template: expressions (Expr) and statements (Stmt), each
// with the source position it came from (for error messages). Built by jinja_parser, walked by
// jinja_interpreter; never changed after parsing, so one tree can be rendered by many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace strata::jinja {

struct SourcePos {
  uint32_t line = 0;
  uint32_t column = 0;
};

// ---- expressions ----

enum class ExprKind : uint8_t {
  kLiteral,    // constant None/bool/int/float/str
  kList,       // [a, b]
  kTuple,      // (a, b) or a, b
  kDict,       // {k: v}
  kName,       // variable
  kGetAttr,    // obj.name
  kGetItem,    // obj[index]
  kSlice,      // obj[start:stop:step]
  kCall,       // f(args)
  kFilter,     // value | name(args)
  kTest,       // value is [not] name(args)
  kNot,        // not x
  kNeg,        // -x
  kPos,        // +x
  kBinary,     // + - * / // % **
  kAnd,
  kOr,
  kCompare,    // a == b < c ..., in, not in
  kCondition,  // a if b else c
  kConcat,     // a ~ b ~ c
};

struct Expr {
  explicit Expr(ExprKind k, SourcePos p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  SourcePos pos;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *list
  ExprPtr star_kwargs;  // **dict
};

struct LiteralExpr : Expr {
  LiteralExpr(SourcePos p, Value v) : Expr(ExprKind::kLiteral, p), value(std::move(v)) {}
  Value value;  // never a container, so sharing it between renders is safe
};

struct SequenceExpr : Expr {  // kList or kTuple
  using Expr::Expr;
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(SourcePos p) : Expr(ExprKind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct NameExpr : Expr {
  NameExpr(SourcePos p, std::string n) : Expr(ExprKind::kName, p), name(std::move(n)) {}
  std::string name;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(SourcePos p, ExprPtr o, std::string a) : Expr(ExprKind::kGetAttr, p), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct GetItemExpr : Expr {
  GetItemExpr(SourcePos p, ExprPtr o, ExprPtr i) : Expr(ExprKind::kGetItem, p), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};

struct SliceExpr : Expr {
  SliceExpr(SourcePos p, ExprPtr o) : Expr(ExprKind::kSlice, p), object(std::move(o)) {}
  ExprPtr object;
  ExprPtr start, stop, step;  // each may be null
};

struct CallExpr : Expr {
  CallExpr(SourcePos p, ExprPtr c) : Expr(ExprKind::kCall, p), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

struct FilterExpr : Expr {
  FilterExpr(SourcePos p, ExprPtr in, std::string n) : Expr(ExprKind::kFilter, p), input(std::move(in)), name(std::move(n)) {}
  ExprPtr input;  // null for the first filter of a {% filter %} block or {% set x | f %}
  std::string name;
  Arguments args;
};

struct TestExpr : Expr {
  TestExpr(SourcePos p, ExprPtr in, std::string n, bool neg)
      : Expr(ExprKind::kTest, p), input(std::move(in)), name(std::move(n)), negated(neg) {}
  ExprPtr input;
  std::string name;
  Arguments args;
  bool negated;
};

struct UnaryExpr : Expr {  // kNot, kNeg, kPos
  UnaryExpr(ExprKind k, SourcePos p, ExprPtr o) : Expr(k, p), operand(std::move(o)) {}
  ExprPtr operand;
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };

struct BinaryExpr : Expr {  // kBinary, kAnd, kOr
  BinaryExpr(ExprKind k, SourcePos p, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(k, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left, right;
};

enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct CompareExpr : Expr {
  CompareExpr(SourcePos p, ExprPtr f) : Expr(ExprKind::kCompare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct ConditionExpr : Expr {
  explicit ConditionExpr(SourcePos p) : Expr(ExprKind::kCondition, p) {}
  ExprPtr test, then_expr, else_expr;  // else_expr may be null (gives undefined)
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(SourcePos p) : Expr(ExprKind::kConcat, p) {}
  std::vector<ExprPtr> parts;
};

// ---- statements ----

enum class StmtKind : uint8_t {
  kText,         // literal template text
  kPrint,        // {{ expr }}
  kIf,
  kFor,
  kSet,          // {% set target = expr %}
  kSetBlock,     // {% set target %}...{% endset %}
  kMacro,
  kCallBlock,    // {% call macro(...) %}...{% endcall %}
  kFilterBlock,  // {% filter f %}...{% endfilter %}
  kWith,
  kBreak,
  kContinue,
  kDo,           // {% do expr %}
  kScope,        // {% generation %}, {% block %}: a body rendered in place
};

struct Stmt {
  Stmt(StmtKind k, SourcePos p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  SourcePos pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// What `set`, `for` and `with` assign to: a name, a tuple of targets, or namespace.attr.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kAttribute } kind = Kind::kName;
  std::string name;         // kName, kAttribute (the namespace variable)
  std::string attr;         // kAttribute
  std::vector<Target> items;  // kTuple
  SourcePos pos;
};

struct TextStmt : Stmt {
  TextStmt(SourcePos p, std::string t) : Stmt(StmtKind::kText, p), text(std::move(t)) {}
  std::string text;
};

struct ExprStmt : Stmt {  // kPrint, kDo
  ExprStmt(StmtKind k, SourcePos p, ExprPtr e) : Stmt(k, p), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(SourcePos p) : Stmt(StmtKind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(SourcePos p) : Stmt(StmtKind::kFor, p) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in xs if cond`; may be null
  Body body;
  Body else_body;
  bool recursive = false;
};

struct SetStmt : Stmt {
  explicit SetStmt(SourcePos p) : Stmt(StmtKind::kSet, p) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(SourcePos p) : Stmt(StmtKind::kSetBlock, p) {}
  Target target;
  ExprPtr filter;  // FilterExpr chain whose innermost input is null; may be null
  Body body;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroStmt : Stmt {
  explicit MacroStmt(SourcePos p) : Stmt(StmtKind::kMacro, p) {}
  std::string name;
  std::vector<Param> params;
  Body body;
  // Whether the body mentions these names; as in Jinja2 that decides whether extra
  // positional/keyword arguments are accepted.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(SourcePos p) : Stmt(StmtKind::kCallBlock, p) {}
  std::unique_ptr<MacroStmt> caller;  // the body, as the macro `caller` the called macro may call
  ExprPtr call;                       // a CallExpr
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(SourcePos p) : Stmt(StmtKind::kFilterBlock, p) {}
  ExprPtr filter;  // FilterExpr chain whose innermost input is null
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(SourcePos p) : Stmt(StmtKind::kWith, p) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct ScopeStmt : Stmt {
  explicit ScopeStmt(SourcePos p) : Stmt(StmtKind::kScope, p) {}
  Body body;
};

}  // namespace strata::jinja
