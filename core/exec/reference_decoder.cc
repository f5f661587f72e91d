// The host reference device (core/exec/reference_decoder.h): the device decoder's step, row by row, with the
// CPU twins of its kernels over a pool in the device's KV layout.
#include "core/exec/reference_decoder.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/reference.h"

namespace frost {
namespace {

std::vector<float> host_f32(const at::Tensor& t) {
  if (!t.defined()) return {};
  at::Tensor c = t.to(at::kFloat).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

[[noreturn]] void bad(const std::string& m) { throw DeviceError("reference device: " + m, false); }

}  // namespace

absl::StatusOr<std::unique_ptr<ReferenceDecoder>> ReferenceDecoder::create(const ModelConfig& cfg,
                                                                           const ModelWeights& w,
                                                                           const DeviceOptions& opts) {
  if (absl::Status st = device_supports(cfg, w.dtype, "reference"); !st.ok()) return st;
  if (absl::Status st = device_int8_weights_present(w, "reference"); !st.ok()) return st;
  std::unique_ptr<ReferenceDecoder> d(new ReferenceDecoder(cfg, opts));
  d->wdt_ = device_weight_dtype(w.dtype);
  auto keep = [&d](const at::Tensor& t) {
    std::vector<float> v = host_f32(t);
    d->weight_bytes_ += static_cast<int64_t>(v.size()) * (t.defined() ? t.element_size() : 0);
    return v;
  };
  // int8: the quantized form the CPU int8 model multiplies (LayerWeights::*_q; the fp32 tensor beside it is
  // its dequantized value, which the fp32 path would read instead).
  const bool int8 = d->wdt_ == cuda::DType::kInt8;
  auto matrix = [&](const at::Tensor& t, const kernels::QuantizedMatrix& qm) {
    Matrix m;
    if (!int8) {
      m.f = keep(t);
      return m;
    }
    const at::Tensor q = qm.q.contiguous(), s = qm.scales.contiguous();
    m.q.assign(q.data_ptr<int8_t>(), q.data_ptr<int8_t>() + q.numel());
    m.scales.assign(s.data_ptr<float>(), s.data_ptr<float>() + s.numel());
    m.group = static_cast<int>(qm.group);
    d->weight_bytes_ += static_cast<int64_t>(m.q.size()) + 4 * static_cast<int64_t>(m.scales.size());
    return m;
  };
  // The device stores the matrices and the table (a tied head too) in its 2-byte format: rounded alike here
  // (the matrices again in ref::linear; a no-op for tensors loaded in that format).
  d->tok_embed_ = keep(w.tok_embed);
  for (float& v : d->tok_embed_) v = cuda::ref::dtype_round(d->wdt_, v);
  d->pos_embed_ = keep(w.pos_embed);
  for (const LayerWeights& l : w.layers) {
    Layer L;
    L.attn_norm_w = keep(l.attn_norm_w);
    L.attn_norm_b = keep(l.attn_norm_b);
    L.wqkv = matrix(l.wqkv, l.wqkv_q);
    L.bqkv = keep(l.bqkv);
    L.wo = matrix(l.wo, l.wo_q);
    L.bo = keep(l.bo);
    L.mlp_norm_w = keep(l.mlp_norm_w);
    L.mlp_norm_b = keep(l.mlp_norm_b);
    L.w_in = matrix(l.w_in, l.w_in_q);
    L.b_in = keep(l.b_in);
    L.w_out = matrix(l.w_out, l.w_out_q);
    L.b_out = keep(l.b_out);
    d->layers_.push_back(std::move(L));
  }
  d->final_norm_w_ = keep(w.final_norm_w);
  d->final_norm_b_ = keep(w.final_norm_b);
  if (int8 || !w.lm_head.is_same(w.tok_embed))
    d->lm_head_ = matrix(w.lm_head, w.lm_head_q);  // int8: never tied
  if (cfg.arch == Arch::kLlama)
    cuda::ref::rope_tables(static_cast<int>(cfg.max_pos), static_cast<int>(cfg.head_dim), cfg.rope_theta,
                           &d->rope_cos_, &d->rope_sin_);
  return d;
}

void ReferenceDecoder::linear(const Matrix& m, const float* x, int rows, int n_out, int n_in, const float* b,
                              bool accumulate, float* y) const {
  if (wdt_ == cuda::DType::kInt8)
    cuda::ref::linear_q8(m.q.data(), m.scales.data(), m.group, x, rows, n_out, n_in, b, accumulate, y);
  else
    cuda::ref::linear(m.f.data(), x, rows, n_out, n_in, b, accumulate, wdt_, y);
}

void ReferenceDecoder::allocate(const cuda::KvLayout& layout, int n_blocks, int max_rows, int max_seqs,
                                int max_blocks) {
  if (!pool_.empty()) bad("allocate() called twice");
  if (layout.format != opts_.kv || layout.n_layer != cfg_.n_layer || layout.n_head_kv != cfg_.n_head_kv ||
      layout.head_dim != cfg_.head_dim || layout.block_tokens < 1)
    bad("the KV layout does not match the model and options");
  if (n_blocks < 1 || max_rows < 1 || max_seqs < 1 || max_blocks < 1) bad("sizes must be positive");
  kv_ = layout;
  n_blocks_ = n_blocks;
  max_rows_ = max_rows;
  max_seqs_ = max_seqs;
  max_blocks_ = max_blocks;
  pool_.assign(static_cast<size_t>(layout.block_bytes()) * static_cast<size_t>(n_blocks), 0);
  table_.assign(static_cast<size_t>(max_seqs) * static_cast<size_t>(max_blocks), 0);
}

void ReferenceDecoder::set_blocks(int seq, const int32_t* blocks, int n) {
  if (seq < 0 || seq >= max_seqs_) bad(absl::StrCat("sequence slot ", seq, " out of [0, ", max_seqs_, ")"));
  if (n > max_blocks_) bad(absl::StrCat(n, " blocks exceed the ", max_blocks_, " a sequence can hold"));
  for (int i = 0; i < n; ++i)
    if (blocks[i] < 0 || blocks[i] >= n_blocks_)
      bad(absl::StrCat("block ", blocks[i], " out of the pool's ", n_blocks_));
  std::copy(blocks, blocks + n, table_.begin() + static_cast<int64_t>(seq) * max_blocks_);
}

void ReferenceDecoder::check(const DeviceStep& step) const {
  if (pool_.empty()) bad("no KV pool: allocate() first");
  const auto n = static_cast<int>(step.token.size());
  if (n <= 0 || n > max_rows_) bad(absl::StrCat("a step has 1..", max_rows_, " rows, got ", n));
  if (step.seq.size() != step.token.size() || step.pos.size() != step.token.size())
    bad("token, seq and pos must have one entry per row");
  const auto nl = static_cast<int>(step.logit_rows.size());
  if (nl <= 0 || nl > n) bad(absl::StrCat("1..", n, " logit rows, got ", nl));
  for (int r = 0; r < n; ++r) {
    if (step.token[r] < 0 || step.token[r] >= cfg_.n_vocab) bad(absl::StrCat("token ", step.token[r], " out of range"));
    if (step.seq[r] < 0 || step.seq[r] >= max_seqs_) bad(absl::StrCat("sequence slot ", step.seq[r], " out of range"));
    if (step.pos[r] < 0 || step.pos[r] >= cfg_.max_pos || step.pos[r] / kv_.block_tokens >= max_blocks_)
      bad(absl::StrCat("position ", step.pos[r], " out of range"));
  }
  for (int32_t lr : step.logit_rows)
    if (lr < 0 || lr >= n) bad(absl::StrCat("logit row ", lr, " out of range"));
}

uint8_t* ReferenceDecoder::block_base(int seq, int pos, int layer, int* row) {
  const int32_t b = table_[static_cast<size_t>(seq) * max_blocks_ + pos / kv_.block_tokens];
  *row = pos % kv_.block_tokens;
  return pool_.data() + (static_cast<int64_t>(b) * kv_.n_layer + layer) * kv_.layer_block_bytes();
}

std::vector<float> ReferenceDecoder::run(const DeviceStep& step, bool hidden) {
  namespace ref = cuda::ref;
  if (fault_ != 0) {
    const bool sticky = fault_ == 2;
    if (!sticky) fault_ = 0;
    throw DeviceError(sticky ? "reference device: injected sticky fault (as a lost CUDA context)"
                             : "reference device: injected fault",
                      sticky);
  }
  check(step);
  const ModelConfig& c = cfg_;
  const int n = static_cast<int>(step.token.size()), nl = static_cast<int>(step.logit_rows.size());
  const int C = static_cast<int>(c.dim), H = static_cast<int>(c.n_head), Hkv = static_cast<int>(c.n_head_kv),
            D = static_cast<int>(c.head_dim), F = static_cast<int>(c.ffn_dim), V = static_cast<int>(c.n_vocab);
  const int Q = H * D, QKV = Q + 2 * Hkv * D;
  const bool gpt2 = c.arch == Arch::kGpt2;
  const int FIN = gpt2 ? F : 2 * F;
  const float eps = static_cast<float>(c.norm_eps);
  auto norm = [&](const float* in, const std::vector<float>& w, const std::vector<float>& b, int rows, float* out) {
    if (gpt2)
      ref::layernorm(in, w.data(), b.data(), rows, C, eps, out);
    else
      ref::rmsnorm(in, w.data(), rows, C, eps, out);
  };
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  // x: [n, C] residual stream
  std::vector<float> x(static_cast<size_t>(n) * C), h(x.size()), qkv(static_cast<size_t>(n) * QKV),
      att(static_cast<size_t>(n) * Q), gu(static_cast<size_t>(n) * FIN), act(static_cast<size_t>(n) * F);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < C; ++i) {
      float v = tok_embed_[static_cast<size_t>(step.token[r]) * C + i];
      if (gpt2) v += pos_embed_[static_cast<size_t>(step.pos[r]) * C + i];
      x[static_cast<size_t>(r) * C + i] = v;
    }
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<float> K, Vv;
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    // 1. norm → qkv
    norm(x.data(), L.attn_norm_w, L.attn_norm_b, n, h.data());
    linear(L.wqkv, h.data(), n, QKV, C, bias(L.bqkv), false, qkv.data());
    // 2. RoPE on q and k heads, then k and v rows into the pool through the format (every row of the step
    //    first: a row attends to this step's earlier rows of its sequence)
    for (int r = 0; r < n; ++r) {
      float* q = qkv.data() + static_cast<int64_t>(r) * QKV;
      if (!gpt2)
        for (int hh = 0; hh < H + Hkv; ++hh) ref::rope_row(q + hh * D, D, rope_cos_.data(), rope_sin_.data(), step.pos[r]);
      int slot = 0;
      uint8_t* base = block_base(step.seq[r], step.pos[r], l, &slot);
      for (int g = 0; g < Hkv; ++g)
        for (int is_v = 0; is_v < 2; ++is_v) {
          const int64_t idx = static_cast<int64_t>(g) * kv_.block_tokens + slot;
          uint8_t* dst = base + (is_v ? kv_.rows_bytes() : 0) + idx * kv_.row_bytes();
          const float s = ref::encode_row(q + (H + is_v * Hkv + g) * D, D, kv_.format, dst);
          if (cuda::kv_has_scales(kv_.format)) {
            float* sc = reinterpret_cast<float*>(base + 2 * kv_.rows_bytes() + (is_v ? kv_.scales_bytes() : 0)) + idx;
            *sc = s;
          }
        }
    }
    // 3. attention: each query head over its kv head's positions 0..pos, decoded from the pool
    for (int r = 0; r < n; ++r) {
      const int n_pos = step.pos[r] + 1;
      for (int g = 0; g < Hkv; ++g) {
        K.resize(static_cast<size_t>(n_pos) * D);
        Vv.resize(K.size());
        for (int p = 0; p < n_pos; ++p) {
          int slot = 0;
          const uint8_t* base = block_base(step.seq[r], p, l, &slot);
          const int64_t idx = static_cast<int64_t>(g) * kv_.block_tokens + slot;
          const float* sc = reinterpret_cast<const float*>(base + 2 * kv_.rows_bytes());
          const float ks = cuda::kv_has_scales(kv_.format) ? sc[idx] : 0.f;
          const float vs = cuda::kv_has_scales(kv_.format) ? sc[kv_.scales_bytes() / 4 + idx] : 0.f;
          const uint8_t* krow = base + idx * kv_.row_bytes();
          const uint8_t* vrow = base + kv_.rows_bytes() + idx * kv_.row_bytes();
          for (int i = 0; i < D; ++i) {
            K[static_cast<size_t>(p) * D + i] = ref::decode_element(krow, i, kv_.format, ks);
            Vv[static_cast<size_t>(p) * D + i] = ref::decode_element(vrow, i, kv_.format, vs);
          }
        }
        for (int hh = g * (H / Hkv); hh < (g + 1) * (H / Hkv); ++hh)
          ref::attend_head(qkv.data() + static_cast<int64_t>(r) * QKV + hh * D, K.data(), Vv.data(), n_pos, D, scale,
                           att.data() + static_cast<int64_t>(r) * Q + hh * D);
      }
    }
    // 4. o projection into the residual, then the MLP
    linear(L.wo, att.data(), n, C, Q, bias(L.bo), true, x.data());
    norm(x.data(), L.mlp_norm_w, L.mlp_norm_b, n, h.data());
    linear(L.w_in, h.data(), n, FIN, C, bias(L.b_in), false, gu.data());
    if (gpt2) {
      ref::gelu_new(gu.data(), static_cast<int64_t>(n) * F);
      linear(L.w_out, gu.data(), n, C, F, bias(L.b_out), true, x.data());
    } else {
      ref::swiglu(gu.data(), n, F, act.data());
      linear(L.w_out, act.data(), n, C, F, bias(L.b_out), true, x.data());
    }
  }
  // 5. the logit rows: final norm, lm_head
  std::vector<float> last(static_cast<size_t>(nl) * C), hn(last.size());
  for (int i = 0; i < nl; ++i)
    std::memcpy(last.data() + static_cast<size_t>(i) * C, x.data() + static_cast<size_t>(step.logit_rows[i]) * C,
                sizeof(float) * C);
  norm(last.data(), final_norm_w_, final_norm_b_, nl, hn.data());
  if (hidden) return hn;
  std::vector<float> logits(static_cast<size_t>(nl) * V);
  if (lm_head_.f.empty() && lm_head_.q.empty())  // tied
    ref::linear(tok_embed_.data(), hn.data(), nl, V, C, nullptr, false, wdt_, logits.data());
  else
    linear(lm_head_, hn.data(), nl, V, C, nullptr, false, logits.data());
  return logits;
}

int ReferenceDecoder::forward(const DeviceStep& step, const std::vector<cuda::SampleParams>& sampling, int32_t* ids,
                              float* host_logits) {
  if (sampling.size() != step.logit_rows.size()) bad("one sampling entry per logit row");
  if (static_cast<int>(sampling.size()) > max_seqs_)
    bad(absl::StrCat(sampling.size(), " sampled rows in a step of at most ", max_seqs_, " sequences"));
  const std::vector<float> logits = run(step);
  const auto V = static_cast<size_t>(cfg_.n_vocab);
  int copied = 0;
  for (size_t i = 0; i < sampling.size(); ++i) {
    const float* row = logits.data() + i * V;
    if (sampling[i].to_host) {
      std::memcpy(host_logits + static_cast<size_t>(copied++) * V, row, V * sizeof(float));
      ids[i] = -1;
    } else {
      ids[i] = cuda::ref::sample_row(row, static_cast<int>(V), sampling[i]);
    }
  }
  return copied;
}

std::vector<float> ReferenceDecoder::forward_logits(const DeviceStep& step) { return run(step); }

std::vector<float> ReferenceDecoder::forward_hidden(const DeviceStep& step) { return run(step, true); }

DeviceMemory ReferenceDecoder::memory() const {
  DeviceMemory m;
  m.name = "host CPU";
  m.weight_bytes = weight_bytes_;
  m.kv_pool_bytes = static_cast<int64_t>(pool_.size());
  m.device_bytes = weight_bytes_ + m.kv_pool_bytes;
  return m;
}

}  // namespace frost
