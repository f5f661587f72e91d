// Fuzz target: config.json (core/model/model_config.h parse_model_config) on arbitrary text.
//
// An accepted config passes validate_model_config() on its own and its sizes are the positive, bounded
// values the loader allocates from; a rejection is INVALID_ARGUMENT.
#include <cstdint>
#include <string>

#include "core/model/model_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ModelConfig> cfg = parse_model_config(text);
  if (!cfg.ok()) {
    fuzz::check_rejection(cfg.status());
    return 0;
  }
  const ModelConfig& c = *cfg;
  const absl::Status again = validate_model_config(c);
  FROST_FUZZ_CHECK(again.ok(), "parsed config fails validation: " + again.ToString());
  for (int64_t v : {c.n_vocab, c.dim, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.ffn_dim, c.max_pos})
    FROST_FUZZ_CHECK(v > 0, "a size is not positive");
  FROST_FUZZ_CHECK(c.n_head % c.n_head_kv == 0, "kv heads do not divide heads");
  FROST_FUZZ_CHECK(c.bos_id >= -1 && c.bos_id < c.n_vocab, "bos_token_id out of range");
  for (int32_t e : c.eos_ids) FROST_FUZZ_CHECK(e >= 0 && e < c.n_vocab, "eos_token_id out of range");
  for (const auto* layers : {&c.variants.ra_layers, &c.variants.sba_layers, &c.variants.router_layers,
                             &c.variants.mlp_ctx_layers}) {
    for (int64_t l : *layers) FROST_FUZZ_CHECK(l >= 0 && l < c.n_layer, "variant layer out of range");
  }
  return 0;
}
