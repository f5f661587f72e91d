// The host reference device (core/exec/reference_decoder.h): the device decoder's step, row by row, with the
// CPU twins of its kernels over a pool in the device's KV layout.
#include "core/exec/reference_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/model/layer_sequence.h"
#include "kernels/cuda/reference.h"

namespace frost {
namespace {

std::vector<float> host_f32(const at::Tensor& t) {
  if (!t.defined()) return {};
  at::Tensor c = t.to(at::kFloat).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

constexpr const char* kWho = "reference device";

[[noreturn]] void bad(const std::string& m) { throw DeviceError(absl::StrCat(kWho, ": ", m), false); }

}  // namespace

absl::StatusOr<std::shared_ptr<const ReferenceWeights>> ReferenceWeights::create(const ModelConfig& cfg,
                                                                                   const ModelWeights& w) {
  // The reference device runs the families' features (ModelConfig::plain()), none of the variants'.
  LayerFeatures have;
  have.families = true;
  if (absl::Status st = device_supports(cfg, w.dtype, "reference", have); !st.ok()) return st;
  if (absl::Status st = device_int8_weights_present(w, "reference"); !st.ok()) return st;
  std::shared_ptr<ReferenceWeights> d(new ReferenceWeights(cfg));
  d->wdt = device_weight_dtype(w.dtype);
  auto keep = [&d](const at::Tensor& t) {
    std::vector<float> v = host_f32(t);
    d->bytes_ += static_cast<int64_t>(v.size()) * (t.defined() ? t.element_size() : 0);
    return v;
  };
  // int8: the quantized form the CPU int8 model multiplies (LayerWeights::*_q; the fp32 tensor beside it is
  // its dequantized value, which the fp32 path would read instead).
  const bool int8 = d->wdt == cuda::DType::kInt8;
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
    d->bytes_ += static_cast<int64_t>(m.q.size()) + 4 * static_cast<int64_t>(m.scales.size());
    return m;
  };
  // The device stores the matrices and the table (a tied head too) in its 2-byte format: rounded alike here
  // (the matrices again in ref::linear; a no-op for tensors loaded in that format).
  d->tok_embed = keep(w.tok_embed);
  for (float& v : d->tok_embed) v = cuda::ref::dtype_round(d->wdt, v);
  d->pos_embed = keep(w.pos_embed);
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
    L.q_norm_w = keep(l.q_norm_w);
    L.k_norm_w = keep(l.k_norm_w);
    L.post_attn_norm_w = keep(l.post_attn_norm_w);
    L.post_mlp_norm_w = keep(l.post_mlp_norm_w);
    d->layers.push_back(std::move(L));
  }
  d->final_norm_w = keep(w.final_norm_w);
  d->final_norm_b = keep(w.final_norm_b);
  if (int8 || !w.lm_head.is_same(w.tok_embed)) d->lm_head = matrix(w.lm_head, w.lm_head_q);  // int8: never tied
  if (cfg.arch == Arch::kLlama) {
    device_rope_table(cfg, /*local=*/false, &d->rope_cos[0], &d->rope_sin[0]);
    if (cfg.rope_local_theta > 0) device_rope_table(cfg, /*local=*/true, &d->rope_cos[1], &d->rope_sin[1]);
  }
  return std::shared_ptr<const ReferenceWeights>(std::move(d));
}

void ReferenceDecoder::linear(const ReferenceWeights::Matrix& m, const float* x, int rows, int n_out, int n_in,
                              const float* b, bool accumulate, float* y) const {
  if (w_->wdt == cuda::DType::kInt8)
    cuda::ref::linear_q8(m.q.data(), m.scales.data(), m.group, x, rows, n_out, n_in, b, accumulate, y);
  else
    cuda::ref::linear(m.f.data(), x, rows, n_out, n_in, b, accumulate, w_->wdt, y);
}

void ReferenceDecoder::allocate(const cuda::KvLayout& layout, int n_blocks, int max_rows, int max_seqs,
                                int max_blocks) {
  const DeviceLimits lim{n_blocks, max_rows, max_seqs, max_blocks};
  check_device_allocation(cfg_, opts_.kv, layout, lim, lim_, kWho);
  kv_ = layout;
  lim_ = lim;
  pool_.assign(static_cast<size_t>(layout.block_bytes()) * static_cast<size_t>(n_blocks), 0);
  table_.assign(static_cast<size_t>(max_seqs) * static_cast<size_t>(max_blocks), 0);
}

void ReferenceDecoder::set_blocks(int seq, const int32_t* blocks, int n) {
  check_device_blocks(lim_, seq, blocks, n, kWho);
  std::copy(blocks, blocks + n, table_.begin() + static_cast<int64_t>(seq) * lim_.max_blocks);
}

uint8_t* ReferenceDecoder::block_base(int seq, int pos, int layer, int* row) {
  const int32_t b = table_[static_cast<size_t>(seq) * lim_.max_blocks + pos / kv_.block_tokens];
  *row = pos % kv_.block_tokens;
  return pool_.data() + (static_cast<int64_t>(b) * kv_.n_layer + layer) * kv_.layer_block_bytes();
}

// The layer sequence's ops on the reference device: every op over the step's rows, plain loops, the device's
// buffers (x: the residual stream [n, C]; h: a norm's rows; qkv; att; gu: the MLP's input projection; act; y:
// a block's output before its post norm, Gemma).
struct ReferenceDecoder::Ops final : LayerOps {
  ReferenceDecoder& d;
  const ReferenceWeights& w;
  const ModelConfig& c;
  const DeviceStep& step;
  const int n, nl, C, H, Hkv, D, F, V, Q, QKV, FIN, ROT;
  const bool gpt2;
  const float eps, scale;
  std::vector<float> x, h, qkv, att, gu, act, last, hn, logits, K, Vv, y;

  Ops(ReferenceDecoder& d_, const DeviceStep& s)
      : d(d_), w(*d_.w_), c(d_.cfg_), step(s), n(static_cast<int>(s.token.size())),
        nl(static_cast<int>(s.logit_rows.size())), C(static_cast<int>(c.dim)), H(static_cast<int>(c.n_head)),
        Hkv(static_cast<int>(c.n_head_kv)), D(static_cast<int>(c.head_dim)), F(static_cast<int>(c.ffn_dim)),
        V(static_cast<int>(c.n_vocab)), Q(H * D), QKV(Q + 2 * Hkv * D), FIN(c.arch == Arch::kGpt2 ? F : 2 * F),
        ROT(static_cast<int>(c.rot_dim())), gpt2(c.arch == Arch::kGpt2), eps(static_cast<float>(c.norm_eps)),
        scale(static_cast<float>(c.attention_scale())), x(static_cast<size_t>(n) * C), h(x.size()),
        qkv(static_cast<size_t>(n) * QKV), att(static_cast<size_t>(n) * Q), gu(static_cast<size_t>(n) * FIN),
        act(static_cast<size_t>(n) * F), last(static_cast<size_t>(nl) * C), hn(last.size()),
        y(c.post_norms ? x.size() : 0) {}

  static const float* bias(const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); }
  void norm_rows(const float* in, const std::vector<float>& wt, const std::vector<float>& b, int rows, float* out) {
    if (gpt2)
      cuda::ref::layernorm(in, wt.data(), b.data(), rows, C, eps, out);
    else
      cuda::ref::rmsnorm(in, wt.data(), rows, C, eps, out);
  }

  void embed() override {
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < C; ++i) {
        float v = w.tok_embed[static_cast<size_t>(step.token[r]) * C + i];
        if (c.embed_scale != 1.0) v *= static_cast<float>(c.embed_scale);  // Gemma: × √C, fp32 as the CPU
        if (gpt2) v += w.pos_embed[static_cast<size_t>(step.pos[r]) * C + i];
        x[static_cast<size_t>(r) * C + i] = v;
      }
  }
  void norm(NormSite site, int64_t l) override {
    if (site == NormSite::kFinal) return norm_rows(last.data(), w.final_norm_w, w.final_norm_b, nl, hn.data());
    const ReferenceWeights::Layer& L = w.layers[static_cast<size_t>(l)];
    const bool a = site == NormSite::kAttn;
    norm_rows(x.data(), a ? L.attn_norm_w : L.mlp_norm_w, a ? L.attn_norm_b : L.mlp_norm_b, n, h.data());
  }
  void linear(LayerMatrix m, int64_t l) override {
    if (m == LayerMatrix::kHead) {
      logits.resize(static_cast<size_t>(nl) * V);
      if (w.lm_head.f.empty() && w.lm_head.q.empty())  // tied
        cuda::ref::linear(w.tok_embed.data(), hn.data(), nl, V, C, nullptr, false, w.wdt, logits.data());
      else
        d.linear(w.lm_head, hn.data(), nl, V, C, nullptr, false, logits.data());
      return;
    }
    const ReferenceWeights::Layer& L = w.layers[static_cast<size_t>(l)];
    // A block's output is added to x, or (post norms) kept in y for post_norm to norm and add. Biases: any of
    // them may be absent (Qwen2: q / k / v biases, no o bias).
    const bool post = c.post_norms;
    float* out = post ? y.data() : x.data();
    switch (m) {
      case LayerMatrix::kQkv: return d.linear(L.wqkv, h.data(), n, QKV, C, bias(L.bqkv), false, qkv.data());
      case LayerMatrix::kO: return d.linear(L.wo, att.data(), n, C, Q, bias(L.bo), !post, out);
      case LayerMatrix::kMlpIn: return d.linear(L.w_in, h.data(), n, FIN, C, bias(L.b_in), false, gu.data());
      case LayerMatrix::kMlpOut:
        return d.linear(L.w_out, gpt2 ? gu.data() : act.data(), n, C, F, bias(L.b_out), !post, out);
      case LayerMatrix::kHead: return;
    }
  }
  // Qwen 3 / Gemma 3: RMSNorm over each q head (q_norm) and k head (k_norm), before RoPE.
  void qk_norm(int64_t l) override {
    const ReferenceWeights::Layer& L = w.layers[static_cast<size_t>(l)];
    for (int r = 0; r < n; ++r) {
      float* q = qkv.data() + static_cast<int64_t>(r) * QKV;
      cuda::ref::rmsnorm(q, L.q_norm_w.data(), H, D, eps, q);
      cuda::ref::rmsnorm(q + Q, L.k_norm_w.data(), Hkv, D, eps, q + Q);
    }
  }
  // Gemma's post-attention / post-feedforward norm: x += RMSNorm(y).
  void post_norm(NormSite site, int64_t l) override {
    const ReferenceWeights::Layer& L = w.layers[static_cast<size_t>(l)];
    const std::vector<float>& nw = site == NormSite::kAttn ? L.post_attn_norm_w : L.post_mlp_norm_w;
    cuda::ref::rmsnorm(y.data(), nw.data(), n, C, eps, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  void logit_softcap() override {
    const auto cap = static_cast<float>(c.final_softcap);
    cuda::ref::softcap(logits.data(), static_cast<int64_t>(logits.size()), cap);
  }
  // RoPE on q and k heads (the layer's table: Gemma 3's sliding layers the local one; the first rot_dim dims
  // of each head), then k and v rows into the pool through the format (every row of the step first: a row
  // attends to this step's earlier rows of its sequence). RA is refused before upload (device_supports).
  void rope_kv_append(int64_t l, bool) override {
    const cuda::KvLayout& kv = d.kv_;
    const int t = c.local_rope(l) ? 1 : 0;
    for (int r = 0; r < n; ++r) {
      float* q = qkv.data() + static_cast<int64_t>(r) * QKV;
      if (!gpt2)
        for (int hh = 0; hh < H + Hkv; ++hh)
          cuda::ref::rope_row(q + hh * D, ROT, w.rope_cos[t].data(), w.rope_sin[t].data(), step.pos[r]);
      int slot = 0;
      uint8_t* base = d.block_base(step.seq[r], step.pos[r], static_cast<int>(l), &slot);
      for (int g = 0; g < Hkv; ++g)
        for (int is_v = 0; is_v < 2; ++is_v) {
          const int64_t idx = static_cast<int64_t>(g) * kv.block_tokens + slot;
          uint8_t* dst = base + (is_v ? kv.rows_bytes() : 0) + idx * kv.row_bytes();
          const float s = cuda::ref::encode_row(q + (H + is_v * Hkv + g) * D, D, kv.format, dst);
          if (cuda::kv_has_scales(kv.format)) {
            float* sc = reinterpret_cast<float*>(base + 2 * kv.rows_bytes() + (is_v ? kv.scales_bytes() : 0)) + idx;
            *sc = s;
          }
        }
    }
  }
  // Each query head over its kv head's positions start..pos, decoded from the pool: start 0, or pos − W + 1 in
  // a sliding layer of window W; the scores soft-capped where the model caps them (Gemma 2).
  void attention(int64_t l) override {
    const cuda::KvLayout& kv = d.kv_;
    const int64_t window = c.window_of(l);
    const auto cap = static_cast<float>(c.attn_softcap);
    for (int r = 0; r < n; ++r) {
      const int n_pos = step.pos[r] + 1;
      const int start = window > 0 && n_pos > window ? n_pos - static_cast<int>(window) : 0;
      for (int g = 0; g < Hkv; ++g) {
        K.resize(static_cast<size_t>(n_pos) * D);
        Vv.resize(K.size());
        for (int p = start; p < n_pos; ++p) {
          int slot = 0;
          const uint8_t* base = d.block_base(step.seq[r], p, static_cast<int>(l), &slot);
          const int64_t idx = static_cast<int64_t>(g) * kv.block_tokens + slot;
          const float* sc = reinterpret_cast<const float*>(base + 2 * kv.rows_bytes());
          const float ks = cuda::kv_has_scales(kv.format) ? sc[idx] : 0.f;
          const float vs = cuda::kv_has_scales(kv.format) ? sc[kv.scales_bytes() / 4 + idx] : 0.f;
          const uint8_t* krow = base + idx * kv.row_bytes();
          const uint8_t* vrow = base + kv.rows_bytes() + idx * kv.row_bytes();
          for (int i = 0; i < D; ++i) {
            K[static_cast<size_t>(p) * D + i] = cuda::ref::decode_element(krow, i, kv.format, ks);
            Vv[static_cast<size_t>(p) * D + i] = cuda::ref::decode_element(vrow, i, kv.format, vs);
          }
        }
        for (int hh = g * (H / Hkv); hh < (g + 1) * (H / Hkv); ++hh)
          cuda::ref::attend_window(qkv.data() + static_cast<int64_t>(r) * QKV + hh * D, K.data(), Vv.data(), start,
                                   n_pos, D, scale, cap, att.data() + static_cast<int64_t>(r) * Q + hh * D);
      }
    }
  }
  void activation(int64_t) override {
    if (gpt2)
      cuda::ref::gelu_new(gu.data(), static_cast<int64_t>(n) * F);  // in place: the next linear reads gu
    else if (c.act == Activation::kGeluNew)
      cuda::ref::gelu_gate(gu.data(), n, F, act.data());  // Gemma: gelu_tanh(gate) · up
    else
      cuda::ref::swiglu(gu.data(), n, F, act.data());
  }
  void gather() override {
    for (int i = 0; i < nl; ++i)
      std::memcpy(last.data() + static_cast<size_t>(i) * C, x.data() + static_cast<size_t>(step.logit_rows[i]) * C,
                  sizeof(float) * C);
  }
};

std::vector<float> ReferenceDecoder::run(const DeviceStep& step, bool hidden) {
  if (fault_ != 0) {
    const bool sticky = fault_ == 2;
    if (!sticky) fault_ = 0;
    throw DeviceError(sticky ? "reference device: injected sticky fault (as a lost CUDA context)"
                             : "reference device: injected fault",
                      sticky);
  }
  check_device_step(cfg_, lim_, kv_.block_tokens, lim_.max_rows, step, kWho);
  Ops ops(*this, step);
  run_layer_sequence(cfg_, ops, hidden ? StepOutput::kHidden : StepOutput::kLogits);
  return hidden ? std::move(ops.hn) : std::move(ops.logits);
}

int ReferenceDecoder::forward(const DeviceStep& step, const std::vector<cuda::SampleParams>& sampling, int32_t* ids,
                              float* host_logits) {
  if (sampling.size() != step.logit_rows.size()) bad("one sampling entry per logit row");
  if (static_cast<int>(sampling.size()) > lim_.max_seqs)
    bad(absl::StrCat(sampling.size(), " sampled rows in a step of at most ", lim_.max_seqs, " sequences"));
  const std::vector<float> logits = run(step);
  const auto V = static_cast<size_t>(cfg_.n_vocab);
  const size_t W = (V + 31) / 32;
  int copied = 0;
  for (size_t i = 0; i < sampling.size(); ++i) {
    const float* row = logits.data() + i * V;
    if (sampling[i].to_host) {
      std::memcpy(host_logits + static_cast<size_t>(copied++) * V, row, V * sizeof(float));
      ids[i] = -1;
    } else if (sampling[i].masked) {
      if (masks_.size() < (i + 1) * W)
        bad(absl::StrCat("logit row ", i, " is masked but has no mask (set_masks)"));
      masked_.assign(row, row + V);
      cuda::ref::apply_token_mask(masked_.data(), static_cast<int>(V), masks_.data() + i * W);
      ids[i] = cuda::ref::sample_row(masked_.data(), static_cast<int>(V), sampling[i]);
    } else {
      ids[i] = cuda::ref::sample_row(row, static_cast<int>(V), sampling[i]);
    }
  }
  masks_.clear();  // one forward()
  return copied;
}

void ReferenceDecoder::set_masks(const uint32_t* words, int n_rows) {
  if (n_rows < 0 || n_rows > lim_.max_seqs)
    bad(absl::StrCat(n_rows, " masked rows in a step of at most ", lim_.max_seqs, " sequences"));
  const size_t W = (static_cast<size_t>(cfg_.n_vocab) + 31) / 32;
  masks_.assign(words, words + static_cast<size_t>(n_rows) * W);
}

std::vector<float> ReferenceDecoder::forward_logits(const DeviceStep& step) { return run(step); }

std::vector<float> ReferenceDecoder::forward_hidden(const DeviceStep& step) { return run(step, true); }

DeviceMemory ReferenceDecoder::memory() const {
  DeviceMemory m;
  m.name = "host CPU";
  m.weight_bytes = w_->bytes();
  m.kv_pool_bytes = static_cast<int64_t>(pool_.size());
  m.device_bytes = m.weight_bytes + m.kv_pool_bytes;
  return m;
}

}  // namespace frost
