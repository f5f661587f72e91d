// Journal: the SQLite job journal (core/jobs/journal.h).
#include "core/jobs/journal.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_util.h"

namespace frost::jobs {
namespace {

using ::frost::testing::read_text_file;
using ::frost::testing::write_text_file;

using ScratchDir = ::frost::testing::TempDir;

std::unique_ptr<Journal> open_ok(const std::string& path) {
  auto j = Journal::open(path);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? std::move(j).value() : nullptr;
}

// A job of `kind` ("prototype", "kv_repair" or "kvsplice") whose spec carries `tag` in a path field (any
// bytes: the journal must store them verbatim).
JobRecord make_job(const std::string& kind, const std::string& tag = "", const std::string& key = "") {
  JobRecord r;
  if (kind == "prototype") {
    PrototypeJobSpec s;
    s.train_path = tag;
    r.spec = s;
  } else if (kind == "kv_repair") {
    KvRepairJobSpec s;
    s.calib_path = tag;
    r.spec = s;
  } else {
    KvSpliceJobSpec s;
    s.calib_path = tag;
    r.spec = s;
  }
  r.kind = job_kind_name(r.spec);
  r.idempotency_key = key;
  return r;
}

std::string tag_of(const JobRecord& r) {
  if (const auto* p = std::get_if<PrototypeJobSpec>(&r.spec)) return p->train_path.value_or("");
  if (const auto* k = std::get_if<KvRepairJobSpec>(&r.spec)) return k->calib_path.value_or("");
  return std::get<KvSpliceJobSpec>(r.spec).calib_path.value_or("");
}

Journal::Inserted insert_ok(Journal& j, JobRecord r) {
  auto ins = j.insert(std::move(r));
  EXPECT_TRUE(ins.ok()) << ins.status();
  return ins.ok() ? *ins : Journal::Inserted{JobRecord{}, false};
}

std::vector<JobRecord> list_ok(const Journal& j, const ListQuery& q) {
  auto l = j.list(q);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *l : std::vector<JobRecord>{};
}

int64_t total_rows(const Journal& j) {
  ListQuery q;
  q.limit = 1000000;
  return static_cast<int64_t>(list_ok(j, q).size());
}

void expect_same(const JobRecord& a, const JobRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.idempotency_key, b.idempotency_key);
  EXPECT_EQ(spec_to_json(a.spec), spec_to_json(b.spec));
  EXPECT_EQ(a.created_unix, b.created_unix);
  EXPECT_EQ(a.started_unix, b.started_unix);
  EXPECT_EQ(a.finished_unix, b.finished_unix);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.progress, b.progress);
  EXPECT_EQ(a.artifact, b.artifact);
  EXPECT_EQ(a.report_json, b.report_json);
  EXPECT_EQ(a.checkpoint_path, b.checkpoint_path);
  EXPECT_EQ(a.seq, b.seq);
}

// Runs SQL on `path` with a plain SQLite connection (to build foreign or tampered files).
void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

TEST(JobStateTest, NamesAndTerminal) {
  EXPECT_STREQ(job_state_name(JobState::kQueued), "QUEUED");
  EXPECT_STREQ(job_state_name(JobState::kRunning), "RUNNING");
  EXPECT_STREQ(job_state_name(JobState::kSucceeded), "SUCCEEDED");
  EXPECT_STREQ(job_state_name(JobState::kFailed), "FAILED");
  EXPECT_STREQ(job_state_name(JobState::kCancelled), "CANCELLED");
  EXPECT_STREQ(job_state_name(JobState::kInterrupted), "INTERRUPTED");
  EXPECT_FALSE(is_terminal(JobState::kQueued));
  EXPECT_FALSE(is_terminal(JobState::kRunning));
  EXPECT_TRUE(is_terminal(JobState::kSucceeded));
  EXPECT_TRUE(is_terminal(JobState::kFailed));
  EXPECT_TRUE(is_terminal(JobState::kCancelled));
  EXPECT_TRUE(is_terminal(JobState::kInterrupted));
}

TEST(JournalTest, InsertAssignsUniqueIdsIncreasingSeqAndQueuedState) {
  ScratchDir dir;
  auto j = open_ok(dir.file("jobs.db"));
  ASSERT_NE(j, nullptr);
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::regex id_re("job-[0-9a-f]{12}");
  std::set<std::string> ids;
  int64_t last_seq = 0;
  for (int i = 0; i < 50; ++i) {
    JobRecord r = make_job("prototype", absl::StrCat("{\"n\": ", i, "}"));
    r.id = "caller-chosen";          // ignored
    r.seq = 999;                     // ignored
    r.state = JobState::kSucceeded;  // forced to QUEUED
    r.priority = i;
    auto ins = insert_ok(*j, r);
    ASSERT_TRUE(ins.inserted);
    EXPECT_TRUE(std::regex_match(ins.job.id, id_re)) << ins.job.id;
    EXPECT_TRUE(ids.insert(ins.job.id).second) << "duplicate id " << ins.job.id;
    EXPECT_GT(ins.job.seq, last_seq);
    last_seq = ins.job.seq;
    EXPECT_EQ(ins.job.state, JobState::kQueued);
    EXPECT_GE(ins.job.created_unix, before - 1);
    EXPECT_LE(ins.job.created_unix, before + 60);
    // What insert() returned is what is stored.
    auto got = j->get(ins.job.id);
    ASSERT_TRUE(got.ok()) << got.status();
    expect_same(*got, ins.job);
    EXPECT_EQ(got->priority, i);
  }
}

TEST(JournalTest, IdempotencyKeyReturnsExistingJobAndInsertsNothing) {
  ScratchDir dir;
  auto j = open_ok(dir.file("jobs.db"));
  ASSERT_NE(j, nullptr);
  auto first = insert_ok(*j, make_job("prototype", "{\"a\": 1}", "key-1"));
  ASSERT_TRUE(first.inserted);
  auto again = insert_ok(*j, make_job("kv_repair", "{\"a\": 2}", "key-1"));
  EXPECT_FALSE(again.inserted);
  expect_same(again.job, first.job);
  EXPECT_EQ(tag_of(again.job), "{\"a\": 1}");
  EXPECT_EQ(total_rows(*j), 1);

  // Still the same job after it has moved on.
  JobRecord moved = first.job;
  moved.state = JobState::kRunning;
  ASSERT_TRUE(j->update(moved).ok());
  auto third = insert_ok(*j, make_job("prototype", "{}", "key-1"));
  EXPECT_FALSE(third.inserted);
  EXPECT_EQ(third.job.id, first.job.id);
  EXPECT_EQ(third.job.state, JobState::kRunning);

  // Another key, and no key at all, insert.
  auto other = insert_ok(*j, make_job("prototype", "{}", "key-2"));
  EXPECT_TRUE(other.inserted);
  EXPECT_NE(other.job.id, first.job.id);
  EXPECT_TRUE(insert_ok(*j, make_job("prototype")).inserted);
  EXPECT_TRUE(insert_ok(*j, make_job("prototype")).inserted);
  EXPECT_EQ(total_rows(*j), 4);
}

TEST(JournalTest, IdempotencyKeyRaceFromEightThreadsInsertsOneRow) {
  ScratchDir dir;
  auto a = open_ok(dir.file("jobs.db"));
  auto b = open_ok(dir.file("jobs.db"));  // a second connection, as another process would have
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kThreads = 8;
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    const std::string key = absl::StrCat("race-", round);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<absl::StatusOr<Journal::Inserted>> results(kThreads, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        Journal& j = t % 2 == 0 ? *a : *b;
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        results[t] = j.insert(make_job("prototype", absl::StrCat("{\"thread\": ", t, "}"), key));
      });
    }
    while (ready.load() < kThreads) std::this_thread::yield();
    go.store(true);
    for (auto& th : threads) th.join();
    int inserted = 0;
    std::set<std::string> ids;
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << r.status();
      inserted += r->inserted ? 1 : 0;
      ids.insert(r->job.id);
    }
    EXPECT_EQ(inserted, 1) << "round " << round;
    EXPECT_EQ(ids.size(), 1u) << "round " << round;
  }
  EXPECT_EQ(total_rows(*a), kRounds);
  EXPECT_EQ(total_rows(*b), kRounds);
}

TEST(JournalTest, GetUnknownIdIsNotFound) {
  ScratchDir dir;
  auto j = open_ok(dir.file("jobs.db"));
  ASSERT_NE(j, nullptr);
  auto got = j->get("job-000000000000");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(got.status().message(), "job 'job-000000000000' not found");
  insert_ok(*j, make_job("prototype"));
  EXPECT_EQ(j->get("").status().code(), absl::StatusCode::kNotFound);
}

TEST(JournalTest, UpdateRoundTripsEveryMutableField) {
  ScratchDir dir;
  auto j = open_ok(dir.file("jobs.db"));
  ASSERT_NE(j, nullptr);
  JobRecord in = make_job("prototype", "{\"lr\": 0.001}", "idem");
  in.priority = 7;
  auto ins = insert_ok(*j, in);
  insert_ok(*j, make_job("prototype"));  // a neighbour that must not change

  JobRecord want = ins.job;
  want.state = JobState::kFailed;
  want.reason = "out of memory at step 12";
  want.started_unix = 1700000000.125;
  want.finished_unix = 1700000123.0625;
  want.attempts = 3;
  JobProgress progress;
  progress.stage = "stage_b";
  progress.epoch = 2;
  progress.step = 12;
  progress.steps_total = 40;
  progress.loss = 0.5;
  progress.eta_s = 3.25;
  want.progress = progress;
  want.artifact = "prototype/3";
  want.report_json = "{\"rmse\": 0.25}";
  want.checkpoint_path = "/var/lib/frost/ckpt/job-1/step-12";
  ASSERT_TRUE(j->update(want).ok());
  auto got = j->get(want.id);
  ASSERT_TRUE(got.ok()) << got.status();
  expect_same(*got, want);

  // Fields fixed at submit time are not rewritten by update().
  JobRecord tampered = want;
  tampered.kind = "kv_repair";
  tampered.priority = -1;
  tampered.spec = make_job("kv_repair", "changed").spec;
  tampered.idempotency_key = "other-key";
  tampered.created_unix = 1;
  tampered.seq = 12345;
  tampered.reason = "";
  tampered.progress.reset();
  tampered.state = JobState::kInterrupted;
  ASSERT_TRUE(j->update(tampered).ok());
  got = j->get(want.id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kind, "prototype");
  EXPECT_EQ(got->priority, 7);
  EXPECT_EQ(tag_of(*got), "{\"lr\": 0.001}");
  EXPECT_EQ(got->idempotency_key, "idem");
  EXPECT_EQ(got->created_unix, ins.job.created_unix);
  EXPECT_EQ(got->seq, ins.job.seq);
  EXPECT_EQ(got->state, JobState::kInterrupted);
  EXPECT_EQ(got->reason, "");
  EXPECT_FALSE(got->progress.has_value());

  JobRecord ghost = want;
  ghost.id = "job-ffffffffffff";
  const absl::Status st = j->update(ghost);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(st.message(), "job 'job-ffffffffffff' not found");
  EXPECT_EQ(total_rows(*j), 2);
}

TEST(JournalTest, PersistsAcrossCloseAndReopen) {
  ScratchDir dir;
  const std::string path = dir.file("jobs.db");
  std::vector<JobRecord> want;
  {
    auto j = open_ok(path);
    ASSERT_NE(j, nullptr);
    for (int i = 0; i < 5; ++i)
      want.push_back(insert_ok(*j, make_job("prototype", "{}", absl::StrCat("k", i))).job);
    want[2].state = JobState::kSucceeded;
    want[2].artifact = "prototype/9";
    want[2].report_json = "{\"ok\": true}";
    want[2].finished_unix = 1700000001.5;
    ASSERT_TRUE(j->update(want[2]).ok());
  }
  auto j = open_ok(path);
  ASSERT_NE(j, nullptr);
  for (const JobRecord& w : want) {
    auto got = j->get(w.id);
    ASSERT_TRUE(got.ok()) << got.status();
    expect_same(*got, w);
  }
  // Idempotency keys survive the restart, and new jobs sort after the old ones.
  auto dup = insert_ok(*j, make_job("prototype", "{}", "k3"));
  EXPECT_FALSE(dup.inserted);
  EXPECT_EQ(dup.job.id, want[3].id);
  auto fresh = insert_ok(*j, make_job("prototype"));
  EXPECT_TRUE(fresh.inserted);
  EXPECT_GT(fresh.job.seq, want.back().seq);
  EXPECT_EQ(total_rows(*j), 6);
}

TEST(JournalTest, ListOrderFiltersAndPagination) {
  ScratchDir dir;
  auto j = open_ok(dir.file("jobs.db"));
  ASSERT_NE(j, nullptr);
  const JobState states[] = {JobState::kQueued, JobState::kRunning,   JobState::kSucceeded,
                             JobState::kFailed, JobState::kCancelled, JobState::kInterrupted};
  std::vector<JobRecord> all;  // submit order
  for (int i = 0; i < 23; ++i) {
    JobRecord r = insert_ok(*j, make_job(i % 3 == 0 ? "kv_repair" : "kvsplice")).job;
    r.state = states[i % 6];
    ASSERT_TRUE(j->update(r).ok());
    all.push_back(r);
  }

  ListQuery q;
  q.limit = 100;
  auto got = list_ok(*j, q);
  ASSERT_EQ(got.size(), all.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, all[all.size() - 1 - i].id) << i;  // newest first
    EXPECT_EQ(got[i].state, all[all.size() - 1 - i].state);
  }

  // Default limit is 50; a smaller one truncates to the newest.
  EXPECT_EQ(ListQuery{}.limit, 50);
  q.limit = 4;
  got = list_ok(*j, q);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].id, all[22].id);
  EXPECT_EQ(got[3].id, all[19].id);

  // State filter (several states), kind filter, and both.
  q = ListQuery{};
  q.states = {JobState::kRunning, JobState::kFailed};
  got = list_ok(*j, q);
  std::vector<std::string> want_ids;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->state == JobState::kRunning || it->state == JobState::kFailed) want_ids.push_back(it->id);
  }
  std::vector<std::string> got_ids;
  for (const auto& r : got) got_ids.push_back(r.id);
  EXPECT_EQ(got_ids, want_ids);

  q = ListQuery{};
  q.kind = "kv_repair";
  got = list_ok(*j, q);
  EXPECT_EQ(got.size(), 8u);
  for (const auto& r : got) EXPECT_EQ(r.kind, "kv_repair");

  q.states = {JobState::kQueued};
  got = list_ok(*j, q);
  // i % 3 == 0 and i % 6 == 0: 0, 6, 12, 18.
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].id, all[18].id);
  EXPECT_EQ(got[3].id, all[0].id);

  q = ListQuery{};
  q.kind = "no-such-kind";
  EXPECT_TRUE(list_ok(*j, q).empty());

  // Pages of 5 via before_seq cover every row exactly once, newest first.
  for (int page_size : {1, 5, 7, 23, 30}) {
    std::vector<std::string> seen;
    ListQuery p;
    p.limit = page_size;
    int pages = 0;
    while (true) {
      auto page = list_ok(*j, p);
      if (page.empty()) break;
      ASSERT_LE(static_cast<int>(page.size()), page_size);
      for (const auto& r : page) seen.push_back(r.id);
      p.before_seq = page.back().seq;
      ASSERT_LT(++pages, 100);
    }
    ASSERT_EQ(seen.size(), all.size()) << "page size " << page_size;
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], all[all.size() - 1 - i].id);
  }

  // Pagination together with a filter.
  std::vector<std::string> seen;
  ListQuery p;
  p.kind = "kvsplice";
  p.limit = 3;
  while (true) {
    auto page = list_ok(*j, p);
    if (page.empty()) break;
    for (const auto& r : page) seen.push_back(r.id);
    p.before_seq = page.back().seq;
  }
  EXPECT_EQ(seen.size(), 15u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 15u);

  q = ListQuery{};
  q.limit = 0;
  EXPECT_EQ(j->list(q).status().code(), absl::StatusCode::kInvalidArgument);
  q.limit = 10;
  q.before_seq = -1;
  EXPECT_EQ(j->list(q).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JournalTest, CountByState) {
  ScratchDir dir;
  auto j = open_ok(dir.file("jobs.db"));
  ASSERT_NE(j, nullptr);
  auto empty = j->count_by_state();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 6u);
  for (const auto& [state, n] : *empty) EXPECT_EQ(n, 0) << job_state_name(state);

  for (int i = 0; i < 10; ++i) {
    JobRecord r = insert_ok(*j, make_job("prototype")).job;
    if (i < 3)
      r.state = JobState::kRunning;
    else if (i < 4)
      r.state = JobState::kSucceeded;
    else if (i < 6)
      r.state = JobState::kCancelled;
    ASSERT_TRUE(j->update(r).ok());
  }
  auto counts = j->count_by_state();
  ASSERT_TRUE(counts.ok()) << counts.status();
  const std::map<JobState, int64_t> want = {{JobState::kQueued, 4},    {JobState::kRunning, 3},
                                            {JobState::kSucceeded, 1}, {JobState::kFailed, 0},
                                            {JobState::kCancelled, 2}, {JobState::kInterrupted, 0}};
  EXPECT_EQ(*counts, want);
}

TEST(JournalTest, GarbageFileIsRejectedAndLeftAlone) {
  ScratchDir dir;
  for (size_t size : {size_t{7}, size_t{100}, size_t{8192}}) {
    const std::string path = dir.file(absl::StrCat("garbage", size, ".db"));
    std::string garbage;
    for (size_t i = 0; i < size; ++i) garbage.push_back(static_cast<char>((i * 131 + 17) % 251));
    write_text_file(path, garbage);
    auto j = Journal::open(path);
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition) << j.status();
    EXPECT_MSG_HAS(j.status(), path);
    EXPECT_EQ(read_text_file(path), garbage);
    EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  }
}

TEST(JournalTest, ForeignSqliteDatabaseAndOtherVersionAreRejected) {
  ScratchDir dir;
  const std::string foreign = dir.file("foreign.db");
  raw_exec(foreign, "CREATE TABLE jobs (x INTEGER); INSERT INTO jobs VALUES (1);");
  auto j = Journal::open(foreign);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition) << j.status();
  EXPECT_MSG_HAS(j.status(), foreign);
  EXPECT_MSG_HAS(j.status(), "not a frost job journal");

  const std::string newer = dir.file("newer.db");
  {
    auto ok = open_ok(newer);
    ASSERT_NE(ok, nullptr);
    insert_ok(*ok, make_job("prototype"));
  }
  raw_exec(newer, "PRAGMA user_version=3;");
  j = Journal::open(newer);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition) << j.status();
  EXPECT_MSG_HAS(j.status(), newer);
  EXPECT_MSG_HAS(j.status(), "schema version 3");

  // Our application_id and version but the table lacks columns.
  const std::string mangled = dir.file("mangled.db");
  raw_exec(mangled,
           "CREATE TABLE jobs (seq INTEGER PRIMARY KEY, id TEXT);"
           "PRAGMA application_id=1179800394; PRAGMA user_version=1;");
  j = Journal::open(mangled);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition) << j.status();
  EXPECT_MSG_HAS(j.status(), mangled);

  // An empty file is a journal that lost its contents (a new one is created whole, never empty): refused.
  const std::string empty = dir.file("empty.db");
  write_text_file(empty, "");
  auto e = Journal::open(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << e.status();
  EXPECT_MSG_HAS(e.status(), empty);
  EXPECT_EQ(read_text_file(empty), "");
}

// Bytes of a file, and the file rewritten with them.
std::string file_bytes(const std::string& path) { return read_text_file(path); }

TEST(JournalTest, ANewJournalIsCreatedWholeAndLeavesNoTemporaryFile) {
  ScratchDir dir;
  const std::string path = dir.file("jobs.db");
  { ASSERT_NE(open_ok(path), nullptr); }
  EXPECT_GT(std::filesystem::file_size(path), 0u);
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".new-"), std::string::npos) << e.path();
}

TEST(JournalTest, DamagedJournalsAreRefusedNamingTheFileAndLeftAlone) {
  ScratchDir dir;
  const std::string golden = dir.file("golden.db");
  std::string marker = "MARKER-reason-0123456789";
  {
    auto j = open_ok(golden);
    ASSERT_NE(j, nullptr);
    for (int i = 0; i < 4; ++i) {
      JobRecord r = insert_ok(*j, make_job("prototype", absl::StrCat("data/train", i, ".jsonl"))).job;
      r.state = JobState::kFailed;
      r.reason = marker;
      ASSERT_TRUE(j->update(r).ok());
    }
  }  // closed: everything is in the main file
  const std::string bytes = file_bytes(golden);
  ASSERT_FALSE(std::filesystem::exists(golden + "-wal"));
  auto expect_refused = [&](const std::string& name, const std::string& damaged, const char* why) {
    const std::string path = dir.file(name);
    write_text_file(path, damaged);
    auto j = Journal::open(path);
    ASSERT_FALSE(j.ok()) << why;
    EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss) << why << ": " << j.status();
    EXPECT_MSG_HAS(j.status(), path);
    EXPECT_EQ(file_bytes(path), damaged) << why;
  };
  // A bit flipped in a row's text: SQLite reads it back as another value; row_sha does not match.
  const size_t at = bytes.find(marker);
  ASSERT_NE(at, std::string::npos);
  std::string flipped = bytes;
  flipped[at + 3] = static_cast<char>(flipped[at + 3] ^ 0x01);
  expect_refused("flipped.db", flipped, "a flipped bit in a reason");
  // Cut short: not a whole number of pages, and half of the pages.
  expect_refused("short1.db", bytes.substr(0, bytes.size() - 1), "one byte short");
  expect_refused("half.db", bytes.substr(0, bytes.size() / 2 + 100), "half");
  // The intact copy opens and reads back.
  const std::string copy = dir.file("copy.db");
  write_text_file(copy, bytes);
  auto j = open_ok(copy);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(total_rows(*j), 4);
}

TEST(JournalTest, AVersion1JournalIsMigratedAndItsRowsKept) {
  ScratchDir dir;
  const std::string path = dir.file("v1.db");
  raw_exec(path,
           "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,"
           " state INTEGER NOT NULL, reason TEXT NOT NULL, priority INTEGER NOT NULL, idempotency_key TEXT,"
           " spec_json TEXT NOT NULL, created_unix REAL NOT NULL, started_unix REAL NOT NULL,"
           " finished_unix REAL NOT NULL, attempts INTEGER NOT NULL, progress_json TEXT NOT NULL,"
           " artifact TEXT NOT NULL, report_json TEXT NOT NULL, checkpoint_path TEXT NOT NULL);"
           "CREATE UNIQUE INDEX jobs_idempotency_key ON jobs(idempotency_key);"
           "CREATE INDEX jobs_state_seq ON jobs(state, seq);"
           "CREATE INDEX jobs_kind_seq ON jobs(kind, seq);"
           "PRAGMA application_id=1179800394; PRAGMA user_version=1; PRAGMA journal_mode=WAL;"
           "INSERT INTO jobs (id, kind, state, reason, priority, idempotency_key, spec_json, created_unix,"
           " started_unix, finished_unix, attempts, progress_json, artifact, report_json, checkpoint_path)"
           " VALUES ('job-000000000001', 'prototype', 3, '', 0, 'key1', '{\"train_path\":\"a.jsonl\"}',"
           " 1700000000.25, 1700000001.0, 1700000002.0, 1, '', 'prototype/1', '{}', '');");
  {
    auto j = open_ok(path);
    ASSERT_NE(j, nullptr);
    auto got = j->get("job-000000000001");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->state, JobState::kSucceeded);
    EXPECT_EQ(got->artifact, "prototype/1");
    EXPECT_EQ(got->idempotency_key, "key1");
    EXPECT_EQ(got->created_unix, 1700000000.25);
    insert_ok(*j, make_job("prototype"));
  }
  auto j = open_ok(path);  // version 2 now, every row checked at open
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(total_rows(*j), 2);
}

TEST(JournalTest, UnusablePathsNameThePath) {
  ScratchDir dir;
  const std::string missing_dir = dir.file("no/such/dir/jobs.db");
  auto j = Journal::open(missing_dir);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kNotFound) << j.status();
  EXPECT_MSG_HAS(j.status(), missing_dir);

  auto d = Journal::open(dir.path());  // a directory
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition) << d.status();
  EXPECT_MSG_HAS(d.status(), dir.path());

  EXPECT_EQ(Journal::open("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JournalTest, UnwritableDirectoryIsPermissionDenied) {
  ScratchDir dir;
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permission bits are not enforced";
  const std::string locked = dir.file("locked");
  ASSERT_EQ(::mkdir(locked.c_str(), 0500), 0);
  auto p = Journal::open(locked + "/jobs.db");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kPermissionDenied) << p.status();
  EXPECT_MSG_HAS(p.status(), locked + "/jobs.db");
  ::chmod(locked.c_str(), 0700);
}

TEST(JournalTest, InjectionLookingStringsAreStoredVerbatim) {
  ScratchDir dir;
  const std::string path = dir.file("jobs.db");
  auto j = open_ok(path);
  ASSERT_NE(j, nullptr);
  const std::string evil = "'; DROP TABLE jobs; --";
  const std::string quotes = "it's \"quoted\" `back` \\ %s %n ? ?1 :a @b $c";
  const std::string binary = std::string("nul\0byte", 8) + "\xff\xfe caf\xC3\xA9";
  JobRecord r = make_job("prototype", quotes, evil);
  r.reason = binary;
  auto ins = insert_ok(*j, r);
  ASSERT_TRUE(ins.inserted);
  JobRecord u = ins.job;
  u.reason = evil;
  JobProgress up;
  up.stage = quotes;
  u.progress = up;
  u.artifact = "x') OR 1=1; --";
  u.report_json = binary;
  u.checkpoint_path = "/tmp/'; DELETE FROM jobs; --";
  ASSERT_TRUE(j->update(u).ok());
  insert_ok(*j, make_job("kvsplice"));

  j.reset();
  j = open_ok(path);  // the table is still there after a reopen
  ASSERT_NE(j, nullptr);
  auto got = j->get(u.id);
  ASSERT_TRUE(got.ok()) << got.status();
  expect_same(*got, u);
  EXPECT_EQ(got->kind, "prototype");
  EXPECT_EQ(tag_of(*got), quotes);
  EXPECT_EQ(got->idempotency_key, evil);
  EXPECT_EQ(got->report_json, binary);

  ListQuery q;
  q.kind = "prototype";
  auto l = list_ok(*j, q);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].id, u.id);
  q.kind = evil;  // a query parameter, never SQL
  EXPECT_TRUE(list_ok(*j, q).empty());
  q.kind = "x' OR '1'='1";
  EXPECT_TRUE(list_ok(*j, q).empty());
  EXPECT_EQ(j->get("' OR '1'='1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(insert_ok(*j, make_job("kv_repair", "{}", evil)).inserted);
  EXPECT_EQ(total_rows(*j), 2);
}

}  // namespace
}  // namespace frost::jobs
