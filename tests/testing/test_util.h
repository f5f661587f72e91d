#pragma once
// Shared test helpers: where ../shared lives, temp dirs, tensor comparison.
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace frost::testing {

// Absolute path of the project's sibling shared/ folder ("" when absent). Honors
// $FROST_SHARED_DIR when set.
std::string shared_dir();
// shared_dir() + "/" + rel, or "" when shared/ (or that path) is absent.
std::string shared_path(const std::string& rel);
// Absolute path of a file in the source tree.
std::string source_path(const std::string& rel);

// A fresh empty directory under $TMPDIR, named by its realpath, removed with its contents by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "frost_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_text_file(const std::string& path, const std::string& contents);
std::string read_text_file(const std::string& path);

// Max |a - b| over all elements (both converted to double).
double max_abs_diff(const at::Tensor& a, const at::Tensor& b);

}  // namespace frost::testing

// Skips the test visibly when shared/ or a file in it is missing.
#define FROST_REQUIRE_SHARED(var, rel)                                          \
  const std::string var = ::frost::testing::shared_path(rel);                  \
  if (var.empty()) GTEST_SKIP() << "../shared absent: " << (rel) << " not found"

// The message of `status` contains `substr`.
#define EXPECT_MSG_HAS(status, substr)                                        \
  EXPECT_NE(std::string((status).message()).find(substr), std::string::npos) \
      << "message lacks \"" << (substr) << "\": " << (status)

// `status_expr` is INVALID_ARGUMENT and its message contains `substr`.
#define EXPECT_INVALID(status_expr, substr)                           \
  do {                                                                \
    const absl::Status st_ = (status_expr);                           \
    EXPECT_EQ(st_.code(), absl::StatusCode::kInvalidArgument) << st_; \
    EXPECT_MSG_HAS(st_, substr);                                      \
  } while (0)

#define EXPECT_TENSOR_NEAR(a, b, atol)                                           \
  do {                                                                           \
    const double frost_d_ = ::frost::testing::max_abs_diff((a), (b));            \
    EXPECT_LE(frost_d_, (atol)) << "max |" #a " - " #b "| = " << frost_d_;        \
  } while (0)
