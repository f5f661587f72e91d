// kernels/cpu/parallel.h: parallel_tasks / parallel_tasks_ahead on the spinning team (and LibTorch's pool
// when the team is busy): every task exactly once, on several threads, whoever calls, nested or concurrent,
// with exceptions reaching the caller, after fork, and idle workers that park instead of burning a core.
#include "kernels/cpu/parallel.h"

#include <ATen/Parallel.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace frost::kernels {
namespace {

class ParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = at::get_num_threads();
    at::set_num_threads(2);
  }
  void TearDown() override { at::set_num_threads(saved_); }
  int saved_ = 1;
};

// Runs n tasks through parallel_tasks; the first task that did not run exactly once, or -1. Usable off the
// test's thread (a second caller, a forked child), where gtest assertions cannot run.
int64_t first_not_once(int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  parallel_tasks(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
  for (int64_t i = 0; i < n; ++i)
    if (hits[static_cast<size_t>(i)].load() != 1) return i;
  return -1;
}

void expect_each_once(int64_t n) {
  ASSERT_EQ(first_not_once(n), -1) << "a task of " << n << " ran 0 or 2+ times";
}

TEST_F(ParallelTest, EveryTaskRunsExactlyOnceWhateverTheCountAndThreads) {
  for (int threads : {2, 3, 4}) {
    at::set_num_threads(threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1000})
      for (int rep = 0; rep < 50; ++rep) expect_each_once(n);
  }
}

// Both threads must be inside the region at once: a task that waits for the other thread's task would hang
// (here: time out) if the region ran on one thread.
TEST_F(ParallelTest, ARegionRunsOnTheCallerAndAWorkerAtOnce) {
  for (int rep = 0; rep < 200; ++rep) {
    std::atomic<int> arrived{0};
    std::atomic<bool> both{true};
    std::mutex mu;
    std::map<std::thread::id, int> by_thread;
    parallel_tasks(2, [&](int64_t) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++by_thread[std::this_thread::get_id()];
      }
      arrived.fetch_add(1);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (arrived.load() < 2)
        if (std::chrono::steady_clock::now() > until) {
          both = false;
          break;
        }
    });
    ASSERT_TRUE(both.load()) << "round " << rep << ": the second thread never joined the region";
    ASSERT_EQ(by_thread.size(), 2u);
  }
  EXPECT_GE(team::workers(), 1);
}

TEST_F(ParallelTest, AheadNamesTheTaskTheSameThreadRunsNext) {
  for (int rep = 0; rep < 100; ++rep) {
    const int64_t n = 37;
    std::mutex mu;
    std::map<std::thread::id, std::vector<std::pair<int64_t, int64_t>>> seq;
    std::vector<std::atomic<int>> hits(n);
    parallel_tasks_ahead(n, [&](int64_t i, int64_t next) {
      hits[static_cast<size_t>(i)].fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      seq[std::this_thread::get_id()].emplace_back(i, next);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1);
    for (const auto& [id, s] : seq) {
      for (size_t k = 0; k + 1 < s.size(); ++k) ASSERT_EQ(s[k].second, s[k + 1].first);
      ASSERT_EQ(s.back().second, -1);
    }
  }
}

TEST_F(ParallelTest, TwoCallersAtOnceBothGetEveryTask) {
  std::atomic<bool> ok{true};
  auto caller = [&] {
    for (int rep = 0; rep < 300 && ok.load(); ++rep)
      if (first_not_once(50) != -1) ok = false;
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_TRUE(ok.load());
}

TEST_F(ParallelTest, NestedCallsRunOnTheTaskThread) {
  std::atomic<int> inner{0}, foreign{0};
  parallel_tasks(4, [&](int64_t) {
    const auto me = std::this_thread::get_id();
    parallel_tasks(8, [&](int64_t) {
      inner.fetch_add(1);
      if (std::this_thread::get_id() != me) foreign.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 32);
  EXPECT_EQ(foreign.load(), 0);
}

TEST_F(ParallelTest, AnExceptionReachesTheCallerAndTheTeamStaysUsable) {
  for (int64_t bad : {0, 1, 5}) {  // thrown on the caller's thread or a worker's, whichever claims it
    EXPECT_THROW(parallel_tasks(6,
                                [&](int64_t i) {
                                  if (i == bad) throw std::runtime_error("task failed");
                                }),
                 std::runtime_error);
    expect_each_once(100);
  }
}

TEST_F(ParallelTest, AForkedChildRunsRegions) {
  expect_each_once(16);  // the parent's team exists
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(first_not_once(64) == -1 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The scheduler state of every thread of this process whose name starts with `prefix`.
std::vector<char> thread_states(const std::string& prefix) {
  std::vector<char> states;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return states;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    std::string name;
    std::getline(std::ifstream(base + "/comm"), name);
    if (name.rfind(prefix, 0) != 0) continue;
    std::string stat;
    std::getline(std::ifstream(base + "/stat"), stat);
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size()) states.push_back(stat[paren + 2]);
  }
  closedir(dir);
  return states;
}

TEST_F(ParallelTest, IdleWorkersParkInsteadOfSpinning) {
  expect_each_once(8);
  // Spinning lasts team::kSpinUs after a region; well after it every worker sleeps (state S).
  std::this_thread::sleep_for(std::chrono::microseconds(team::kSpinUs) + std::chrono::milliseconds(200));
  const std::vector<char> states = thread_states("frost-team-");
  ASSERT_FALSE(states.empty()) << "no frost-team-* threads";
  for (char s : states) EXPECT_EQ(s, 'S') << "an idle team worker is running";
}

}  // namespace
}  // namespace frost::kernels
