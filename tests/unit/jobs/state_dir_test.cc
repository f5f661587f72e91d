// resolve_data_path (core/jobs/state_dir.h).
#include "core/jobs/state_dir.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_util.h"

namespace frost::jobs {
namespace {

using ::frost::testing::read_text_file;
using ::frost::testing::write_text_file;

using ScratchDir = ::frost::testing::TempDir;  // named by its realpath (resolve_data_path compares them)

// ---- resolve_data_path ------------------------------------------------------------------------

class ResolveDataPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.file("data");
    std::filesystem::create_directories(root_ + "/sub");
    std::filesystem::create_directories(tmp_.file("data2"));
    write_text_file(root_ + "/a.txt", "a");
    write_text_file(root_ + "/sub/b.txt", "b");
    write_text_file(tmp_.file("outside.txt"), "o");
    write_text_file(tmp_.file("data2/c.txt"), "c");
    std::filesystem::create_symlink(tmp_.file("outside.txt"), root_ + "/out_link");
    std::filesystem::create_symlink(root_ + "/sub/b.txt", root_ + "/in_link");
    std::filesystem::create_symlink("sub/b.txt", root_ + "/rel_in_link");
    std::filesystem::create_symlink(tmp_.path(), root_ + "/dir_out_link");
    std::filesystem::create_symlink(tmp_.file("data2"), root_ + "/data2_link");
    std::filesystem::create_symlink(tmp_.file("gone.txt"), root_ + "/dangling_out");
    std::filesystem::create_symlink(root_ + "/gone.txt", root_ + "/dangling_in");
  }

  absl::StatusOr<std::string> resolve(const std::string& path, bool require_file = true) {
    return resolve_data_path(root_, path, "train_path", require_file);
  }
  void expect_outside(const std::string& path, const std::string& root_as_given = "") {
    const std::string r = root_as_given.empty() ? root_ : root_as_given;
    auto got = resolve_data_path(r, path, "train_path");
    ASSERT_FALSE(got.ok()) << path << " -> " << *got;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(),
              absl::StrCat("train_path: path '", path, "' is outside the data root '", r, "'"));
  }

  ScratchDir tmp_;
  std::string root_;
};

TEST_F(ResolveDataPathTest, RelativeAndAbsoluteInsideResolve) {
  auto a = resolve("a.txt");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, root_ + "/a.txt");
  auto b = resolve("sub/b.txt");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, root_ + "/sub/b.txt");
  auto abs = resolve(root_ + "/sub/b.txt");
  ASSERT_TRUE(abs.ok()) << abs.status();
  EXPECT_EQ(*abs, root_ + "/sub/b.txt");
  // '..' that stays inside, and redundant separators, are fine; the result is normalised.
  auto dots = resolve("sub/../sub/./b.txt");
  ASSERT_TRUE(dots.ok()) << dots.status();
  EXPECT_EQ(*dots, root_ + "/sub/b.txt");
  auto slashes = resolve(root_ + "//sub///b.txt");
  ASSERT_TRUE(slashes.ok()) << slashes.status();
  EXPECT_EQ(*slashes, root_ + "/sub/b.txt");
}

TEST_F(ResolveDataPathTest, EscapesAreRefused) {
  expect_outside("../outside.txt");
  expect_outside("sub/../../outside.txt");
  expect_outside(tmp_.file("outside.txt"));
  expect_outside("/etc/passwd");
  expect_outside(root_ + "/../outside.txt");
  // /data2 is not inside /data.
  expect_outside(tmp_.file("data2/c.txt"));
  expect_outside("../data2/c.txt");
  expect_outside("data2_link/c.txt");
}

TEST_F(ResolveDataPathTest, SymlinksAreFollowedAndChecked) {
  expect_outside("out_link");
  expect_outside("dir_out_link/outside.txt");
  auto in = resolve("in_link");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(*in, root_ + "/sub/b.txt");
  auto rel = resolve("rel_in_link");
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_EQ(*rel, root_ + "/sub/b.txt");

  // The root may itself be reached through a symlink, and given with a trailing slash.
  const std::string root_link = tmp_.file("root_link");
  std::filesystem::create_symlink(root_, root_link);
  auto via_link = resolve_data_path(root_link, "a.txt", "train_path");
  ASSERT_TRUE(via_link.ok()) << via_link.status();
  EXPECT_EQ(*via_link, root_ + "/a.txt");
  auto abs_via_link = resolve_data_path(root_link + "/", root_link + "/sub/b.txt", "train_path");
  ASSERT_TRUE(abs_via_link.ok()) << abs_via_link.status();
  EXPECT_EQ(*abs_via_link, root_ + "/sub/b.txt");
  expect_outside("../outside.txt", root_link);
}

TEST_F(ResolveDataPathTest, MissingPaths) {
  auto missing = resolve("missing.txt");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "train_path: 'missing.txt' does not exist");
  auto deep = resolve("sub/nope/deeper.txt");
  EXPECT_EQ(deep.status().message(), "train_path: 'sub/nope/deeper.txt' does not exist");
  auto dangling = resolve("dangling_in");
  EXPECT_EQ(dangling.status().message(), "train_path: 'dangling_in' does not exist");
  // Missing paths outside the root say "outside", not whether something exists there.
  expect_outside("../missing.txt");
  expect_outside(tmp_.file("missing.txt"));
  expect_outside("dir_out_link/missing.txt");
  expect_outside("dangling_out");
}

TEST_F(ResolveDataPathTest, EmptyNulAndDirectory) {
  auto empty = resolve("");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_MSG_HAS(empty.status(), "train_path");
  auto nul = resolve(std::string("a.txt\0../../etc/passwd", 22));
  EXPECT_EQ(nul.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_MSG_HAS(nul.status(), "train_path");

  auto dir = resolve("sub");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.status().message(), "train_path: 'sub' is not a regular file");
  auto dir_ok = resolve("sub", /*require_file=*/false);
  ASSERT_TRUE(dir_ok.ok()) << dir_ok.status();
  EXPECT_EQ(*dir_ok, root_ + "/sub");
  auto root_itself = resolve(".", /*require_file=*/false);
  ASSERT_TRUE(root_itself.ok()) << root_itself.status();
  EXPECT_EQ(*root_itself, root_);
  // Leaving the root is refused for directories too.
  auto up = resolve_data_path(root_, "..", "eval_dir", /*require_file=*/false);
  EXPECT_EQ(up.status().message(),
            absl::StrCat("eval_dir: path '..' is outside the data root '", root_, "'"));

  auto no_root = resolve_data_path(tmp_.file("no_root"), "a.txt", "train_path");
  EXPECT_EQ(no_root.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace frost::jobs
