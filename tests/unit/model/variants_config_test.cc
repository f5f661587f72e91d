// Architecture variants' configuration (core/model/variants.h): validation names the field and the value,
// and the parameter counts of the variants (the low-rank MLP context's seed table) agree with the model's.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/builtin_models.h"
#include "core/model/kv_dims.h"
#include "core/model/model_config.h"
#include "core/model/model_loader.h"
#include "core/model/transformer.h"
#include "core/model/variants.h"
#include "tests/testing/st_writer.h"
#include "tests/testing/test_util.h"
#include "tests/unit/model/variants_testing.h"

namespace frost {
namespace {

using ::frost::testing::max_abs_diff;
using ::frost::testing::NamedTensors;
using ::frost::testing::TempDir;
using ::frost::testing::write_model_dir;
using ojson = nlohmann::ordered_json;
using namespace variants_testing;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------------------------
// (d) config validation.

absl::Status parse_with(ojson base, const ojson& variants) {
  base["frost_variants"] = variants;
  return parse_model_config(base.dump()).status();
}

TEST(VariantConfigTest, ParsesEveryFieldAndKeepsPlainConfigsPlain) {
  auto plain = parse_model_config(gpt2_json().dump());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->variants.any());
  ojson j = gpt2_json();
  j["frost_variants"] = nullptr;
  ASSERT_TRUE(parse_model_config(j.dump()).ok());
  j["frost_variants"] = ojson::parse(R"({"ra_layers": [0], "sba": {"layers": [1], "alpha": 0.25},
      "router": {"layers": [0, 1], "ra_heads": 1, "hidden": 8}, "mlp_ctx": {"rank": 16, "conductor": true}})");
  auto c = parse_model_config(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  const VariantConfig& v = c->variants;
  EXPECT_EQ(v.ra_layers, (std::vector<int64_t>{0}));
  EXPECT_EQ(v.sba_layers, (std::vector<int64_t>{1}));
  EXPECT_DOUBLE_EQ(v.sba_alpha, 0.25);
  EXPECT_EQ(v.router_layers, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(v.router_ra_heads, 1);
  EXPECT_EQ(v.router_hidden, 8);
  EXPECT_EQ(v.mlp_ctx_layers, (std::vector<int64_t>{0, 1}));  // absent "layers" = all
  EXPECT_EQ(v.mlp_ctx_rank, 16);
  EXPECT_TRUE(v.mlp_ctx_conductor);
  // router.hidden defaults to 16; RA with GQA-free LLaMA is fine
  auto r = parse_model_config([] {
    ojson l = llama_json(4);
    l["frost_variants"] = {{"router", {{"layers", {1}}, {"ra_heads", 3}}}, {"ra_layers", {0, 1}}};
    return l.dump();
  }());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->variants.router_hidden, 16);
}

TEST(VariantConfigTest, RejectsBadFieldsNamingFieldAndValue) {
  const ojson g = gpt2_json();
  EXPECT_INVALID(parse_with(g, 3), "frost_variants must be an object, got 3");
  EXPECT_INVALID(parse_with(g, {{"ra_layer", {0}}}), "frost_variants.ra_layer is unknown");
  EXPECT_INVALID(parse_with(g, {{"ra_layers", 0}}),
                 "frost_variants.ra_layers must be a list of layer indices, got 0");
  EXPECT_INVALID(parse_with(g, {{"ra_layers", {"0"}}}),
                 "frost_variants.ra_layers must be a list of layer indices");
  EXPECT_INVALID(parse_with(g, {{"ra_layers", {2}}}), "frost_variants.ra_layers has layer 2, outside [0, 2)");
  EXPECT_INVALID(parse_with(g, {{"ra_layers", {-1}}}), "frost_variants.ra_layers has layer -1");
  EXPECT_INVALID(parse_with(g, {{"ra_layers", {1, 1}}}), "frost_variants.ra_layers lists layer 1 twice");
  EXPECT_INVALID(parse_with(llama_json(2), {{"ra_layers", {0}}}),
                 "frost_variants.ra_layers needs num_key_value_heads (2) == num_attention_heads (4)");
  EXPECT_INVALID(parse_with(llama_json(2), {{"sba", {{"layers", {1}}, {"alpha", 0.5}}}}),
                 "frost_variants.sba.layers needs num_key_value_heads (2)");
  EXPECT_INVALID(parse_with(g, {{"sba", {{"layers", {1}}, {"alpha", 1.5}}}}),
                 "frost_variants.sba.alpha must be in [0, 1], got 1.5");
  EXPECT_INVALID(parse_with(g, {{"sba", {{"layers", {1}}, {"alpha", "half"}}}}),
                 "frost_variants.sba.alpha must be a number, got \"half\"");
  EXPECT_INVALID(parse_with(g, {{"sba", {{"layers", {1}}}}}), "frost_variants.sba.alpha is missing");
  EXPECT_INVALID(parse_with(g, {{"sba", {{"layers", {1}}, {"alpha", 0.5}, {"beta", 1}}}}),
                 "frost_variants.sba.beta is unknown");
  EXPECT_INVALID(parse_with(g, {{"ra_layers", {1}}, {"sba", {{"layers", {1}}, {"alpha", 0.5}}}}),
                 "frost_variants.sba.layers has layer 1, which ra_layers also lists");
  EXPECT_INVALID(parse_with(g, {{"router", {{"layers", {0}}}}}), "frost_variants.router.ra_heads is missing");
  EXPECT_INVALID(parse_with(g, {{"router", {{"layers", {0}}, {"ra_heads", 0}}}}),
                 "frost_variants.router.ra_heads must be in [1, n_head = 4), got 0");
  EXPECT_INVALID(parse_with(g, {{"router", {{"layers", {0}}, {"ra_heads", 4}}}}),
                 "frost_variants.router.ra_heads must be in [1, n_head = 4), got 4");
  EXPECT_INVALID(parse_with(g, {{"router", {{"layers", {0}}, {"ra_heads", 1}, {"hidden", 0}}}}),
                 "frost_variants.router.hidden must be in [1, 4096], got 0");
  EXPECT_INVALID(parse_with(g, {{"router", {{"layers", {5}}, {"ra_heads", 1}}}}),
                 "frost_variants.router.layers has layer 5");
  EXPECT_INVALID(parse_with(g, {{"mlp_ctx", {{"rank", 0}}}}),
                 "frost_variants.mlp_ctx.rank must be in [1, 1048576], got 0");
  EXPECT_INVALID(parse_with(g, {{"mlp_ctx", {{"rank", 8.5}}}}),
                 "frost_variants.mlp_ctx.rank must be an integer, got 8.5");
  EXPECT_INVALID(parse_with(g, {{"mlp_ctx", {{"rank", 8}, {"conductor", 1}}}}),
                 "frost_variants.mlp_ctx.conductor must be true or false, got 1");
  EXPECT_INVALID(parse_with(g, {{"mlp_ctx", {{"rank", 8}, {"layers", {0, 3}}}}}),
                 "frost_variants.mlp_ctx.layers has layer 3");
  EXPECT_INVALID(parse_with(llama_json(4), {{"mlp_ctx", {{"rank", 8}}}}),
                 "frost_variants.mlp_ctx is GPT-2 only");
  // the config.json label is part of the message
  EXPECT_INVALID(parse_with(g, {{"ra_layers", {7}}}), "config.json: frost_variants.ra_layers");
  // builtin configs go through the same validation
  ModelConfig c = *builtin_config("builtin:tiny");
  c.variants = ra({0});
  EXPECT_INVALID(validate_model_config(c), "frost_variants.ra_layers needs num_key_value_heads (2)");
}

// ---------------------------------------------------------------------------------------------
// Parameter counts (docs/architecture_variants.md, "Parameter counts").

TEST(VariantParamsTest, ReproducesTheSeedTable) {
  using variants::seed_ctx_accounting;
  const auto a = seed_ctx_accounting(768, 12, 4, 128);
  EXPECT_EQ(a.ctx_down, 98'304);  // "768 × 128 = 98K"
  EXPECT_EQ(a.ctx_up, 393'216);   // "128 × 3072 = 393K"
  EXPECT_EQ(a.ctx_per_layer, 491'520);
  EXPECT_EQ(a.ctx_total, 5'898'240);  // "+5.9M"
  EXPECT_NEAR(a.ctx_total / 1e6, 5.9, 0.05);
  EXPECT_EQ(a.attn_per_layer, 2'359'296);      // "4*E² = 2.36M"
  EXPECT_EQ(a.mlp_per_layer, 4'718'592);       // "4.72M"
  EXPECT_EQ(a.baseline_per_layer, 7'077'888);  // "7.08M"
  EXPECT_EQ(a.baseline_total, 84'934'656);     // "85M"
  EXPECT_NEAR(a.baseline_total / 1e6, 85, 0.1);
  EXPECT_EQ(a.lowrank_per_layer, 7'569'408);  // "7.57M/layer"
  EXPECT_NEAR(a.lowrank_per_layer / 1e6, 7.57, 0.005);
  // "90.9M": exactly 90,832,896 = 90.83M by the seed's own accounting (the docs note the rounding)
  EXPECT_EQ(a.lowrank_total, 90'832'896);
  EXPECT_NEAR(a.lowrank_total / 1e6, 90.9, 0.1);
  EXPECT_EQ(a.fullrank_ctx_per_layer, 2'359'296);  // naive ctx_proj "2.36M"
  EXPECT_EQ(a.fullrank_total, 113'246'208);        // "113.3M" (113.25M)
  EXPECT_NEAR(a.fullrank_total / 1e6, 113.3, 0.1);
  EXPECT_NEAR((a.fullrank_total - a.lowrank_total) / 1e6, 22.4, 0.05);                      // "saved 22.4M"
  EXPECT_NEAR(static_cast<double>(a.fullrank_ctx_per_layer) / a.ctx_per_layer, 4.8, 0.01);  // "5×"
  EXPECT_EQ(seed_ctx_accounting(768, 12, 4, 64).ctx_per_layer, 245'760);                    // "245K"
  EXPECT_EQ(seed_ctx_accounting(768, 12, 4, 256).ctx_per_layer, 983'040);                   // seed: "982K"
  // seed: "R=3072 back to 2.36M" — not for the factorised form: 768·3072 + 3072·3072
  EXPECT_EQ(seed_ctx_accounting(768, 12, 4, 3072).ctx_per_layer, 11'796'480);

  // variant_params on a GPT-2 124M-shaped config
  ModelConfig c = *builtin_config("builtin:tiny-gpt2");
  c.dim = 768;
  c.n_head = c.n_head_kv = 12;
  c.head_dim = 64;
  c.n_layer = 12;
  c.ffn_dim = 3072;
  c.variants.mlp_ctx_rank = 128;
  for (int64_t l = 0; l < 12; ++l) c.variants.mlp_ctx_layers.push_back(l);
  ASSERT_TRUE(validate_model_config(c).ok());
  EXPECT_EQ(variants::variant_params(c).mlp_ctx, 5'898'240);
  EXPECT_EQ(variants::variant_params(c).mlp_ctx_scalars, 12);
}

TEST(VariantParamsTest, AgreesWithTransformerNParams) {
  struct P {
    std::string base;
    bool mha;
    VariantConfig v;
  };
  for (const P& p :
       {P{"builtin:tiny-gpt2", false, all_of_them()}, P{"builtin:tiny-gpt2", false, mlp_ctx(8, false)},
        P{"builtin:tiny", false, router({0, 1}, 1, 16)}, P{"builtin:tiny", true, ra({0})}}) {
    const ModelConfig cfg = make_config(p.base, p.mha, p.v);
    ModelConfig plain = cfg;
    plain.variants = VariantConfig();
    const int64_t added = make_model(cfg)->n_params() - make_model(plain)->n_params();
    EXPECT_EQ(added, variants::variant_params(cfg).total()) << p.base;
    if (!p.v.mlp_ctx_layers.empty()) {
      EXPECT_EQ(variants::variant_params(cfg).mlp_ctx,
                2 * variants::mlp_ctx_params_per_layer(cfg.dim, cfg.ffn_dim, p.v.mlp_ctx_rank));
    }
  }
}

}  // namespace
}  // namespace frost
