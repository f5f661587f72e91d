// The prototype regression's configuration (core/prototype/config.h): the seed table's defaults, field
// validation naming the field, the JSON round trip and the τ schedule.
// The other prototype tests: prototype_config_test.cc, prototype_selection_test.cc, prototype_net_test.cc,
// prototype_trainer_test.cc.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "core/prototype/artifact.h"
#include "core/prototype/config.h"
#include "core/prototype/evaluate.h"
#include "core/prototype/features.h"
#include "core/prototype/metrics.h"
#include "core/prototype/net.h"
#include "core/prototype/predictor.h"
#include "core/prototype/residual_choice.h"
#include "core/prototype/selection.h"
#include "core/prototype/trainer.h"
#include "tests/testing/test_util.h"
#include "tests/unit/prototype/prototype_testing.h"

namespace frost::prototype {
namespace {

using frost::testing::TempDir;
using namespace frost::prototype::prototype_testing;  // NOLINT(build/namespaces)

// ------------------------------------------------------------------------------ config

TEST(PrototypeConfig, DefaultsAreTheSeedTable) {
  PrototypeConfig c;
  EXPECT_EQ(c.max_tokens, 256);
  EXPECT_EQ(c.d_h, 256);
  EXPECT_EQ(c.m, 8);
  EXPECT_EQ(c.m_q, 8);
  EXPECT_EQ(c.K, 128);
  EXPECT_EQ(c.T, 512);
  EXPECT_EQ(c.L, 3);
  EXPECT_EQ(c.H, 8);
  EXPECT_EQ(c.ffn_dim(), 4 * 256);
  EXPECT_EQ(c.huber_delta, 0.5);
  EXPECT_EQ(c.epochs_a, 5);
  EXPECT_EQ(c.epochs_b, 10);
  EXPECT_EQ(c.tau_start, 1.0);
  EXPECT_EQ(c.tau_end, 0.1);
  EXPECT_EQ(c.lambda_emb, 0.1);
  EXPECT_EQ(c.lambda_ov, 1.0);
  EXPECT_EQ(c.lambda_rep, 0.1);
  EXPECT_EQ(c.m_cos, 0.2);
  // Not in the seed's table: frost's attribution departure and slot-initialisation choice.
  EXPECT_EQ(c.key_bias, 16.0);
  EXPECT_EQ(c.slot_init, "kmeans++");
  // Issue 24: the linear probe under the head, its held-out scale, resTR trained inside its guard.
  EXPECT_EQ(c.probe, "ridge");
  EXPECT_EQ(c.val_fraction, 0.1);
  EXPECT_EQ(c.probe_margin, 0.0);
  EXPECT_EQ(c.restr_guard_weight, 1.0);
  EXPECT_TRUE(validate(c).ok());
  PrototypeConfig bad_probe;
  EXPECT_INVALID(set_fields(bad_probe, {"probe=lasso"}), "probe must be 'ridge' or 'none'");
}

TEST(PrototypeConfig, SetFieldsValidatesAndNamesTheField) {
  PrototypeConfig c;
  ASSERT_TRUE(set_fields(c, {"K=16", "T=64", "lr=0.003", "seed=7"}).ok());
  EXPECT_EQ(c.K, 16);
  EXPECT_EQ(c.T, 64);
  EXPECT_EQ(c.lr, 0.003);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_INVALID(set_fields(c, {"bogus=1"}),
                 "prototype config: unknown key 'bogus' (known: max_tokens, d_h,");
  EXPECT_INVALID(set_fields(c, {"K=1"}), "prototype config: K must be in [2, 65536], got 1");
  EXPECT_INVALID(set_fields(c, {"lr=0"}), "prototype config: lr must be > 0, got 0");
  EXPECT_INVALID(set_fields(c, {"ood_quantile=1"}), "ood_quantile must be in [0, 1), got 1");
  EXPECT_INVALID(set_fields(c, {"seed=-1"}), "seed must be an unsigned integer, got '-1'");
  EXPECT_INVALID(set_fields(c, {"K=abc"}), "K must be an integer, got 'abc'");
  EXPECT_INVALID(set_fields(c, {"lr=nan"}), "lr must be a finite number");
  EXPECT_INVALID(set_fields(c, {"K"}), "'K' is not key=value");
  PrototypeConfig d;
  EXPECT_INVALID(set_fields(d, {"T=100"}), "T (100) must be >= K (128)");
  PrototypeConfig e;
  EXPECT_INVALID(set_fields(e, {"d_h=100"}), "d_h (100) must be divisible by H (8)");
  PrototypeConfig f, f2, f3;
  EXPECT_INVALID(set_fields(f2, {"key_bias=-1"}), "key_bias must be >= 0, got -1");
  PrototypeConfig f4;
  EXPECT_INVALID(set_fields(f4, {"label_flip_p=1.5"}), "label_flip_p must be in [0, 1], got 1.5");
  EXPECT_INVALID(set_fields(f3, {"slot_init=zeros"}),
                 "slot_init must be 'kmeans++' or 'normal', got 'zeros'");
  ASSERT_TRUE(set_fields(f, {"key_bias=0", "slot_init=normal"}).ok());
  EXPECT_EQ(f.key_bias, 0.0);
  EXPECT_EQ(f.slot_init, "normal");
}

TEST(PrototypeConfig, JsonRoundTrip) {
  PrototypeConfig c;
  ASSERT_TRUE(set_fields(c, {"K=16", "T=64", "lr=0.0003", "seed=18446744073709551615"}).ok());
  auto back = config_from_json(to_json(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(to_json(*back), to_json(c));
  nlohmann::json j = to_json(c);
  j["nope"] = 1;
  EXPECT_INVALID(config_from_json(j).status(), "unknown key 'nope'");
}

// The one field table: every key it lists is in the dump, sets from its own dumped value, and a struct built
// in code is range-checked by validate() with the same words set_field uses.
TEST(PrototypeConfig, OneTableDrivesKeysDumpAndRanges) {
  PrototypeConfig c;
  const nlohmann::json j = to_json(c);
  ASSERT_EQ(j.size(), config_keys().size());
  for (const std::string& key : config_keys()) {
    ASSERT_TRUE(j.contains(key)) << key;
    const nlohmann::json& v = j[key];
    const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    EXPECT_TRUE(set_field(c, key, text).ok()) << key << "=" << text;
  }
  EXPECT_EQ(to_json(c), j);
  PrototypeConfig d;
  d.restr_alpha_max = 1.5;
  EXPECT_INVALID(validate(d), "prototype config: restr_alpha_max must be in [0, 1], got 1.5");
  PrototypeConfig e;
  e.H = 0;
  EXPECT_INVALID(validate(e), "prototype config: H must be in [1, 256], got 0");
}

TEST(PrototypeConfig, TauAnnealsLinearlyPerEpoch) {
  PrototypeConfig c;  // 10 epochs, 1.0 -> 0.1
  EXPECT_DOUBLE_EQ(tau_for_epoch(c, 1), 1.0);
  EXPECT_DOUBLE_EQ(tau_for_epoch(c, 10), 0.1);
  for (int e = 1; e <= 10; ++e) EXPECT_NEAR(tau_for_epoch(c, e), 1.0 - (e - 1) / 9.0 * 0.9, 1e-12);
  c.epochs_b = 1;
  EXPECT_DOUBLE_EQ(tau_for_epoch(c, 1), 1.0);
}

}  // namespace
}  // namespace frost::prototype
