// StateDirLock (core/serving/state_dir_lock.h).
#include "core/serving/state_dir_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_util.h"

namespace frost::serving {
namespace {

using ::frost::testing::read_text_file;
using ::frost::testing::write_text_file;

using ScratchDir = ::frost::testing::TempDir;  // named by its realpath (resolve_data_path compares them)

// ---- StateDirLock ----------------------------------------------------------------------------

TEST(StateDirLockTest, SecondAcquireFailsWhileHeldAndSucceedsAfterRelease) {
  ScratchDir tmp;
  const std::string dir = tmp.file("state/nested");  // created by acquire()
  auto first = StateDirLock::acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  EXPECT_EQ(read_text_file(dir + "/LOCK"), absl::StrCat(::getpid(), "\n"));

  auto second = StateDirLock::acquire(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_EQ(second.status().message(),
            absl::StrCat("state directory '", dir, "' is in use by another frostd (pid ", ::getpid(), ")"));
  // The failed attempt did not disturb the holder's pid.
  EXPECT_EQ(read_text_file(dir + "/LOCK"), absl::StrCat(::getpid(), "\n"));

  first->reset();
  auto third = StateDirLock::acquire(dir);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(read_text_file(dir + "/LOCK"), absl::StrCat(::getpid(), "\n"));

  // A different directory is independent.
  auto other = StateDirLock::acquire(tmp.file("other"));
  EXPECT_TRUE(other.ok()) << other.status();
}

TEST(StateDirLockTest, LockOfAProcessKilledWithSigkillIsReleased) {
  ScratchDir tmp;
  const std::string dir = tmp.file("state");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    ::alarm(60);  // never outlive a broken parent
    auto lock = StateDirLock::acquire(dir);
    const char c = lock.ok() ? 'y' : 'n';
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    while (true) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');

  auto blocked = StateDirLock::acquire(dir);
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kFailedPrecondition) << blocked.status();
  EXPECT_MSG_HAS(blocked.status(), absl::StrCat("(pid ", child, ")"));

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);

  auto after = StateDirLock::acquire(dir);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(read_text_file(dir + "/LOCK"), absl::StrCat(::getpid(), "\n"));
}

TEST(StateDirLockTest, UnusableDirectory) {
  ScratchDir tmp;
  EXPECT_EQ(StateDirLock::acquire("").status().code(), absl::StatusCode::kInvalidArgument);
  write_text_file(tmp.file("plain"), "x");
  auto st = StateDirLock::acquire(tmp.file("plain"));
  EXPECT_FALSE(st.ok());
  EXPECT_MSG_HAS(st.status(), tmp.file("plain"));
}

}  // namespace
}  // namespace frost::serving
