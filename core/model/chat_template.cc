// Chat-template renderer and loader (core/model/chat_template.h). Rendering follows jinja2's semantics on
// Python values (chat_template_value.cc): for-loop scoping gives each iteration a fresh scope, so {% set %} in a
// loop does not leak — the reason templates use namespace().
#include "core/model/chat_template.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/json.h"
#include "core/common/status_macros.h"
#include "core/model/chat_template_internal.h"

namespace frost {

namespace {

using namespace chat_template_internal;  // NOLINT: this file is the renderer of those types

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(absl::flat_hash_map<std::string, Value> globals, std::optional<int64_t> now) : now_(now) {
    // jinja2's global functions and transformers' (raise_exception, strftime_now): `x is defined` holds.
    for (const char* f : {"range", "dict", "namespace", "raise_exception", "strftime_now"})
      globals.emplace(f, Value::function(f));
    scopes_.push_back(std::move(globals));
  }
  ~Renderer() {
    scopes_.clear();
    for (auto& ns : namespaces_) ns->clear();
  }

  absl::StatusOr<std::string> run(const Template& t) {
    scopes_.emplace_back();  // template-level {% set %}
    Flow flow = Flow::kNormal;
    absl::Status s = exec(t.body, &flow);
    if (!s.ok()) return s;
    return std::move(out_);
  }

 private:
  absl::Status error(int line, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("chat_template: ", what, " (line ", line, ")"));
  }
  // A builtin's bare message, placed at `line`; resource bounds keep their code.
  absl::Status wrap(const absl::Status& s, int line) const {
    if (s.code() == absl::StatusCode::kResourceExhausted)
      return absl::ResourceExhaustedError(absl::StrCat("chat_template: ", s.message(), " (line ", line, ")"));
    return error(line, s.message());
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::undefined(absl::StrCat("'", name, "' is undefined"));
  }

  absl::Status append(absl::string_view text, int line) {
    out_.append(text.data(), text.size());
    if (out_.size() > kMaxStringBytes)
      return absl::ResourceExhaustedError(
          absl::StrCat("chat_template: output exceeds ", kMaxStringBytes, " bytes (line ", line, ")"));
    return absl::OkStatus();
  }

  absl::Status exec(const Body& body, Flow* flow) {
    for (const auto& st : body) {
      absl::Status s = exec_one(*st, flow);
      if (!s.ok()) return s;
      if (*flow != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status exec_one(const Stmt& st, Flow* flow) {
    switch (st.kind) {
      case StmtKind::kText: return append(st.text, st.line);
      case StmtKind::kOutput: {
        absl::StatusOr<Value> v = eval(*st.expr);
        if (!v.ok()) return v.status();
        return append(to_str(*v), st.line);
      }
      case StmtKind::kIf:
        for (const auto& [cond, branch] : st.branches) {
          absl::StatusOr<Value> c = eval(*cond);
          if (!c.ok()) return c.status();
          if (truthy(*c)) return exec(branch, flow);
        }
        return exec(st.else_body, flow);
      case StmtKind::kFor: return exec_for(st);
      case StmtKind::kSet: {
        absl::StatusOr<Value> v = eval(*st.expr);
        if (!v.ok()) return v.status();
        scopes_.back()[st.targets[0]] = *std::move(v);
        return absl::OkStatus();
      }
      case StmtKind::kSetAttr: {
        Value target = lookup(st.targets[0]);
        if (target.type != Value::Type::kNamespace)
          return error(st.line, absl::StrCat("cannot assign attribute on a ", type_name(target), " ('",
                                             st.targets[0], "' is not a namespace)"));
        absl::StatusOr<Value> v = eval(*st.expr);
        if (!v.ok()) return v.status();
        Value* slot = const_cast<Value*>(find_key(*target.ns, st.targets[1]));
        if (slot) *slot = *std::move(v);
        else target.ns->emplace_back(st.targets[1], *std::move(v));
        return absl::OkStatus();
      }
      case StmtKind::kBreak: *flow = Flow::kBreak; return absl::OkStatus();
      case StmtKind::kContinue: *flow = Flow::kContinue; return absl::OkStatus();
      case StmtKind::kBlock: return exec(st.body, flow);
    }
    return absl::OkStatus();
  }

  absl::Status bind(const Stmt& st, const Value& item) {
    auto& scope = scopes_.back();
    if (st.targets.size() == 1) {
      scope[st.targets[0]] = item;
      return absl::OkStatus();
    }
    absl::StatusOr<List> parts = iterate(item);
    if (!parts.ok()) return wrap(parts.status(), st.line);
    if (parts->size() != st.targets.size())
      return error(st.line, absl::StrCat("cannot unpack ", parts->size(), " values into ", st.targets.size(),
                                         " loop variables"));
    for (size_t k = 0; k < parts->size(); ++k) scope[st.targets[k]] = (*parts)[k];
    return absl::OkStatus();
  }

  // One scope per iteration holds the loop variables, `loop`, and any {% set %} of the body.
  absl::Status exec_for(const Stmt& st) {
    absl::StatusOr<Value> seq = eval(*st.expr);
    if (!seq.ok()) return seq.status();
    absl::StatusOr<List> all = iterate(*seq);
    if (!all.ok()) return wrap(all.status(), st.line);
    FROST_RETURN_IF_ERROR(spend(static_cast<int64_t>(all->size()), st.line));
    List items;
    if (st.filter) {
      for (const Value& item : *all) {
        scopes_.emplace_back();
        absl::Status b = bind(st, item);
        absl::StatusOr<Value> keep = b.ok() ? eval(*st.filter) : absl::StatusOr<Value>(b);
        scopes_.pop_back();
        if (!keep.ok()) return keep.status();
        if (truthy(*keep)) items.push_back(item);
      }
    } else {
      items = *std::move(all);
    }
    if (items.empty()) {
      Flow flow = Flow::kNormal;
      return exec(st.else_body, &flow);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      FROST_RETURN_IF_ERROR(spend(1, st.line));
      scopes_.emplace_back();
      absl::Status s = bind(st, items[k]);
      Map loop = {{"index", Value::integer(k + 1)},     {"index0", Value::integer(k)},
                  {"revindex", Value::integer(n - k)},  {"revindex0", Value::integer(n - k - 1)},
                  {"first", Value::boolean(k == 0)},    {"last", Value::boolean(k == n - 1)},
                  {"length", Value::integer(n)},        {"depth", Value::integer(1)},
                  {"depth0", Value::integer(0)}};
      if (k > 0) loop.emplace_back("previtem", items[k - 1]);
      if (k + 1 < n) loop.emplace_back("nextitem", items[k + 1]);
      scopes_.back()["loop"] = Value::of_map(std::move(loop));
      Flow flow = Flow::kNormal;
      if (s.ok()) s = exec(st.body, &flow);
      scopes_.pop_back();
      if (!s.ok()) return s;
      if (flow == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  absl::Status spend(int64_t n, int line) {
    absl::Status s = budget_.spend(n);
    return s.ok() ? s : wrap(s, line);
  }

  absl::StatusOr<Value> eval_defined(const Expr& e) {
    absl::StatusOr<Value> v = eval(e);
    if (v.ok() && v->is_undefined()) return error(e.line, v->s);
    return v;
  }

  absl::Status eval_args(const Expr& e, size_t first, CallArgs* args) {
    for (size_t k = first; k < e.args.size(); ++k) {
      absl::StatusOr<Value> v = eval(*e.args[k]);
      if (!v.ok()) return v.status();
      args->positional.push_back(*std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      absl::StatusOr<Value> v = eval(*expr);
      if (!v.ok()) return v.status();
      args->keyword.emplace_back(key, *std::move(v));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList: {
        List items;
        for (const auto& a : e.args) {
          absl::StatusOr<Value> v = eval(*a);
          if (!v.ok()) return v.status();
          items.push_back(*std::move(v));
        }
        return deep_check(Value::of_list(std::move(items), e.literal.tuple), e.line);
      }
      case ExprKind::kDict: {
        absl::StatusOr<Value> d = eval_dict(e);
        if (!d.ok()) return d;
        return deep_check(*std::move(d), e.line);
      }
      case ExprKind::kGetAttr: {
        absl::StatusOr<Value> obj = eval_defined(*e.args[0]);
        if (!obj.ok()) return obj.status();
        return get_attr(*obj, e.name);
      }
      case ExprKind::kGetItem: {
        absl::StatusOr<Value> obj = eval_defined(*e.args[0]);
        if (!obj.ok()) return obj.status();
        absl::StatusOr<Value> key = eval(*e.args[1]);
        if (!key.ok()) return key.status();
        return get_item(*obj, *key);
      }
      case ExprKind::kSlice: return eval_slice(e);
      case ExprKind::kNot: {
        absl::StatusOr<Value> v = eval(*e.args[0]);
        if (!v.ok()) return v.status();
        return Value::boolean(!truthy(*v));
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        absl::StatusOr<Value> v = eval_defined(*e.args[0]);
        if (!v.ok()) return v.status();
        if (!v->is_number())
          return error(e.line, absl::StrCat("bad operand type for unary ", e.kind == ExprKind::kNeg ? "-" : "+",
                                            ": '", type_name(*v), "'"));
        if (e.kind == ExprKind::kPos) return v->type == Value::Type::kBool ? Value::integer(v->b) : *v;
        if (v->type == Value::Type::kDouble) return Value::real(-v->d);
        int64_t x = v->type == Value::Type::kBool ? v->b : v->i;
        if (x == std::numeric_limits<int64_t>::min()) return error(e.line, "integer overflow");
        return Value::integer(-x);
      }
      case ExprKind::kBinary: return eval_binary(e);
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        absl::StatusOr<Value> a = eval(*e.args[0]);
        if (!a.ok()) return a.status();
        if (truthy(*a) == (e.kind == ExprKind::kOr)) return a;
        return eval(*e.args[1]);
      }
      case ExprKind::kCompare: return eval_compare(e);
      case ExprKind::kCond: {
        absl::StatusOr<Value> c = eval(*e.args[1]);
        if (!c.ok()) return c.status();
        if (truthy(*c)) return eval(*e.args[0]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined("the conditional expression had no else branch");
      }
      case ExprKind::kFilter:
      case ExprKind::kTest: {
        absl::StatusOr<Value> v = eval(*e.args[0]);
        if (!v.ok()) return v.status();
        CallArgs args;
        FROST_RETURN_IF_ERROR(eval_args(e, 1, &args));
        if (e.kind == ExprKind::kTest) {
          absl::StatusOr<bool> r = apply_test(e.name, *v, args);
          if (!r.ok()) return wrap(r.status(), e.line);
          return Value::boolean(*r != e.negated);
        }
        absl::StatusOr<Value> r = apply_filter(e.name, *v, args, budget_);
        if (!r.ok()) return wrap(r.status(), e.line);
        return r;
      }
      case ExprKind::kCall: return eval_call(e);
      case ExprKind::kMethod: {
        absl::StatusOr<Value> obj = eval_defined(*e.args[0]);
        if (!obj.ok()) return obj.status();
        CallArgs args;
        FROST_RETURN_IF_ERROR(eval_args(e, 1, &args));
        absl::StatusOr<Value> r = call_method(*obj, e.name, args, budget_);
        if (!r.ok()) return wrap(r.status(), e.line);
        return r;
      }
    }
    return error(e.line, "unknown expression");
  }

  // Values nest only through literals, so bounding them here bounds every recursion over values.
  absl::StatusOr<Value> deep_check(Value v, int line) const {
    if (v.depth > kMaxValueDepth)
      return error(line, absl::StrCat("value nests deeper than ", kMaxValueDepth, " lists/dicts"));
    return v;
  }

  absl::StatusOr<Value> eval_dict(const Expr& e) {
    Map m;
    for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
      absl::StatusOr<Value> key = eval(*e.args[k]);
      if (!key.ok()) return key.status();
      if (key->type != Value::Type::kString)
        return error(e.line, absl::StrCat("dict keys must be strings, got ", type_name(*key)));
      absl::StatusOr<Value> v = eval(*e.args[k + 1]);
      if (!v.ok()) return v.status();
      Value* slot = const_cast<Value*>(find_key(m, key->s));
      if (slot) *slot = *std::move(v);
      else m.emplace_back(key->s, *std::move(v));
    }
    return Value::of_map(std::move(m));
  }

  absl::StatusOr<Value> eval_slice(const Expr& e) {
    absl::StatusOr<Value> obj = eval_defined(*e.args[0]);
    if (!obj.ok()) return obj.status();
    int64_t bound[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[k + 1]) continue;
      absl::StatusOr<Value> v = eval(*e.args[k + 1]);
      if (!v.ok()) return v.status();
      if (v->type == Value::Type::kNone) continue;
      if (v->type != Value::Type::kInt && v->type != Value::Type::kBool)
        return error(e.line, "slice indices must be integers or None");
      bound[k] = v->type == Value::Type::kInt ? v->i : v->b;
      given[k] = true;
    }
    if (bound[2] == 0) return error(e.line, "slice step cannot be zero");
    std::u32string text;
    int64_t n;
    if (obj->type == Value::Type::kList) n = static_cast<int64_t>(obj->list->size());
    else if (obj->type == Value::Type::kString) n = static_cast<int64_t>((text = decode_utf8(obj->s)).size());
    else return Value::undefined(absl::StrCat("'", type_name(*obj), "' object cannot be sliced"));
    // Python's slice.indices().
    const int64_t step = bound[2];
    auto clamp = [&](int64_t x, bool is_given, int64_t dflt) {
      if (!is_given) return dflt;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t start = clamp(bound[0], given[0], step > 0 ? 0 : n - 1);
    int64_t stop = clamp(bound[1], given[1], step > 0 ? n : -1);
    List items;
    std::u32string chars;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (obj->type == Value::Type::kList) items.push_back((*obj->list)[static_cast<size_t>(k)]);
      else chars.push_back(text[static_cast<size_t>(k)]);
    }
    if (obj->type == Value::Type::kString) return Value::string(encode_utf8(chars));
    return Value::of_list(std::move(items));
  }

  absl::StatusOr<Value> eval_binary(const Expr& e) {
    absl::StatusOr<Value> a = eval(*e.args[0]);
    if (!a.ok()) return a.status();
    absl::StatusOr<Value> b = eval(*e.args[1]);
    if (!b.ok()) return b.status();
    if (e.name == "~") {
      std::string s = to_str(*a) + to_str(*b);
      if (s.size() > kMaxStringBytes) return error(e.line, "string exceeds the size bound");
      return Value::string(std::move(s));
    }
    if (a->is_undefined()) return error(e.line, a->s);
    if (b->is_undefined()) return error(e.line, b->s);
    absl::StatusOr<Value> r = arithmetic(e.name, *a, *b);
    if (!r.ok()) return error(e.line, r.status().message());
    return r;
  }

  static absl::StatusOr<Value> arithmetic(const std::string& op, const Value& a, const Value& b) {
    using T = Value::Type;
    auto bad = [&] {
      if (op == "+" && a.type == T::kString)
        return absl::InvalidArgumentError(absl::StrCat("can only concatenate str (not \"", type_name(b), "\") to str"));
      return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '", type_name(a),
                                                     "' and '", type_name(b), "'"));
    };
    if (a.is_number() && b.is_number()) return number_op(op, a, b);
    if (op == "+" && a.type == b.type && (a.type == T::kString || a.type == T::kList)) {
      if (a.type == T::kString) {
        if (a.s.size() + b.s.size() > kMaxStringBytes) return absl::InvalidArgumentError("string exceeds the size bound");
        return Value::string(a.s + b.s);
      }
      if (a.list->size() + b.list->size() > kMaxListItems) return absl::InvalidArgumentError("list exceeds the size bound");
      List items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::of_list(std::move(items));
    }
    if (op == "*" && (a.type == T::kString || a.type == T::kList) && (b.type == T::kInt || b.type == T::kBool))
      return repeat(a, b.type == T::kInt ? b.i : b.b);
    if (op == "*" && (b.type == T::kString || b.type == T::kList) && (a.type == T::kInt || a.type == T::kBool))
      return repeat(b, a.type == T::kInt ? a.i : a.b);
    if (op == "%" && a.type == T::kString) return absl::InvalidArgumentError("string formatting with '%' is not supported");
    return bad();
  }

  static absl::StatusOr<Value> repeat(const Value& v, int64_t times) {
    using T = Value::Type;
    times = std::max<int64_t>(times, 0);
    size_t unit = v.type == T::kString ? v.s.size() : v.list->size();
    size_t limit = v.type == T::kString ? kMaxStringBytes : kMaxListItems;
    if (unit > 0 && static_cast<uint64_t>(times) > limit / unit)
      return absl::InvalidArgumentError("repetition exceeds the size bound");
    if (v.type == T::kString) {
      std::string s;
      for (int64_t k = 0; k < times; ++k) s += v.s;
      return Value::string(std::move(s));
    }
    List items;
    for (int64_t k = 0; k < times; ++k) items.insert(items.end(), v.list->begin(), v.list->end());
    return Value::of_list(std::move(items));
  }

  static absl::StatusOr<Value> number_op(const std::string& op, const Value& a, const Value& b) {
    using T = Value::Type;
    auto as_i = [](const Value& x) { return x.type == T::kInt ? x.i : int64_t{x.b}; };
    auto as_d = [&](const Value& x) { return x.type == T::kDouble ? x.d : static_cast<double>(as_i(x)); };
    const bool ints = a.type != T::kDouble && b.type != T::kDouble;
    if (op == "/") {
      if (as_d(b) == 0) return absl::InvalidArgumentError("division by zero");
      return Value::real(as_d(a) / as_d(b));
    }
    if (!ints) {
      double x = as_d(a), y = as_d(b);
      if (op == "+") return Value::real(x + y);
      if (op == "-") return Value::real(x - y);
      if (op == "*") return Value::real(x * y);
      if (op == "**") return Value::real(std::pow(x, y));
      if (y == 0) return absl::InvalidArgumentError("float division by zero");
      if (op == "//") return Value::real(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::real(m);
    }
    int64_t x = as_i(a), y = as_i(b), r = 0;
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
    else if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
    else if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
    else if (op == "**") {
      if (y < 0) return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
      r = 1;
      for (int64_t k = 0; k < y && !overflow; ++k) {
        overflow = __builtin_mul_overflow(r, x, &r);
        if (r == 0 || r == 1) break;  // 0**n, 1**n: done (also bounds the loop)
        if (r == -1) {
          r = ((y - k - 1) % 2 == 0) ? -1 : 1;
          break;
        }
      }
    } else {
      if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow = true;
      else {
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        r = op == "//" ? q : m;
      }
    }
    if (overflow) return absl::InvalidArgumentError("integer overflow");
    return Value::integer(r);
  }

  absl::StatusOr<bool> contains(const Value& container, const Value& item, int line) {
    using T = Value::Type;
    switch (container.type) {
      case T::kUndefined: return false;
      case T::kString:
        if (item.type != T::kString)
          return error(line, absl::StrCat("'in <string>' requires string as left operand, not ", type_name(item)));
        return container.s.find(item.s) != std::string::npos;
      case T::kList:
        for (const Value& x : *container.list)
          if (values_equal(x, item)) return true;
        return false;
      case T::kMap: return item.type == T::kString && find_key(*container.map, item.s) != nullptr;
      default: return error(line, absl::StrCat("argument of type '", type_name(container), "' is not iterable"));
    }
  }

  absl::StatusOr<Value> eval_compare(const Expr& e) {
    absl::StatusOr<Value> lhs = eval(*e.args[0]);
    if (!lhs.ok()) return lhs.status();
    for (size_t k = 0; k < e.ops.size(); ++k) {
      absl::StatusOr<Value> rhs = eval(*e.args[k + 1]);
      if (!rhs.ok()) return rhs.status();
      const std::string& op = e.ops[k];
      bool r;
      if (op == "==" || op == "!=") {
        r = values_equal(*lhs, *rhs) == (op == "==");
      } else if (op == "in" || op == "not in") {
        absl::StatusOr<bool> c = contains(*rhs, *lhs, e.line);
        if (!c.ok()) return c.status();
        r = *c == (op == "in");
      } else {
        if (lhs->is_undefined()) return error(e.line, lhs->s);
        if (rhs->is_undefined()) return error(e.line, rhs->s);
        bool less;
        absl::Status s = (op == "<" || op == ">=") ? value_less(*lhs, *rhs, &less) : value_less(*rhs, *lhs, &less);
        if (!s.ok()) return error(e.line, s.message());
        r = (op == "<" || op == ">") ? less : !less;
      }
      if (!r) return Value::boolean(false);
      lhs = std::move(rhs);
    }
    return Value::boolean(true);
  }

  absl::StatusOr<Value> eval_call(const Expr& e) {
    CallArgs args;
    FROST_RETURN_IF_ERROR(eval_args(e, 0, &args));
    if (e.name == "raise_exception") {
      // transformers: raise TemplateError(message); the message is the whole error.
      const Value* msg = args.get(0, "message");
      return absl::InvalidArgumentError(msg ? to_str(*msg) : "");
    }
    if (e.name == "range") return eval_range(e, args);
    if (e.name == "strftime_now") {
      const Value* format = args.get(0, "format");
      if (format == nullptr || format->type != Value::Type::kString)
        return error(e.line, "strftime_now() takes one string argument (the format)");
      return Value::string(format_time(format->s, now_ ? *now_ : static_cast<int64_t>(std::time(nullptr))));
    }
    if (e.name == "namespace" || e.name == "dict") {
      Map m;
      if (!args.positional.empty()) {
        if (const Map* init = args.positional[0].items()) m = *init;
        else return error(e.line, absl::StrCat(e.name, "() takes keyword arguments or one mapping"));
      }
      for (auto& kv : args.keyword) m.emplace_back(kv.first, kv.second);
      if (e.name == "dict") return Value::of_map(std::move(m));
      Value ns;
      ns.type = Value::Type::kNamespace;
      ns.ns = std::make_shared<Map>(std::move(m));
      namespaces_.push_back(ns.ns);
      return ns;
    }
    Value callee = lookup(e.name);
    if (callee.is_undefined()) return error(e.line, callee.s);
    return error(e.line, absl::StrCat("'", type_name(callee), "' object is not callable"));
  }

  absl::StatusOr<Value> eval_range(const Expr& e, const CallArgs& args) {
    int64_t v[3] = {0, 0, 1};
    size_t n = args.positional.size();
    if (n < 1 || n > 3 || !args.keyword.empty()) return error(e.line, "range() takes 1 to 3 integer arguments");
    for (size_t k = 0; k < n; ++k) {
      const Value& a = args.positional[k];
      if (a.type != Value::Type::kInt && a.type != Value::Type::kBool)
        return error(e.line, absl::StrCat("range() argument must be int, not ", type_name(a)));
      v[n == 1 ? 1 : k] = a.type == Value::Type::kInt ? a.i : a.b;
    }
    if (v[2] == 0) return error(e.line, "range() arg 3 must not be zero");
    double count = std::ceil((static_cast<double>(v[1]) - static_cast<double>(v[0])) / static_cast<double>(v[2]));
    if (count > static_cast<double>(kMaxListItems))
      return absl::ResourceExhaustedError(absl::StrCat("chat_template: range() of ", static_cast<int64_t>(count),
                                                       " items exceeds ", kMaxListItems, " (line ", e.line, ")"));
    List items;
    for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) items.push_back(Value::integer(x));
    FROST_RETURN_IF_ERROR(spend(static_cast<int64_t>(items.size()), e.line));
    return Value::of_list(std::move(items));
  }

  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  // Every namespace made by this render: {% set ns.self = ns %} makes a reference cycle, broken by clearing them.
  std::vector<std::shared_ptr<Map>> namespaces_;
  std::string out_;
  Budget budget_;
  std::optional<int64_t> now_;
};

constexpr int64_t kMaxConfigBytes = int64_t{64} << 20;
constexpr int kMaxJsonDepth = 64;

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::parse(std::string source) {
  absl::StatusOr<std::shared_ptr<const Template>> t = parse_template(source);
  if (!t.ok()) return t.status();
  return ChatTemplate(std::move(source), *std::move(t));
}

absl::StatusOr<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, const Context& ctx) const {
  List msgs;
  msgs.reserve(messages.size());
  for (const ChatMessage& m : messages)
    msgs.push_back(Value::of_map({{"role", Value::string(m.role)}, {"content", Value::string(m.content)}}));
  // apply_chat_template's render arguments (tools/documents are passed as None when absent).
  absl::flat_hash_map<std::string, Value> globals;
  globals["messages"] = Value::of_list(std::move(msgs));
  globals["add_generation_prompt"] = Value::boolean(ctx.add_generation_prompt);
  globals["bos_token"] = Value::string(ctx.bos_token);
  globals["eos_token"] = Value::string(ctx.eos_token);
  globals["tools"] = Value::none();
  globals["documents"] = Value::none();
  Renderer r(std::move(globals), ctx.now);
  return r.run(*tmpl_);
}

absl::StatusOr<std::string> ChatTemplate::render_json(std::string_view vars_json, std::optional<int64_t> now) const {
  absl::StatusOr<Value> vars = value_from_json(absl::string_view(vars_json.data(), vars_json.size()));
  if (!vars.ok())
    return absl::InvalidArgumentError(absl::StrCat("chat_template: render variables: ", vars.status().message()));
  if (vars->type != Value::Type::kMap)
    return absl::InvalidArgumentError(absl::StrCat("chat_template: render variables: expected a JSON object, got ",
                                                   type_name(*vars)));
  absl::flat_hash_map<std::string, Value> globals;
  for (const auto& [name, value] : *vars->map) globals[name] = value;
  globals.emplace("tools", Value::none());
  globals.emplace("documents", Value::none());
  Renderer r(std::move(globals), now);
  return r.run(*tmpl_);
}

absl::StatusOr<std::optional<std::string>> load_chat_template_source(const std::string& model_dir) {
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  if (is_file(jinja_path)) {
    absl::StatusOr<std::string> text = read_file(jinja_path, kMaxConfigBytes, "the chat template limit");
    if (!text.ok()) return text.status();
    return std::optional<std::string>(*std::move(text));
  }
  const std::string config_path = model_dir + "/tokenizer_config.json";
  absl::StatusOr<std::string> text = read_file(config_path, kMaxConfigBytes, "the tokenizer config limit");
  if (absl::IsNotFound(text.status())) return std::optional<std::string>();
  if (!text.ok()) return text.status();
  nlohmann::json j;
  if (auto err = parse_json_bounded(*text, kMaxJsonDepth, &j))
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", *err));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(config_path, ": expected a JSON object"));
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (!it->is_array())
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": chat_template must be a string or a list of ",
                                                   "{\"name\", \"template\"}, got ", it->type_name()));
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
        !entry["template"].is_string())
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": chat_template list entries must be ",
                                                     "{\"name\": string, \"template\": string}"));
    if (entry["name"] == "default") return std::optional<std::string>(entry["template"].get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(config_path, ": chat_template lists named templates but none is named \"default\""));
}

}  // namespace frost
