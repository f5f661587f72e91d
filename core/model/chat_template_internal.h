#pragma once
// Internals of core/model/chat_template.h shared by its .cc files: values, the syntax tree, the parser entry,
// and the builtins (filters, tests, methods). Not an API: include chat_template.h.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace frost::chat_template_internal {

// Bounds on what an untrusted template may cost. Parser nesting bounds the recursion of both parse and render.
constexpr int kMaxNesting = 64;                        // nested blocks + nested parentheses/brackets/unary ops
constexpr int kMaxExprDepth = 256;                     // syntax tree depth of one expression (a+b+c+... chains)
constexpr int64_t kMaxSteps = 2'000'000;               // loop iterations + items visited by filters, per render
constexpr size_t kMaxStringBytes = size_t{32} << 20;   // any one string value, and the output
constexpr size_t kMaxListItems = size_t{1} << 20;      // any one list (range(), list + list, 'x' * n)
constexpr int kMaxValueDepth = 64;                     // lists/dicts in lists/dicts (repr, json, == recurse)

struct Value;
using List = std::vector<Value>;
using Map = std::vector<std::pair<std::string, Value>>;  // keeps insertion order, like Python's dict

struct Value {
  // kFunction: a global callable (raise_exception, range, namespace, dict, strftime_now), named by `s`.
  enum class Type { kUndefined, kNone, kBool, kInt, kDouble, kString, kList, kMap, kNamespace, kFunction };
  Type type = Type::kUndefined;
  bool b = false;
  bool tuple = false;  // a list that Python would hold as a tuple (items(), for repr only)
  int depth = 0;  // nesting of lists/dicts below this value (0 for scalars)
  int64_t i = 0;
  double d = 0;
  std::string s;  // kString; for kUndefined the hint used in error messages ("'x' is undefined")
  std::shared_ptr<const List> list;
  std::shared_ptr<const Map> map;
  std::shared_ptr<Map> ns;  // namespace(): the one mutable value ({% set ns.x = ... %})

  static Value undefined(std::string hint) {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value none() { return of(Type::kNone); }
  static Value function(std::string name) {
    Value v = of(Type::kFunction);
    v.s = std::move(name);
    return v;
  }
  static Value boolean(bool x) {
    Value v = of(Type::kBool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = of(Type::kInt);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = of(Type::kDouble);
    v.d = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = of(Type::kString);
    v.s = std::move(x);
    return v;
  }
  static Value of_list(List items, bool is_tuple = false) {
    Value v = of(Type::kList);
    for (const Value& x : items) v.depth = std::max(v.depth, x.depth + 1);
    v.list = std::make_shared<const List>(std::move(items));
    v.tuple = is_tuple;
    return v;
  }
  static Value of_map(Map items) {
    Value v = of(Type::kMap);
    for (const auto& kv : items) v.depth = std::max(v.depth, kv.second.depth + 1);
    v.map = std::make_shared<const Map>(std::move(items));
    return v;
  }
  bool is_undefined() const { return type == Type::kUndefined; }
  bool is_number() const { return type == Type::kBool || type == Type::kInt || type == Type::kDouble; }
  // The mapping items of a kMap or kNamespace (nullptr otherwise).
  const Map* items() const { return type == Type::kMap ? map.get() : type == Type::kNamespace ? ns.get() : nullptr; }

 private:
  static Value of(Type t) {
    Value v;
    v.type = t;
    return v;
  }
};

const Value* find_key(const Map& m, absl::string_view key);
const char* type_name(const Value& v);  // Python's: 'str', 'int', 'dict', 'NoneType', ...
bool truthy(const Value& v);
std::string to_str(const Value& v);   // Python str(); undefined → ""
std::string to_repr(const Value& v);  // Python repr()
// json.dumps(v, ensure_ascii=False, indent=indent) with indent < 0 meaning None; error on undefined.
absl::StatusOr<std::string> to_json(const Value& v, int indent);
bool values_equal(const Value& a, const Value& b);
// Python's a < b (type error when not ordered); sets *less.
absl::Status value_less(const Value& a, const Value& b, bool* less);
// A JSON document as Python values (render_json): objects → dicts in member order, integers → int, other
// numbers → float, null → None. INVALID_ARGUMENT for invalid JSON or nesting deeper than kMaxValueDepth.
absl::StatusOr<Value> value_from_json(absl::string_view text);
// transformers' strftime_now(format): time.strftime on the local time of `unix_seconds`, with the C locale's
// English names. Directives: %Y %m %d %e %b %B %a %A %H %I %M %S %p %y %j %%; others are kept as written.
std::string format_time(absl::string_view format, int64_t unix_seconds);
// Code points of UTF-8 `s` (invalid bytes map to U+FFFD) and back.
std::u32string decode_utf8(absl::string_view s);
std::string encode_utf8(std::u32string_view s);

// ---- syntax tree ----
enum class ExprKind {
  kLiteral, kName, kList, kDict, kGetAttr, kGetItem, kSlice, kNot, kNeg, kPos, kBinary, kAnd, kOr, kCompare,
  kCond, kFilter, kTest, kCall, kMethod,
};
struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int depth = 1;
  Value literal;
  std::string name;  // variable, attribute, operator, filter, test, function or method name
  bool negated = false;  // `is not`
  // Operands: kGetAttr [obj]; kGetItem [obj, key]; kSlice [obj, start?, stop?, step?] (null when absent);
  // kBinary/kAnd/kOr [lhs, rhs]; kCompare [first, rest...] with ops; kCond [then, cond, else?];
  // kFilter/kTest [value, args...]; kCall [args...]; kMethod [obj, args...]; kList items; kDict [k, v, k, v...].
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::string> ops;  // kCompare: "==", "<", "in", "not in", ...
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};
using ExprPtr = std::unique_ptr<Expr>;

enum class StmtKind { kText, kOutput, kIf, kFor, kSet, kSetAttr, kBreak, kContinue, kBlock };
struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet/kSetAttr value, kFor iterable
  std::vector<std::string> targets;  // kFor loop variables; kSet [name]; kSetAttr [namespace, attribute]
  ExprPtr filter;                    // kFor `if` filter (may be null)
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition, body) for if and each elif
  Body body;                         // kFor, kBlock
  Body else_body;                    // kIf else, kFor else
};

struct Template {
  Body body;
};

// ---- tokens (chat_template_lex.cc) ----
enum class Tok { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
struct Token {
  Tok type;
  std::string text;  // data text (whitespace control applied), name, decoded string, operator
  size_t offset;     // in the normalized source, for line/column
  int64_t i = 0;
  double d = 0;
};
struct Lexed {
  std::vector<Token> tokens;          // ends with kEof
  std::vector<size_t> line_starts{0};  // offsets where lines start
  void line_col(size_t offset, int* line, int* col) const;
  absl::Status error(size_t offset, absl::string_view what) const;  // "chat_template: <what> at line L, column C"
};
absl::StatusOr<Lexed> lex_template(absl::string_view source);

// Parses (chat_template_parse.cc). Errors: "chat_template: <what> at line L, column C".
absl::StatusOr<std::shared_ptr<const Template>> parse_template(absl::string_view source);

// ---- builtins (chat_template_builtins.cc) ----
bool is_known_filter(absl::string_view name);
bool is_known_test(absl::string_view name);

// Counts work against kMaxSteps; shared by the renderer and the builtins.
class Budget {
 public:
  absl::Status spend(int64_t n);

 private:
  int64_t used_ = 0;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* get(size_t index, absl::string_view keyword_name) const;  // positional index or keyword
};

// Errors are bare messages; the renderer prefixes "chat_template: " and appends the line.
absl::StatusOr<Value> apply_filter(absl::string_view name, const Value& v, const CallArgs& args, Budget& budget);
absl::StatusOr<bool> apply_test(absl::string_view name, const Value& v, const CallArgs& args);
absl::StatusOr<Value> call_method(const Value& obj, absl::string_view name, const CallArgs& args, Budget& budget);
// Values of a for loop or a filter over a sequence: list items, string characters, dict keys; undefined → none.
absl::StatusOr<List> iterate(const Value& v);
// Python getattr/getitem as jinja2's sandbox resolves them (undefined when absent).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

}  // namespace frost::chat_template_internal
