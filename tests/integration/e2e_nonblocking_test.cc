// End-to-end: gRPC callback threads only validate and enqueue (server/unary.h). While slow control-plane
// calls are in flight — ActivateArtifact hashing a large artifact file, SubmitJob reading a calibration file
// of tens of MB — Health.Check and a Generate stream on the same frostd answer within a small bound, well
// under the slow calls' duration. Before the unary helper those calls did their disk work on the callback
// thread, and with enough of them in flight every callback thread was taken: Health and Generate waited until
// the slow calls finished.
//
// The work is real (no test-only delay): the artifact is a directory in the state directory whose
// checksums.json lists a 192 MiB file first, so activation reads and hashes all of it before the mismatch is
// found (FAILED_PRECONDITION: cannot be activated, sha256 does not match); the SubmitJob reads and parses
// every line of its 64 MiB calibration file before its config (an unknown key) is refused (INVALID_ARGUMENT),
// so no training job runs and loads the machine afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frost/v1/admin.grpc.pb.h"
#include "frost/v1/training.grpc.pb.h"
#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

constexpr int kActivations = 8;  // concurrent ActivateArtifact calls
constexpr int kSubmits = 8;      // concurrent SubmitJob calls
constexpr int64_t kArtifactBytes = int64_t{192} << 20;
constexpr int64_t kCalibBytes = int64_t{64} << 20;
constexpr char kToken[] = "admin-secret";

void WriteBytes(const std::string& path, int64_t n, char fill) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  const std::string block(1 << 20, fill);
  for (int64_t left = n; left > 0; left -= static_cast<int64_t>(block.size()))
    ASSERT_EQ(std::fwrite(block.data(), 1, std::min<int64_t>(left, block.size()), f),
              static_cast<size_t>(std::min<int64_t>(left, block.size())));
  ASSERT_EQ(std::fclose(f), 0);
}

// kv_repair/<version> in the artifact store under `state_dir`: artifact.json, and a checksums.json whose
// first entry (names sort before "artifact.json") is a large file with a wrong sha256.
void WriteLargeArtifact(const std::string& state_dir, int version) {
  const std::string dir = absl::StrCat(state_dir, "/artifacts/kv_repair/", version);
  std::filesystem::create_directories(dir);
  testing::write_text_file(dir + "/artifact.json", R"({"job_id": "test", "backbone": "builtin:tiny"})");
  WriteBytes(dir + "/a0-large.bin", kArtifactBytes, 'x');
  testing::write_text_file(
      dir + "/checksums.json",
      absl::StrCat(R"({"format": "frost-artifact-checksums", "files": {"a0-large.bin": )", R"({"bytes": )",
                   kArtifactBytes, R"(, "sha256": ")", std::string(64, '0'),
                   R"("}, "artifact.json": {"bytes": 1, "sha256": ")", std::string(64, '0'), R"("}}})"));
}

// A JSONL calibration file of about `bytes`: one {"text": ...} per line.
void WriteCalibration(const std::string& path, int64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::string line = "{\"text\": \"";
  for (int i = 0; line.size() < 1000; ++i)
    absl::StrAppend(&line, "Once upon a time there was a story ", i, ". ");
  line += "\"}\n";
  for (int64_t n = 0; n < bytes; n += static_cast<int64_t>(line.size()))
    ASSERT_EQ(std::fwrite(line.data(), 1, line.size(), f), line.size());
  ASSERT_EQ(std::fclose(f), 0);
}

class GrpcE2eNonBlocking : public E2eTest {};

TEST_F(GrpcE2eNonBlocking, SlowActivationsAndLargeSubmitsDoNotDelayHealthOrGenerate) {
  testing::TempDir dir;
  const std::string token_file = dir.file("admin.token");
  testing::write_text_file(token_file, absl::StrCat(kToken, "\n"));
  const std::string state_dir = dir.file("state");
  for (int v = 1; v <= kActivations; ++v) WriteLargeArtifact(state_dir, v);
  const std::string data_root = dir.file("data");
  std::filesystem::create_directories(data_root);
  WriteCalibration(data_root + "/calib.jsonl", kCalibBytes);

  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions o;
  o.state_dir = state_dir;
  o.yaml = absl::StrCat(kBaseYaml, "jobs:\n  data_root: ", data_root,
                        "\nauth:\n  admin_token_file: ", token_file, "\n");
  ASSERT_TRUE(f->Start(o)) << f->LogText();
  // Warm: the first Generate and Health of a process pay one-time costs.
  ASSERT_TRUE(RunGenerate(f->stub(), LongRequest(4)).status.ok());
  HealthStatus hs{};
  ASSERT_TRUE(f->Check(kReadiness, &hs).ok());

  std::unique_ptr<v1::Admin::Stub> admin = v1::Admin::NewStub(f->channel());
  std::unique_ptr<v1::Training::Stub> training = v1::Training::NewStub(f->channel());
  const auto t0 = Clock::now();
  std::mutex mu;
  std::vector<double> slow_end_s;  // when each slow call returned, from t0
  std::vector<std::string> unexpected;
  // Each slow call ends with `want` and a message naming `part` (the work was done), or RESOURCE_EXHAUSTED
  // (the service's queue is bounded: server/executor.h); anything else is a failure.
  auto done = [&](const char* what, const grpc::Status& st, StatusCode want, const std::string& part) {
    std::lock_guard<std::mutex> l(mu);
    slow_end_s.push_back(SecondsSince(t0));
    const bool as_wanted = st.error_code() == want && st.error_message().find(part) != std::string::npos;
    if (!as_wanted && st.error_code() != StatusCode::RESOURCE_EXHAUSTED)
      unexpected.push_back(absl::StrCat(what, ": ", st.error_code(), " ", st.error_message()));
  };
  std::vector<std::thread> slow;
  for (int v = 1; v <= kActivations; ++v) {
    slow.emplace_back([&, v] {
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      v1::ActivateArtifactRequest req;
      req.set_name(absl::StrCat("kv_repair/", v));
      v1::Artifact resp;
      done("ActivateArtifact", admin->ActivateArtifact(&ctx, req, &resp), StatusCode::FAILED_PRECONDITION,
           "sha256 does not match");
    });
  }
  for (int i = 0; i < kSubmits; ++i) {
    slow.emplace_back([&] {
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      v1::SubmitJobRequest req;
      req.mutable_kv_repair()->set_calib_path("calib.jsonl");
      (*req.mutable_kv_repair()->mutable_config())["no_such_key"] = "1";
      v1::Job resp;
      done("SubmitJob", training->SubmitJob(&ctx, req, &resp), StatusCode::INVALID_ARGUMENT, "no_such_key");
    });
  }
  // Let the slow calls reach the server, then probe.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double probe_start_s = SecondsSince(t0);
  double health_s = 0;
  for (int i = 0; i < 3; ++i) {
    const auto h0 = Clock::now();
    grpc::Status st = f->Check(kReadiness, &hs);
    health_s = std::max(health_s, SecondsSince(h0));
    EXPECT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    EXPECT_EQ(hs, grpc::health::v1::HealthCheckResponse::SERVING);
  }
  const StreamOutcome gen = RunGenerate(f->stub(), LongRequest(8), std::chrono::milliseconds(120000));
  EXPECT_TRUE(CompletedWithLength(gen, 8)) << Describe(gen);
  const double probe_end_s = SecondsSince(t0);
  for (std::thread& t : slow) t.join();

  const double slowest_s = *std::max_element(slow_end_s.begin(), slow_end_s.end());
  std::fprintf(stderr,
               "[ nonblocking ] slow calls: last returned after %.2f s; probes from %.2f s to %.2f s: "
               "Health.Check (worst of 3) %.3f s, Generate (8 tokens) %.3f s\n",
               slowest_s, probe_start_s, probe_end_s, health_s, gen.seconds);
  EXPECT_TRUE(unexpected.empty()) << absl::StrJoin(unexpected, "\n");
  // The load lasted long enough for the bounds below to mean something.
  ASSERT_GE(slowest_s, 2.0) << "the slow calls were too quick to show blocking: raise their sizes";
  // Margins for a loaded 2-core CI machine: the probes compete for the CPU with the slow calls' workers.
  EXPECT_LT(health_s, 0.25 * slowest_s);
  EXPECT_LT(health_s, 1.0);
  EXPECT_LT(gen.seconds, 0.5 * slowest_s);
  EXPECT_LT(probe_end_s, slowest_s) << "the probes ended after the slow calls: they waited for them";
  EXPECT_TRUE(f->StopCleanly());
}

}  // namespace
}  // namespace frost::e2e
