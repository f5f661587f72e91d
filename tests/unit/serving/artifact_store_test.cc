// ArtifactStore: atomic publication, versions, activation pointer, name validation.
#include "core/serving/artifact_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/test_util.h"

namespace frost::serving {
namespace {

namespace fs = std::filesystem;

class ArtifactStoreTest : public ::testing::Test {
 protected:
  static absl::Status write_one(const std::string& dir) {
    std::ofstream(dir + "/payload.bin") << "0123456789";
    return absl::OkStatus();
  }
  ::frost::testing::TempDir tmp_{"frost_store"};
  const std::string root_ = tmp_.path();
};

TEST_F(ArtifactStoreTest, PublishListGet) {
  auto s = ArtifactStore::open(root_ + "/a");
  ASSERT_TRUE(s.ok()) << s.status();
  ArtifactMeta meta{"job-1", "stories260K", "{\"mae\":1}"};
  auto a1 = (*s)->publish("prototype", meta, write_one);
  ASSERT_TRUE(a1.ok()) << a1.status();
  EXPECT_EQ(a1->name, "prototype/1");
  auto a2 = (*s)->publish("prototype", meta, write_one);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2->name, "prototype/2");
  auto all = (*s)->list();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].job_id, "job-1");
  EXPECT_EQ((*all)[0].backbone, "stories260K");
  EXPECT_EQ((*all)[0].report_json, "{\"mae\":1}");
  EXPECT_GT((*all)[0].bytes, 10);
  EXPECT_TRUE(fs::exists((*all)[1].dir + "/payload.bin"));
  EXPECT_EQ((*s)->get("prototype/9").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ArtifactStoreTest, VerifyRefusesADamagedFileNamingIt) {
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  auto a = (*s)->publish("prototype", {"job-1", "stories260K", ""}, write_one);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->has_checksums);
  EXPECT_TRUE(fs::exists(a->dir + "/checksums.json"));
  EXPECT_TRUE((*s)->verify(*a).ok()) << (*s)->verify(*a);
  auto rewrite = [](const std::string& path, const std::string& bytes) { std::ofstream(path) << bytes; };
  // A flipped byte, a truncation, in the payload and in artifact.json (whose JSON still parses).
  rewrite(a->dir + "/payload.bin", "0123456788");
  absl::Status st = (*s)->verify(*a);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_MSG_HAS(st, a->dir + "/payload.bin");
  rewrite(a->dir + "/payload.bin", "01234");
  EXPECT_MSG_HAS((*s)->verify(*a), "5 bytes");
  rewrite(a->dir + "/payload.bin", "0123456789");
  EXPECT_TRUE((*s)->verify(*a).ok());
  const std::string info = ::frost::testing::read_text_file(a->dir + "/artifact.json");
  std::string flipped = info;
  const size_t at = flipped.find("job-1");
  ASSERT_NE(at, std::string::npos);
  flipped[at + 4] = '7';
  rewrite(a->dir + "/artifact.json", flipped);
  auto again = (*s)->get(a->name);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_MSG_HAS((*s)->verify(*again), a->dir + "/artifact.json");
  rewrite(a->dir + "/artifact.json", info);
  // checksums.json itself damaged: refused too.
  rewrite(a->dir + "/checksums.json", "{\"format\":");
  EXPECT_MSG_HAS((*s)->verify(*a), a->dir + "/checksums.json");
  // An artifact from before checksums.json (artifact.json without "checksums") passes unchecked.
  fs::remove(a->dir + "/checksums.json");
  std::string legacy = info;
  const size_t c = legacy.find("\n  \"checksums\": \"checksums.json\",");  // keys are sorted: not the last
  ASSERT_NE(c, std::string::npos) << legacy;
  legacy.erase(c, legacy.find('\n', c + 1) - c);
  rewrite(a->dir + "/artifact.json", legacy);
  auto old = (*s)->get(a->name);
  ASSERT_TRUE(old.ok()) << old.status() << legacy;
  EXPECT_FALSE(old->has_checksums);
  EXPECT_TRUE((*s)->verify(*old).ok());
}

TEST_F(ArtifactStoreTest, AFailedWriteLeavesNothingBehind) {
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  auto r = (*s)->publish("prototype", {}, [](const std::string& dir) {
    std::ofstream(dir + "/half.bin") << "x";
    return absl::CancelledError("cancelled mid-write");
  });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE((*s)->list()->empty());
  for (const auto& e : fs::directory_iterator(root_))
    EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << e.path();
}

TEST_F(ArtifactStoreTest, LeftoverTempDirectoriesOfACrashAreRemovedAndNeverListed) {
  fs::create_directories(root_ + "/.tmp-prototype-abc123");
  std::ofstream(root_ + "/.tmp-prototype-abc123/prototype.safetensors") << "partial";
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(fs::exists(root_ + "/.tmp-prototype-abc123"));
  EXPECT_TRUE((*s)->list()->empty());
}

TEST_F(ArtifactStoreTest, VersionsAreNeverReusedAfterDelete) {
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->publish("prototype", {}, write_one).ok());
  ASSERT_TRUE((*s)->publish("prototype", {}, write_one).ok());
  ASSERT_TRUE((*s)->remove("prototype/2").ok());
  EXPECT_EQ((*s)->remove("prototype/2").code(), absl::StatusCode::kNotFound);
  auto a = (*s)->publish("prototype", {}, write_one);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name, "prototype/3");
  // and after reopening (NEXT persisted)
  auto s2 = ArtifactStore::open(root_);
  EXPECT_EQ((*s2)->publish("prototype", {}, write_one)->name, "prototype/4");
}

TEST_F(ArtifactStoreTest, ActivePointerPersists) {
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE((*s)->active("prototype")->has_value());
  ASSERT_TRUE((*s)->publish("prototype", {}, write_one).ok());
  ASSERT_TRUE((*s)->set_active("prototype", "prototype/1").ok());
  auto s2 = ArtifactStore::open(root_);
  EXPECT_EQ((*s2)->active("prototype")->value_or(""), "prototype/1");
}

TEST_F(ArtifactStoreTest, NamesThatCouldEscapeTheRootAreRefused) {
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  for (const char* bad : {"../prototype/1", "prototype/../../etc", "/etc/passwd", "prototype/0",
                          "prototype/-1", "prototype/01", "Prototype/1", "prototype", "", "prototype/1/x"}) {
    EXPECT_EQ((*s)->get(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ((*s)->remove(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// artifact.json as the store wrote it before its fields had a table (core/serving/artifact_store.cc),
// verbatim: it loads, and what the store writes now is the same layout (nlohmann's dump(2), keys sorted).
TEST_F(ArtifactStoreTest, ArtifactJsonFromEarlierVersionsLoads) {
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  auto a = (*s)->publish("prototype", {"job-9", "stories260K", "{\"mae\":0.5}"}, write_one);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string now = ::frost::testing::read_text_file(a->dir + "/artifact.json");
  const std::string earlier =
      "{\n  \"backbone\": \"stories260K\",\n  \"checksums\": \"checksums.json\",\n  \"created_unix\": "
      "1780000000.25,\n  \"job_id\": \"job-9\",\n  \"kind\": \"prototype\",\n  \"report_json\": "
      "\"{\\\"mae\\\":0.5}\",\n  \"version\": 1\n}";
  // Only the time differs.
  const size_t t0 = now.find("\"created_unix\": ") + 16, t1 = now.find(',', t0);
  EXPECT_EQ(now.substr(0, t0) + "1780000000.25" + now.substr(t1), earlier);
  std::ofstream(a->dir + "/artifact.json", std::ios::trunc) << earlier;
  auto back = (*s)->get("prototype/1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "job-9");
  EXPECT_EQ(back->backbone, "stories260K");
  EXPECT_EQ(back->report_json, "{\"mae\":0.5}");
  EXPECT_EQ(back->created_unix, 1780000000.25);
  EXPECT_TRUE(back->has_checksums);
  // A field a later version adds is skipped.
  std::ofstream(a->dir + "/artifact.json", std::ios::trunc) << R"({"job_id": "job-9", "signed_by": "ops"})";
  auto later = (*s)->get("prototype/1");
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->job_id, "job-9");
  EXPECT_FALSE(later->has_checksums);
}

// A field of artifact.json with another JSON type is DATA_LOSS naming it, not an uncaught exception
// (json::value() throws type_error; found by tests/fuzz/artifact_manifest_fuzz.cc). list() skips it.
TEST_F(ArtifactStoreTest, MistypedArtifactJsonFieldIsDataLoss) {
  auto s = ArtifactStore::open(root_);
  ASSERT_TRUE(s.ok());
  auto a = (*s)->publish("prototype", {"job-1", "m", ""}, write_one);
  ASSERT_TRUE(a.ok()) << a.status();
  std::ofstream(a->dir + "/artifact.json", std::ios::trunc)
      << R"({"job_id": "job-1", "backbone": {"name": "m"}})";
  const absl::Status st = (*s)->get("prototype/1").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_MSG_HAS(st, "artifact.json: backbone: expected a string, got {\"name\":\"m\"}");
  auto all = (*s)->list();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->empty());
}

}  // namespace
}  // namespace frost::serving
