// Scheduler semantics with a scripted job kind (the real prototype kind runs end to end in
// tests/client/jobs_test.py): order, bounds, cancellation, failure, shutdown and crash recovery.
#include "core/jobs/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/kv/repair_set.h"
#include "core/model/kv_dims.h"
#include "core/model/model_loader.h"
#include "core/serving/checked_file.h"
#include "core/serving/kv_repair_kind.h"
#include "core/serving/registry.h"
#include "tests/testing/test_util.h"

namespace frost::jobs {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The script of a ScriptedKind job, carried in a prototype spec's train_path.
std::string script_of(const JobSpec& spec) { return std::get<PrototypeJobSpec>(spec).train_path.value_or(""); }
PrototypeJobSpec script(const std::string& s) {
  PrototypeJobSpec p;
  p.train_path = s;
  return p;
}

// A job kind (registered as "prototype") whose run() steps until its CancelToken fires or `steps` steps are
// done; the script is the number of steps ("fail" makes prepare refuse, "boom" makes run fail).
class ScriptedKind final : public JobKind {
 public:
  absl::StatusOr<JobSpec> prepare(const JobSpec& spec) override {
    if (script_of(spec) == "fail") return absl::InvalidArgumentError("spec: refused");
    return spec;
  }
  absl::StatusOr<JobResult> run(const JobRecord& job, const JobContext& ctx) override {
    {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(job.id);
    }
    if (script_of(job.spec) == "boom") return absl::InternalError("exploded at step 0");
    const int steps = std::atoi(script_of(job.spec).c_str());
    for (int i = 0; i < steps; ++i) {
      if (ctx.cancel->stop_requested()) return absl::CancelledError("cancelled");
      JobProgress p;
      p.stage = "s";
      p.step = i;
      ctx.progress(p);
      std::this_thread::sleep_for(5ms);
    }
    return JobResult{"thing/1", "{}", false};
  }
  std::mutex mu;
  std::vector<std::string> order;
};

class SchedulerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Scheduler> make(int max_queued = 64) {
    SchedulerOptions o;
    o.state_dir = dir_;
    o.max_queued = max_queued;
    o.max_attempts = 2;
    auto s = Scheduler::create(o, {{"prototype", kind_}});
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  static JobRecord wait_terminal(Scheduler& s, const std::string& id) {
    for (int i = 0; i < 2000; ++i) {
      JobRecord j = *s.get(id);
      if (is_terminal(j.state)) return j;
      std::this_thread::sleep_for(5ms);
    }
    ADD_FAILURE() << id << " never ended";
    return *s.get(id);
  }
  ::frost::testing::TempDir tmp_{"frost_sched"};
  const std::string dir_ = tmp_.path();
  std::shared_ptr<ScriptedKind> kind_ = std::make_shared<ScriptedKind>();
};

TEST_F(SchedulerTest, HigherPriorityFirstThenSubmitOrder) {
  auto s = make();
  auto a = s->submit(script("1"), 0, "");
  auto b = s->submit(script("1"), 5, "");
  auto c = s->submit(script("1"), 0, "");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  s->start();
  wait_terminal(*s, a->id);
  wait_terminal(*s, c->id);
  EXPECT_EQ(kind_->order, (std::vector<std::string>{b->id, a->id, c->id}));
  EXPECT_EQ(s->get(a->id)->state, JobState::kSucceeded);
  EXPECT_EQ(s->get(a->id)->artifact, "thing/1");
}

TEST_F(SchedulerTest, BadSpecsUnknownKindsAndAFullQueueAreRefusedWithoutAJob) {
  auto s = make(/*max_queued=*/1);
  EXPECT_EQ(s->submit(script("fail"), 0, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->submit(KvRepairJobSpec{}, 0, "").status().code(), absl::StatusCode::kInvalidArgument)
      << "a kind this scheduler does not run";
  EXPECT_EQ(s->submit(script("1"), 101, "").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s->submit(script("1"), 0, "").ok());
  EXPECT_EQ(s->submit(script("1"), 0, "").status().code(), absl::StatusCode::kResourceExhausted);
  ListQuery q;
  EXPECT_EQ(s->list(q)->size(), 1u);
}

TEST_F(SchedulerTest, IdempotencyKeyReturnsTheFirstJob) {
  auto s = make();
  auto a = s->submit(script("1"), 0, "key-1");
  auto b = s->submit(script("1"), 0, "key-1");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->id, b->id);
  EXPECT_EQ(s->list(ListQuery{})->size(), 1u);
}

TEST_F(SchedulerTest, CancelQueuedRunningAndFinished) {
  auto s = make();
  auto run = s->submit(script("100000"), 0, "");
  auto queued = s->submit(script("1"), 0, "");
  s->start();
  for (int i = 0; i < 400 && s->get(run->id)->state != JobState::kRunning; ++i)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(s->get(run->id)->state, JobState::kRunning);
  auto cq = s->cancel(queued->id);
  ASSERT_TRUE(cq.ok());
  EXPECT_EQ(cq->state, JobState::kCancelled);  // at once
  ASSERT_TRUE(s->cancel(run->id).ok());
  JobRecord r = wait_terminal(*s, run->id);
  EXPECT_EQ(r.state, JobState::kCancelled);
  EXPECT_EQ(s->cancel(run->id).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->cancel("job-unknown").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kind_->order.size(), 1u);  // the cancelled queued job never ran
}

TEST_F(SchedulerTest, AFailingJobRecordsItsReason) {
  auto s = make();
  auto j = s->submit(script("boom"), 0, "");
  s->start();
  JobRecord r = wait_terminal(*s, j->id);
  EXPECT_EQ(r.state, JobState::kFailed);
  EXPECT_NE(r.reason.find("exploded"), std::string::npos);
}

TEST_F(SchedulerTest, WatchersSeeProgressAndTheTerminalState) {
  auto s = make();
  auto j = s->submit(script("5"), 0, "");
  std::mutex mu;
  std::vector<JobState> seen;
  int progress = 0;
  s->subscribe(j->id, [&](const JobRecord& r) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(r.state);
    progress += r.progress.has_value() && r.state == JobState::kRunning;
  });
  s->start();
  wait_terminal(*s, j->id);
  // The journal commits the final state just before watchers hear it: give the event a moment.
  for (int i = 0; i < 400; ++i) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!seen.empty() && is_terminal(seen.back())) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::lock_guard<std::mutex> l(mu);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), JobState::kRunning);
  EXPECT_EQ(seen.back(), JobState::kSucceeded);
  EXPECT_GE(progress, 5);
}

TEST_F(SchedulerTest, ShutdownReturnsARunningJobToTheQueueAndTheNextStartResumesIt) {
  std::string id;
  {
    auto s = make();
    id = s->submit(script("100000"), 0, "")->id;
    s->start();
    for (int i = 0; i < 400 && s->get(id)->state != JobState::kRunning; ++i) std::this_thread::sleep_for(5ms);
    s->shutdown();
    JobRecord j = *s->get(id);
    EXPECT_EQ(j.state, JobState::kQueued);
    EXPECT_NE(j.reason.find("shut down"), std::string::npos);
  }
  auto s = make();
  EXPECT_EQ(s->counts().queued, 1);
  ASSERT_TRUE(s->cancel(id).ok());
}

TEST_F(SchedulerTest, CrashRecoveryRequeuesRunningJobsOrInterruptsThemAfterMaxAttempts) {
  std::string resumable, exhausted;
  {
    auto journal = Journal::open(dir_ + "/jobs.db");
    ASSERT_TRUE(journal.ok()) << journal.status();
    JobRecord a;
    a.spec = script("1");
    JobRecord r1 = (*journal)->insert(a)->job, r2 = (*journal)->insert(a)->job;
    r1.state = r2.state = JobState::kRunning;  // what a kill -9 leaves behind
    r1.attempts = 1;
    r2.attempts = 2;  // == max_attempts
    ASSERT_TRUE((*journal)->update(r1).ok());
    ASSERT_TRUE((*journal)->update(r2).ok());
    resumable = r1.id;
    exhausted = r2.id;
  }
  auto s = make();
  JobRecord r1 = *s->get(resumable), r2 = *s->get(exhausted);
  EXPECT_EQ(r1.state, JobState::kQueued);
  EXPECT_NE(r1.reason.find("resumed"), std::string::npos);
  EXPECT_EQ(r2.state, JobState::kInterrupted);
  EXPECT_FALSE(r2.reason.empty());
  s->start();
  JobRecord done = wait_terminal(*s, resumable);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_EQ(done.attempts, 2);
}

// counts() is kept in memory (GetServerInfo and /metrics must not read the journal): after every kind of
// state change it equals what the journal itself counts, and a reopened scheduler (recovery included) starts
// from the journal's counts.
TEST_F(SchedulerTest, CountsFromMemoryEqualTheJournalsAfterSubmitsCancelsCompletionsAndAReopen) {
  // The journal's own counts, through another connection; the scheduler moves its counts just after each
  // commit, so give it a moment to agree.
  auto journal_counts = [&] { return *(*Journal::open(dir_ + "/jobs.db"))->count_by_state(); };
  auto agree = [&](Scheduler& s) {
    for (int i = 0; i < 400 && s.counts().by_state != journal_counts(); ++i) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(s.counts().by_state, journal_counts());
  };
  std::string running;
  {
    auto s = make();
    agree(*s);
    EXPECT_EQ(s->counts().by_state.size(), 6u) << "every state, zeros included";
    auto a = s->submit(script("1"), 0, "");
    auto b = s->submit(script("100000"), -5, "");  // runs after a and c
    auto c = s->submit(script("boom"), 0, "");
    auto d = s->submit(script("1"), 0, "key");
    auto again = s->submit(script("1"), 0, "key");  // the same job: no new count
    ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok() && again.ok());
    EXPECT_EQ(s->counts().by_state[JobState::kQueued], 4);
    EXPECT_EQ(s->counts().queued, 4);
    agree(*s);
    ASSERT_TRUE(s->cancel(d->id).ok());  // QUEUED → CANCELLED
    agree(*s);
    s->start();
    wait_terminal(*s, a->id);  // QUEUED → RUNNING → SUCCEEDED
    wait_terminal(*s, c->id);  // QUEUED → RUNNING → FAILED
    for (int i = 0; i < 400 && s->get(b->id)->state != JobState::kRunning; ++i)
      std::this_thread::sleep_for(5ms);
    agree(*s);
    EXPECT_EQ(s->counts().by_state[JobState::kRunning], 1);
    EXPECT_EQ(s->counts().running, 1);
    EXPECT_EQ(s->counts().queued, 0);
    auto e = s->submit(script("1"), 0, "");
    ASSERT_TRUE(e.ok());
    s->shutdown();  // b: RUNNING → QUEUED (resumes at the next start); e stays QUEUED
    agree(*s);
    EXPECT_EQ(s->counts().by_state[JobState::kQueued], 2);
    EXPECT_EQ(s->counts().by_state[JobState::kSucceeded], 1);
    EXPECT_EQ(s->counts().by_state[JobState::kFailed], 1);
    EXPECT_EQ(s->counts().by_state[JobState::kCancelled], 1);
    running = e->id;
  }
  {
    // What a kill -9 leaves: a job RUNNING in the journal; recovery queues it again.
    auto journal = Journal::open(dir_ + "/jobs.db");
    ASSERT_TRUE(journal.ok()) << journal.status();
    JobRecord r = *(*journal)->get(running);
    r.state = JobState::kRunning;
    r.attempts = 1;
    ASSERT_TRUE((*journal)->update(r).ok());
  }
  auto s = make();
  agree(*s);
  EXPECT_EQ(s->counts().by_state[JobState::kQueued], 2);
  EXPECT_EQ(s->counts().by_state[JobState::kRunning], 0);
  EXPECT_EQ(s->counts().queued, 2);
  s->start();
  const std::vector<JobRecord> all = *s->list(ListQuery{});
  for (const JobRecord& j : all)
    if (j.state == JobState::kQueued || j.state == JobState::kRunning) (void)s->cancel(j.id);  // or it ended
  for (const JobRecord& j : all) wait_terminal(*s, j.id);
  agree(*s);
  EXPECT_EQ(s->counts().by_state[JobState::kQueued] + s->counts().by_state[JobState::kRunning], 0);
  EXPECT_EQ(s->counts().by_state[JobState::kCancelled] + s->counts().by_state[JobState::kSucceeded] +
                s->counts().by_state[JobState::kFailed],
            5);
}

// A kind that publishes a real kv_repair artifact (its "model" metadata is the script) and asks for its
// activation.
class PublishingKind final : public JobKind {
 public:
  PublishingKind(serving::ArtifactStore* store, std::shared_ptr<const LoadedModel> model)
      : store_(store), model_(std::move(model)) {}
  absl::StatusOr<JobSpec> prepare(const JobSpec& spec) override { return spec; }
  absl::StatusOr<JobResult> run(const JobRecord& job, const JobContext&) override {
    RepairConfig rc;
    rc.rank = 2;
    auto set = RepairSet::create(rc, {0}, repair_dims(model_->config), 1);
    if (!set.ok()) return set.status();
    serving::ArtifactMeta meta;
    meta.job_id = job.id;
    auto info = store_->publish("kv_repair", meta, [&](const std::string& dir) {
      return serving::write_checked_file(
          dir, serving::kKvRepairFile, serving::kKvRepairFormat, [&](const std::string& p) {
            return (*set)->save(p, {{"codec", "int4"}, {"model", script_of(job.spec)}});
          });
    });
    if (!info.ok()) return info.status();
    return JobResult{info->name, "{}", /*activate=*/true};
  }

 private:
  serving::ArtifactStore* store_;
  std::shared_ptr<const LoadedModel> model_;
};

// serving sits below jobs: a job that asks for activation is activated by the registry itself (no callback
// the server installs); a refused activation leaves the job SUCCEEDED with the reason, and the active one.
TEST_F(SchedulerTest, AJobThatAsksForActivationIsServedByTheRegistry) {
  auto m = load_model("builtin:tiny");
  ASSERT_TRUE(m.ok()) << m.status();
  std::shared_ptr<const LoadedModel> model(std::move(*m));
  auto store = serving::ArtifactStore::open(dir_ + "/artifacts");
  ASSERT_TRUE(store.ok()) << store.status();
  serving::TensorStore tensors;
  serving::Registry registry(store->get(), &tensors);
  registry.set_model(model);
  SchedulerOptions o;
  o.state_dir = dir_ + "/state";
  auto s =
      Scheduler::create(o, {{"prototype", std::make_shared<PublishingKind>(store->get(), model)}}, &registry);
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->start();

  JobRecord good = wait_terminal(**s, (*s)->submit(script(model->name), 0, "")->id);
  EXPECT_EQ(good.state, JobState::kSucceeded);
  EXPECT_EQ(good.reason, "");
  EXPECT_EQ(registry.active_name("kv_repair"), good.artifact);
  EXPECT_EQ(**(*store)->active("kv_repair"), good.artifact) << "persisted as ACTIVE";

  JobRecord other = wait_terminal(**s, (*s)->submit(script("some-other-model"), 0, "")->id);
  EXPECT_EQ(other.state, JobState::kSucceeded);
  EXPECT_NE(other.reason.find("activation failed"), std::string::npos) << other.reason;
  EXPECT_NE(other.reason.find(other.artifact), std::string::npos) << other.reason;
  EXPECT_EQ(registry.active_name("kv_repair"), good.artifact) << "the active one keeps serving";
}

}  // namespace
}  // namespace frost::jobs
