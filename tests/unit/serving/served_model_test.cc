// serving::ServedModel (core/serving/served_model.h): the served model's life cycle without a server —
// restore before the configured fallback, the writable hook and the degraded mode's retry, the follower
// thread, and a second owner refused by the state directory's lock.
#include "core/serving/served_model.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/kv/repair_set.h"
#include "core/model/kv_dims.h"
#include "core/serving/checked_file.h"
#include "core/serving/kv_repair_kind.h"
#include "tests/testing/test_util.h"

namespace frost::serving {
namespace {

using namespace std::chrono_literals;

class ServedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model("builtin:tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const LoadedModel>(std::move(*m));
  }

  // Publishes a kv_repair artifact into `store` for the served model; returns its name.
  std::string publish_repair(ArtifactStore& store, uint64_t seed) {
    RepairConfig rc;
    rc.rank = 2;
    auto set = RepairSet::create(rc, {0}, repair_dims(model_->config), seed);
    EXPECT_TRUE(set.ok()) << set.status();
    auto info = store.publish("kv_repair", {}, [&](const std::string& dir) {
      return write_checked_file(dir, kKvRepairFile, kKvRepairFormat, [&](const std::string& p) {
        return (*set)->save(p, {{"codec", "int4"}, {"model", model_->name}});
      });
    });
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->name : "";
  }

  // A kv_repair file the config could name (engine.kv_repair).
  std::string repair_file() {
    RepairConfig rc;
    rc.rank = 2;
    auto set = RepairSet::create(rc, {0}, repair_dims(model_->config), 9);
    EXPECT_TRUE(set.ok());
    const std::string path = tmp_.path() + "/configured.safetensors";
    EXPECT_TRUE((*set)->save(path, {{"codec", "int8"}, {"model", model_->name}}).ok());
    return path;
  }

  template <class F>
  static bool eventually(F f) {
    for (int i = 0; i < 400 && !f(); ++i) std::this_thread::sleep_for(10ms);
    return f();
  }

  ::frost::testing::TempDir tmp_{"frost_served"};
  std::shared_ptr<const LoadedModel> model_;
};

TEST_F(ServedModelTest, RestoresThePersistedArtifactBeforeTheConfiguredFileAndOpensTheWritableState) {
  ServedModelOptions o;
  o.state_dir = tmp_.path() + "/state";
  o.kv_repair_file = repair_file();
  std::string active;
  {
    auto first = ServedModel::create(o);
    ASSERT_TRUE(first.ok()) << first.status();
    int hooked = 0;
    ASSERT_TRUE((*first)
                    ->start(model_,
                            [&](ArtifactStore& s) {
                              ++hooked;
                              EXPECT_FALSE(s.read_only());
                              return absl::OkStatus();
                            })
                    .ok());
    EXPECT_EQ(hooked, 1);
    EXPECT_TRUE((*first)->writable().ok());
    EXPECT_EQ((*first)->registry().active_name("kv_repair"), "file:" + o.kv_repair_file)
        << "nothing persisted: the configured file serves";
    EXPECT_EQ((*first)->model(), model_);

    // A second owner of the same state directory is refused while the first holds it.
    auto second = ServedModel::create(o);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();

    active = publish_repair(*(*first)->store(), 1);
    ASSERT_TRUE((*first)->registry().activate(active).ok());
  }
  auto restarted = ServedModel::create(o);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  ASSERT_TRUE((*restarted)->start(model_, nullptr).ok());
  EXPECT_EQ((*restarted)->registry().active_name("kv_repair"), active)
      << "the persisted activation outranks the file";
  EXPECT_EQ((*restarted)->registry().kv_repair().get()->name, active);
}

TEST_F(ServedModelTest, AFallbackFileThatCannotBeServedFailsTheStartNamingTheField) {
  ServedModelOptions o;
  o.kv_splice_file = tmp_.path() + "/missing.safetensors";
  auto sm = ServedModel::create(o);
  ASSERT_TRUE(sm.ok()) << sm.status();
  const absl::Status st = (*sm)->start(model_, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message().rfind("engine.kv_splice: ", 0), 0u) << st;
}

// Degraded: the writable state cannot be used (here: the hook's journal says the volume is full). Serving
// goes on, writable() says why, the listener hears false, and the retry thread opens it later.
TEST_F(ServedModelTest, AStorageErrorDegradesAndTheRetryRecovers) {
  ServedModelOptions o;
  o.state_dir = tmp_.path() + "/state";
  o.state_retry_s = 0.02;
  auto sm = ServedModel::create(o);
  ASSERT_TRUE(sm.ok()) << sm.status();
  std::atomic<int> calls{0};
  std::atomic<int> heard_false{0}, heard_true{0};
  (*sm)->set_writable_listener([&](bool ok) { ++(ok ? heard_true : heard_false); });
  ASSERT_TRUE((*sm)
                  ->start(model_,
                          [&](ArtifactStore&) {
                            return ++calls < 3 ? absl::ResourceExhaustedError("no space left on device")
                                               : absl::OkStatus();
                          })
                  .ok());
  const absl::Status why = (*sm)->writable();
  if (calls.load() < 3) {
    EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_TRUE(eventually([&] { return heard_true.load() == 1; }));
  EXPECT_EQ(heard_false.load(), 1);
  EXPECT_EQ(calls.load(), 3);
  EXPECT_TRUE((*sm)->writable().ok());

  // Another error from the hook at start is not a storage error: the start fails.
  ServedModelOptions o2;
  o2.state_dir = tmp_.path() + "/state2";
  auto other = ServedModel::create(o2);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(
      (*other)->start(model_, [](ArtifactStore&) { return absl::DataLossError("damaged journal"); }).code(),
      absl::StatusCode::kDataLoss);
}

// A follower (another frostd's state directory, read-only) swaps in what the owner's ACTIVE marker names from
// its own thread, and stop() ends that thread.
TEST_F(ServedModelTest, AFollowerPicksUpTheOwnersActivation) {
  ServedModelOptions owner_o;
  owner_o.state_dir = tmp_.path() + "/state";
  auto owner = ServedModel::create(owner_o);
  ASSERT_TRUE(owner.ok()) << owner.status();
  ASSERT_TRUE((*owner)->start(model_, nullptr).ok());

  ServedModelOptions fo;
  fo.follow_state_dir = owner_o.state_dir;
  fo.follow_interval_ms = 10;
  auto follower = ServedModel::create(fo);
  ASSERT_TRUE(follower.ok()) << follower.status();
  ASSERT_TRUE((*follower)->store()->read_only());
  ASSERT_TRUE((*follower)->start(model_, nullptr).ok());
  EXPECT_EQ((*follower)->registry().active_name("kv_repair"), "");

  const std::string a = publish_repair(*(*owner)->store(), 1);
  ASSERT_TRUE((*owner)->registry().activate(a).ok());
  EXPECT_TRUE(eventually([&] { return (*follower)->registry().active_name("kv_repair") == a; }));
  (*follower)->stop();
  (*follower)->stop();  // idempotent
}

}  // namespace
}  // namespace frost::serving
