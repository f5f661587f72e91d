// Where the prototype head computes (core/prototype/device.h): the served model's device resolved to a
// compute device with its reason, and a model served on a CUDA device under a LibTorch without CUDA (this
// host's Debian 1.13) training and predicting on the CPU with the same bits as a CPU model. The GPU side (the
// same run on cuda:0 against the CPU, within a tolerance) is tests/gpu/prototype_device_test.cc.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/prototype/device.h"
#include "core/prototype/features.h"
#include "core/prototype/predictor.h"
#include "core/prototype/trainer.h"
#include "tests/unit/prototype/prototype_testing.h"

namespace frost::prototype {
namespace {

using namespace frost::prototype::prototype_testing;  // NOLINT(build/namespaces)

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(PrototypeDevice, TheServedDeviceResolvesToWhereTheHeadComputesWithItsReason) {
  for (const char* cpu : {"cpu", ""}) {
    const ComputeDevice d = resolve_compute_device(cpu, /*cuda_available=*/true);
    EXPECT_TRUE(d.is_cpu()) << cpu;
    EXPECT_EQ(d.name, "cpu");
    EXPECT_TRUE(has(d.reason, "model.device is cpu")) << d.reason;
  }
  const ComputeDevice ref = resolve_compute_device("reference", true);
  EXPECT_TRUE(ref.is_cpu());
  EXPECT_EQ(ref.name, "cpu");
  EXPECT_TRUE(has(ref.reason, "reference")) << ref.reason;

  const ComputeDevice no_cuda = resolve_compute_device("cuda:0", /*cuda_available=*/false);
  EXPECT_TRUE(no_cuda.is_cpu());
  EXPECT_EQ(no_cuda.name, "cpu");
  EXPECT_TRUE(has(no_cuda.reason, "cuda:0") && has(no_cuda.reason, "no CUDA backend")) << no_cuda.reason;

  const ComputeDevice gpu1 = resolve_compute_device("cuda:1", true);
  EXPECT_TRUE(gpu1.device.is_cuda());
  EXPECT_EQ(gpu1.device.index(), 1);
  EXPECT_EQ(gpu1.name, "cuda:1");
  EXPECT_TRUE(has(gpu1.reason, "LibTorch has CUDA")) << gpu1.reason;
  const ComputeDevice gpu = resolve_compute_device("cuda", true);
  EXPECT_TRUE(gpu.device.is_cuda());
  EXPECT_EQ(gpu.name, "cuda:0");

  for (const char* odd : {"cuda:x", "cuda:-1", "tpu"}) {
    const ComputeDevice d = resolve_compute_device(odd, true);
    EXPECT_TRUE(d.is_cpu()) << odd;
    EXPECT_TRUE(has(d.reason, "not a CUDA device")) << d.reason;
  }
  EXPECT_TRUE(cpu_compute_device().is_cpu());
}

// A HiddenStateSource that names a device but computes with another model's CPU forward: a model "served on
// cuda:0" without a GPU, whose features are exactly the CPU's.
class NamedCpuSource final : public HiddenStateSource {
 public:
  NamedCpuSource(std::shared_ptr<const LoadedModel> cpu, std::string device)
      : cpu_(std::move(cpu)), device_(std::move(device)) {}
  std::string device() const override { return device_; }
  absl::StatusOr<at::Tensor> hidden(const std::vector<int32_t>& tokens) const override {
    return backbone_hidden(*cpu_, tokens);
  }

 private:
  std::shared_ptr<const LoadedModel> cpu_;
  std::string device_;
};

std::unique_ptr<LoadedModel> tiny() {
  auto m = load_model("builtin:tiny");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

RegressionData toy_data(int n) {
  RegressionData d;
  const char* words[] = {"red", "green", "blue", "gold"};
  for (int i = 0; i < n; ++i) {
    d.texts.push_back(std::string("a ") + words[i % 4] + " thing number " + std::to_string(i));
    d.labels.push_back(static_cast<float>(2 * (i % 4) + 1));
    d.ids.push_back("row" + std::to_string(i));
  }
  return d;
}

TEST(PrototypeDevice, ACudaModelWithoutACudaLibTorchTrainsAndPredictsOnTheCpuWithTheCpuBits) {
  if (at::hasCUDA())
    GTEST_SKIP() << "this LibTorch has CUDA: tests/gpu/prototype_device_test.cc covers cuda:0";
  std::shared_ptr<const LoadedModel> cpu_model = tiny();
  std::unique_ptr<LoadedModel> cuda_model = tiny();
  ASSERT_TRUE(cpu_model && cuda_model);
  cuda_model->hidden_source = std::make_shared<NamedCpuSource>(cpu_model, "cuda:0");
  EXPECT_EQ(served_device(*cuda_model), "cuda:0");
  EXPECT_EQ(served_device(*cpu_model), "cpu");
  const ComputeDevice d = compute_device(*cuda_model);
  EXPECT_TRUE(d.is_cpu());
  EXPECT_TRUE(has(d.reason, "no CUDA backend")) << d.reason;

  const RegressionData data = toy_data(40);
  const LabelBounds bounds{0.0, 10.0};
  PrototypeConfig cfg = small_cfg();
  auto on_cuda_model = PrototypeTrainer::create(*cuda_model, data, bounds, cfg);
  auto on_cpu_model = PrototypeTrainer::create(*cpu_model, data, bounds, cfg, cpu_compute_device());
  ASSERT_TRUE(on_cuda_model.ok() && on_cpu_model.ok());
  EXPECT_EQ((*on_cuda_model)->device().name, "cpu");
  auto a = (*on_cuda_model)->run({});
  auto b = (*on_cpu_model)->run({});
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
  EXPECT_TRUE((*on_cuda_model)->features()->device().is_cpu());
  EXPECT_TRUE((*on_cuda_model)->key_cache().device().is_cpu());
  EXPECT_TRUE((*on_cuda_model)->mem_cache().device().is_cpu());
  EXPECT_EQ(a->report.value("compute_device", ""), "cpu");
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (size_t i = 0; i < a->tensors.size(); ++i) {
    EXPECT_TRUE(a->tensors[i].second.is_cpu()) << a->tensors[i].first;
    EXPECT_TRUE(at::equal(a->tensors[i].second, b->tensors[i].second)) << a->tensors[i].first;
  }

  auto p = Predictor::create(*a, *cuda_model);
  auto q = Predictor::create(*b, *cpu_model);
  ASSERT_TRUE(p.ok() && q.ok()) << p.status() << " " << q.status();
  EXPECT_EQ((*p)->device().name, "cpu");
  auto pp = (*p)->predict({"a red thing", "a gold thing number 3"}, 2);
  auto qq = (*q)->predict({"a red thing", "a gold thing number 3"}, 2);
  ASSERT_TRUE(pp.ok() && qq.ok());
  for (size_t i = 0; i < pp->size(); ++i) {
    EXPECT_EQ((*pp)[i].value, (*qq)[i].value);
    EXPECT_EQ((*pp)[i].weights, (*qq)[i].weights);
  }
}

TEST(PrototypeDevice, FeatureCacheRowsAndBatchesLiveOnItsDevice) {
  std::unique_ptr<LoadedModel> m = tiny();
  ASSERT_TRUE(m);
  FeatureCache::Options o;
  o.max_tokens = 8;
  auto fc = FeatureCache::build(*m, {"one text", "another text here"}, o);
  ASSERT_TRUE(fc.ok()) << fc.status();
  EXPECT_TRUE((*fc)->device().is_cpu());
  const FeatureBatch b = (*fc)->batch({0, 1});
  EXPECT_TRUE(b.h.is_cpu() && b.mask.is_cpu());
}

}  // namespace
}  // namespace frost::prototype
