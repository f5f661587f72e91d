// End-to-end tests of what a careless operator or a hostile client finds (harness: tests/testing/e2e_harness.h):
// configured paths of the wrong kind (a directory as --config, a FIFO as a TLS key or chat template, a regular
// file as jobs.state_dir) refused at once naming the field; a stop signal at any instant of start-up ends the
// process; request metadata over server.max_header_list_bytes refuses that one call and leaves the other calls
// on the same HTTP/2 connection running; a full state volume leaves Generate serving and jobs unavailable until
// space returns.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "frost/v1/training.grpc.pb.h"
#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

class GrpcE2eHostileOps : public E2eTest {};

// frostd must exit, not start, within `timeout_s`, with exit status 1 and a log naming every one of `parts`.
::testing::AssertionResult RefusesToStart(Frostd* f, FrostdOptions opts, const std::vector<std::string>& parts,
                                          double timeout_s = 15) {
  opts.wait_for_ports = false;
  if (::testing::AssertionResult r = f->Spawn(opts); !r) return r;
  const std::optional<int> st = f->WaitExit(timeout_s);
  if (!st) return ::testing::AssertionFailure() << "still running after " << timeout_s << " s:\n" << f->LogText();
  if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 1)
    return ::testing::AssertionFailure() << "exit " << f->DescribeExit() << ", want status 1:\n" << f->LogText();
  const std::string log = f->LogText();
  for (const std::string& p : parts)
    if (log.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "the log lacks \"" << p << "\":\n" << log;
  return ::testing::AssertionSuccess();
}

std::string MakeFifo(const testing::TempDir& dir, const std::string& name) {
  const std::string p = dir.file(name);
  EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
  return p;
}

TEST_F(GrpcE2eHostileOps, ConfiguredPathsOfTheWrongKindAreRefusedAtOnceNamingTheField) {
  testing::TempDir dir;
  {  // --config naming a directory used to start silently on the built-in defaults
    FrostdOptions o;
    o.config_path = dir.path();
    EXPECT_TRUE(RefusesToStart(Own(std::make_unique<Frostd>()), o, {"cannot read config file", "a directory"}));
  }
  {  // --config naming a FIFO: refused, not a hang waiting for a writer
    FrostdOptions o;
    o.config_path = MakeFifo(dir, "config.fifo");
    EXPECT_TRUE(RefusesToStart(Own(std::make_unique<Frostd>()), o, {"config.fifo", "a FIFO"}, 10));
  }
  {  // a FIFO as the TLS certificate and key used to hang start-up with nothing logged
    const std::string fifo = MakeFifo(dir, "key.fifo");
    FrostdOptions o;
    o.yaml = absl::StrCat("server:\n  tls:\n    cert_file: ", fifo, "\n    key_file: ", fifo, "\n");
    EXPECT_TRUE(RefusesToStart(Own(std::make_unique<Frostd>()), o, {"server.tls.cert_file", "a FIFO"}, 10));
  }
  {  // a chat template that is a FIFO
    FrostdOptions o;
    o.yaml = absl::StrCat("model:\n  chat_template: ", MakeFifo(dir, "tmpl.fifo"), "\n");
    EXPECT_TRUE(RefusesToStart(Own(std::make_unique<Frostd>()), o, {"model.chat_template", "a FIFO"}, 10));
  }
  {  // jobs.state_dir that is a regular file
    const std::string file = dir.file("state-is-a-file");
    testing::write_text_file(file, "x");
    FrostdOptions o;
    o.state_dir = file;
    EXPECT_TRUE(RefusesToStart(Own(std::make_unique<Frostd>()), o,
                               {"jobs.state_dir", "is a regular file, not a directory"}));
  }
  {  // a token file that is a directory
    FrostdOptions o;
    o.yaml = absl::StrCat("auth:\n  admin_token_file: ", dir.path(), "\n");
    EXPECT_TRUE(RefusesToStart(Own(std::make_unique<Frostd>()), o, {"auth.admin_token_file", "a directory"}));
  }
}

TEST_F(GrpcE2eHostileOps, AStopSignalAtAnyInstantOfStartUpEndsTheProcess) {
  // Before, the stop signals were blocked from the first instruction and only answered once the server had
  // started: anything that held start-up (a FIFO as a key file) left SIGTERM pending and the process running.
  // Now a signal during start-up exits at once and one during the model load once the load returns (or after
  // server.drain_timeout_s). Whatever instant it lands, the process ends, with status 0.
  for (int delay_ms : {0, 1, 3, 10, 30, 100, 300, 1000}) {
    SCOPED_TRACE(absl::StrCat("SIGTERM ", delay_ms, " ms after the spawn"));
    Frostd* f = Own(std::make_unique<Frostd>());
    FrostdOptions o;
    o.model = "builtin:15m";
    o.wait_for_ports = false;
    ASSERT_TRUE(f->Spawn(o));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    f->Terminate();
    const std::optional<int> st = f->WaitExit(20);
    ASSERT_TRUE(st.has_value()) << "still running 20 s after SIGTERM:\n" << f->LogText();
    // Exit 0 — or, for a signal that lands before main() has blocked it (the exec itself), death by SIGTERM.
    const bool clean = (WIFEXITED(*st) && WEXITSTATUS(*st) == 0) || (WIFSIGNALED(*st) && WTERMSIG(*st) == SIGTERM);
    EXPECT_TRUE(clean) << f->DescribeExit() << "\n" << f->LogText();
  }
}

TEST_F(GrpcE2eHostileOps, OversizedMetadataEndsOnlyItsOwnCallNotTheConnection) {
  // server.max_header_list_bytes is checked per call; the HTTP/2 limit sits above it (4x, at least 64 KiB),
  // because gRPC ends every call of a connection when one header block exceeds the transport's limit.
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions o;
  o.model = "builtin:15m";
  o.yaml = absl::StrCat(kBaseYaml, "server:\n  max_header_list_bytes: 4096\n");
  ASSERT_TRUE(f->Start(o));

  // A Health.Watch open on the same connection (a healthy stream of another service).
  std::unique_ptr<grpc::health::v1::Health::Stub> health = grpc::health::v1::Health::NewStub(f->channel());
  grpc::ClientContext wctx;
  grpc::health::v1::HealthCheckRequest wreq;
  wreq.set_service(kReadiness);
  std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>> watch = health->Watch(&wctx, wreq);
  grpc::health::v1::HealthCheckResponse wmsg;
  ASSERT_TRUE(watch->Read(&wmsg));
  EXPECT_EQ(wmsg.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  // A long stream on the channel, read in the background.
  std::promise<StreamOutcome> done;
  std::atomic<int> chunks{0};
  std::thread reader([&] {
    StreamHooks hooks;
    hooks.on_chunk = [&](int n, grpc::ClientContext&) { chunks.store(n); };
    done.set_value(RunGenerate(f->stub(), LongRequest(300), std::nullopt, hooks));
  });
  ASSERT_TRUE(PollUntil(60, [&] { return chunks.load() > 0; }));

  // Over server.max_header_list_bytes on the same connection: that call alone is refused, naming the limit.
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-big", std::string(8192, 'a'));
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::TokenizeRequest treq;
  treq.set_text("hello");
  v1::TokenizeResponse tresp;
  const grpc::Status big = f->stub().Tokenize(&ctx, treq, &tresp);
  EXPECT_EQ(big.error_code(), StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  EXPECT_NE(big.error_message().find("server.max_header_list_bytes=4096"), std::string::npos) << big.error_message();

  // The stream goes on to its last token, and the connection serves the next call.
  const StreamOutcome out = done.get_future().get();
  reader.join();
  EXPECT_TRUE(out.status.ok()) << out.status.error_code() << " " << out.status.error_message();
  EXPECT_TRUE(out.has_final);
  EXPECT_EQ(out.final.completion_tokens(), 300);
  v1::TokenizeResponse again;
  EXPECT_TRUE(f->Tokenize("hello", &again).ok());
  EXPECT_GT(again.token_ids_size(), 0);

  // The watch is still open: it sees the drain's NOT_SERVING and ends OK.
  f->Terminate();
  ASSERT_TRUE(watch->Read(&wmsg));
  EXPECT_EQ(wmsg.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  while (watch->Read(&wmsg)) {
  }
  const grpc::Status wend = watch->Finish();
  EXPECT_TRUE(wend.ok()) << wend.error_code() << " " << wend.error_message();
  EXPECT_TRUE(f->WaitCleanExit(30));
}

// A tmpfs of `mib` MiB at a fresh mount point, unmounted at the end; skips the test where mounting is not
// allowed (not root, no CAP_SYS_ADMIN).
class SmallVolume {
 public:
  explicit SmallVolume(int mib) : point_(dir_.file("vol")) {
    ::mkdir(point_.c_str(), 0755);
    const std::string opts = absl::StrCat("size=", mib, "m,mode=0755");
    mounted_ = ::mount("tmpfs", point_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
  }
  ~SmallVolume() {
    if (mounted_ && ::umount(point_.c_str()) != 0) ::umount2(point_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return point_; }
  // Writes a file until the volume is full.
  void Fill() {
    std::FILE* f = std::fopen((point_ + "/filler").c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string block(4096, 'x');
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }
  void Free() { std::remove((point_ + "/filler").c_str()); }

 private:
  testing::TempDir dir_;
  std::string point_;
  bool mounted_ = false;
};

TEST_F(GrpcE2eHostileOps, AFullStateVolumeLeavesGenerateServingAndJobsComeBackWithSpace) {
  SmallVolume vol(2);
  if (!vol.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  vol.Fill();
  testing::TempDir dir;
  const std::string token_file = dir.file("admin.token");
  testing::write_text_file(token_file, "admin-secret\n");

  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions o;
  o.state_dir = vol.path() + "/state";
  o.yaml = absl::StrCat(kBaseYaml, "jobs:\n  state_retry_s: 1\nauth:\n  admin_token_file: ", token_file, "\n");
  ASSERT_TRUE(f->Start(o)) << f->LogText();  // it starts: before, a full state volume kept frostd down
  EXPECT_NE(f->LogText().find("training jobs are unavailable: jobs.state_dir"), std::string::npos) << f->LogText();

  // Generate serves.
  const StreamOutcome gen = RunGenerate(f->stub(), LongRequest(8));
  EXPECT_TRUE(gen.status.ok()) << gen.status.error_message();
  EXPECT_EQ(gen.final.completion_tokens(), 8);

  // Jobs are unavailable, saying why; the metric says so.
  std::unique_ptr<v1::Training::Stub> training = v1::Training::NewStub(f->channel());
  auto list_jobs = [&](v1::ListJobsResponse* resp) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer admin-secret");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return training->ListJobs(&ctx, v1::ListJobsRequest(), resp);
  };
  v1::ListJobsResponse jobs;
  grpc::Status ls = list_jobs(&jobs);
  EXPECT_EQ(ls.error_code(), StatusCode::UNAVAILABLE) << ls.error_message();
  EXPECT_NE(ls.error_message().find("jobs.state_dir"), std::string::npos) << ls.error_message();
  EXPECT_EQ(f->Metrics().Sum("frost_jobs_available"), 0);
  HealthStatus training_health{};
  grpc::Status hs = f->Check("frost.v1.Training", &training_health);
  EXPECT_TRUE(hs.ok()) << hs.error_message();
  EXPECT_EQ(training_health, grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  // Space returns: jobs come back without a restart.
  vol.Free();
  EXPECT_TRUE(PollUntil(15, [&] { return f->Metrics().Sum("frost_jobs_available") == 1; })) << f->LogText();
  ls = list_jobs(&jobs);
  EXPECT_TRUE(ls.ok()) << ls.error_code() << " " << ls.error_message();
  hs = f->Check("frost.v1.Training", &training_health);
  EXPECT_TRUE(hs.ok()) << hs.error_message();
  EXPECT_EQ(training_health, grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_NE(f->LogText().find("training jobs are available again"), std::string::npos);
  EXPECT_TRUE(f->StopCleanly());
}

}  // namespace
}  // namespace frost::e2e
