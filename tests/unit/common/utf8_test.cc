#include "core/common/utf8.h"

#include <c10/util/Exception.h>

#include <gtest/gtest.h>

#include "core/common/cancel.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"

namespace frost {
namespace {

TEST(Utf8Test, Validity) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xE2\x96"));          // truncated
  EXPECT_FALSE(is_valid_utf8("\xFF"));
}

TEST(Utf8Test, ValidPrefixStopsAtTheFirstBadByte) {
  EXPECT_EQ(utf8_valid_prefix(""), 0u);
  EXPECT_EQ(utf8_valid_prefix("caf\xC3\xA9"), 5u);
  EXPECT_EQ(utf8_valid_prefix("ab\xFF\xFE"), 2u);         // never valid, mid-string
  EXPECT_EQ(utf8_valid_prefix("a\xC0\xAF"), 1u);          // overlong
  EXPECT_EQ(utf8_valid_prefix("a\xED\xA0\x80"), 1u);      // surrogate
  EXPECT_EQ(utf8_valid_prefix("\xC3\xA9x\xE2\x96"), 3u);  // truncated at the end
}

TEST(Utf8Test, EmittablePrefixHoldsBackOnlyIncompleteSequences) {
  EXPECT_EQ(utf8_emittable_prefix("ab\xE2\x96"), 2u);           // possibly valid: hold
  EXPECT_EQ(utf8_emittable_prefix("ab\xE2\x96\x81"), 5u);       // complete
  EXPECT_EQ(utf8_emittable_prefix("ab\xFF"), 3u);               // never valid: emit
  EXPECT_EQ(utf8_emittable_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(utf8_emittable_prefix("\xE2\x41"), 2u);             // broken, then 'A'
}

TEST(Utf8Test, SanitizeReplacesMaximalInvalidSubparts) {
  EXPECT_EQ(sanitize_utf8("ok"), "ok");
  EXPECT_EQ(sanitize_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(sanitize_utf8("\xE2\x96" "A"), "\xEF\xBF\xBD" "A");  // one U+FFFD for the subpart
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_TRUE(is_valid_utf8(sanitize_utf8("\x80\x80\xC3")));
}

TEST(Utf8Test, AppendEncodesEveryLength) {
  std::string s;
  for (char32_t cp : {U'A', U'\u00E9', U'\u2581', U'\U0001F600'}) append_utf8(s, cp);
  EXPECT_EQ(s, "A\xC3\xA9\xE2\x96\x81\xF0\x9F\x98\x80");
}

TEST(TorchStatusTest, MapsExceptionsToCodes) {
  EXPECT_TRUE(torch_call([] {}).ok());
  auto v = torch_call([] { return 7; });
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  auto e = torch_call([]() -> int {
    TORCH_CHECK(false, "shape mismatch 3 vs 4");
    return 0;
  });
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(e.status().message().find("shape mismatch 3 vs 4"), std::string::npos);
  auto n = torch_call([] { TORCH_CHECK_NOT_IMPLEMENTED(false, "no kernel"); });
  EXPECT_EQ(n.code(), absl::StatusCode::kUnimplemented);
}

TEST(CancelTokenTest, CancelAndDeadline) {
  FakeClock clock;
  CancelToken t(&clock);
  EXPECT_EQ(t.state(), CancelToken::State::kRunning);
  t.set_timeout_s(1.0);
  clock.advance_ns(999'999'999);
  EXPECT_FALSE(t.stop_requested());
  clock.advance_ns(1);
  EXPECT_EQ(t.state(), CancelToken::State::kDeadlineExceeded);
  t.cancel();
  EXPECT_EQ(t.state(), CancelToken::State::kCancelled);  // explicit cancel wins
}

absl::StatusOr<int> half(int x) {
  if (x % 2) return absl::InvalidArgumentError("odd");
  return x / 2;
}
absl::StatusOr<int> quarter(int x) {
  FROST_ASSIGN_OR_RETURN(int h, half(x));
  FROST_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(StatusMacrosTest, PropagateErrors) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frost
