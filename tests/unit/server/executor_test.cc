// Executor (server/executor.h): the bounded queue Predict runs behind — work runs on the named worker
// threads, a full queue is refused at once, and shutdown finishes what was accepted.
#include "server/executor.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"

namespace frost::server {
namespace {

std::string thread_name() {
  char buf[32] = {0};
  pthread_getname_np(pthread_self(), buf, sizeof(buf));
  return buf;
}

TEST(ExecutorTest, RunsTasksOnItsNamedThreadsAfterInit) {
  std::atomic<int> inits{0};
  Executor ex("frost-test", 2, 8, [&] { inits.fetch_add(1); });
  absl::Mutex mu;
  std::vector<std::string> names;
  absl::Notification all;
  std::atomic<int> left{4};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ex.submit([&] {
                    {
                      absl::MutexLock l(&mu);
                      names.push_back(thread_name());
                    }
                    if (left.fetch_sub(1) == 1) all.Notify();
                  }).ok());
  }
  all.WaitForNotification();
  ex.shutdown();
  EXPECT_EQ(inits.load(), 2);
  for (const std::string& n : names) EXPECT_TRUE(n == "frost-test-0" || n == "frost-test-1") << n;
}

TEST(ExecutorTest, AFullQueueIsResourceExhaustedAtOnceAndShutdownRunsWhatWasAccepted) {
  Executor ex("frost-test", 1, 2);
  absl::Notification started, release;
  std::atomic<int> ran{0};
  // One task occupies the only worker; two more fill the queue.
  ASSERT_TRUE(ex.submit([&] {
                  started.Notify();
                  release.WaitForNotification();
                  ran.fetch_add(1);
                }).ok());
  started.WaitForNotification();
  ASSERT_TRUE(ex.submit([&] { ran.fetch_add(1); }).ok());
  ASSERT_TRUE(ex.submit([&] { ran.fetch_add(1); }).ok());
  EXPECT_EQ(ex.queued(), 2);
  EXPECT_EQ(ex.running(), 1);
  const absl::Status full = ex.submit([&] { ran.fetch_add(100); });
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("frost-test: 2 requests already queued"), std::string::npos) << full;
  release.Notify();
  ex.shutdown();  // the two queued tasks still run
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(ex.submit([] {}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace frost::server
