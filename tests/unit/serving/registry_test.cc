// serving::Registry (core/serving/registry.h), on kv_repair artifacts (cheap to make: a seeded RepairSet
// for builtin:tiny): activation verifies before it swaps and persists before it serves, a bad artifact
// changes nothing, a request's snapshot survives a swap, and a new registry restores what was active.
#include "core/serving/registry.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/model/kv_dims.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"
#include "core/serving/checked_file.h"
#include "core/serving/tensor_store.h"
#include "tests/testing/test_util.h"

namespace frost::serving {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model("builtin:tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const LoadedModel>(std::move(*m));
    auto st = ArtifactStore::open(tmp_.path() + "/artifacts");
    ASSERT_TRUE(st.ok()) << st.status();
    store_ = std::move(*st);
  }

  // Publishes a kv_repair artifact for `model_name` (the file's "model" metadata); returns its name.
  std::string publish_repair(uint64_t seed, const std::string& model_name) {
    RepairConfig rc;
    rc.rank = 2;
    auto set = RepairSet::create(rc, {0}, repair_dims(model_->config), seed);
    EXPECT_TRUE(set.ok()) << set.status();
    ArtifactMeta meta;
    meta.backbone = model_name;
    auto info = store_->publish("kv_repair", meta, [&](const std::string& dir) {
      return write_checked_file(dir, "repair.safetensors", "frost.kv_repair.v1", [&](const std::string& p) {
        return (*set)->save(p, {{"codec", "int4"}, {"corruption", "none"}, {"model", model_name}});
      });
    });
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->name : "";
  }

  ::frost::testing::TempDir tmp_{"frost_registry"};
  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<ArtifactStore> store_;
  TensorStore tensors_;
};

TEST_F(RegistryTest, ActivatesPersistsAndKeepsTheSnapshotARequestTook) {
  Registry reg(store_.get(), &tensors_);
  EXPECT_EQ(reg.kinds(), (std::vector<std::string>{"kv_repair", "kvsplice", "prototype"}));
  const std::string a = publish_repair(1, model_->name), b = publish_repair(2, model_->name);
  ASSERT_TRUE(reg.activate(a, model_).ok());
  EXPECT_EQ(reg.active_name("kv_repair"), a);
  EXPECT_TRUE(reg.is_active(a));
  EXPECT_EQ(reg.active_names(), std::vector<std::string>{a});
  EXPECT_EQ(*store_->active("kv_repair"), a) << "persisted as ACTIVE";
  EXPECT_NE(reg.describe("kv_repair").find("int4"), std::string::npos) << reg.describe("kv_repair");

  // A request took the slot's version; a swap does not change what it holds.
  std::shared_ptr<const RepairActive> held = reg.kv_repair().get();
  ASSERT_TRUE(reg.activate(b, model_).ok());
  EXPECT_EQ(held->name, a);
  EXPECT_EQ(reg.kv_repair().get()->name, b);
  EXPECT_FALSE(reg.is_active(a));
  EXPECT_EQ(reg.swaps(), 2);
}

TEST_F(RegistryTest, ABadArtifactIsRefusedAndTheActiveOneKeepsServing) {
  Registry reg(store_.get(), &tensors_);
  const std::string good = publish_repair(1, model_->name);
  const std::string other_model = publish_repair(2, "some-other-model");
  const std::string corrupt = publish_repair(3, model_->name);
  ASSERT_TRUE(reg.activate(good, model_).ok());

  auto info = store_->get(corrupt);
  ASSERT_TRUE(info.ok());
  {
    std::fstream f(info->dir + "/repair.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.write("\xff\xff\xff\xff", 4);
  }
  for (const std::string& bad : {other_model, corrupt}) {
    absl::StatusOr<ArtifactInfo> r = reg.activate(bad, model_);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status();
    EXPECT_EQ(reg.active_name("kv_repair"), good);
    EXPECT_EQ(*store_->active("kv_repair"), good) << "a refused artifact must not be persisted";
  }
  EXPECT_EQ(reg.swap_failures(), 2);
  EXPECT_EQ(reg.activate("kv_repair/99", model_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.activate("kv_repair/../1", model_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.activate(good, nullptr).status().code(), absl::StatusCode::kUnavailable);
  Registry disabled(nullptr, &tensors_);
  EXPECT_EQ(disabled.activate(good, model_).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegistryTest, ANewRegistryRestoresWhatWasActive) {
  std::string a;
  {
    Registry reg(store_.get(), &tensors_);
    a = publish_repair(1, model_->name);
    ASSERT_TRUE(reg.activate(a, model_).ok());
  }
  Registry after_restart(store_.get(), &tensors_);
  EXPECT_EQ(after_restart.active_name("kv_repair"), "");
  EXPECT_EQ(after_restart.restore(model_), (std::set<std::string>{"kv_repair"}));
  EXPECT_EQ(after_restart.active_name("kv_repair"), a);

  // A persisted activation that cannot be served any more is logged and skipped, not fatal.
  auto info = store_->get(a);
  ASSERT_TRUE(info.ok());
  std::remove((info->dir + "/repair.safetensors").c_str());
  Registry broken(store_.get(), &tensors_);
  EXPECT_TRUE(broken.restore(model_).empty());
  EXPECT_EQ(broken.active_name("kv_repair"), "");
}

TEST_F(RegistryTest, ServesAConfiguredFileWithoutPersistingIt) {
  RepairConfig rc;
  rc.rank = 2;
  auto set = RepairSet::create(rc, {0}, repair_dims(model_->config), 5);
  ASSERT_TRUE(set.ok());
  const std::string path = tmp_.path() + "/repair.safetensors";
  ASSERT_TRUE((*set)->save(path, {{"codec", "int8"}, {"model", model_->name}}).ok());
  Registry reg(store_.get(), &tensors_);
  ASSERT_TRUE(reg.serve_file("kv_repair", "engine.kv_repair", path, model_).ok());
  EXPECT_EQ(reg.active_name("kv_repair"), "file:" + path);
  EXPECT_FALSE(store_->active("kv_repair")->has_value());
  const absl::Status missing = reg.serve_file("kv_repair", "engine.kv_repair", path + ".nope", model_);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.message().rfind("engine.kv_repair: ", 0), 0u) << missing;
  EXPECT_EQ(reg.serve_file("prototype", "x", path, model_).code(), absl::StatusCode::kInvalidArgument);
}

// An inference replica follows a trainer's store read-only: it serves what ACTIVE names, writes nothing,
// refuses activations of its own, keeps serving through a bad activation, and picks up the next good one.
TEST_F(RegistryTest, AFollowerServesWhatTheOwnersMarkerNamesAndWritesNothing) {
  Registry owner(store_.get(), &tensors_);
  auto ro = ArtifactStore::open_read_only(tmp_.path() + "/artifacts");
  ASSERT_TRUE(ro.ok()) << ro.status();
  TensorStore follower_tensors;
  Registry follower(ro->get(), &follower_tensors);
  EXPECT_TRUE(follower.restore(model_).empty()) << "nothing active yet";

  const std::string a = publish_repair(1, model_->name), b = publish_repair(2, model_->name);
  ASSERT_TRUE(owner.activate(a, model_).ok());
  EXPECT_EQ(follower.follow(model_), (std::set<std::string>{"kv_repair"}));
  EXPECT_EQ(follower.active_name("kv_repair"), a);
  EXPECT_TRUE(follower.follow(model_).empty()) << "unchanged marker: no reload";

  // The follower's own activation is refused and changes nothing, on disk or in memory.
  const absl::Status own = follower.activate(b, model_).status();
  EXPECT_EQ(own.code(), absl::StatusCode::kFailedPrecondition) << own;
  EXPECT_NE(own.message().find("follow"), std::string::npos) << own;
  EXPECT_EQ(**store_->active("kv_repair"), a);
  EXPECT_EQ((*ro)->remove(a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ro)->set_active("kv_repair", b).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ro)->publish("kv_repair", {}, [](const std::string&) { return absl::OkStatus(); }).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // A marker naming an artifact the follower cannot serve (another model's) leaves `a` serving, counted once.
  const std::string other_model = publish_repair(3, "some-other-model");
  ASSERT_TRUE(store_->set_active("kv_repair", other_model).ok());
  EXPECT_TRUE(follower.follow(model_).empty());
  EXPECT_TRUE(follower.follow(model_).empty());
  EXPECT_EQ(follower.active_name("kv_repair"), a);
  EXPECT_EQ(follower.swap_failures(), 1) << "a refused version is not retried every poll";

  // The owner activates a good one: the follower swaps, and a held snapshot keeps its version.
  std::shared_ptr<const RepairActive> held = follower.kv_repair().get();
  ASSERT_TRUE(owner.activate(b, model_).ok());
  EXPECT_EQ(follower.follow(model_), (std::set<std::string>{"kv_repair"}));
  EXPECT_EQ(follower.active_name("kv_repair"), b);
  EXPECT_EQ(held->name, a);
  EXPECT_EQ(follower.swaps(), 2);

  // A store that does not exist (yet) serves nothing and is not an error.
  auto missing = ArtifactStore::open_read_only(tmp_.path() + "/nope/artifacts");
  ASSERT_TRUE(missing.ok()) << missing.status();
  Registry early(missing->get(), &follower_tensors);
  EXPECT_TRUE(early.follow(model_).empty());
}

}  // namespace
}  // namespace frost::serving
