// core/common/fs.h: reading files and checking configured paths never blocks on, or silently accepts, a path of
// the wrong kind (a FIFO used to hang start-up; a directory used to read as an empty config).
#include "core/common/fs.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

namespace frost {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string t = ::testing::TempDir() + "frost_fs_XXXXXX";
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string file(const std::string& n) const { return path_ + "/" + n; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

TEST(ReadFile, ReadsARegularFileAndHonoursTheLimit) {
  TempDir d;
  write(d.file("a"), "hello");
  absl::StatusOr<std::string> r = read_file(d.file("a"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "hello");
  r = read_file(d.file("a"), 4, "limits.x");
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("larger than limits.x=4"), std::string::npos) << r.status();
  EXPECT_TRUE(absl::IsNotFound(read_file(d.file("missing")).status()));
}

TEST(ReadFile, AFifoIsRefusedAtOnceNotWaitedOn) {
  TempDir d;
  const std::string fifo = d.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> r = read_file(fifo);  // no writer: a blocking open would never return
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("is a FIFO, not a regular file"), std::string::npos) << r.status();
  EXPECT_LT(s, 1.0);
  EXPECT_FALSE(open_regular_file(fifo).ok());
}

TEST(ReadFile, DirectoriesAndDevicesAreRefusedNamingWhatTheyAre) {
  TempDir d;
  absl::StatusOr<std::string> r = read_file(d.path());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("is a directory"), std::string::npos) << r.status();
  r = read_file("/dev/zero");  // would otherwise read forever
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("a character device"), std::string::npos) << r.status();
}

TEST(CheckPath, NamesTheFieldThePathAndWhatItIsInstead) {
  TempDir d;
  write(d.file("f"), "x");
  EXPECT_TRUE(check_path("a.file", d.file("f"), PathKind::kRegularFile).ok());
  EXPECT_TRUE(check_path("a.dir", d.path(), PathKind::kDirectory).ok());
  EXPECT_TRUE(check_path("a.dir", d.file("absent"), PathKind::kDirectoryOrAbsent).ok());

  absl::Status st = check_path("jobs.state_dir", d.file("f"), PathKind::kDirectoryOrAbsent);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_EQ(st.message(), "jobs.state_dir: \"" + d.file("f") + "\" is a regular file, not a directory");
  st = check_path("model.chat_template", d.path(), PathKind::kRegularFile);
  EXPECT_EQ(st.message(), "model.chat_template: \"" + d.path() + "\" is a directory, not a regular file");
  st = check_path("model.path", d.file("absent"), PathKind::kDirectory);
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  EXPECT_EQ(st.message(), "model.path: \"" + d.file("absent") + "\" does not exist");

  const std::string fifo = d.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  st = check_path("server.tls.key_file", fifo, PathKind::kRegularFile);
  EXPECT_EQ(st.message(), "server.tls.key_file: \"" + fifo + "\" is a FIFO, not a regular file");

  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sp = d.file("s");
  if (sp.size() < sizeof(addr.sun_path)) {
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sp.c_str());
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    st = check_path("auth.user_token_file", sp, PathKind::kRegularFile);
    EXPECT_NE(st.message().find("is a socket, not a regular file"), std::string::npos) << st;
  }
  ::close(sock);
}

}  // namespace
}  // namespace frost
