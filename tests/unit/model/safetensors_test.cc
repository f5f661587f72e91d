// SafetensorsFile: round trips through view() and every rejection documented in safetensors.h.
#include "core/store/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/st_writer.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

using ::frost::testing::NamedTensors;
using ::frost::testing::safetensors_bytes;
using ::frost::testing::TempDir;
using ::frost::testing::write_text_file;

// A file from a raw header string and data section (no padding added).
std::string raw_file(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

absl::Status parse_bytes(const std::string& bytes, const SafetensorsLimits& limits = {}) {
  return SafetensorsFile::from_bytes(bytes, "t.safetensors", limits).status();
}

// ---- positive cases -------------------------------------------------------------------------

TEST(SafetensorsTest, DtypeNamesAndSizes) {
  EXPECT_STREQ(st_dtype_name(StDtype::kF32), "F32");
  EXPECT_STREQ(st_dtype_name(StDtype::kF16), "F16");
  EXPECT_STREQ(st_dtype_name(StDtype::kBF16), "BF16");
  EXPECT_EQ(st_dtype_size(StDtype::kF32), 4);
  EXPECT_EQ(st_dtype_size(StDtype::kF16), 2);
  EXPECT_EQ(st_dtype_size(StDtype::kBF16), 2);
  EXPECT_STREQ(st_dtype_name(StDtype::kF64), "F64");
  EXPECT_EQ(st_dtype_size(StDtype::kF64), 8);
  StTensorInfo info;
  info.shape = {3, 4, 5};
  EXPECT_EQ(info.numel(), 60);
  info.shape = {};
  EXPECT_EQ(info.numel(), 1);
  info.shape = {7, 0};
  EXPECT_EQ(info.numel(), 0);
}

TEST(SafetensorsTest, RoundTripAllDtypesFromFile) {
  const at::Tensor a = at::arange(12, at::kFloat).reshape({3, 4}) * 0.5 - 2.0;
  const at::Tensor b = (at::arange(6, at::kFloat) * 0.25).to(at::kHalf);
  const at::Tensor c = (at::arange(5, at::kFloat) - 2.0).reshape({5, 1}).to(at::kBFloat16);
  const at::Tensor d = at::arange(3, at::kDouble) / 3.0;  // not representable in float: F64 keeps it
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_text_file(path, safetensors_bytes({{"d", d}, {"a", a}, {"b", b}, {"c", c}}));  // d first: 8-aligned

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->path(), path);
  ASSERT_EQ((*f)->tensors().size(), 4u);
  struct Expect {
    const char* name;
    StDtype dt;
    at::ScalarType st;
    const at::Tensor* t;
  };
  for (const Expect& e : {Expect{"a", StDtype::kF32, at::kFloat, &a}, Expect{"b", StDtype::kF16, at::kHalf, &b},
                          Expect{"c", StDtype::kBF16, at::kBFloat16, &c}, Expect{"d", StDtype::kF64, at::kDouble, &d}}) {
    SCOPED_TRACE(e.name);
    const StTensorInfo* info = (*f)->find(e.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, e.dt);
    EXPECT_EQ(info->shape, e.t->sizes().vec());
    EXPECT_EQ(info->numel(), e.t->numel());
    at::Tensor v = (*f)->view(*info);
    EXPECT_EQ(v.scalar_type(), e.st);
    EXPECT_EQ(v.sizes(), e.t->sizes());
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_TRUE(at::equal(v, *e.t));
    // Zero copy: two views share the mapped bytes.
    EXPECT_EQ((*f)->view(*info).data_ptr(), v.data_ptr());
  }
  EXPECT_EQ((*f)->find("missing"), nullptr);
}

TEST(SafetensorsTest, TensorsSortedByOffsetAndContiguous) {
  // Written in the order z, a, m: tensors() is sorted by offset, not by name.
  const std::string bytes = safetensors_bytes(
      {{"z", at::ones({2}, at::kFloat)}, {"a", at::zeros({3}, at::kHalf)}, {"m", at::ones({1, 2}, at::kFloat)}});
  auto f = SafetensorsFile::from_bytes(bytes, "mem");
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& ts = (*f)->tensors();
  ASSERT_EQ(ts.size(), 3u);
  EXPECT_EQ(ts[0].name, "z");
  EXPECT_EQ(ts[1].name, "a");
  EXPECT_EQ(ts[2].name, "m");
  EXPECT_EQ(ts[0].begin, 0u);
  EXPECT_EQ(ts[0].end, 8u);
  EXPECT_EQ(ts[1].begin, 8u);
  EXPECT_EQ(ts[1].end, 14u);
  EXPECT_EQ(ts[2].begin, 14u);
  EXPECT_EQ(ts[2].end, 22u);
  // "m" starts at data offset 14: not 4-byte aligned, still read correctly.
  EXPECT_TRUE(at::equal((*f)->view(ts[2]), at::ones({1, 2}, at::kFloat)));
}

TEST(SafetensorsTest, Metadata) {
  const std::string bytes =
      safetensors_bytes({{"w", at::ones({2}, at::kFloat)}}, {{"format", "pt"}, {"note", "hello"}});
  auto f = SafetensorsFile::from_bytes(bytes, "mem");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().size(), 2u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->metadata().at("note"), "hello");
  EXPECT_EQ((*f)->find("__metadata__"), nullptr);
  EXPECT_EQ((*f)->tensors().size(), 1u);
}

TEST(SafetensorsTest, ZeroSizeAndScalarTensors) {
  const at::Tensor empty = at::zeros({0, 4}, at::kFloat);
  const at::Tensor scalar = at::full({}, 3.5, at::kFloat);
  const std::string bytes = safetensors_bytes(
      {{"before", at::ones({2}, at::kFloat)},
       {"empty", empty},
       {"scalar", scalar},
       {"tail_empty", at::zeros({0}, at::kHalf)}});
  auto f = SafetensorsFile::from_bytes(bytes, "mem");
  ASSERT_TRUE(f.ok()) << f.status();
  const StTensorInfo* e = (*f)->find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->begin, e->end);
  at::Tensor ev = (*f)->view(*e);
  EXPECT_EQ(ev.sizes(), empty.sizes());
  EXPECT_EQ(ev.numel(), 0);
  const StTensorInfo* s = (*f)->find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ((*f)->view(*s).item<float>(), 3.5f);
  const StTensorInfo* t = (*f)->find("tail_empty");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ((*f)->view(*t).numel(), 0);
}

TEST(SafetensorsTest, EmptyHeaderObjectIsValid) {
  auto f = SafetensorsFile::from_bytes(raw_file("{}"), "mem");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(SafetensorsTest, UnpaddedHeaderGivesMisalignedDataButCorrectValues) {
  // Header length 61 (odd): the data section starts at an odd address.
  const std::string h = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string data(8, '\0');
  const float vals[2] = {1.25f, -7.0f};
  std::memcpy(data.data(), vals, 8);
  auto f = SafetensorsFile::from_bytes(raw_file(h, data), "mem");
  ASSERT_TRUE(f.ok()) << f.status();
  at::Tensor v = (*f)->view(*(*f)->find("x"));
  EXPECT_EQ(v[0].item<float>(), 1.25f);
  EXPECT_EQ(v[1].item<float>(), -7.0f);
}

TEST(SafetensorsTest, OpenMissingFileIsNotFound) {
  TempDir dir;
  auto f = SafetensorsFile::open(dir.file("nope.safetensors"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_MSG_HAS(f.status(), "nope.safetensors");
}

TEST(SafetensorsTest, OpenDirectoryIsRejected) {
  TempDir dir;
  EXPECT_INVALID(SafetensorsFile::open(dir.path()).status(), "not a regular file");
}

TEST(SafetensorsTest, CloneOutlivesTheFile) {
  at::Tensor kept;
  {
    auto f = SafetensorsFile::from_bytes(safetensors_bytes({{"w", at::full({4}, 2.0, at::kFloat)}}), "mem");
    ASSERT_TRUE(f.ok()) << f.status();
    kept = (*f)->view(*(*f)->find("w")).clone();
  }
  EXPECT_TRUE(at::equal(kept, at::full({4}, 2.0, at::kFloat)));
}

TEST(SafetensorsTest, OpensSharedStories260K) {
  FROST_REQUIRE_SHARED(path, "models/stories260K/model.safetensors");
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  // embed + 5 layers * 9 + final norm; tied, so no lm_head.
  EXPECT_EQ((*f)->tensors().size(), 47u);
  const StTensorInfo* emb = (*f)->find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, StDtype::kF32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{512, 64}));
  const StTensorInfo* k = (*f)->find("model.layers.4.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ((*f)->find("lm_head.weight"), nullptr);
  EXPECT_TRUE(at::isfinite((*f)->view(*emb)).all().item<bool>());
  EXPECT_TRUE(check_not_pickle(path).ok());
}

// ---- file-level rejections ------------------------------------------------------------------

TEST(SafetensorsTest, RejectsEmptyFile) {
  EXPECT_INVALID(parse_bytes(""), "empty file");
  TempDir dir;
  write_text_file(dir.file("e.safetensors"), "");
  const absl::Status s = SafetensorsFile::open(dir.file("e.safetensors")).status();
  EXPECT_INVALID(s, "empty file");
  EXPECT_MSG_HAS(s, "e.safetensors");
}

TEST(SafetensorsTest, RejectsFileShorterThanLengthPrefix) {
  EXPECT_INVALID(parse_bytes("abc"), "shorter than the 8-byte header length");
}

TEST(SafetensorsTest, RejectsHeaderLengthPastEnd) {
  std::string bytes = safetensors_bytes({{"w", at::ones({2}, at::kFloat)}});
  bytes[0] = static_cast<char>(0xff);
  bytes[1] = static_cast<char>(0x7f);
  EXPECT_INVALID(parse_bytes(bytes), "extends past the end of the file");
  // Truncated in the middle of the header.
  const std::string good = safetensors_bytes({{"w", at::ones({2}, at::kFloat)}});
  EXPECT_INVALID(parse_bytes(good.substr(0, 20)), "extends past the end of the file");
}

TEST(SafetensorsTest, RejectsHeaderLongerThanLimit) {
  SafetensorsLimits lim;
  lim.max_header_bytes = 16;
  EXPECT_INVALID(parse_bytes(safetensors_bytes({{"w", at::ones({2}, at::kFloat)}}), lim), "exceeds the limit");
  // Default limit (100 MiB) with a huge claimed length.
  std::string bytes(16, '\0');
  bytes[6] = 1;  // 2^48
  EXPECT_INVALID(parse_bytes(bytes), "exceeds the limit");
}

TEST(SafetensorsTest, RejectsTruncatedData) {
  const std::string good = safetensors_bytes({{"a", at::ones({4}, at::kFloat)}, {"b", at::ones({4}, at::kFloat)}});
  const absl::Status s = parse_bytes(good.substr(0, good.size() - 3));
  EXPECT_INVALID(s, "tensor 'b'");
  EXPECT_MSG_HAS(s, "extend past the data section");
}

TEST(SafetensorsTest, RejectsNonJsonHeader) {
  const absl::Status s = parse_bytes(raw_file("this is not json"));
  EXPECT_INVALID(s, "header is not valid JSON");
  EXPECT_MSG_HAS(s, "t.safetensors");
  EXPECT_INVALID(parse_bytes(raw_file("{\"a\": ")), "header is not valid JSON");
  EXPECT_INVALID(parse_bytes(raw_file("")), "header is not valid JSON");
  EXPECT_INVALID(parse_bytes(raw_file("{} trailing")), "header is not valid JSON");
  EXPECT_INVALID(parse_bytes(raw_file(std::string("{\"\xff\": 1}"))), "header is not valid JSON");
}

TEST(SafetensorsTest, RejectsNonObjectHeader) {
  EXPECT_INVALID(parse_bytes(raw_file("[1, 2]")), "expected an object");
  EXPECT_INVALID(parse_bytes(raw_file("42")), "expected an object");
}

TEST(SafetensorsTest, RejectsDeeplyNestedHeader) {
  EXPECT_INVALID(parse_bytes(raw_file(std::string(100000, '['))), "nests deeper");
}

TEST(SafetensorsTest, RejectsBadMetadata) {
  EXPECT_INVALID(parse_bytes(raw_file(R"({"__metadata__": {"k": 1}})")), "__metadata__ value for key 'k'");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"__metadata__": ["x"]})")), "__metadata__ must be an object");
}

TEST(SafetensorsTest, RejectsDuplicateTensorName) {
  const std::string h =
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h, std::string(8, '\0'))), "duplicate tensor name 'w'");
}

TEST(SafetensorsTest, RejectsDuplicateKeyInsideEntry) {
  const std::string h = R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h, std::string(4, '\0'))), "duplicate key 'dtype'");
}

// ---- per-tensor rejections ------------------------------------------------------------------

TEST(SafetensorsTest, RejectsUnsupportedDtypes) {
  for (const char* dt : {"I64", "U8", "I32", "BOOL", "F8_E4M3", "f32"}) {
    SCOPED_TRACE(dt);
    const std::string h = std::string(R"({"x":{"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,8]}})";
    EXPECT_INVALID(parse_bytes(raw_file(h, std::string(8, '\0'))),
                   std::string("unsupported dtype '") + dt + "' for tensor 'x'");
  }
}

TEST(SafetensorsTest, RejectsMissingOrMistypedFields) {
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", "abcd")),
                 "tensor 'x': missing string field 'dtype'");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","data_offsets":[0,4]}})", "abcd")),
                 "tensor 'x': missing array field 'shape'");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","shape":[1]}})", "abcd")),
                 "tensor 'x': 'data_offsets' must be an array");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd")),
                 "tensor 'x': 'data_offsets' must be an array");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":[1,2]})")), "tensor 'x': entry must be an object");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "abcd")),
                 "tensor 'x': missing string field 'dtype'");
}

TEST(SafetensorsTest, RejectsBadShapes) {
  for (const char* shape : {"[-1]", "[1.5]", "[\"2\"]", "[null]", "[2, -3]", "[true]"}) {
    SCOPED_TRACE(shape);
    const std::string h = std::string(R"({"x":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,4]}})";
    EXPECT_INVALID(parse_bytes(raw_file(h, "abcd")), "tensor 'x': shape");
  }
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","shape":5,"data_offsets":[0,4]}})", "abcd")),
                 "tensor 'x': missing array field 'shape'");
}

TEST(SafetensorsTest, RejectsRankAboveLimit) {
  const std::string h = R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h, "abcd")), "tensor 'x': rank 9 exceeds the limit of 8");
  SafetensorsLimits lim;
  lim.max_rank = 2;
  const std::string h3 = R"({"x":{"dtype":"F32","shape":[1,1,1],"data_offsets":[0,4]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h3, "abcd"), lim), "rank 3 exceeds the limit of 2");
}

TEST(SafetensorsTest, RejectsNumelOverflow) {
  const std::string h =
      R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h, "abcd")), "tensor 'x': shape [4294967296, 4294967296, 16] overflows");
  // numel fits in int64 but numel * 4 bytes does not.
  const std::string h2 = R"({"x":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h2, "abcd")), "tensor 'x': shape [4611686018427387904] overflows");
  // A dimension beyond int64.
  const std::string h3 = R"({"x":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h3, "abcd")), "tensor 'x': shape");
}

TEST(SafetensorsTest, RejectsBadOffsets) {
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "abcd")),
                 "tensor 'x': data_offsets [4, 0] has begin > end");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", "abcd")),
                 "tensor 'x': data_offsets [0, 8] extend past the data section (4 bytes)");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd")),
                 "tensor 'x': data_offsets [-4,0] must be non-negative integers");
  EXPECT_INVALID(parse_bytes(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", "abcd")),
                 "tensor 'x': data_offsets");
}

TEST(SafetensorsTest, RejectsByteSpanMismatch) {
  // 3 floats need 12 bytes, the offsets span 8.
  const std::string h = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h, std::string(8, '\0'))),
                 "tensor 'x': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8");
  // F16 vs F32 confusion.
  const std::string h2 = R"({"y":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h2, std::string(8, '\0'))), "tensor 'y': shape [2] of F16 needs 4 bytes");
}

TEST(SafetensorsTest, RejectsOverlap) {
  const std::string h =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const absl::Status s = parse_bytes(raw_file(h, std::string(12, '\0')));
  EXPECT_INVALID(s, "tensor 'b' data_offsets [4, 12] overlap tensor 'a'");
  // Two tensors on the very same bytes.
  const std::string h2 =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h2, std::string(4, '\0'))), "overlap tensor 'a'");
}

TEST(SafetensorsTest, RejectsGap) {
  const std::string h =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h, std::string(12, '\0'))), "gap of 4 unused bytes before tensor 'b'");
  // Data that does not start at offset 0.
  const std::string h2 = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_INVALID(parse_bytes(raw_file(h2, std::string(8, '\0'))), "gap of 4 unused bytes before tensor 'a'");
}

TEST(SafetensorsTest, RejectsTrailingBytes) {
  std::string bytes = safetensors_bytes({{"w", at::ones({2}, at::kFloat)}});
  bytes += "xyz";
  EXPECT_INVALID(parse_bytes(bytes), "3 trailing bytes after the last tensor");
  EXPECT_INVALID(parse_bytes(raw_file("{}", "x")), "1 trailing bytes");
}

TEST(SafetensorsTest, RejectsTooManyTensors) {
  SafetensorsLimits lim;
  lim.max_tensors = 2;
  const std::string bytes = safetensors_bytes(
      {{"a", at::ones({1}, at::kFloat)}, {"b", at::ones({1}, at::kFloat)}, {"c", at::ones({1}, at::kFloat)}});
  EXPECT_INVALID(parse_bytes(bytes, lim), "more than 2 tensors");
}

TEST(SafetensorsTest, RejectsPickleAndZipBytesWithFormatMessage) {
  const std::string pickle = std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);
  EXPECT_INVALID(parse_bytes(pickle), "unsupported format: use safetensors");
  const std::string zip = std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + "archive/data.pkl";
  EXPECT_INVALID(parse_bytes(zip), "unsupported format: use safetensors");
}

// ---- robustness: truncations and random corruptions -----------------------------------------

// Reads every byte a view exposes with memcpy (which ASan checks), so an out-of-bounds view
// fails loudly under the sanitizer build.
void touch_all(const SafetensorsFile& f) {
  for (const StTensorInfo& t : f.tensors()) {
    at::Tensor v = f.view(t);
    const size_t nbytes = static_cast<size_t>(t.end - t.begin);
    ASSERT_EQ(static_cast<size_t>(v.numel() * v.element_size()), nbytes) << t.name;
    std::vector<char> buf(nbytes);
    if (nbytes > 0) std::memcpy(buf.data(), v.data_ptr(), nbytes);
  }
}

TEST(SafetensorsTest, EveryTruncationIsRejectedCleanly) {
  const std::string good = safetensors_bytes(
      {{"a", at::ones({3, 5}, at::kFloat)}, {"b", at::ones({7}, at::kHalf)}, {"c", at::ones({2, 2}, at::kBFloat16)}},
      {{"k", "v"}});
  for (size_t n = 0; n < good.size(); ++n) {
    auto f = SafetensorsFile::from_bytes(good.substr(0, n), "cut");
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes was accepted";
    ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  }
  auto f = SafetensorsFile::from_bytes(good, "whole");
  ASSERT_TRUE(f.ok()) << f.status();
  touch_all(**f);
}

TEST(SafetensorsTest, RandomCorruptionsNeverCrash) {
  const std::string good = safetensors_bytes(
      {{"w0", at::ones({4, 3}, at::kFloat)}, {"w1", at::zeros({0}, at::kHalf)}, {"w2", at::ones({5}, at::kBFloat16)}});
  uint64_t state = 0x9E3779B97F4A7C15ull;  // fixed seed: the test is deterministic
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const char kJsonish[] = "{}[]\",:0123456789-eE. FBI";
  int accepted = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::string b = good;
    const int n_edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < n_edits; ++e) {
      const size_t pos = next() % b.size();
      switch (next() % 4) {
        case 0: b[pos] = static_cast<char>(next()); break;                               // random byte
        case 1: b[pos] = kJsonish[next() % (sizeof(kJsonish) - 1)]; break;               // JSON-ish byte
        case 2: b.erase(pos, 1 + next() % 8); break;                                      // delete
        case 3: b.insert(pos, std::string(1 + next() % 8, kJsonish[next() % 10])); break;  // insert
      }
      if (b.empty()) b = "x";
    }
    auto f = SafetensorsFile::from_bytes(b, "fuzz");
    if (f.ok()) {
      ++accepted;
      touch_all(**f);
    } else {
      ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
    }
  }
  // Some edits land in the data section or header padding and keep the file valid.
  EXPECT_GT(accepted, 0);
}

// ---- check_not_pickle -----------------------------------------------------------------------

TEST(CheckNotPickleTest, RefusesByExtension) {
  TempDir dir;
  for (const char* name : {"pytorch_model.bin", "model.pt", "model.PTH", "last.ckpt", "x.pkl", "x.pickle"}) {
    SCOPED_TRACE(name);
    const std::string path = dir.file(name);
    write_text_file(path, "anything");
    const absl::Status s = check_not_pickle(path);
    EXPECT_INVALID(s, "unsupported format: use safetensors");
    EXPECT_MSG_HAS(s, name);
    // By name alone: the file need not exist.
    EXPECT_INVALID(check_not_pickle(dir.file(std::string("absent_") + name)), "unsupported format: use safetensors");
  }
}

TEST(CheckNotPickleTest, RefusesByMagic) {
  TempDir dir;
  for (int proto = 2; proto <= 5; ++proto) {
    const std::string path = dir.file("p" + std::to_string(proto) + ".safetensors");
    write_text_file(path, std::string("\x80") + static_cast<char>(proto) + std::string("}q\x00(X\x01\x00\x00\x00", 9));
    EXPECT_INVALID(check_not_pickle(path), "unsupported format: use safetensors");
  }
  const std::string zip = dir.file("model.safetensors");
  write_text_file(zip, std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + "model/data.pkl");
  const absl::Status s = check_not_pickle(zip);
  EXPECT_INVALID(s, "unsupported format: use safetensors");
  EXPECT_MSG_HAS(s, "zip");
}

TEST(CheckNotPickleTest, AcceptsSafetensorsAndOtherFiles) {
  TempDir dir;
  const std::string st = dir.file("model.safetensors");
  write_text_file(st, safetensors_bytes({{"w", at::ones({2}, at::kFloat)}}));
  EXPECT_TRUE(check_not_pickle(st).ok());
  const std::string cfg = dir.file("config.json");
  write_text_file(cfg, "{}");
  EXPECT_TRUE(check_not_pickle(cfg).ok());
  const std::string tiny = dir.file("x");
  write_text_file(tiny, "\x80");
  EXPECT_TRUE(check_not_pickle(tiny).ok());
  EXPECT_TRUE(check_not_pickle(dir.file("absent.safetensors")).ok());
  EXPECT_TRUE(check_not_pickle(dir.path() + "/dir.bin/config").ok());  // a dot in a folder name
}

TEST(CheckNotPickleTest, ValidSafetensorsWhoseLengthLooksLikePickleMagic) {
  // Header length 0x280 = 640 gives leading bytes 80 02, the pickle protocol-2 magic. The
  // header is real JSON where the length says, so it is a safetensors file, not a pickle.
  std::string h = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  h.resize(640, ' ');
  const std::string bytes = raw_file(h, "abcd");
  ASSERT_EQ(static_cast<uint8_t>(bytes[0]), 0x80);
  ASSERT_EQ(static_cast<uint8_t>(bytes[1]), 0x02);
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_text_file(path, bytes);
  EXPECT_TRUE(check_not_pickle(path).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 1u);
}

}  // namespace
}  // namespace frost
