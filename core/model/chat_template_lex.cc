// Lexer of the chat-template Jinja subset (core/model/chat_template.h), after jinja2 3.1's lexer.py with
// transformers' settings: trim_blocks and lstrip_blocks on, `-`/`+` whitespace control, brace balancing inside
// tags, Python string escapes ("unicode-escape"), and keep_trailing_newline=False.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/utf8.h"
#include "core/model/chat_template_internal.h"

namespace frost::chat_template_internal {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

absl::string_view rstrip_ws(absl::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return s.substr(0, n);
}
class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') lexed_.line_starts.push_back(k + 1);
  }

  absl::Status error(size_t offset, absl::string_view what) const { return lexed_.error(offset, what); }

  // Fills the tokens of the Lexed it returns.
  absl::StatusOr<Lexed> run() {
    std::vector<Token>& out = lexed_.tokens;
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t tag = src_.find('{', pos);
      while (tag != std::string::npos && tag + 1 < n && !std::strchr("{%#", src_[tag + 1]))
        tag = src_.find('{', tag + 1);
      if (tag == std::string::npos || tag + 1 >= n) {
        out.push_back({Tok::kData, src_.substr(pos), pos});
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < n ? src_[tag + 2] : '\0';
      absl::string_view text(src_.data() + pos, tag - pos);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the spaces before a block/comment tag that is the first thing on its line.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == absl::string_view::npos ? 0 : l_pos + 1;
        bool line_start = l_pos > 0 || pos == 0 || src_[pos - 1] == '\n';
        absl::string_view tail = text.substr(l_pos);
        if (line_start && !tail.empty() && std::all_of(tail.begin(), tail.end(), is_space))
          text = text.substr(0, l_pos);
      }
      if (!text.empty()) out.push_back({Tok::kData, std::string(text), pos});
      size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      absl::StatusOr<size_t> next = kind == '#' ? skip_comment(tag, body) : lex_tag(kind, tag, body, out);
      if (!next.ok()) return next.status();
      pos = *next;
    }
    out.push_back({Tok::kEof, "", n});
    return std::move(lexed_);
  }

 private:
  // After an end tag: `-` strips all following whitespace; a block/comment end eats one newline (trim_blocks)
  // unless it is `+%}`.
  size_t after_end(size_t p, char strip, bool block_like) const {
    if (strip == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (strip != '+' && block_like && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  absl::StatusOr<size_t> skip_comment(size_t tag, size_t body) const {
    size_t end = src_.find("#}", body);
    if (end == std::string::npos) return error(tag, "unterminated comment");
    char strip = (end > body && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? src_[end - 1] : '\0';
    return after_end(end + 2, strip, true);
  }

  absl::StatusOr<size_t> lex_tag(char kind, size_t tag, size_t p, std::vector<Token>& out) {
    const bool block = kind == '%';
    out.push_back({block ? Tok::kBlockBegin : Tok::kVarBegin, "", tag});
    int depth = 0;  // open brackets: `}}` inside a dict literal does not end the tag (jinja2's balancing)
    const size_t n = src_.size();
    for (;;) {
      while (p < n && is_space(src_[p])) ++p;
      if (p >= n) return error(tag, block ? "unterminated block tag '{%'" : "unterminated expression '{{'");
      if (depth == 0) {
        const char* end = block ? "%}" : "}}";
        for (char strip : {'-', '+', '\0'}) {
          if (strip == '+' && !block) continue;
          size_t at = p + (strip ? 1 : 0);
          if ((strip == '\0' || src_[p] == strip) && src_.compare(at, 2, end) == 0) {
            out.push_back({block ? Tok::kBlockEnd : Tok::kVarEnd, "", p});
            return after_end(at + 2, strip, block);
          }
        }
      }
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        out.push_back({Tok::kName, src_.substr(p, e - p), p});
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        absl::StatusOr<size_t> e = lex_number(p, out);
        if (!e.ok()) return e.status();
        p = *e;
      } else if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> e = lex_string(p, out);
        if (!e.ok()) return e.status();
        p = *e;
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                     ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (src_.compare(p, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (op == nullptr) return error(p, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        if (std::strchr("([{", op[0]) && op[1] == '\0') ++depth;
        if (std::strchr(")]}", op[0]) && op[1] == '\0') {
          if (depth == 0) return error(p, absl::StrCat("unexpected '", op, "'"));
          --depth;
        }
        out.push_back({Tok::kOp, op, p});
        p += std::strlen(op);
      }
    }
  }

  absl::StatusOr<size_t> lex_number(size_t p, std::vector<Token>& out) const {
    const size_t n = src_.size();
    size_t e = p;
    auto digits = [&] {
      while (e < n && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < n && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < n && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < n && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        e = x;
        digits();
        is_float = true;
      }
    }
    std::string text = src_.substr(p, e - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t{is_float ? Tok::kFloat : Tok::kInt, text, p};
    errno = 0;
    if (is_float) {
      t.d = std::strtod(text.c_str(), nullptr);
    } else {
      t.i = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return error(p, absl::StrCat("integer literal ", text, " is out of range"));
    }
    out.push_back(std::move(t));
    return e;
  }

  // A quoted string with Python's escapes (jinja2 decodes with "unicode-escape").
  absl::StatusOr<size_t> lex_string(size_t p, std::vector<Token>& out) const {
    const char q = src_[p];
    std::string value;
    size_t k = p + 1;
    const size_t n = src_.size();
    auto hex = [&](size_t at, int len, char32_t* cp) {
      if (at + len > n) return false;
      *cp = 0;
      for (int j = 0; j < len; ++j) {
        char h = src_[at + j];
        if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
        *cp = *cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                          : (std::tolower(h) - 'a' + 10));
      }
      return true;
    };
    for (;;) {
      if (k >= n) return error(p, "unterminated string literal");
      char c = src_[k];
      if (c == q) break;
      if (c != '\\') {
        value.push_back(c);
        ++k;
        continue;
      }
      if (k + 1 >= n) return error(p, "unterminated string literal");
      char e = src_[k + 1];
      k += 2;
      char32_t cp = 0;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case 'a': value.push_back('\a'); break;
        case 'x':
        case 'u':
        case 'U': {
          int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (!hex(k, len, &cp) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return error(k - 2, absl::StrCat("invalid \\", std::string(1, e), " escape in string literal"));
          append_utf8(value, cp);
          k += len;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            cp = static_cast<char32_t>(e - '0');
            for (int j = 0; j < 2 && k < n && src_[k] >= '0' && src_[k] <= '7'; ++j) cp = cp * 8 + (src_[k++] - '0');
            append_utf8(value, cp);
          } else if (e == 'N') {
            return error(k - 2, "\\N{...} escapes are not supported");
          } else {
            value.push_back('\\');  // Python keeps unknown escapes as written
            value.push_back(e);
          }
      }
    }
    out.push_back({Tok::kString, std::move(value), p});
    return k + 1;
  }

  std::string src_;
  Lexed lexed_;
};

}  // namespace

void Lexed::line_col(size_t offset, int* line, int* col) const {
  auto it = std::upper_bound(line_starts.begin(), line_starts.end(), offset);
  *line = static_cast<int>(it - line_starts.begin());
  *col = static_cast<int>(offset - *(it - 1)) + 1;
}

absl::Status Lexed::error(size_t offset, absl::string_view what) const {
  int line, col;
  line_col(offset, &line, &col);
  return absl::InvalidArgumentError(absl::StrCat("chat_template: ", what, " at line ", line, ", column ", col));
}

absl::StatusOr<Lexed> lex_template(absl::string_view source) {
  // jinja2 normalizes \r\n and \r to \n, then drops one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src.push_back('\n');
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src.push_back(source[k]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lexer(std::move(src));
  return lexer.run();
}


}  // namespace frost::chat_template_internal
