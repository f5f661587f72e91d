// Transformer reference path (LibTorch ops, any T): the independent twin of the layer sequence (forward_batch.cc).
#include "core/model/transformer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "core/kv/fisher.h"
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"

namespace frost {

Transformer::Transformer(ModelConfig cfg, ModelWeights w) : cfg_(std::move(cfg)), w_(std::move(w)) {
  wdtype_ = w_.tok_embed.scalar_type();
  // Matrices loaded as bf16 are served as bf16, as fp16 as fp16 (a device format: the CPU paths refuse it
  // before they run; quantize_weights sets the int8 / int4 formats itself).
  if (w_.dtype == WeightDtype::kF32 && wdtype_ == at::kBFloat16) w_.dtype = WeightDtype::kBF16;
  if (w_.dtype == WeightDtype::kF32 && wdtype_ == at::kHalf) w_.dtype = WeightDtype::kF16;
  if (cfg_.arch == Arch::kLlama) {
    // RoPE tables computed as Hugging Face does, in float32 (core/model/rope.h): the global rotation, and Gemma 3's
    // local one (rope_local_base_freq, unscaled) for its sliding layers.
    rope_.push_back(make_rope_table(cfg_.rope_theta, cfg_.rope_scaling, cfg_.rot_dim(), cfg_.max_pos, cfg_.max_pos));
    if (cfg_.rope_local_theta > 0)
      rope_.push_back(make_rope_table(cfg_.rope_local_theta, RopeScaling{}, cfg_.rot_dim(), cfg_.max_pos, cfg_.max_pos));
  }
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    variants::check_layer_weights(cfg_, l, lw.var, lw.wo.defined());
  }
}

// Calls fn(t) once for every distinct weight tensor (a tied lm_head counts once).
template <typename Fn>
static void for_each_weight(const ModelWeights& w, Fn&& fn) {
  auto visit = [&fn](const at::Tensor& t) {
    if (t.defined()) fn(t);
  };
  visit(w.tok_embed);
  visit(w.pos_embed);
  for (const auto& l : w.layers) {
    for (const auto* t : {&l.attn_norm_w, &l.attn_norm_b, &l.wqkv, &l.bqkv, &l.wo, &l.bo, &l.mlp_norm_w,
                          &l.mlp_norm_b, &l.w_in, &l.b_in, &l.w_out, &l.b_out, &l.q_norm_w, &l.k_norm_w,
                          &l.post_attn_norm_w, &l.post_mlp_norm_w})
      visit(*t);
    for (const at::Tensor* t : l.var.tensors()) visit(*t);
  }
  visit(w.final_norm_w);
  visit(w.final_norm_b);
  if (!w.lm_head.is_same(w.tok_embed)) visit(w.lm_head);
}

int64_t Transformer::n_params() const {
  int64_t n = 0;
  for_each_weight(w_, [&n](const at::Tensor& t) { n += t.numel(); });
  return n;
}

int64_t Transformer::weight_bytes() const {
  int64_t n = 0;
  for_each_weight(w_, [&n](const at::Tensor& t) { n += t.numel() * static_cast<int64_t>(t.element_size()); });
  return n;
}

KvSpec Transformer::kv_spec(int64_t max_tokens, KvCodecKind codec,
                            std::shared_ptr<const KvSpliceSet> splice) const {
  KvSpec s;
  s.n_layer = cfg_.n_layer;
  s.n_head_kv = cfg_.n_head_kv;
  s.head_dim = cfg_.head_dim;
  s.max_tokens = std::min(max_tokens, cfg_.max_pos);
  s.codec = codec;
  s.splice = std::move(splice);
  s.reverse_layers = variants::reverse_store_layers(cfg_);
  // Blocks can be released below a sliding window only when EVERY layer slides (Mistral-style): a block holds
  // all layers, so one global layer (Gemma 2/3, Qwen2 past max_window_layers) keeps every block; so does an SBA
  // layer's reverse store, which is read whole. The window passed down is the LARGEST layer window: a block is
  // dead only when no layer reads it.
  int64_t w = 0;
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const int64_t wl = cfg_.window_of(l);
    if (wl <= 0) {
      w = 0;
      break;
    }
    w = std::max(w, wl);
  }
  s.window = s.reverse_layers.empty() ? w : 0;
  return s;
}

at::Tensor Transformer::linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
  // Reference math is fp32 activations × (upcast) weights, the same as the fast path.
  const at::Tensor wf = w.scalar_type() == at::kFloat ? w : w.to(at::kFloat);
  return b.defined() ? at::addmm(b, x, wf.t()) : at::mm(x, wf.t());
}

at::Tensor Transformer::norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
  if (cfg_.arch == Arch::kGpt2) return at::layer_norm(x, {cfg_.dim}, w, b, cfg_.norm_eps);
  // RMSNorm (HF LlamaRMSNorm): x * rsqrt(mean(x²) + eps) * w
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + cfg_.norm_eps) * w;
}

at::Tensor Transformer::apply_rope(const at::Tensor& x /*[T, n, D]*/, int64_t pos, const RopeTable& table) const {
  // HF "rotate_half" over the first rotary_dim dims: pairs (j, j + rot/2) rotate by angle pos · inv_freq[j]
  // (the table's attention factor folded into cos / sin); the remaining dims pass through (partial rotary).
  const int64_t t = x.size(0), rot = table.rotary_dim, half = rot / 2;
  at::Tensor c = table.cos.narrow(0, pos, t).unsqueeze(1);  // [T, 1, rot/2]
  at::Tensor s = table.sin.narrow(0, pos, t).unsqueeze(1);
  at::Tensor x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
  at::Tensor rotated = at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 2);
  return rot == x.size(2) ? rotated : at::cat({rotated, x.narrow(2, rot, x.size(2) - rot)}, 2);
}

at::Tensor Transformer::forward(const at::Tensor& tokens, SequenceKv& kv, bool last_only,
                                at::Tensor* hidden_out) const {
  KvStudy none;  // no corruption, folded repair, no taps
  return forward(tokens, kv, none, last_only, hidden_out);
}

at::Tensor Transformer::forward(const at::Tensor& tokens, SequenceKv& kv, KvStudy& study, bool last_only,
                                at::Tensor* hidden_out) const {
  TORCH_CHECK(tokens.dim() == 1 && tokens.size(0) > 0, "forward: tokens must be a non-empty 1-D tensor");
  const int64_t T = tokens.size(0), pos = kv.n_tokens(), S = pos + T;
  const int64_t H = cfg_.n_head, Hkv = cfg_.n_head_kv, D = cfg_.head_dim, C = cfg_.dim;
  TORCH_CHECK(S <= kv.capacity() && S <= cfg_.max_pos, "forward: ", S, " positions exceed capacity ",
              std::min(kv.capacity(), cfg_.max_pos));
  // The reference path reads every layer's K / V from position 0 (masking the window), so it refuses a paged
  // sequence whose sliding window gave blocks back (SequenceKv::release_outside_window; the serving engine runs
  // forward_batch, which reads the window only). kv_gather would refuse too; this says why up front.
  TORCH_CHECK(kv.n_released() == 0, "forward: the sequence's blocks below position ", kv.n_released() * kv.block_tokens(),
              " were released by its sliding window; the reference path reads from position 0 (use forward_batch)");
  const at::Tensor ids = tokens.to(at::kLong);
  TORCH_CHECK(ids.min().item<int64_t>() >= 0 && ids.max().item<int64_t>() < cfg_.n_vocab,
              "forward: token id out of range [0, ", cfg_.n_vocab, ")");
  const double scale = cfg_.attention_scale();
  const CorruptionSpec& corruption = study.corruption;
  const bool persistent =
      corruption.kind != CorruptionKind::kNone && corruption.mode == CorruptionMode::kPersistentAtWrite;
  const bool fresh =
      corruption.kind != CorruptionKind::kNone && corruption.mode == CorruptionMode::kFreshPerStep;
  const RepairSet* repair = kv.repair().get();
  KvTaps& taps = study.taps;
  // KVSplice training: the sequence's splice set (its codec's latent bases) when they are being learned.
  const KvSpliceSet* learned_splice =
      kv.spec().codec == KvCodecKind::kKvSplice && kv.spec().splice ? kv.spec().splice.get() : nullptr;
  // Straight-through: the value of `noisy`, the gradient of `x` (corruption and codec rounding are
  // not differentiable; training treats them as identity).
  auto ste = [](const at::Tensor& x, const at::Tensor& noisy) {
    return x.requires_grad() ? x + (noisy - x).detach() : noisy;
  };

  // 1. embeddings (+ learned positions for GPT-2)                       x: [T, C]
  at::Tensor x = w_.tok_embed.index_select(0, ids).to(at::kFloat);
  if (cfg_.embed_scale != 1.0) x = x * static_cast<float>(cfg_.embed_scale);  // Gemma: × √C (fp32)
  const at::Tensor e_tok = x;  // E(x) of the router features: the token embedding, no position
  if (cfg_.arch == Arch::kGpt2) x = x + w_.pos_embed.narrow(0, pos, T).to(at::kFloat);

  // causal mask over absolute positions: query pos+i sees keys j <= pos+i  [T, S]; a sliding layer of window W
  // also hides the keys j <= pos+i − W (it sees the last W positions)
  const at::Tensor key_pos = at::arange(S, at::kLong).unsqueeze(0), query_pos = (at::arange(T, at::kLong) + pos).unsqueeze(1);
  const at::Tensor mask = key_pos > query_pos;
  auto mask_of = [&](int64_t l) {
    const int64_t w = cfg_.window_of(l);
    return w > 0 ? at::logical_or(mask, key_pos <= query_pos - w) : mask;
  };

  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    // 2. attention block: norm → q, k, v                                 qkv: [T, H*D + 2*Hkv*D]
    at::Tensor h = norm(x, lw.attn_norm_w, lw.attn_norm_b);
    at::Tensor qkv = linear(h, lw.wqkv, lw.bqkv);
    at::Tensor q = qkv.narrow(1, 0, H * D).view({T, H, D});
    at::Tensor k = qkv.narrow(1, H * D, Hkv * D).view({T, Hkv, D});
    at::Tensor v = qkv.narrow(1, H * D + Hkv * D, Hkv * D).view({T, Hkv, D});
    if (cfg_.qk_norm) {  // Qwen 3, Gemma 3: RMSNorm over each head's D dims (norm() reduces the last dim)
      q = norm(q, lw.q_norm_w, at::Tensor());
      k = norm(k, lw.k_norm_w, at::Tensor());
    }
    // 3. RoPE (LLaMA)
    if (cfg_.arch == Arch::kLlama) {
      q = apply_rope(q, pos, rope_of(l));
      k = apply_rope(k, pos, rope_of(l));
    }
    if (cfg_.variants.is_ra(l)) std::swap(q, k);  // RA: the cache stores q rows, k_i probes them
    if (taps.queries) taps.query_rows.push_back(q.detach());
    // 4. KV pipeline: [corrupt at write] → codec append → read the whole cache back → [corrupt
    //    fresh] → [repair inside attention]                                  K, V: [Hkv, S, D]
    KvCodec& cache = kv.layer(l);
    const uint64_t stream_k = 2 * static_cast<uint64_t>(l), stream_v = stream_k + 1;
    if (persistent) {
      k = ste(k, corrupt(k.detach(), corruption, stream_k, static_cast<uint64_t>(pos)));
      v = ste(v, corrupt(v.detach(), corruption, stream_v, static_cast<uint64_t>(pos)));
    }
    cache.append(k.detach(), v.detach(), pos);
    at::Tensor K = cache.keys(S), V = cache.values(S);
    if (learned_splice && learned_splice->k(l).scale.requires_grad()) {
      // kvsplice training: the new rows take the value the cache returns (fp16 latents) and the gradient
      // of the fp32 splice reconstruction, so it reaches the splice's tensors and the rows.
      const LearnedKvSplice* sk = &learned_splice->k(l);
      const LearnedKvSplice* sv = &learned_splice->v(l);
      at::Tensor kr = sk->reconstruct(k.reshape({T, Hkv * D})).view({T, Hkv, D}).transpose(0, 1);
      at::Tensor vr = sv->reconstruct(v.reshape({T, Hkv * D})).view({T, Hkv, D}).transpose(0, 1);
      K = at::cat({K.narrow(1, 0, pos), ste(kr, K.narrow(1, pos, T))}, 1);
      V = at::cat({V.narrow(1, 0, pos), ste(vr, V.narrow(1, pos, T))}, 1);
    } else if (k.requires_grad()) {  // training: the new rows pass the codec straight through (identity
                                     // gradient)
      K = at::cat({K.narrow(1, 0, pos), ste(k.transpose(0, 1), K.narrow(1, pos, T))}, 1);
      V = at::cat({V.narrow(1, 0, pos), ste(v.transpose(0, 1), V.narrow(1, pos, T))}, 1);
    }
    if (fresh) {
      K = ste(K, corrupt(K.detach(), corruption, stream_k, static_cast<uint64_t>(pos)));
      V = ste(V, corrupt(V.detach(), corruption, stream_v, static_cast<uint64_t>(pos)));
    }
    at::Tensor att;  //                                                   att: [H, T, D]
    if (const RepairLayer* rl = repair ? repair->layer(l) : nullptr) {
      const at::Tensor qh = q.transpose(0, 1);  // [H, T, D]
      const AttendShape shape{cfg_.window_of(l), cfg_.attn_softcap};
      switch (study.repair_path) {
        case KvStudy::RepairPath::kFolded:
          att = rl->attend_folded(qh, K, V, pos, scale, shape);
          break;
        case KvStudy::RepairPath::kMaterialised:
          att = rl->attend_reference(qh, K, V, pos, scale, shape);
          break;
        case KvStudy::RepairPath::kFactorised: {
          auto [kw, vw] = rl->projections(K, V);
          att = rl->attend_fast(qh, K, V, kw, vw, pos, scale, shape);
          break;
        }
      }
      if (taps.contraction) {
        at::Tensor pen = rl->contraction_penalty(qh, K, V);
        taps.contraction_sum = taps.contraction_sum.defined() ? taps.contraction_sum + pen : pen;
      }
    } else {
      if (H != Hkv) {  // GQA: query head h uses kv head h / (H / Hkv)
        K = K.repeat_interleave(H / Hkv, 0);
        V = V.repeat_interleave(H / Hkv, 0);
      }
      if (const FimKvSplice* tm = study.temporal.get()) {  // FIMKVSplice: each head's K, V through its
                                                           // temporal rank-r basis
        TORCH_CHECK(pos == 0 && S == tm->window(), "forward: FIMKVSplice needs one pass over a fresh ",
                    tm->window(), "-token window, got positions ", pos, "..", S - 1);
        K = tm->reconstruct(l, K);
        V = tm->reconstruct(l, V);
      }
      // 5. scores, causal mask, softmax, weighted values
      at::Tensor scores = at::matmul(q.transpose(0, 1), K.transpose(1, 2)) * scale;  // [H, T, S]
      if (cfg_.attn_softcap > 0) {  // Gemma 2: cap · tanh(scores / cap), before the mask
        const auto cap = static_cast<float>(cfg_.attn_softcap);
        scores = at::tanh(scores / cap) * cap;
      }
      scores = scores.masked_fill(mask_of(l), -std::numeric_limits<float>::infinity());
      at::Tensor probs = at::softmax(scores, -1);
      if (taps.probs) taps.attention_probs.push_back(probs);
      att = at::matmul(probs, V);
    }
    if (cfg_.variants.is_sba(l))
      att = variants::sba_attend(cfg_, l, kv, corruption.kind != CorruptionKind::kNone, att, q, k, v, pos,
                                 mask, scale);
    if (taps.attention) taps.attention_out.push_back(att);
    at::Tensor o = att.transpose(0, 1).reshape({T, H * D});
    const at::Tensor a_out =
        lw.var.router() ? variants::router_out(lw.var, o, x, e_tok) : linear(o, lw.wo, lw.bo);
    x = x + (cfg_.post_norms ? norm(a_out, lw.post_attn_norm_w, at::Tensor()) : a_out);

    // 6. MLP block                                                       [T, C]
    h = norm(x, lw.mlp_norm_w, lw.mlp_norm_b);
    at::Tensor a;
    if (cfg_.arch == Arch::kLlama) {  // gated: down(act(gate h) * up h), act silu (SwiGLU) or tanh-GELU (Gemma)
      at::Tensor gu = linear(h, lw.w_in, lw.b_in);
      const int64_t F = cfg_.ffn_dim;
      const at::Tensor gate = gu.narrow(1, 0, F);
      a = (cfg_.act == Activation::kSilu ? at::silu(gate) : at::gelu(gate, "tanh")) * gu.narrow(1, F, F);
    } else {  // gelu_new(c_fc h)
      at::Tensor u = linear(h, lw.w_in, lw.b_in);
      if (lw.var.ctx_active()) u = variants::mlp_ctx_mix(lw.var, u, a_out);
      a = 0.5 * u * (1.0 + at::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u.pow(3))));
    }
    const at::Tensor m_out = linear(a, lw.w_out, lw.b_out);
    x = x + (cfg_.post_norms ? norm(m_out, lw.post_mlp_norm_w, at::Tensor()) : m_out);
  }
  kv.advance(T);

  // 7. final norm → logits                                              [T|1, V]
  x = norm(x, w_.final_norm_w, w_.final_norm_b);
  if (hidden_out) *hidden_out = x;
  if (last_only) x = x.narrow(0, T - 1, 1);
  (void)C;
  at::Tensor logits = linear(x, w_.lm_head, at::Tensor());
  if (cfg_.final_softcap > 0) {  // Gemma 2: cap · tanh(logits / cap)
    const auto cap = static_cast<float>(cfg_.final_softcap);
    logits = at::tanh(logits / cap) * cap;
  }
  return logits;
}

}  // namespace frost
