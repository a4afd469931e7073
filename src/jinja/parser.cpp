#include "jinja/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "jinja/template_error.h"

namespace strata::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText: return "template text";
    case TokenKind::kVariableBegin: return "begin of print statement";
    case TokenKind::kVariableEnd: return "end of print statement";
    case TokenKind::kBlockBegin: return "begin of statement block";
    case TokenKind::kBlockEnd: return "end of statement block";
    case TokenKind::kString: return "string";
    case TokenKind::kInteger: return "integer";
    case TokenKind::kFloat: return "float";
    case TokenKind::kEnd: return "end of template";
    default: return t.text;
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  Body run() {
    Body body = parse_body({});
    if (cur().kind != TokenKind::kEnd) fail_at(cur(), fmt::format("unexpected '{}'", describe(cur())));
    return body;
  }

 private:
  // Limits how deep the tree gets. A guard holds the levels entered through it for its lifetime.
  // Nesting (brackets, prefix operators, nested blocks) costs a dozen native frames per level
  // while parsing, so it has the tighter limit; each link of an operator chain (a + b + c) makes
  // the tree one level deeper but costs the parser nothing, so chains get a limit of their own.
  class DepthGuard {
   public:
    enum Kind { kNesting, kChain };
    explicit DepthGuard(Parser& p, int levels = 1, Kind kind = kNesting) : p_(p), kind_(kind) {
      for (int i = 0; i < levels; ++i) enter();
    }
    ~DepthGuard() { counter() -= levels_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    void enter() {
      ++levels_;
      int limit = kind_ == kNesting ? kMaxParseDepth : kMaxChainLength;
      if (++counter() > limit)
        p_.fail_at(p_.cur(), kind_ == kNesting
                                 ? fmt::format("template nested too deeply (more than {} levels)", limit)
                                 : fmt::format("expression too long (more than {} chained operations)", limit));
    }

   private:
    int& counter() { return kind_ == kNesting ? p_.depth_ : p_.chain_; }
    Parser& p_;
    Kind kind_;
    int levels_ = 0;
  };

  const Token& cur() const { return toks_[std::min(pos_, toks_.size() - 1)]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = cur();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  static SourcePos pos_of(const Token& t) { return {t.line, t.column}; }

  [[noreturn]] void fail_at(const Token& t, const std::string& message) const {
    throw TemplateSyntaxError(message, t.line, t.column);
  }

  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  const Token& expect_op(std::string_view op) {
    if (!is_op(op)) fail_at(cur(), fmt::format("expected '{}', got '{}'", op, describe(cur())));
    return next();
  }
  const Token& expect_name() {
    if (cur().kind != TokenKind::kName) fail_at(cur(), fmt::format("expected a name, got '{}'", describe(cur())));
    return next();
  }
  void expect_name(std::string_view name) {
    if (!is_name(name)) fail_at(cur(), fmt::format("expected '{}', got '{}'", name, describe(cur())));
    next();
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd)
      fail_at(cur(), fmt::format("expected end of statement block, got '{}'", describe(cur())));
    next();
  }

  // ---- statements ----

  // Parses until a {% name %} with name in `ends` (left unconsumed, positioned at the name) or
  // the end of the template (an error when `ends` is not empty).
  Body parse_body(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        std::string want;
        for (std::string_view e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
        fail_at(t, fmt::format("unexpected end of template, expected {}", want));
      }
      if (t.kind == TokenKind::kText) {
        body.push_back(std::make_unique<TextStmt>(pos_of(t), t.text));
        next();
      } else if (t.kind == TokenKind::kVariableBegin) {
        next();
        ExprPtr e = parse_tuple(true, {});
        if (cur().kind != TokenKind::kVariableEnd)
          fail_at(cur(), fmt::format("expected end of print statement, got '{}'", describe(cur())));
        next();
        body.push_back(std::make_unique<ExprStmt>(StmtKind::kPrint, pos_of(t), std::move(e)));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& name = peek();
        if (name.kind == TokenKind::kName &&
            std::find(ends.begin(), ends.end(), std::string_view(name.text)) != ends.end()) {
          next();  // leave the stream at the end tag's name
          return body;
        }
        next();
        body.push_back(parse_statement(ends));
      } else {
        fail_at(t, fmt::format("unexpected '{}'", describe(t)));
      }
    }
  }

  // After a statement header: `%}`, the body up to one of `ends`, and the end tag's name.
  Body parse_statements(std::initializer_list<std::string_view> ends, bool drop_end) {
    expect_block_end();
    Body body = parse_body(ends);
    if (drop_end) next();
    return body;
  }

  StmtPtr parse_statement(std::initializer_list<std::string_view> enclosing_ends) {
    DepthGuard guard(*this);
    const Token& t = cur();
    if (t.kind != TokenKind::kName) fail_at(t, "tag name expected");
    const std::string& n = t.text;
    StmtPtr s;
    if (n == "if") {
      s = parse_if();
    } else if (n == "for") {
      s = parse_for();
    } else if (n == "set") {
      s = parse_set();
    } else if (n == "macro") {
      s = parse_macro();
    } else if (n == "call") {
      s = parse_call_block();
    } else if (n == "filter") {
      s = parse_filter_block();
    } else if (n == "with") {
      s = parse_with();
    } else if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_at(t, fmt::format("'{}' outside of a loop", n));
      next();
      s = std::make_unique<Stmt>(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos_of(t));
    } else if (n == "do") {
      next();
      s = std::make_unique<ExprStmt>(StmtKind::kDo, pos_of(t), parse_tuple(true, {}));
    } else if (n == "generation" || n == "block") {
      // {% generation %} is Hugging Face's assistant-mask marker and {% block %} without
      // inheritance renders in place: both just render their body.
      next();
      std::string end = "end" + n;
      if (n == "block") expect_name();
      auto scope = std::make_unique<ScopeStmt>(pos_of(t));
      expect_block_end();
      scope->body = parse_body({end});
      next();
      if (n == "block" && cur().kind == TokenKind::kName) next();
      s = std::move(scope);
    } else if (n == "include" || n == "import" || n == "from" || n == "extends") {
      fail_at(t, fmt::format("the '{}' tag is not supported: chat templates must be self-contained", n));
    } else {
      std::string msg = fmt::format("encountered unknown tag '{}'", n);
      if (enclosing_ends.size() != 0) {
        std::string want;
        for (std::string_view e : enclosing_ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
        msg += fmt::format("; expected {}", want);
      }
      fail_at(t, msg);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<IfStmt>(pos_of(next()));
    while (true) {
      ExprPtr cond = parse_tuple(false, {});
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(cond), std::move(body));
      const Token& end = next();
      if (end.text == "elif") continue;
      if (end.text == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<ForStmt>(pos_of(next()));
    s->target = parse_target(false, {"in"});
    expect_name("in");
    s->iter = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->filter = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_set() {
    const Token& t = next();
    Target target = parse_target(true, {});
    if (skip_op("=")) {
      auto s = std::make_unique<SetStmt>(pos_of(t));
      s->target = std::move(target);
      s->value = parse_tuple(true, {});
      return s;
    }
    auto s = std::make_unique<SetBlockStmt>(pos_of(t));
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  std::vector<Param> parse_signature() {
    std::vector<Param> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name().text;
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
      } else if (!params.empty() && params.back().default_value) {
        fail_at(cur(), "non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<MacroStmt>(pos_of(next()));
    s->name = expect_name().text;
    s->params = parse_signature();
    macros_.push_back(s.get());
    int saved_loops = loop_depth_;
    loop_depth_ = 0;  // a loop around the macro definition does not reach into its body
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved_loops;
    macros_.pop_back();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = std::make_unique<CallBlockStmt>(pos_of(next()));
    s->caller = std::make_unique<MacroStmt>(s->pos);
    s->caller->name = "caller";
    if (is_op("(")) s->caller->params = parse_signature();
    const Token& at = cur();
    s->call = parse_expression(true);
    if (s->call->kind != ExprKind::kCall) fail_at(at, "expected a call after 'call'");
    macros_.push_back(s->caller.get());
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->caller->body = parse_statements({"endcall"}, true);
    loop_depth_ = saved_loops;
    macros_.pop_back();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<FilterBlockStmt>(pos_of(next()));
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<WithStmt>(pos_of(next()));
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      Target t = parse_target(false, {});
      expect_op("=");
      s->assignments.emplace_back(std::move(t), parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // Assignment targets: name, ns.attr (set only), or a tuple of names (optionally parenthesized).
  Target parse_target(bool with_namespace, std::initializer_list<std::string_view> extra_ends) {
    const Token& t = cur();
    if (with_namespace && t.kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == ".") {
      Target target;
      target.kind = Target::Kind::kAttribute;
      target.pos = pos_of(t);
      target.name = next().text;
      next();
      target.attr = expect_name().text;
      return target;
    }
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.pos = pos_of(t);
    bool is_tuple = false;
    while (true) {
      if (!tuple.items.empty()) expect_op(",");
      if (cur().kind == TokenKind::kBlockEnd || is_op("=") || is_op(")") ||
          (cur().kind == TokenKind::kName &&
           std::find(extra_ends.begin(), extra_ends.end(), std::string_view(cur().text)) != extra_ends.end()))
        break;
      tuple.items.push_back(parse_target_primary());
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (tuple.items.empty()) fail_at(cur(), fmt::format("expected an assignment target, got '{}'", describe(cur())));
    if (!is_tuple) return std::move(tuple.items[0]);
    return tuple;
  }

  Target parse_target_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    if (skip_op("(")) {
      Target inner = parse_target(false, {});
      expect_op(")");
      return inner;
    }
    if (t.kind != TokenKind::kName) fail_at(t, fmt::format("can't assign to '{}'", describe(t)));
    static constexpr std::string_view kConstants[] = {"true", "false", "none", "True", "False", "None"};
    if (std::find(std::begin(kConstants), std::end(kConstants), std::string_view(t.text)) != std::end(kConstants))
      fail_at(t, fmt::format("can't assign to constant '{}'", t.text));
    Target target;
    target.kind = Target::Kind::kName;
    target.pos = pos_of(t);
    target.name = next().text;
    return target;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<std::string_view> extra_ends) const {
    const Token& t = cur();
    if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd || (t.kind == TokenKind::kOperator && t.text == ")"))
      return true;
    return t.kind == TokenKind::kName &&
           std::find(extra_ends.begin(), extra_ends.end(), std::string_view(t.text)) != extra_ends.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
                      bool explicit_parens = false) {
    const Token& start = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_ends)) break;
      items.push_back(parse_expression(with_condexpr));
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_at(cur(), fmt::format("expected an expression, got '{}'", describe(cur())));
    }
    auto t = std::make_unique<SequenceExpr>(ExprKind::kTuple, pos_of(start));
    t->items = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this, 0, DepthGuard::kChain);
    SourcePos p = pos_of(cur());
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      guard.enter();
      auto c = std::make_unique<ConditionExpr>(p);
      c->then_expr = std::move(expr);
      c->test = parse_or();
      if (skip_name("else")) c->else_expr = parse_condexpr();
      expr = std::move(c);
      p = pos_of(cur());
    }
    return expr;
  }

  ExprPtr parse_or() {
    DepthGuard guard(*this, 0, DepthGuard::kChain);
    ExprPtr left = parse_and();
    while (is_name("or")) {
      guard.enter();
      SourcePos p = pos_of(next());
      left = std::make_unique<BinaryExpr>(ExprKind::kOr, p, BinaryOp::kAdd, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    DepthGuard guard(*this, 0, DepthGuard::kChain);
    ExprPtr left = parse_not();
    while (is_name("and")) {
      guard.enter();
      SourcePos p = pos_of(next());
      left = std::make_unique<BinaryExpr>(ExprKind::kAnd, p, BinaryOp::kAdd, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      SourcePos p = pos_of(next());
      return std::make_unique<UnaryExpr>(ExprKind::kNot, p, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourcePos p = pos_of(cur());
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      CompareOp op;
      const Token& t = cur();
      if (t.kind == TokenKind::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" ||
                                             t.text == ">" || t.text == ">=")) {
        op = t.text == "==" ? CompareOp::kEq
             : t.text == "!=" ? CompareOp::kNe
             : t.text == "<"  ? CompareOp::kLt
             : t.text == "<=" ? CompareOp::kLe
             : t.text == ">"  ? CompareOp::kGt
                              : CompareOp::kGe;
        next();
      } else if (is_name("in")) {
        op = CompareOp::kIn;
        next();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = CompareOp::kNotIn;
        next();
        next();
      } else {
        break;
      }
      if (!cmp) cmp = std::make_unique<CompareExpr>(p, std::move(first));
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (!cmp) return first;
    return cmp;
  }

  ExprPtr binary(BinaryOp op, SourcePos p, ExprPtr l, ExprPtr r) {
    return std::make_unique<BinaryExpr>(ExprKind::kBinary, p, op, std::move(l), std::move(r));
  }

  ExprPtr parse_math1() {
    DepthGuard guard(*this, 0, DepthGuard::kChain);
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      guard.enter();
      const Token& t = next();
      BinaryOp op = t.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = binary(op, pos_of(t), std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    SourcePos p = pos_of(cur());
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = std::make_unique<ConcatExpr>(p);  // flat: a long chain does not nest
    c->parts.push_back(std::move(first));
    while (skip_op("~")) c->parts.push_back(parse_math2());
    return c;
  }

  ExprPtr parse_math2() {
    DepthGuard guard(*this, 0, DepthGuard::kChain);
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      guard.enter();
      const Token& t = next();
      BinaryOp op = t.text == "*" ? BinaryOp::kMul : t.text == "/" ? BinaryOp::kDiv : t.text == "//" ? BinaryOp::kFloorDiv : BinaryOp::kMod;
      left = binary(op, pos_of(t), std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    DepthGuard guard(*this, 0, DepthGuard::kChain);
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      guard.enter();
      const Token& t = next();
      left = binary(BinaryOp::kPow, pos_of(t), std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, 0);
    const Token& t = cur();
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      guard.enter();
      next();
      node = std::make_unique<UnaryExpr>(t.text == "-" ? ExprKind::kNeg : ExprKind::kPos, pos_of(t), parse_unary(false));
    } else {
      node = parse_primary();
    }
    DepthGuard links(*this, 0, DepthGuard::kChain);
    node = parse_postfix(std::move(node), links);
    if (with_filter) node = parse_filter_expr(std::move(node), links);
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this, 0);
    const Token& t = cur();
    SourcePos p = pos_of(t);
    switch (t.kind) {
      case TokenKind::kName: {
        next();
        if (t.text == "true" || t.text == "True") return std::make_unique<LiteralExpr>(p, Value::boolean(true));
        if (t.text == "false" || t.text == "False") return std::make_unique<LiteralExpr>(p, Value::boolean(false));
        if (t.text == "none" || t.text == "None") return std::make_unique<LiteralExpr>(p, Value::none());
        if (t.text == "varargs" || t.text == "kwargs" || t.text == "caller") {
          for (MacroStmt* m : macros_) {
            if (t.text == "varargs") m->uses_varargs = true;
            if (t.text == "kwargs") m->uses_kwargs = true;
            if (t.text == "caller") m->uses_caller = true;
          }
        }
        return std::make_unique<NameExpr>(p, t.text);
      }
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) s += next().text;  // adjacent literals concatenate
        return std::make_unique<LiteralExpr>(p, Value::string(std::move(s)));
      }
      case TokenKind::kInteger:
        next();
        return std::make_unique<LiteralExpr>(p, Value::integer(t.int_value));
      case TokenKind::kFloat:
        next();
        return std::make_unique<LiteralExpr>(p, Value::number(t.float_value));
      case TokenKind::kOperator:
        if (t.text == "(" || t.text == "[" || t.text == "{") guard.enter();
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail_at(t, fmt::format("unexpected '{}'", describe(t)));
  }

  ExprPtr parse_list() {
    auto l = std::make_unique<SequenceExpr>(ExprKind::kList, pos_of(next()));
    while (!is_op("]")) {
      if (!l->items.empty()) expect_op(",");
      if (is_op("]")) break;
      l->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return l;
  }

  ExprPtr parse_dict() {
    auto d = std::make_unique<DictExpr>(pos_of(next()));
    while (!is_op("}")) {
      if (!d->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      d->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return d;
  }

  ExprPtr parse_postfix(ExprPtr node, DepthGuard& guard) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        guard.enter();
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        guard.enter();
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node, DepthGuard& guard) {
    while (true) {
      if (is_op("|")) {
        guard.enter();
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        guard.enter();
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        guard.enter();
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    SourcePos p = pos_of(t);
    if (t.text == ".") {
      const Token& attr = next();
      if (attr.kind == TokenKind::kName) return std::make_unique<GetAttrExpr>(p, std::move(node), attr.text);
      if (attr.kind == TokenKind::kInteger)
        return std::make_unique<GetItemExpr>(p, std::move(node),
                                             std::make_unique<LiteralExpr>(pos_of(attr), Value::integer(attr.int_value)));
      fail_at(attr, "expected name or number after '.'");
    }
    std::vector<ExprPtr> args;
    std::unique_ptr<SliceExpr> slice;
    while (!is_op("]")) {
      if (!args.empty() || slice) expect_op(",");
      ExprPtr first;
      if (!is_op(":")) first = parse_expression(true);
      if (!is_op(":")) {
        if (slice) fail_at(cur(), "a slice cannot be combined with other subscripts");
        args.push_back(std::move(first));
        continue;
      }
      if (slice || !args.empty()) fail_at(cur(), "a slice cannot be combined with other subscripts");
      next();  // ':'
      slice = std::make_unique<SliceExpr>(p, nullptr);
      slice->start = std::move(first);
      if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression(true);
      if (skip_op(":")) {
        if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
      }
    }
    expect_op("]");
    if (slice) {
      slice->object = std::move(node);
      return slice;
    }
    ExprPtr index;  // x[] is x[()] in Jinja2
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      auto tup = std::make_unique<SequenceExpr>(ExprKind::kTuple, p);
      tup->items = std::move(args);
      index = std::move(tup);
    }
    return std::make_unique<GetItemExpr>(p, std::move(node), std::move(index));
  }

  Arguments parse_call_args() {
    const Token& open = expect_op("(");
    Arguments a;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_at(open, "invalid syntax for function call expression");
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        ensure(!a.star_args && !a.star_kwargs);
        a.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!a.star_kwargs);
        a.star_kwargs = parse_expression(true);
      } else if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        ensure(!a.star_kwargs);
        std::string key = next().text;
        next();
        a.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!a.star_args && !a.star_kwargs && a.keyword.empty());
        a.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = std::make_unique<CallExpr>(pos_of(cur()), std::move(callee));
    c->args = parse_call_args();
    return c;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name().text;
    while (skip_op(".")) name += "." + expect_name().text;
    return name;
  }

  // `| name(args) | name ...`; `start_inline` when the first '|' is implicit ({% filter %}).
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    DepthGuard guard(*this, 0, DepthGuard::kChain);
    while (is_op("|") || start_inline) {
      guard.enter();
      if (!start_inline) next();
      start_inline = false;
      SourcePos p = pos_of(cur());
      auto f = std::make_unique<FilterExpr>(p, std::move(node), parse_dotted_name());
      if (is_op("(")) f->args = parse_call_args();
      node = std::move(f);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    SourcePos p = pos_of(next());  // 'is'
    bool negated = skip_name("not");
    auto t = std::make_unique<TestExpr>(p, std::move(node), parse_dotted_name(), negated);
    const Token& c = cur();
    if (is_op("(")) {
      t->args = parse_call_args();
    } else if ((c.kind == TokenKind::kName || c.kind == TokenKind::kString || c.kind == TokenKind::kInteger ||
                c.kind == TokenKind::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_at(c, "you cannot chain multiple tests with is");
      DepthGuard guard(*this, 0, DepthGuard::kChain);
      ExprPtr arg = parse_primary();
      arg = parse_postfix(std::move(arg), guard);
      t->args.positional.push_back(std::move(arg));
    }
    return t;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;  // nesting levels held by DepthGuards
  int chain_ = 0;  // chain links held by DepthGuards
  int loop_depth_ = 0;
  std::vector<MacroStmt*> macros_;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace strata::jinja
