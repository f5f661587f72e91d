#include "tests/testing/decoder_harness.h"

#include <cmath>
#include <random>
#include <stdexcept>

#include "core/kv/sequence_kv.h"
#include "core/model/builtin_models.h"
#include "core/model/quantize.h"
#include "core/model/tokenizer.h"
#include "kernels/cuda/reference.h"

namespace frost::testing {

ModelConfig device_llama_gqa() {
  ModelConfig c = builtin_config("builtin:tiny").value();
  c.n_vocab = 300;
  c.dim = 128;
  c.n_layer = 2;
  c.n_head = 8;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.ffn_dim = 200;
  c.max_pos = 64;
  c.tie_embeddings = true;
  return c;
}

ModelConfig device_gpt2() {
  ModelConfig c = builtin_config("builtin:tiny-gpt2").value();
  c.n_vocab = 300;
  c.dim = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 4;
  c.head_dim = 16;
  c.ffn_dim = 256;
  c.max_pos = 64;
  c.tie_embeddings = false;
  return c;
}

namespace {
// The families' tensors random_weights does not draw (builtin models are plain): norm weights around 1,
// biases around 0, from their own generator.
void add_family_weights(const ModelConfig& cfg, uint64_t seed, ModelWeights& w) {
  std::mt19937_64 g(seed ^ 0x5eedfa4117ull);
  auto vec = [&g](int64_t n, float spread, float mean) {
    std::uniform_real_distribution<float> u(-spread, spread);
    at::Tensor t = at::empty({n}, at::kFloat);
    for (int64_t i = 0; i < n; ++i) t.data_ptr<float>()[i] = mean + u(g);
    return t;
  };
  const bool llama = cfg.arch == Arch::kLlama;
  for (LayerWeights& l : w.layers) {
    if (cfg.qk_norm) {
      l.q_norm_w = vec(cfg.head_dim, 0.2f, 1.f);
      l.k_norm_w = vec(cfg.head_dim, 0.2f, 1.f);
    }
    if (cfg.post_norms) {
      l.post_attn_norm_w = vec(cfg.dim, 0.2f, 1.f);
      l.post_mlp_norm_w = vec(cfg.dim, 0.2f, 1.f);
    }
    if (llama && cfg.attention_bias) l.bqkv = vec(cfg.q_dim() + 2 * cfg.kv_dim(), 0.1f, 0.f);
    if (llama && cfg.o_bias) l.bo = vec(cfg.dim, 0.1f, 0.f);
  }
}
}  // namespace

std::shared_ptr<LoadedModel> random_loaded_model(const ModelConfig& cfg, uint64_t seed, WeightDtype dtype) {
  auto m = std::make_shared<LoadedModel>();
  m->name = "random:" + std::string(arch_name(cfg.arch));
  m->source = m->name;
  m->config = cfg;
  const at::ScalarType scalar = dtype == WeightDtype::kBF16  ? at::kBFloat16
                                : dtype == WeightDtype::kF16 ? at::kHalf
                                                             : at::kFloat;
  ModelWeights w = random_weights(cfg, seed, scalar);
  add_family_weights(cfg, seed, w);
  if (absl::Status st = quantize_weights(w, dtype, 32); !st.ok()) throw std::runtime_error(st.ToString());
  m->model = std::make_unique<Transformer>(cfg, std::move(w));
  m->tokenizer = make_byte_tokenizer(static_cast<int32_t>(cfg.n_vocab));
  return m;
}

KvCodecKind kv_codec_of(cuda::KvFormat f) {
  switch (f) {
    case cuda::KvFormat::kF32: return KvCodecKind::kF32;
    case cuda::KvFormat::kF16: return KvCodecKind::kF16;
    case cuda::KvFormat::kBF16: return KvCodecKind::kBF16;
    case cuda::KvFormat::kInt8: return KvCodecKind::kInt8;
    case cuda::KvFormat::kInt4: return KvCodecKind::kInt4;
  }
  return KvCodecKind::kF32;
}

std::vector<float> cpu_forward_logits(const LoadedModel& m, KvCodecKind codec,
                                      const std::vector<int32_t>& tokens) {
  SequenceKv kv(m.model->kv_spec(static_cast<int64_t>(tokens.size()), codec));
  at::Tensor ids = at::empty({static_cast<int64_t>(tokens.size())}, at::kLong);
  for (size_t i = 0; i < tokens.size(); ++i) ids.data_ptr<int64_t>()[i] = tokens[i];
  at::Tensor out = m.model->forward(ids, kv).contiguous();
  return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
}

cuda::KvLayout device_layout(const ModelConfig& cfg, cuda::KvFormat format, int block_tokens) {
  cuda::KvLayout l;
  l.format = format;
  l.n_layer = static_cast<int>(cfg.n_layer);
  l.n_head_kv = static_cast<int>(cfg.n_head_kv);
  l.head_dim = static_cast<int>(cfg.head_dim);
  l.block_tokens = block_tokens;
  return l;
}

void allocate_for_test(DeviceDecoder& d, const ModelConfig& cfg, cuda::KvFormat format, int n_blocks, int max_rows,
                       int max_seqs, int block_tokens) {
  const int max_blocks = static_cast<int>((cfg.max_pos + block_tokens - 1) / block_tokens);
  d.allocate(device_layout(cfg, format, block_tokens), n_blocks, max_rows, max_seqs, max_blocks);
}

TestBlocks::TestBlocks(int n_blocks) {
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int TestBlocks::take() {
  if (free_.empty()) throw std::runtime_error("test pool exhausted");
  const int b = free_.back();
  free_.pop_back();
  return b;
}

void DecoderSeq::reserve(DeviceDecoder& d, TestBlocks& a, int n_positions) {
  const int bt = d.kv_layout().block_tokens;
  while (static_cast<int>(blocks.size()) * bt < n_positions) blocks.push_back(a.take());
  d.set_blocks(slot, blocks.data(), static_cast<int>(blocks.size()));
}

std::vector<std::vector<float>> run_alone(DeviceDecoder& d, TestBlocks& a, DecoderSeq s, int n_new, int vocab) {
  std::vector<std::vector<float>> out;
  s.reserve(d, a, static_cast<int>(s.tokens.size()) + n_new);
  DeviceStep pre;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    pre.token.push_back(s.tokens[i]);
    pre.seq.push_back(s.slot);
    pre.pos.push_back(static_cast<int32_t>(i));
  }
  pre.logit_rows = {static_cast<int32_t>(s.tokens.size()) - 1};
  out.push_back(d.forward_logits(pre));
  for (int k = 1; k < n_new; ++k) {
    const int32_t t = argmax_of(out.back().data(), vocab);
    const auto p = static_cast<int32_t>(s.tokens.size());
    s.tokens.push_back(t);
    d.set_blocks(s.slot, s.blocks.data(), static_cast<int>(s.blocks.size()));
    out.push_back(d.forward_logits(DeviceStep{{t}, {s.slot}, {p}, {0}}));
  }
  return out;
}

double rel_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double m = 0, s = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return 1e30;
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
    s = std::max(s, static_cast<double>(std::fabs(b[i])));
  }
  return m / s;
}

int argmax_of(const float* l, int vocab) { return cuda::ref::argmax(l, vocab); }

std::vector<float> prefill_then_decode_logits(DeviceDecoder& d, const std::vector<int32_t>& tokens, int n_prefill) {
  DeviceStep pre;
  for (int i = 0; i < n_prefill; ++i) {
    pre.token.push_back(tokens[static_cast<size_t>(i)]);
    pre.seq.push_back(0);
    pre.pos.push_back(i);
    pre.logit_rows.push_back(i);
  }
  std::vector<float> got = d.forward_logits(pre);
  for (int i = n_prefill; i < static_cast<int>(tokens.size()); ++i) {
    const std::vector<float> l = d.forward_logits(DeviceStep{{tokens[static_cast<size_t>(i)]}, {0}, {i}, {0}});
    got.insert(got.end(), l.begin(), l.end());
  }
  return got;
}

}  // namespace frost::testing
