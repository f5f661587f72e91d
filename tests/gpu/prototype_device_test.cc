// The prototype head on cuda:0 (core/prototype/device.h): a small head trained on real data (an EmoBank
// valence subset over stories260K's features) once on the GPU and once on the CPU from the same seed, the
// feature cache, KeyCache / MemCache and the net on the device, the artifact on the CPU, and Predict on the
// GPU against the CPU. Skips visibly without a GPU, without a LibTorch with CUDA (FROST_TORCH_CUDA, a
// CPU-only LibTorch such as Debian's) or without ../shared.
//
// Tolerances (stated, as the kernels' tests state theirs): the draws are the CPU generator's on both sides,
// so the two runs differ only by float rounding of the device's kernels (reduction order, no TF32):
//   * the same artifact served by the GPU predictor and by the CPU predictor: |ŷ_gpu − ŷ_cpu| <= 1e-4 on the
//     [1, 5] scale, prototype weights within 1e-4;
//   * the head trained on the GPU against the one trained on the CPU: the same K prototypes, predictions
//     within 5e-3 (a few hundred optimizer steps of rounding).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "core/prototype/data.h"
#include "core/prototype/device.h"
#include "core/prototype/features.h"
#include "core/prototype/predictor.h"
#include "core/prototype/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/testing/test_util.h"
#include "tests/unit/prototype/prototype_testing.h"

namespace frost::prototype {
namespace {

// The unit tests' small config (builtin:tiny trains it in a moment), on longer texts and larger batches for
// stories260K's EmoBank rows.
PrototypeConfig small_cfg() {
  PrototypeConfig c = prototype_testing::small_cfg();
  c.max_tokens = 32;
  c.batch_size = 16;
  c.probe = "none";  // the head alone: the residual choice on held-out rows would hide it behind the probe
  return c;
}

TEST(PrototypeDeviceGpu, TrainsAndPredictsOnCuda0WithinToleranceOfTheCpu) {
  FROST_REQUIRE_GPU();
  if (!at::hasCUDA())
    GTEST_SKIP()
        << "GPU test skipped: this LibTorch has no CUDA backend (CPU-only LibTorch or FROST_TORCH_CUDA=OFF): "
           "the prototype head computes on the CPU";
  // ../shared does not travel to the GPU machine: the model is the repository's own stories260K, and the data
  // the EmoBank valence rows scripts/gpu_prepare.sh copies into .gpu/ (FROST_PROTOTYPE_DATA), else ../shared.
  const std::string model_dir = testing::source_path("models/stories260K");
  const char* env_data = std::getenv("FROST_PROTOTYPE_DATA");
  const std::string data_dir =
      env_data != nullptr ? std::string(env_data) : testing::shared_path("data/emobank_valence");
  if (data_dir.empty())
    GTEST_SKIP() << "no EmoBank valence rows: set FROST_PROTOTYPE_DATA (.gpu/) or provide ../shared";
  auto model = load_model(model_dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto ds = load_dataset_dir(data_dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  RegressionData train, test;
  for (size_t i = 0; i < 160; ++i) {
    train.texts.push_back(ds->train.texts[i]);
    train.labels.push_back(ds->train.labels[i]);
  }
  for (size_t i = 0; i < 48; ++i) {
    test.texts.push_back(ds->test.texts[i]);
    test.labels.push_back(ds->test.labels[i]);
  }

  const ComputeDevice gpu = resolve_compute_device("cuda:0", at::hasCUDA());
  ASSERT_EQ(gpu.name, "cuda:0");
  auto tg = PrototypeTrainer::create(**model, train, ds->bounds, small_cfg(), gpu);
  auto tc = PrototypeTrainer::create(**model, train, ds->bounds, small_cfg(), cpu_compute_device());
  ASSERT_TRUE(tg.ok() && tc.ok()) << tg.status() << " " << tc.status();
  auto ag = (*tg)->run({});
  ASSERT_TRUE(ag.ok()) << ag.status();
  auto ac = (*tc)->run({});
  ASSERT_TRUE(ac.ok()) << ac.status();

  // Where the state lived: the device; what was saved: the CPU.
  EXPECT_TRUE((*tg)->features()->device().is_cuda());
  EXPECT_TRUE((*tg)->features()->batch({0, 1}).h.is_cuda());
  EXPECT_TRUE((*tg)->key_cache().is_cuda());
  EXPECT_TRUE((*tg)->mem_cache().is_cuda());
  for (const auto& [name, t] : (*tg)->net()->params().items()) EXPECT_TRUE(t.is_cuda()) << name;
  for (const auto& [name, t] : ag->tensors) EXPECT_TRUE(t.is_cpu()) << name;
  EXPECT_EQ(ag->report.value("compute_device", ""), "cuda:0");

  std::vector<int64_t> pg, pc;
  for (const PrototypeEntry& e : ag->prototypes) pg.push_back(e.index);
  for (const PrototypeEntry& e : ac->prototypes) pc.push_back(e.index);
  EXPECT_EQ(pg, pc) << "the GPU run picked other prototypes than the CPU run";

  // Test features once on the CPU; each predictor copies them to its device.
  FeatureCache::Options fo;
  fo.max_tokens = small_cfg().max_tokens;
  auto fc = FeatureCache::build(**model, test.texts, fo);
  ASSERT_TRUE(fc.ok()) << fc.status();
  std::vector<int64_t> all(test.texts.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  const FeatureBatch fb = (*fc)->batch(all);

  auto predict = [&](const PrototypeArtifact& art, const ComputeDevice& d) {
    auto p = Predictor::create(art, **model, d);
    EXPECT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->device().name, d.name);
    auto r = (*p)->predict_features(fb.h, fb.mask, 2);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const std::vector<Prediction> cpu_on_cpu = predict(*ac, cpu_compute_device());
  const std::vector<Prediction> gpu_on_cpu = predict(*ac, gpu);  // the predictor alone on the GPU
  const std::vector<Prediction> gpu_on_gpu = predict(*ag, gpu);  // trained and served on the GPU
  ASSERT_EQ(cpu_on_cpu.size(), test.texts.size());
  double d_pred = 0, d_weight = 0, d_train = 0;
  for (size_t i = 0; i < cpu_on_cpu.size(); ++i) {
    d_pred = std::max(d_pred, std::fabs(gpu_on_cpu[i].value - cpu_on_cpu[i].value));
    for (size_t k = 0; k < cpu_on_cpu[i].weights.size(); ++k)
      d_weight = std::max(d_weight, std::fabs(gpu_on_cpu[i].weights[k] - cpu_on_cpu[i].weights[k]));
    d_train = std::max(d_train, std::fabs(gpu_on_gpu[i].value - cpu_on_cpu[i].value));
    EXPECT_GE(gpu_on_gpu[i].value, ds->bounds.a);
    EXPECT_LE(gpu_on_gpu[i].value, ds->bounds.b);
  }
  EXPECT_LE(d_pred, 1e-4) << "the GPU predictor against the CPU one on the same artifact";
  EXPECT_LE(d_weight, 1e-4);
  EXPECT_LE(d_train, 5e-3) << "the head trained on the GPU against the one trained on the CPU";
  std::printf("prototype on cuda:0: max |Δŷ| predictor %.3g, weights %.3g, trained on the GPU %.3g\n", d_pred,
              d_weight, d_train);
}

}  // namespace
}  // namespace frost::prototype
