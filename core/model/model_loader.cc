#include "core/model/model_loader.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/device.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/model/builtin_models.h"
#include "core/model/quantize.h"
#include "core/model/checkpoint_files.h"
#include "core/model/weight_map.h"
#include "core/store/safetensors.h"

namespace fs = std::filesystem;

namespace frost {
namespace {

constexpr uint64_t kBuiltinSeed = 0x5EEDF205700ull;

// The dtype matrices are read in: int8 / int4 quantize from fp32 (quantize.h); fp16 (a device format) is
// converted by LibTorch, round to nearest even (the device twins' ref::f16_bits, tests/unit/exec).
at::ScalarType to_scalar(WeightDtype d) {
  return d == WeightDtype::kBF16 ? at::kBFloat16 : d == WeightDtype::kF16 ? at::kHalf : at::kFloat;
}

// fp16 holds magnitudes up to 65504: a weight at or beyond 65520 rounds to ±inf, which would poison every
// product it takes part in. Such a checkpoint is refused, naming the matrix, rather than served as inf.
absl::Status check_f16_range(const ModelWeights& w) {
  auto check = [](const at::Tensor& t, const std::string& what) -> absl::Status {
    if (!t.defined() || t.scalar_type() != at::kHalf) return absl::OkStatus();
    FROST_ASSIGN_OR_RETURN(bool finite, torch_call([&] { return at::isfinite(t).all().item<bool>(); }));
    if (finite) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("model.dtype fp16: ", what,
                     " has values beyond fp16's range (|x| >= 65520 rounds to inf, or the checkpoint holds "
                     "inf / NaN); serve it as fp32 or bf16"));
  };
  FROST_RETURN_IF_ERROR(check(w.tok_embed, "tok_embed"));
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string p = absl::StrCat("layer ", l, " ");
    FROST_RETURN_IF_ERROR(check(lw.wqkv, p + "wqkv"));
    FROST_RETURN_IF_ERROR(check(lw.wo, p + "wo"));
    FROST_RETURN_IF_ERROR(check(lw.w_in, p + "w_in"));
    FROST_RETURN_IF_ERROR(check(lw.w_out, p + "w_out"));
  }
  if (!w.lm_head.is_same(w.tok_embed)) FROST_RETURN_IF_ERROR(check(w.lm_head, "lm_head"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transformer>> make_transformer(const ModelConfig& cfg, ModelWeights weights,
                                                              const LoadOptions& opts) {
  if (opts.dtype == WeightDtype::kF16) {
    if (cfg.variants.any())
      return absl::InvalidArgumentError(
          "model.dtype fp16: architecture variants (RA / SBA / router / MLP context) run only on "
          "model.device cpu, which does not serve fp16 weights");
    FROST_RETURN_IF_ERROR(check_f16_range(weights));
  }
  FROST_RETURN_IF_ERROR(quantize_weights(weights, opts.dtype, opts.int8_group));
  return torch_call([&] { return std::make_unique<Transformer>(cfg, std::move(weights)); });
}

absl::StatusOr<std::unique_ptr<LoadedModel>> load_builtin(const std::string& name, const LoadOptions& opts) {
  FROST_ASSIGN_OR_RETURN(ModelConfig cfg, builtin_config(name));
  auto m = std::make_unique<LoadedModel>();
  m->name = name;
  m->source = name;
  FROST_ASSIGN_OR_RETURN(ModelWeights weights,
                         torch_call([&] { return random_weights(cfg, kBuiltinSeed, to_scalar(opts.dtype)); }));
  FROST_ASSIGN_OR_RETURN(m->model, make_transformer(cfg, std::move(weights), opts));
  m->config = std::move(cfg);
  m->tokenizer = make_byte_tokenizer(static_cast<int32_t>(m->config.n_vocab));
  return m;
}

absl::StatusOr<std::unique_ptr<LoadedModel>> load_dir(const std::string& path, const LoadOptions& opts) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  if (!fs::exists(p, ec)) return absl::NotFoundError(absl::StrCat("model path not found: ", path));
  if (!fs::is_directory(p, ec)) {
    // A single file: refuse pickle/TorchScript explicitly; anything else needs its directory.
    FROST_RETURN_IF_ERROR(check_not_pickle(p.string()));
    return absl::InvalidArgumentError(
        absl::StrCat("model path must be a Hugging Face checkpoint directory, got file ", path));
  }
  FROST_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(p.string()));
  FROST_ASSIGN_OR_RETURN(GenerationDefaults gen, load_generation_config(p.string(), cfg.n_vocab));
  for (int32_t e : gen.eos_ids)  // stop tokens: config.json's, then generation_config.json's
    if (std::find(cfg.eos_ids.begin(), cfg.eos_ids.end(), e) == cfg.eos_ids.end()) cfg.eos_ids.push_back(e);
  FROST_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<SafetensorsFile>> opened, open_checkpoint_weights(p.string()));
  std::vector<const SafetensorsFile*> views;
  for (const auto& f : opened) views.push_back(f.get());
  FROST_ASSIGN_OR_RETURN(ModelWeights weights, map_weights(cfg, views, to_scalar(opts.dtype)));
  opened.clear();  // the weights are copies: unmap the files now

  auto m = std::make_unique<LoadedModel>();
  m->name = p.filename().string();
  m->source = p.string();
  FROST_ASSIGN_OR_RETURN(m->model, make_transformer(cfg, std::move(weights), opts));
  m->config = std::move(cfg);
  m->generation = std::move(gen);

  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = load_tokenizer(p.string(), opts.tokenizer);
  if (tok.ok()) {
    m->tokenizer = std::move(tok).value();
    // More tokenizer entries than embedding rows (Gemma 3: 262,145 for 262,144) is how some models ship: the
    // ids past the rows are never sampled (the logits have one entry per row) and are refused as input
    // (check_token_ids), naming the id.
    if (m->tokenizer->vocab_size() > m->config.n_vocab) {
      FROST_LOG_WARN("%s: the tokenizer has %d entries, the embedding %lld rows: ids >= %lld are refused as input",
                     p.c_str(), m->tokenizer->vocab_size(), static_cast<long long>(m->config.n_vocab),
                     static_cast<long long>(m->config.n_vocab));
    }
  } else if (absl::IsNotFound(tok.status()) && opts.tokenizer == TokenizerPreference::kAuto) {
    // A checkpoint without tokenizer files still serves token-id prompts.
    FROST_LOG_WARN("%s: no tokenizer found; only token-id prompts can be served", p.c_str());
  } else {
    return tok.status();
  }
  return m;
}

}  // namespace

absl::Status check_token_ids(const std::vector<int32_t>& ids, int64_t n_vocab, const std::string& what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] = token id ", ids[i], " is out of range [0, ",
                                                     n_vocab, "): the model has ", n_vocab, " embedding rows"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LoadedModel>> load_model(const std::string& path_or_builtin,
                                                        const LoadOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  // On a thread of its own, so that the OpenMP pool loading starts does not outlive it (see
  // run_on_transient_thread): the model will run on another thread, the engine's.
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = run_on_transient_thread([&] {
    return absl::StartsWith(path_or_builtin, "builtin:") ? load_builtin(path_or_builtin, opts)
                                                         : load_dir(path_or_builtin, opts);
  });
  if (!m.ok()) return m;
  (*m)->t_load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace frost
