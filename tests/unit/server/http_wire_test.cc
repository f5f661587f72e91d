// server/http_wire.h: the request head, body framing, chunked and content decoding on strings (no sockets;
// tests/unit/server/http_front_test.cc drives the same rules over real connections).
#include "server/http_wire.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <variant>

namespace frost::server::http {
namespace {

RequestHead parse_ok(const std::string& head, HeadLimits lim = HeadLimits()) {
  std::variant<RequestHead, Refusal> r = parse_request_head(head, lim);
  if (auto* refused = std::get_if<Refusal>(&r)) ADD_FAILURE() << head << " → " << refused->message;
  return std::holds_alternative<RequestHead>(r) ? std::get<RequestHead>(r) : RequestHead();
}
Refusal parse_refused(const std::string& head, HeadLimits lim = HeadLimits()) {
  std::variant<RequestHead, Refusal> r = parse_request_head(head, lim);
  EXPECT_TRUE(std::holds_alternative<Refusal>(r)) << head;
  return std::holds_alternative<Refusal>(r) ? std::get<Refusal>(r) : Refusal{0, "", ""};
}
std::variant<BodyFraming, Refusal> framing(const std::string& fields, uint64_t max = 1000,
                                           const char* version = "1.1") {
  return body_framing(parse_ok(std::string("POST /x HTTP/") + version + "\r\n" + fields + "\r\n"), max);
}
int refused_status(const std::variant<BodyFraming, Refusal>& f) {
  return std::holds_alternative<Refusal>(f) ? std::get<Refusal>(f).status : 0;
}

TEST(HttpWireTest, ParsesTheRequestHead) {
  const RequestHead h =
      parse_ok("GET /v1/models?a=b HTTP/1.0\r\nHost: x\r\nX-Long:  spaced value \t\r\n\r\n");
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.path, "/v1/models");
  EXPECT_EQ(h.query, "a=b");
  EXPECT_EQ(h.minor, 0);
  ASSERT_EQ(h.headers.size(), 2u);
  ASSERT_NE(h.find("x-long"), nullptr);
  EXPECT_EQ(*h.find("x-long"), "spaced value");
  // absolute-form and bare LF line ends
  const RequestHead a = parse_ok("POST http://example.com:80/v1/completions HTTP/1.1\nHost: y\n\n");
  EXPECT_EQ(a.path, "/v1/completions");
  EXPECT_EQ(parse_refused("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n").status, 400);  // a bare CR
  EXPECT_EQ(parse_refused("GET / HTTP/1.1\r\nA: \x01\r\n\r\n").status, 400);
}

TEST(HttpWireTest, FindsTheHeadEndAcrossPieces) {
  const std::string head = "GET / HTTP/1.1\r\nHost: x\r\n\r\nNEXT";
  size_t scanned = 0;
  for (size_t n = 1; n < head.size(); ++n) {
    const size_t end = find_head_end(std::string_view(head).substr(0, n), &scanned);
    if (n < head.size() - 4) {
      EXPECT_EQ(end, 0u) << n;
    }
    if (end) {
      EXPECT_EQ(end, head.size() - 4);
      return;
    }
  }
  FAIL() << "no end found";
}

TEST(HttpWireTest, HeadLimits) {
  HeadLimits lim;
  lim.max_request_line = 32;
  lim.max_head_bytes = 128;
  lim.max_headers = 3;
  EXPECT_EQ(check_incomplete_head("GET /" + std::string(40, 'a'), lim)->status, 414);
  EXPECT_FALSE(check_incomplete_head("GET / HTTP/1.1\r\nA: b", lim));
  EXPECT_EQ(check_incomplete_head("GET / HTTP/1.1\r\nA: " + std::string(120, 'b'), lim)->status, 431);
  EXPECT_EQ(parse_refused("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", lim).status, 431);
}

TEST(HttpWireTest, BodyFraming) {
  auto f = framing("Content-Length: 5, 5\r\nContent-Length: 005\r\n");
  ASSERT_TRUE(std::holds_alternative<BodyFraming>(f));
  EXPECT_EQ(std::get<BodyFraming>(f).length, 5u);
  EXPECT_EQ(refused_status(framing("Content-Length: 5, 6\r\n")), 400);
  EXPECT_EQ(refused_status(framing("Content-Length: -1\r\n")), 400);
  EXPECT_EQ(refused_status(framing("Content-Length: 99999999999999999999999\r\n")), 413);
  EXPECT_EQ(refused_status(framing("Content-Length: 1001\r\n")), 413);
  EXPECT_EQ(refused_status(framing("Transfer-Encoding: chunked\r\nContent-Length: 1\r\n")), 400);
  EXPECT_EQ(refused_status(framing("Transfer-Encoding: chunked\r\n", 1000, "1.0")), 400);
  EXPECT_EQ(refused_status(framing("Transfer-Encoding: gzip, chunked\r\n")), 501);
  EXPECT_EQ(refused_status(framing("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n")), 400);
  EXPECT_EQ(refused_status(framing("Transfer-Encoding: identity\r\n")), 400);
  EXPECT_EQ(refused_status(framing("Content-Length: 3\r\nExpect: 200-ok\r\n")), 417);
  EXPECT_EQ(refused_status(framing("Content-Length: 3\r\nContent-Encoding: br\r\n")), 415);
  EXPECT_EQ(refused_status(framing("Content-Length: 3\r\nContent-Encoding: gzip, gzip\r\n")), 415);
  f = framing(
      "Transfer-Encoding: Chunked\r\nContent-Encoding: x-gzip\r\nExpect: 100-Continue\r\nConnection: "
      "close\r\n");
  ASSERT_TRUE(std::holds_alternative<BodyFraming>(f));
  const BodyFraming& b = std::get<BodyFraming>(f);
  EXPECT_EQ(b.kind, BodyFraming::Kind::kChunked);
  EXPECT_EQ(b.coding, ContentCoding::kGzip);
  EXPECT_TRUE(b.expect_continue);
  EXPECT_TRUE(b.close);
}

TEST(HttpWireTest, ChunkedByteByByte) {
  const std::string wire =
      "4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  ChunkedDecoder d(1000, HeadLimits(), 100, 2);
  std::string data;
  size_t used_total = 0;
  for (size_t i = 0; i < wire.size() && !d.done(); ++i) {
    size_t used = 0;
    ASSERT_FALSE(d.feed(std::string_view(wire).substr(i, 1), &used, &data)) << i;
    used_total += used;
  }
  EXPECT_TRUE(d.done());
  EXPECT_EQ(data, "Wikipedia in\r\n\r\nchunks.");
  EXPECT_EQ(used_total, wire.size() - 4);
  // Over the limit as soon as a chunk size says so; too many trailer fields; a long size line.
  ChunkedDecoder small(10, HeadLimits(), 0, 0);
  size_t used = 0;
  EXPECT_EQ(small.feed("8\r\n12345678\r\n8\r\n", &used, &data)->status, 413);
  HeadLimits lim;
  lim.max_headers = 2;
  ChunkedDecoder trailers(100, lim, 0, 1);
  EXPECT_EQ(trailers.feed("0\r\nA: 1\r\nB: 2\r\n\r\n", &used, &data)->status, 431);
  ChunkedDecoder long_line(100, HeadLimits(), 0, 0);
  EXPECT_EQ(long_line.feed("1;" + std::string(5000, 'e'), &used, &data)->status, 400);
}

std::string gzip(const std::string& s, int bits = 31) {
  z_stream zs{};
  deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, s.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  zs.avail_in = static_cast<uInt>(s.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(out.size() - zs.avail_out);
  deflateEnd(&zs);
  return out;
}

TEST(HttpWireTest, ContentDecoder) {
  // Two gzip members, fed a byte at a time.
  const std::string two = gzip("hello ") + gzip("world");
  ContentDecoder d(ContentCoding::kGzip, 100);
  std::string body;
  for (char c : two) ASSERT_FALSE(d.feed(std::string_view(&c, 1), &body));
  EXPECT_FALSE(d.finish());
  EXPECT_EQ(body, "hello world");
  // Inflating past the limit: refused with at most the limit (plus one output block) held.
  const std::string big = gzip(std::string(1 << 20, 'z'));
  ContentDecoder bomb(ContentCoding::kGzip, 4096);
  body.clear();
  std::optional<Refusal> r = bomb.feed(big, &body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_LE(body.size(), 4096u);
  // Bytes after a deflate stream; garbage.
  ContentDecoder after(ContentCoding::kDeflate, 100);
  body.clear();
  EXPECT_EQ(after.feed(gzip("x", 15) + "junk", &body)->status, 400);
  ContentDecoder garbage(ContentCoding::kGzip, 100);
  EXPECT_EQ(garbage.feed("not gzip at all", &body)->status, 400);
}

}  // namespace
}  // namespace frost::server::http
