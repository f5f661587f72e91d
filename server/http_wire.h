#pragma once
// HTTP/1.1 message framing for server/http_front.h, without I/O (so every rule is unit tested on strings):
// the request head (RFC 9112 §2-5), how its body is framed (§6), chunked decoding (§7.1) and content decoding
// (gzip / deflate, RFC 9110 §8.4), each bounded before anything is buffered. Every refusal carries the status
// to answer, a message that says what was wrong, and the reason the front counts it under.
//
// What is refused (the front then answers and closes the connection):
//   400  a bad request line, request target or HTTP version; a header line without a colon, with whitespace
//        before it, or with a bad field name or value (a control character); obs-fold (a line that starts
//        with SP / HTAB); Content-Length not all digits, or two different values; Transfer-Encoding with
//        Content-Length; chunked not the last transfer coding, or given twice; Transfer-Encoding on HTTP/1.0;
//        a bad chunk-size line, a chunk without its CRLF, a corrupt or truncated gzip / deflate body
//   414  a request line longer than the limit
//   431  a head over its byte limit or with more header fields than allowed (trailers counted too)
//   413  a body over the limit: declared (Content-Length), counted while chunks arrive, or inflated
//   415  a Content-Encoding other than gzip, x-gzip, deflate or identity
//   417  an Expect other than 100-continue
//   501  a transfer coding other than chunked (before it)
//   505  an HTTP major version other than 1
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace frost::server::http {

struct Header {
  std::string name;   // as sent
  std::string value;  // without surrounding whitespace
};

// A request the front answers itself: the status, what was wrong, and the counter's reason (a literal).
struct Refusal {
  int status = 400;
  std::string message;
  const char* reason = "bad_request";
};

struct HeadLimits {
  size_t max_request_line = 8192;  // bytes of the request line (414 beyond)
  size_t max_head_bytes = 16384;   // request line + header fields + the empty line (431 beyond)
  int max_headers = 100;           // header fields (431 beyond)
};

struct RequestHead {
  std::string method;
  std::string target;  // as sent
  std::string path;    // the target's path ("/v1/models"; an absolute-form target reduced to it), no query
  std::string query;   // after '?', without it
  int minor = 1;       // HTTP/1.<minor>
  std::vector<Header> headers;
  // The first field named `name` (case-insensitive), or null.
  const std::string* find(std::string_view name) const;
};

// Where the head starting at buf[0] ends: the length through its empty line, or 0 while it is incomplete.
// `*scanned` (start at 0) is where the search resumes when more bytes arrive. Lines end in LF, with or
// without CR before it.
size_t find_head_end(std::string_view buf, size_t* scanned);
// A refusal for an incomplete head already past a limit (its first line longer than max_request_line, or
// max_head_bytes without its end), else nothing: the caller reads on (at most max_head_bytes in all).
std::optional<Refusal> check_incomplete_head(std::string_view buf, const HeadLimits& lim);
// Parses a complete head (what find_head_end measured).
std::variant<RequestHead, Refusal> parse_request_head(std::string_view head, const HeadLimits& lim);

enum class ContentCoding { kIdentity, kGzip, kDeflate };

struct BodyFraming {
  enum class Kind { kNone, kLength, kChunked };
  Kind kind = Kind::kNone;
  uint64_t length = 0;  // kLength
  ContentCoding coding = ContentCoding::kIdentity;
  bool expect_continue = false;  // Expect: 100-continue
  bool close = false;            // Connection: close, or HTTP/1.0 (no keep-alive on 1.0)
};
// How the body of `head` is framed, in this order of refusals: framing (400 / 501), Expect (417), a declared
// length over `max_body_bytes` (413: before anything is read), Content-Encoding (415).
std::variant<BodyFraming, Refusal> body_framing(const RequestHead& head, uint64_t max_body_bytes);

// Turns the body's bytes as they arrive into the request body: identity, or gzip / deflate inflated with zlib
// a block at a time, refused (413) as soon as the output passes `max_body_bytes` — a bomb is never inflated
// whole. One per request body.
class ContentDecoder {
 public:
  ContentDecoder(ContentCoding coding, uint64_t max_body_bytes);
  ~ContentDecoder();
  ContentDecoder(const ContentDecoder&) = delete;
  ContentDecoder& operator=(const ContentDecoder&) = delete;

  // Appends what `data` decodes to onto `body`.
  std::optional<Refusal> feed(std::string_view data, std::string* body);
  // At the end of the body: a refusal when a compressed stream is truncated.
  std::optional<Refusal> finish();

 private:
  std::optional<Refusal> inflate_some(std::string_view data, std::string* body);

  ContentCoding coding_;
  uint64_t max_body_bytes_;
  z_stream zs_{};
  bool started_ = false;  // inflateInit2 done
  bool ended_ = false;    // the compressed stream is complete
};

// Decodes a chunked body incrementally (RFC 9112 §7.1): chunk-size lines (with extensions) of at most
// kMaxChunkLine bytes, the data of each chunk handed on as it arrives, the decoded total refused (413) as
// soon as it passes `max_body_bytes`, trailer fields parsed and dropped but counted against what the head
// left of the head limits.
class ChunkedDecoder {
 public:
  static constexpr size_t kMaxChunkLine = 4096;
  // `head_bytes` / `head_fields`: what the request head already used of `lim`.
  ChunkedDecoder(uint64_t max_body_bytes, const HeadLimits& lim, size_t head_bytes, int head_fields);

  // Consumes bytes from the front of `in` (*consumed of them) and appends chunk data to `*data`. done() once
  // the last chunk and the trailers are consumed: bytes after them belong to the next request.
  std::optional<Refusal> feed(std::string_view in, size_t* consumed, std::string* data);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  std::optional<Refusal> size_line(std::string_view line);

  uint64_t max_body_bytes_;
  HeadLimits lim_;
  size_t head_bytes_;  // head + trailer bytes so far
  int head_fields_;    // header + trailer fields so far
  State state_ = State::kSize;
  uint64_t left_ = 0;   // bytes of the current chunk still to come
  uint64_t total_ = 0;  // decoded bytes so far
  std::string line_;    // a size or trailer line being assembled
};

// The reason phrase of `status` ("Not Found"), "Unknown" for one not listed.
const char* reason_phrase(int status);
// "HTTP/1.1 <status> <reason>\r\n" + the fields + the empty line.
std::string response_head(int status, const std::vector<Header>& fields);

// Whether `a` equals `b` ignoring ASCII case.
bool iequals(std::string_view a, std::string_view b);

}  // namespace frost::server::http
