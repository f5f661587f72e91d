#include "server/http_wire.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace frost::server::http {
namespace {

bool is_tchar(unsigned char c) {  // RFC 9110 §5.6.2 token characters
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}
bool is_token(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}
bool is_ows(char c) { return c == ' ' || c == '\t'; }
std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

// Debian's Abseil has its own string_view: these take std::string_view.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}
std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = absl::ascii_tolower(c);
  return out;
}

// `s` quoted for a message: at most 64 bytes, anything but printable ASCII as \xNN.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  if (s.size() > 64) out += "...";
  return out + "\"";
}

Refusal bad(std::string message) { return Refusal{400, std::move(message), "bad_request"}; }
Refusal head_too_large(std::string message) { return Refusal{431, std::move(message), "head_too_large"}; }
Refusal body_too_large(std::string message) { return Refusal{413, std::move(message), "body_too_large"}; }

// The elements of a comma-separated list over every field named `name` (empty elements dropped, RFC 9110
// §5.6.1), trimmed; `fields` says how many fields there were.
std::vector<std::string_view> list_values(const RequestHead& head, std::string_view name, int* fields) {
  std::vector<std::string_view> out;
  *fields = 0;
  for (const Header& h : head.headers) {
    if (!iequals(h.name, name)) continue;
    ++*fields;
    for (std::string_view v : split(h.value, ',')) {
      v = trim_ows(v);
      if (!v.empty()) out.push_back(v);
    }
  }
  return out;
}

// A list element's name without its parameters ("gzip;q=1" → "gzip"), lower case.
std::string coding_name(std::string_view element) {
  return lower(trim_ows(element.substr(0, element.find(';'))));
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return absl::ascii_tolower(x) == absl::ascii_tolower(y);
         });
}

const std::string* RequestHead::find(std::string_view name) const {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return &h.value;
  return nullptr;
}

size_t find_head_end(std::string_view buf, size_t* scanned) {
  size_t i = *scanned;
  for (; i < buf.size(); ++i) {
    if (buf[i] != '\n') continue;
    if (i + 1 >= buf.size()) break;
    if (buf[i + 1] == '\n') return i + 2;
    if (buf[i + 1] == '\r') {
      if (i + 2 >= buf.size()) break;
      if (buf[i + 2] == '\n') return i + 3;
    }
  }
  *scanned = i;
  return 0;
}

std::optional<Refusal> check_incomplete_head(std::string_view buf, const HeadLimits& lim) {
  const size_t lf = buf.find('\n');
  const size_t line = lf == std::string_view::npos ? buf.size() : lf;
  if (line > lim.max_request_line)
    return Refusal{414, absl::StrCat("the request line is longer than ", lim.max_request_line, " bytes"),
                   "uri_too_long"};
  if (buf.size() >= lim.max_head_bytes)
    return head_too_large(absl::StrCat("the request head (request line and header fields) is over ",
                                       lim.max_head_bytes, " bytes"));
  return std::nullopt;
}

std::variant<RequestHead, Refusal> parse_request_head(std::string_view head, const HeadLimits& lim) {
  if (head.size() > lim.max_head_bytes)
    return head_too_large(
        absl::StrCat("the request head is ", head.size(), " bytes, over ", lim.max_head_bytes));
  // Lines end in LF (CRLF); a CR anywhere else is refused (RFC 9112 §2.2).
  std::vector<std::string_view> lines;
  for (std::string_view line : split(head, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos)
      return bad(absl::StrCat("a bare CR in the line ", quoted(line)));
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();  // the empty line(s) that end the head
  if (lines.empty()) return bad("an empty request line");

  // request-line = method SP request-target SP HTTP-version
  RequestHead h;
  const std::string_view rl = lines[0];
  if (rl.size() > lim.max_request_line)
    return Refusal{414, absl::StrCat("the request line is longer than ", lim.max_request_line, " bytes"),
                   "uri_too_long"};
  const std::vector<std::string_view> parts = split(rl, ' ');
  if (parts.size() != 3 || !is_token(parts[0]) || parts[1].empty())
    return bad(absl::StrCat("bad request line ", quoted(rl), " (expected METHOD TARGET HTTP/1.1)"));
  const std::string_view version = parts[2];
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" ||
      !std::isdigit(static_cast<unsigned char>(version[5])) || version[6] != '.' ||
      !std::isdigit(static_cast<unsigned char>(version[7])))
    return bad(absl::StrCat("bad HTTP version ", quoted(version), " (expected HTTP/1.1 or HTTP/1.0)"));
  if (version[5] != '1')
    return Refusal{505,
                   absl::StrCat("HTTP version ", quoted(version), " is not supported (HTTP/1.1 or HTTP/1.0)"),
                   "bad_request"};
  h.method = std::string(parts[0]);
  h.target = std::string(parts[1]);
  h.minor = version[7] - '0';
  for (unsigned char c : parts[1])
    if (c <= 0x20 || c == 0x7f) return bad(absl::StrCat("bad request target ", quoted(parts[1])));
  std::string_view target = parts[1];
  if (target[0] != '/' && target != "*") {
    // absolute-form (RFC 9112 §3.2.2): the path after the authority.
    const std::string scheme_part = lower(target.substr(0, 8));
    const size_t scheme = scheme_part.rfind("http://", 0) == 0    ? 7
                          : scheme_part.rfind("https://", 0) == 0 ? 8
                                                                  : 0;
    if (scheme == 0)
      return bad(
          absl::StrCat("bad request target ", quoted(target), " (expected a path such as /v1/models)"));
    const size_t slash = target.find_first_of("/?", scheme);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    if (target[0] == '?') h.path = "/";
  }
  const size_t q = target.find('?');
  if (h.path.empty()) h.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) h.query = std::string(target.substr(q + 1));

  // field-line = field-name ":" OWS field-value OWS
  if (static_cast<int>(lines.size()) - 1 > lim.max_headers)
    return head_too_large(
        absl::StrCat("the request has ", lines.size() - 1, " header fields, over ", lim.max_headers));
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.empty()) return bad("an empty line inside the header fields");
    if (is_ows(line[0]))
      return bad(
          absl::StrCat("obs-fold (a header line that starts with whitespace, continuing the previous one) "
                       "is not accepted: ",
                       quoted(line)));
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      return bad(absl::StrCat("a header line without a colon: ", quoted(line)));
    const std::string_view name = line.substr(0, colon);
    if (!name.empty() && is_ows(name.back()))
      return bad(absl::StrCat("whitespace between the header field name and the colon: ", quoted(line)));
    if (!is_token(name)) return bad(absl::StrCat("bad header field name ", quoted(name)));
    const std::string_view value = trim_ows(line.substr(colon + 1));
    for (unsigned char c : value)
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return bad(
            absl::StrCat("header ", std::string(name), ": a control character in its value ", quoted(value)));
    h.headers.push_back(Header{std::string(name), std::string(value)});
  }
  return h;
}

std::variant<BodyFraming, Refusal> body_framing(const RequestHead& head, uint64_t max_body_bytes) {
  BodyFraming f;
  int n_conn = 0;
  f.close = head.minor == 0;  // no keep-alive on HTTP/1.0
  for (std::string_view t : list_values(head, "Connection", &n_conn))
    if (iequals(t, "close")) f.close = true;

  int n_te = 0, n_cl = 0;
  const std::vector<std::string_view> te = list_values(head, "Transfer-Encoding", &n_te);
  const std::vector<std::string_view> cl = list_values(head, "Content-Length", &n_cl);
  if (n_te > 0) {
    if (head.minor == 0) return bad("Transfer-Encoding on an HTTP/1.0 request (chunked needs HTTP/1.1)");
    if (n_cl > 0) return bad("both Transfer-Encoding and Content-Length: the body's length is ambiguous");
    if (te.empty()) return bad("an empty Transfer-Encoding");
    if (coding_name(te.back()) != "chunked")
      return bad(absl::StrCat("the last transfer coding is ", quoted(te.back()),
                              ", not chunked: the body's length cannot be determined"));
    for (size_t i = 0; i + 1 < te.size(); ++i)
      if (coding_name(te[i]) == "chunked") return bad("Transfer-Encoding names chunked more than once");
    if (te.size() > 1)
      return Refusal{
          501,
          absl::StrCat("transfer coding ", quoted(coding_name(te[0])), " is not supported (only chunked)"),
          "not_implemented"};
    f.kind = BodyFraming::Kind::kChunked;
  } else if (n_cl > 0) {
    std::string_view first;
    for (std::string_view v : cl) {
      if (!std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return bad(absl::StrCat("Content-Length ", quoted(v), " is not a number of bytes"));
      std::string_view digits = v;
      while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
      if (first.empty()) {
        first = digits;
      } else if (digits != first) {
        return bad(absl::StrCat("two different Content-Length values (", std::string(first), " and ",
                                std::string(digits), ")"));
      }
    }
    if (cl.empty()) return bad("an empty Content-Length");
    uint64_t n = 0;
    for (char c : first) n = n * 10 + static_cast<uint64_t>(c - '0');
    if (first.size() > 18) n = UINT64_MAX;  // digits, just too many: over any limit
    f.length = n;
    f.kind = n > 0 ? BodyFraming::Kind::kLength : BodyFraming::Kind::kNone;
  }

  if (const std::string* expect = head.find("Expect")) {
    if (!iequals(trim_ows(*expect), "100-continue"))
      return Refusal{417, absl::StrCat("Expect ", quoted(*expect), " is not supported (only 100-continue)"),
                     "expectation_failed"};
    f.expect_continue = head.minor >= 1;
  }
  if (f.kind == BodyFraming::Kind::kLength && f.length > max_body_bytes)
    return body_too_large(
        absl::StrCat("the request body is ",
                     f.length == UINT64_MAX ? std::string("more than 10^18") : absl::StrCat(f.length),
                     " bytes, over the limit of ", max_body_bytes));

  int n_ce = 0;
  std::vector<std::string> codings;
  for (std::string_view c : list_values(head, "Content-Encoding", &n_ce)) {
    std::string name = coding_name(c);
    if (name != "identity") codings.push_back(std::move(name));
  }
  if (f.kind != BodyFraming::Kind::kNone && !codings.empty()) {
    if (codings.size() > 1)
      return Refusal{415, "more than one Content-Encoding (one of gzip, deflate or identity)",
                     "unsupported_encoding"};
    if (codings[0] == "gzip" || codings[0] == "x-gzip") {
      f.coding = ContentCoding::kGzip;
    } else if (codings[0] == "deflate") {
      f.coding = ContentCoding::kDeflate;
    } else {
      return Refusal{415,
                     absl::StrCat("Content-Encoding ", quoted(codings[0]),
                                  " is not supported (gzip, deflate or identity)"),
                     "unsupported_encoding"};
    }
  }
  return f;
}

// ---- ContentDecoder

ContentDecoder::ContentDecoder(ContentCoding coding, uint64_t max_body_bytes)
    : coding_(coding), max_body_bytes_(max_body_bytes) {}

ContentDecoder::~ContentDecoder() {
  if (started_) inflateEnd(&zs_);
}

std::optional<Refusal> ContentDecoder::feed(std::string_view data, std::string* body) {
  if (coding_ == ContentCoding::kIdentity) {
    if (body->size() + data.size() > max_body_bytes_)
      return body_too_large(
          absl::StrCat("the request body is over the limit of ", max_body_bytes_, " bytes"));
    body->append(data);
    return std::nullopt;
  }
  while (!data.empty()) {  // zlib counts input in uInt
    const size_t n = std::min<size_t>(data.size(), 1u << 30);
    if (std::optional<Refusal> r = inflate_some(data.substr(0, n), body)) return r;
    data.remove_prefix(n);
  }
  return std::nullopt;
}

std::optional<Refusal> ContentDecoder::inflate_some(std::string_view data, std::string* body) {
  const char* name = coding_ == ContentCoding::kGzip ? "gzip" : "deflate";
  if (!started_) {
    // deflate is the zlib format (RFC 9110 §8.4.1.2), but some clients send raw deflate: told apart by the
    // zlib header (CM 8, a check multiple of 31).
    int window_bits = 15 + 16;
    if (coding_ == ContentCoding::kDeflate) {
      const unsigned b0 = static_cast<unsigned char>(data[0]);
      const bool zlib = (b0 & 0x0f) == 8 && (b0 >> 4) <= 7 &&
                        (data.size() < 2 || ((b0 << 8) | static_cast<unsigned char>(data[1])) % 31 == 0);
      window_bits = zlib ? 15 : -15;
    }
    if (inflateInit2(&zs_, window_bits) != Z_OK) return Refusal{500, "zlib: inflateInit2 failed", "internal"};
    started_ = true;
  }
  zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs_.avail_in = static_cast<uInt>(data.size());
  unsigned char out[16384];
  for (;;) {
    if (ended_) {
      if (zs_.avail_in == 0) break;
      if (coding_ != ContentCoding::kGzip)
        return bad(absl::StrCat("bytes after the end of the ", name, " stream"));
      inflateReset(&zs_);  // another gzip member (RFC 1952 §2.2)
      ended_ = false;
    }
    zs_.next_out = out;
    zs_.avail_out = sizeof(out);
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    const size_t produced = sizeof(out) - zs_.avail_out;
    if (body->size() + produced > max_body_bytes_)
      return body_too_large(absl::StrCat("the ", name, " request body inflates to more than the limit of ",
                                         max_body_bytes_, " bytes"));
    body->append(reinterpret_cast<const char*>(out), produced);
    if (rc == Z_STREAM_END) {
      ended_ = true;
      continue;
    }
    if (rc == Z_BUF_ERROR) break;  // needs more input
    if (rc != Z_OK)
      return bad(absl::StrCat("the ", name, " request body is corrupt: ", zs_.msg ? zs_.msg : "zlib error"));
    if (zs_.avail_in == 0 && zs_.avail_out != 0) break;
  }
  zs_.next_in = nullptr;
  zs_.avail_in = 0;
  return std::nullopt;
}

std::optional<Refusal> ContentDecoder::finish() {
  if (coding_ == ContentCoding::kIdentity || !started_ || ended_) return std::nullopt;
  return bad(absl::StrCat("the ", coding_ == ContentCoding::kGzip ? "gzip" : "deflate",
                          " request body is truncated"));
}

// ---- ChunkedDecoder

ChunkedDecoder::ChunkedDecoder(uint64_t max_body_bytes, const HeadLimits& lim, size_t head_bytes,
                               int head_fields)
    : max_body_bytes_(max_body_bytes), lim_(lim), head_bytes_(head_bytes), head_fields_(head_fields) {}

std::optional<Refusal> ChunkedDecoder::size_line(std::string_view line) {
  // chunk-size [ chunk-ext ]: hex digits, then optional BWS ";" extensions.
  size_t i = 0;
  uint64_t size = 0;
  while (i < line.size() && std::isxdigit(static_cast<unsigned char>(line[i]))) {
    if (i == 15) return body_too_large("a chunk size of more than 15 hex digits");
    const char c = absl::ascii_tolower(line[i]);
    size = size * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    ++i;
  }
  if (i == 0) return bad(absl::StrCat("bad chunk-size line ", quoted(line), " (expected hex digits)"));
  size_t j = i;
  while (j < line.size() && is_ows(line[j])) ++j;
  if (j < line.size() && line[j] != ';')
    return bad(
        absl::StrCat("bad chunk-size line ", quoted(line), " (expected hex digits, then ; extensions)"));
  for (; j < line.size(); ++j) {
    const unsigned char c = static_cast<unsigned char>(line[j]);
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return bad(absl::StrCat("a control character in the chunk extension ", quoted(line)));
  }
  if (total_ + size > max_body_bytes_)
    return body_too_large(
        absl::StrCat("the chunked request body is over the limit of ", max_body_bytes_, " bytes"));
  left_ = size;
  state_ = size == 0 ? State::kTrailer : State::kData;
  return std::nullopt;
}

std::optional<Refusal> ChunkedDecoder::feed(std::string_view in, size_t* consumed, std::string* data) {
  size_t i = 0;
  while (i < in.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(left_, in.size() - i));
      data->append(in.substr(i, take));
      total_ += take;
      left_ -= take;
      i += take;
      if (left_ == 0) state_ = State::kDataEnd;
      continue;
    }
    // A line: the chunk size, the CRLF after a chunk's data, or a trailer field.
    const size_t lf = in.find('\n', i);
    const size_t take = (lf == std::string_view::npos ? in.size() : lf + 1) - i;
    if (state_ == State::kTrailer) {
      if (head_bytes_ + line_.size() + take > lim_.max_head_bytes)
        return head_too_large(absl::StrCat("the request head and its chunked trailers are over ",
                                           lim_.max_head_bytes, " bytes"));
    } else if (line_.size() + take > kMaxChunkLine) {
      return bad(absl::StrCat("a chunk-size line longer than ", kMaxChunkLine, " bytes"));
    }
    line_.append(in.substr(i, take));
    i += take;
    if (lf == std::string_view::npos) break;
    std::string_view line(line_);
    line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (state_ == State::kDataEnd) {
      if (!line.empty()) return bad("chunk data longer than its chunk size (no CRLF after it)");
      state_ = State::kSize;
    } else if (state_ == State::kSize) {
      if (std::optional<Refusal> r = size_line(line)) return r;
    } else if (line.empty()) {
      state_ = State::kDone;
    } else {
      head_bytes_ += line_.size();
      if (++head_fields_ > lim_.max_headers)
        return head_too_large(
            absl::StrCat("the request's header and trailer fields are over ", lim_.max_headers));
      if (is_ows(line[0]) || line.find(':') == std::string_view::npos)
        return bad(absl::StrCat("bad trailer field ", quoted(line)));
    }
    line_.clear();
  }
  *consumed = i;
  return std::nullopt;
}

// ---- responses

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string response_head(int status, const std::vector<Header>& fields) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ", reason_phrase(status), "\r\n");
  for (const Header& f : fields) absl::StrAppend(&out, f.name, ": ", f.value, "\r\n");
  out += "\r\n";
  return out;
}

}  // namespace frost::server::http
