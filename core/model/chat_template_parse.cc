// Parser of the chat-template Jinja subset (core/model/chat_template.h), after jinja2 3.1's parser.py: the same
// operator precedence, with `is` tests and `|` filters binding tighter than arithmetic. Recursion is bounded
// (kMaxNesting, kMaxExprDepth) because the source comes from a model file.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/model/chat_template_internal.h"

namespace frost::chat_template_internal {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Recursive descent over the token list. Every function returns null after recording the first error.
class Parser {
 public:
  explicit Parser(const Lexed& lexed) : lx_(lexed), toks_(lexed.tokens) {}

  absl::StatusOr<std::shared_ptr<const Template>> run() {
    auto t = std::make_shared<Template>();
    std::string end;
    parse_body(&t->body, {}, &end);
    if (!err_.ok()) return err_;
    return std::shared_ptr<const Template>(std::move(t));
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  bool at_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool at_name(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  int line_of(const Token& t) const {
    int line, col;
    lx_.line_col(t.offset, &line, &col);
    return line;
  }

  std::nullptr_t fail(const Token& at, absl::string_view what) {
    if (err_.ok()) err_ = lx_.error(at.offset, what);
    return nullptr;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::kEof: return "end of template";
      case Tok::kBlockEnd: return "end of block tag";
      case Tok::kVarEnd: return "end of expression";
      case Tok::kString: return "string literal";
      default: return absl::StrCat("'", t.text, "'");
    }
  }
  bool expect_op(const char* op) {
    if (at_op(op)) {
      ++pos_;
      return true;
    }
    fail(cur(), absl::StrCat("expected '", op, "', got ", describe(cur())));
    return false;
  }
  bool expect(Tok type, const char* what) {
    if (cur().type == type) {
      ++pos_;
      return true;
    }
    fail(cur(), absl::StrCat("expected ", what, ", got ", describe(cur())));
    return false;
  }

  // RAII nesting counter for recursive productions.
  struct Nest {
    Parser* p;
    bool ok;
    explicit Nest(Parser* parser) : p(parser), ok(++parser->nesting_ <= kMaxNesting) {
      if (!ok) p->fail(p->cur(), absl::StrCat("nesting deeper than ", kMaxNesting, " levels"));
    }
    ~Nest() { --p->nesting_; }
  };

  ExprPtr make(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line_of(at);
    return e;
  }
  // Sets e->depth from its children; refuses trees deeper than kMaxExprDepth (the renderer recurses on them).
  ExprPtr finish(ExprPtr e, const Token& at) {
    if (!e) return nullptr;
    int d = 0;
    for (const auto& a : e->args)
      if (a) d = std::max(d, a->depth);
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) return fail(at, absl::StrCat("expression nests deeper than ", kMaxExprDepth));
    return e;
  }

  // ---- statements ----
  // Parses until EOF or a block tag whose name is in `ends`; *end receives that name ("" at EOF), with the
  // cursor just after the name.
  void parse_body(Body* body, const std::set<std::string>& ends, std::string* end) {
    Nest nest(this);
    if (!nest.ok) return;
    while (err_.ok()) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        *end = "";
        return;
      }
      if (t.type == Tok::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->text = t.text;
        body->push_back(std::move(s));
        ++pos_;
      } else if (t.type == Tok::kVarBegin) {
        ++pos_;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = line_of(t);
        s->expr = parse_expression();
        if (!s->expr || !expect(Tok::kVarEnd, "'}}'")) return;
        body->push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        ++pos_;
        const Token& name = cur();
        if (name.type != Tok::kName) {
          fail(name, absl::StrCat("expected a tag name, got ", describe(name)));
          return;
        }
        if (ends.count(name.text)) {
          ++pos_;
          *end = name.text;
          return;
        }
        std::unique_ptr<Stmt> s = parse_statement(t);
        if (!s) return;
        body->push_back(std::move(s));
      } else {
        fail(t, absl::StrCat("unexpected ", describe(t)));
        return;
      }
    }
  }

  // Parses a body that must close with one of `ends`; fails naming the opening tag otherwise.
  bool parse_closed(Body* body, const std::set<std::string>& ends, const Token& open, const char* what,
                    std::string* end) {
    parse_body(body, ends, end);
    if (!err_.ok()) return false;
    if (end->empty()) {
      fail(open, absl::StrCat("'", what, "' block is never closed (expected '", *ends.rbegin(), "')"));
      return false;
    }
    return true;
  }

  std::unique_ptr<Stmt> parse_statement(const Token& open) {
    const std::string tag = cur().text;
    ++pos_;
    auto s = std::make_unique<Stmt>();
    s->line = line_of(open);
    if (tag == "if") return parse_if(std::move(s), open);
    if (tag == "for") return parse_for(std::move(s), open);
    if (tag == "set") return parse_set(std::move(s));
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return fail(open, absl::StrCat("'", tag, "' outside a for loop"));
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
      return s;
    }
    if (tag == "generation") {  // transformers' AssistantTracker tag: renders its body unchanged
      s->kind = StmtKind::kBlock;
      if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
      std::string end;
      if (!parse_closed(&s->body, {"endgeneration"}, open, "generation", &end)) return nullptr;
      if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
      return s;
    }
    return fail(open, absl::StrCat("unsupported tag '", tag, "'"));
  }

  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s, const Token& open) {
    s->kind = StmtKind::kIf;
    for (;;) {
      ExprPtr cond = parse_expression();
      if (!cond || !expect(Tok::kBlockEnd, "'%}'")) return nullptr;
      Body body;
      std::string end;
      if (!parse_closed(&body, {"elif", "else", "endif"}, open, "if", &end)) return nullptr;
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
        if (!parse_closed(&s->else_body, {"endif"}, open, "if", &end)) return nullptr;
      }
      if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
      return s;
    }
  }

  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s, const Token& open) {
    s->kind = StmtKind::kFor;
    bool paren = at_op("(");
    if (paren) ++pos_;
    do {
      if (cur().type != Tok::kName) return fail(cur(), absl::StrCat("expected a loop variable, got ", describe(cur())));
      s->targets.push_back(cur().text);
      ++pos_;
    } while (at_op(",") && (++pos_, true));
    if (paren && !expect_op(")")) return nullptr;
    if (!at_name("in")) return fail(cur(), absl::StrCat("expected 'in', got ", describe(cur())));
    ++pos_;
    s->expr = parse_or();  // jinja2 parses the iterable without a conditional expression, so `if` filters
    if (!s->expr) return nullptr;
    if (at_name("if")) {
      ++pos_;
      s->filter = parse_expression();
      if (!s->filter) return nullptr;
    }
    if (at_name("recursive")) return fail(cur(), "recursive loops are not supported");
    if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
    std::string end;
    ++loop_depth_;
    bool ok = parse_closed(&s->body, {"else", "endfor"}, open, "for", &end);
    --loop_depth_;
    if (!ok) return nullptr;
    if (end == "else") {
      if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
      if (!parse_closed(&s->else_body, {"endfor"}, open, "for", &end)) return nullptr;
    }
    if (!expect(Tok::kBlockEnd, "'%}'")) return nullptr;
    return s;
  }

  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s) {
    if (cur().type != Tok::kName) return fail(cur(), absl::StrCat("expected a variable name, got ", describe(cur())));
    s->kind = StmtKind::kSet;
    s->targets.push_back(cur().text);
    ++pos_;
    if (at_op(".")) {
      ++pos_;
      if (cur().type != Tok::kName) return fail(cur(), "expected an attribute name after '.'");
      s->kind = StmtKind::kSetAttr;
      s->targets.push_back(cur().text);
      ++pos_;
    }
    if (at_op(",")) return fail(cur(), "tuple assignment in set is not supported");
    if (cur().type == Tok::kBlockEnd) return fail(cur(), "block set ({% set x %}...{% endset %}) is not supported");
    if (!expect_op("=")) return nullptr;
    s->expr = parse_expression();
    if (!s->expr || !expect(Tok::kBlockEnd, "'%}'")) return nullptr;
    return s;
  }

  // ---- expressions (jinja2 parser.py precedence) ----
  ExprPtr parse_expression() {
    Nest nest(this);
    if (!nest.ok) return nullptr;
    const Token& at = cur();
    ExprPtr e = parse_or();
    while (e && at_name("if")) {
      ++pos_;
      auto c = make(ExprKind::kCond, at);
      ExprPtr cond = parse_or();
      if (!cond) return nullptr;
      ExprPtr other;
      if (at_name("else")) {
        ++pos_;
        other = parse_expression();
        if (!other) return nullptr;
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = finish(std::move(c), at);
    }
    return e;
  }

  ExprPtr parse_binary_chain(ExprKind kind, const char* word, ExprPtr (Parser::*next)()) {
    const Token& at = cur();
    ExprPtr e = (this->*next)();
    while (e && at_name(word)) {
      ++pos_;
      ExprPtr rhs = (this->*next)();
      if (!rhs) return nullptr;
      auto b = make(kind, at);
      b->args.push_back(std::move(e));
      b->args.push_back(std::move(rhs));
      e = finish(std::move(b), at);
    }
    return e;
  }
  ExprPtr parse_or() { return parse_binary_chain(ExprKind::kOr, "or", &Parser::parse_and); }
  ExprPtr parse_and() { return parse_binary_chain(ExprKind::kAnd, "and", &Parser::parse_not); }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Nest nest(this);
      if (!nest.ok) return nullptr;
      const Token& at = cur();
      ++pos_;
      auto n = make(ExprKind::kNot, at);
      ExprPtr inner = parse_not();
      if (!inner) return nullptr;
      n->args.push_back(std::move(inner));
      return finish(std::move(n), at);
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math(0);
    if (!first) return nullptr;
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        ++pos_;
      } else if (at_name("in")) {
        op = "in";
        ++pos_;
      } else if (at_name("not") && toks_[pos_ + 1].type == Tok::kName && toks_[pos_ + 1].text == "in") {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      ExprPtr rhs = parse_math(0);
      if (!rhs) return nullptr;
      if (!cmp) {
        cmp = make(ExprKind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(rhs));
    }
    return cmp ? finish(std::move(cmp), at) : std::move(first);
  }

  // Levels: 0 `+ -`, 1 `~`, 2 `* / // %`, 3 `**`, then unary.
  ExprPtr parse_math(int level) {
    static const std::vector<std::vector<std::string>> kLevels = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == 4) return parse_unary(true);
    const Token& at = cur();
    ExprPtr e = parse_math(level + 1);
    for (;;) {
      if (!e || cur().type != Tok::kOp) return e;
      const auto& ops = kLevels[level];
      if (std::find(ops.begin(), ops.end(), cur().text) == ops.end()) return e;
      auto b = make(ExprKind::kBinary, cur());
      b->name = cur().text;
      ++pos_;
      ExprPtr rhs = parse_math(level + 1);
      if (!rhs) return nullptr;
      b->args.push_back(std::move(e));
      b->args.push_back(std::move(rhs));
      e = finish(std::move(b), at);
    }
  }

  ExprPtr parse_unary(bool with_filter) {
    const Token& at = cur();
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      Nest nest(this);
      if (!nest.ok) return nullptr;
      e = make(at_op("-") ? ExprKind::kNeg : ExprKind::kPos, at);
      ++pos_;
      ExprPtr inner = parse_unary(false);
      if (!inner) return nullptr;
      e->args.push_back(std::move(inner));
      e = finish(std::move(e), at);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case Tok::kName: {
        ++pos_;
        auto e = make(ExprKind::kLiteral, t);
        if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        return e;
      }
      case Tok::kString: {
        std::string s;
        while (cur().type == Tok::kString) s += toks_[pos_++].text;  // adjacent literals concatenate
        auto e = make(ExprKind::kLiteral, t);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        ++pos_;
        auto e = make(ExprKind::kLiteral, t);
        e->literal = t.type == Tok::kInt ? Value::integer(t.i) : Value::real(t.d);
        return e;
      }
      case Tok::kOp:
        if (t.text == "(" || t.text == "[" || t.text == "{") {
          Nest nest(this);
          if (!nest.ok) return nullptr;
          return t.text == "(" ? parse_paren() : t.text == "[" ? parse_list() : parse_dict();
        }
        break;
      default: break;
    }
    return fail(t, absl::StrCat("unexpected ", describe(t)));
  }

  // `(e)`, or a tuple `(a, b)` held as a list.
  ExprPtr parse_paren() {
    const Token& at = cur();
    ++pos_;
    if (at_op(")")) return fail(cur(), "empty tuple '()' is not supported");
    ExprPtr e = parse_expression();
    if (!e) return nullptr;
    if (at_op(",")) {
      auto list = make(ExprKind::kList, at);
      list->literal.tuple = true;
      list->args.push_back(std::move(e));
      while (at_op(",")) {
        ++pos_;
        if (at_op(")")) break;
        ExprPtr item = parse_expression();
        if (!item) return nullptr;
        list->args.push_back(std::move(item));
      }
      e = finish(std::move(list), at);
    }
    if (!expect_op(")")) return nullptr;
    return e;
  }

  ExprPtr parse_list() {
    const Token& at = cur();
    ++pos_;
    auto list = make(ExprKind::kList, at);
    while (!at_op("]")) {
      if (!list->args.empty() && !expect_op(",")) return nullptr;
      if (at_op("]")) break;
      ExprPtr item = parse_expression();
      if (!item) return nullptr;
      list->args.push_back(std::move(item));
    }
    ++pos_;
    return finish(std::move(list), at);
  }

  ExprPtr parse_dict() {
    const Token& at = cur();
    ++pos_;
    auto dict = make(ExprKind::kDict, at);
    while (!at_op("}")) {
      if (!dict->args.empty() && !expect_op(",")) return nullptr;
      if (at_op("}")) break;
      ExprPtr key = parse_expression();
      if (!key || !expect_op(":")) return nullptr;
      ExprPtr value = parse_expression();
      if (!value) return nullptr;
      dict->args.push_back(std::move(key));
      dict->args.push_back(std::move(value));
    }
    ++pos_;
    return finish(std::move(dict), at);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (e) {
      const Token& at = cur();
      if (at_op(".")) {
        ++pos_;
        const Token& name = cur();
        if (name.type == Tok::kName) {
          ++pos_;
          auto g = make(ExprKind::kGetAttr, at);
          g->name = name.text;
          g->args.push_back(std::move(e));
          e = finish(std::move(g), at);
        } else if (name.type == Tok::kInt) {  // foo.0 is foo[0] in jinja2
          ++pos_;
          auto g = make(ExprKind::kGetItem, at);
          auto key = make(ExprKind::kLiteral, name);
          key->literal = Value::integer(name.i);
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(key));
          e = finish(std::move(g), at);
        } else {
          return fail(name, absl::StrCat("expected an attribute name after '.', got ", describe(name)));
        }
      } else if (at_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
    return nullptr;
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& at = cur();
    Nest nest(this);
    if (!nest.ok) return nullptr;
    ++pos_;
    ExprPtr parts[3];
    int colons = 0;
    for (;;) {
      if (at_op("]")) break;
      if (at_op(":")) {
        if (++colons > 2) return fail(cur(), "too many ':' in slice");
        ++pos_;
        continue;
      }
      if (parts[colons]) return fail(cur(), absl::StrCat("expected ']' or ':', got ", describe(cur())));
      parts[colons] = parse_expression();
      if (!parts[colons]) return nullptr;
    }
    ++pos_;
    if (colons == 0 && !parts[0]) return fail(at, "empty subscript '[]'");
    auto e = make(colons == 0 ? ExprKind::kGetItem : ExprKind::kSlice, at);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(parts[0]));
    if (colons > 0) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return finish(std::move(e), at);
  }

  // `(args, key=value)` appended to `call`; the callee decides what a call means.
  bool parse_args(Expr* call) {
    Nest nest(this);
    if (!nest.ok) return false;
    ++pos_;  // '('
    bool first = true;
    while (!at_op(")")) {
      if (!first && !expect_op(",")) return false;
      first = false;
      if (at_op(")")) break;
      if (cur().type == Tok::kName && toks_[pos_ + 1].type == Tok::kOp && toks_[pos_ + 1].text == "=") {
        std::string key = cur().text;
        pos_ += 2;
        ExprPtr v = parse_expression();
        if (!v) return false;
        call->kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!call->kwargs.empty()) {
          fail(cur(), "positional argument after keyword argument");
          return false;
        }
        ExprPtr v = parse_expression();
        if (!v) return false;
        call->args.push_back(std::move(v));
      }
    }
    ++pos_;
    return true;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const Token& at = cur();
    ExprPtr call;
    if (callee->kind == ExprKind::kName) {
      call = make(ExprKind::kCall, at);
      call->name = callee->name;
    } else if (callee->kind == ExprKind::kGetAttr) {
      call = make(ExprKind::kMethod, at);
      call->name = callee->name;
      call->args.push_back(std::move(callee->args[0]));
    } else {
      return fail(at, "only functions and methods can be called");
    }
    if (!parse_args(call.get())) return nullptr;
    return finish(std::move(call), at);
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (e) {
      const Token& at = cur();
      if (at_op("|")) {
        ++pos_;
        const Token& name = cur();
        if (!expect(Tok::kName, "a filter name")) return nullptr;
        if (!is_known_filter(name.text)) return fail(name, absl::StrCat("unsupported filter '", name.text, "'"));
        auto f = make(ExprKind::kFilter, at);
        f->name = name.text;
        f->args.push_back(std::move(e));
        if (at_op("(") && !parse_args(f.get())) return nullptr;
        e = finish(std::move(f), at);
      } else if (at_name("is")) {
        ++pos_;
        auto t = make(ExprKind::kTest, at);
        if (at_name("not")) {
          t->negated = true;
          ++pos_;
        }
        const Token& name = cur();
        if (!expect(Tok::kName, "a test name")) return nullptr;
        if (!is_known_test(name.text)) return fail(name, absl::StrCat("unsupported test '", name.text, "'"));
        t->name = name.text;
        t->args.push_back(std::move(e));
        const Token& arg = cur();
        if (at_op("(")) {
          if (!parse_args(t.get())) return nullptr;
        } else if ((arg.type == Tok::kName || arg.type == Tok::kString || arg.type == Tok::kInt ||
                    arg.type == Tok::kFloat || at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
          // jinja2: a test takes one bare argument (`x is divisibleby 3`, `x is sameas none`).
          if (at_name("is")) return fail(arg, "tests cannot be chained with 'is'");
          ExprPtr a = parse_postfix(parse_primary());
          if (!a) return nullptr;
          t->args.push_back(std::move(a));
        }
        e = finish(std::move(t), at);
      } else if (at_op("(")) {
        return fail(at, "only functions and methods can be called");
      } else {
        return e;
      }
    }
    return nullptr;
  }

  const Lexed& lx_;
  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
  absl::Status err_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Template>> parse_template(absl::string_view source) {
  absl::StatusOr<Lexed> lexed = lex_template(source);
  if (!lexed.ok()) return lexed.status();
  Parser parser(*lexed);
  return parser.run();
}

}  // namespace frost::chat_template_internal
