// TensorStore (core/serving/tensor_store.h) and the device it reports: leases by device, and the served
// model's store naming where the prototype head computes (core/prototype/device.h) — what `frostctl
// server-info` prints as device and store_bytes.<device>.
#include "core/serving/tensor_store.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/prototype/artifact.h"
#include "core/prototype/trainer.h"
#include "core/serving/artifact_store.h"
#include "core/serving/registry.h"
#include "core/serving/served_model.h"
#include "tests/testing/test_util.h"
#include "tests/unit/prototype/prototype_testing.h"

namespace frost::serving {
namespace {

TEST(TensorStore, LeasesCountOnTheirDeviceUntilReleased) {
  TensorStore ts;
  EXPECT_EQ(ts.device(), "cpu");
  auto a = ts.account("prototype/1", 100);
  ts.set_device("cuda:0");
  auto b = ts.account("prototype/2", 40);
  auto c = ts.account("prototype/3", 7, "cpu");  // a lease may name its own device
  EXPECT_EQ(ts.device(), "cuda:0");
  auto by = ts.bytes_by_device();
  EXPECT_EQ(by["cpu"], 107);
  EXPECT_EQ(by["cuda:0"], 40);
  a.reset();
  b.reset();
  by = ts.bytes_by_device();
  EXPECT_EQ(by["cpu"], 7);
  EXPECT_EQ(by["cuda:0"], 0);
  EXPECT_EQ(ts.bytes_of("prototype/3"), 7);
  EXPECT_EQ(ts.bytes_of("prototype/1"), 0);
}

// Names a device; Predict and the jobs would ask it for features (never, in these tests).
class NamedSource final : public HiddenStateSource {
 public:
  explicit NamedSource(std::string d) : d_(std::move(d)) {}
  std::string device() const override { return d_; }
  absl::StatusOr<at::Tensor> hidden(const std::vector<int32_t>&) const override {
    return absl::UnimplementedError("not in this test");
  }

 private:
  std::string d_;
};

std::shared_ptr<const LoadedModel> tiny(const std::string& served_on) {
  auto m = load_model("builtin:tiny");
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  if (served_on != "cpu") (*m)->hidden_source = std::make_shared<NamedSource>(served_on);
  return std::shared_ptr<const LoadedModel>(std::move(*m));
}

TEST(TensorStore, TheServedModelsStoreNamesTheDeviceTheHeadComputesOn) {
  const std::string cuda_head = at::hasCUDA() ? "cuda:0" : "cpu";
  for (const auto& [served, expect] : std::vector<std::pair<std::string, std::string>>{
           {"cpu", "cpu"}, {"reference", "cpu"}, {"cuda:0", cuda_head}}) {
    auto sm = ServedModel::create(ServedModelOptions{});
    ASSERT_TRUE(sm.ok()) << sm.status();
    std::shared_ptr<const LoadedModel> m = tiny(served);
    ASSERT_TRUE(m);
    ASSERT_TRUE((*sm)->start(m, nullptr).ok());
    EXPECT_EQ((*sm)->tensors().device(), expect) << "model.device " << served;
    EXPECT_EQ((*sm)->tensors().bytes_by_device().count(expect), 1u);
  }
}

TEST(TensorStore, AnActivePrototypeHeadIsAccountedOnItsComputeDevice) {
  ::frost::testing::TempDir tmp{"frost_tensor_store"};
  std::shared_ptr<const LoadedModel> model = tiny("cpu");
  ASSERT_TRUE(model);
  prototype::RegressionData data;
  for (int i = 0; i < 24; ++i) {
    data.texts.push_back("text number " + std::to_string(i) + (i % 2 ? " up" : " down"));
    data.labels.push_back(static_cast<float>(1 + i % 3));
  }
  auto trainer =
      prototype::PrototypeTrainer::create(*model, data, {0.0, 4.0}, prototype::prototype_testing::small_cfg());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto art = (*trainer)->run({});
  ASSERT_TRUE(art.ok()) << art.status();
  auto store = ArtifactStore::open(tmp.path() + "/artifacts");
  ASSERT_TRUE(store.ok()) << store.status();
  auto info = (*store)->publish(
      "prototype", {}, [&](const std::string& dir) { return prototype::save_artifact(*art, dir).status(); });
  ASSERT_TRUE(info.ok()) << info.status();
  TensorStore ts;
  Registry reg(store->get(), &ts);
  ASSERT_TRUE(reg.activate(info->name, model).ok());
  EXPECT_EQ(ts.bytes_by_device()["cpu"], art->tensor_bytes());
  EXPECT_NE(reg.describe("prototype").find("on cpu"), std::string::npos) << reg.describe("prototype");
}

}  // namespace
}  // namespace frost::serving
