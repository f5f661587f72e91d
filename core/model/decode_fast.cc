// Transformer fast path: batch-1 single-token decode on raw pointers. Every buffer lives in
// DecodeScratch; no LibTorch op runs per step. Matrix products use the packed GEMM of the batched step with
// one row (kernels/cpu/gemm.h: same fma order, so decode_step and forward_batch agree bit for bit). Held
// equal to forward() by tests/unit/model/transformer_test.cc and tests/integration/hf_reference_test.cc.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/cpu_kernels.h"
#include "core/model/rows.h"
#include "core/model/transformer.h"
#include "kernels/cpu/parallel.h"

namespace frost {

using rows::embed_row;
using rows::fptr;
using rows::norm_row;
using rows::rope_row;

void attend_all_heads(const KvCodec& cache, const float* q, int64_t n_head, int64_t head_dim, int64_t n,
                      float scale, float* out) {
  // Parallel over heads only when there is enough work to pay for waking the pool.
  if (n * head_dim * n_head < (int64_t{1} << 15)) {
    cache.attend(q, n_head, n, scale, 0, n_head, out);
  } else {
    kernels::parallel_tasks(n_head, [&](int64_t h) { cache.attend(q, n_head, n, scale, h, h + 1, out); });
  }
}

namespace {

// One row through a packed matrix: the same kernel and fma order as forward_batch, so the batch-1 path and
// the batched one give bit-identical logits (core/model/forward_batch.cc).
void gemv(const kernels::PackedMatrix& w, const at::Tensor& b, const float* x, float* y) {
  kernels::gemm_packed(w, x, w.n_in, 1, fptr(b), y, w.n_out);
}

}  // namespace

DecodeScratch Transformer::make_scratch(int64_t max_tokens) const {
  DecodeScratch s;
  const auto C = static_cast<size_t>(cfg_.dim);
  s.x.resize(C);
  s.xn.resize(C);
  s.hidden.resize(C);
  s.qkv.resize(static_cast<size_t>(cfg_.q_dim() + 2 * cfg_.kv_dim()));
  s.att_out.resize(static_cast<size_t>(cfg_.q_dim()));
  const int64_t f_in = cfg_.arch == Arch::kLlama ? 2 * cfg_.ffn_dim : cfg_.ffn_dim;
  s.h_in.resize(static_cast<size_t>(f_in));
  s.h_act.resize(static_cast<size_t>(cfg_.ffn_dim));
  s.logits.resize(static_cast<size_t>(cfg_.n_vocab));
  variants::size_scratch(cfg_, std::min(max_tokens, cfg_.max_pos), &s.var);
  return s;
}

const float* Transformer::decode_step(int32_t token, SequenceKv& kv, DecodeScratch& s) const {
  ensure_packed();
  const int64_t pos = kv.n_tokens();
  const int64_t H = cfg_.n_head, Hkv = cfg_.n_head_kv, D = cfg_.head_dim, C = cfg_.dim;
  TORCH_CHECK(token >= 0 && token < cfg_.n_vocab, "decode_step: token ", token, " out of range");
  TORCH_CHECK(pos < kv.capacity() && pos < cfg_.max_pos, "decode_step: position ", pos, " exceeds capacity");
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const RepairSet* repair = kv.repair().get();
  if (repair) {  // sized once per scratch (the rank is not known at make_scratch)
    const int64_t r = repair->cfg().rank;
    if (static_cast<int64_t>(s.repair_gv.size()) < H * r) s.repair_gv.resize(static_cast<size_t>(H * r));
    if (static_cast<int64_t>(s.repair_tmp.size()) < 8 * r) s.repair_tmp.resize(static_cast<size_t>(8 * r));
    if (static_cast<int64_t>(s.repair_q.size()) < H * D) s.repair_q.resize(static_cast<size_t>(H * D));
  }
  float* x = s.x.data();
  float* xn = s.xn.data();
  float* q = s.qkv.data();
  float* k = q + H * D;
  float* v = k + Hkv * D;

  // 1. embeddings (+ learned positions for GPT-2)
  embed_row(w_.tok_embed, token, x);
  if (!s.var.e_tok.empty())
    std::memcpy(s.var.e_tok.data(), x, static_cast<size_t>(C) * sizeof(float));  // router E(x)
  if (cfg_.arch == Arch::kGpt2) {
    const float* pe = w_.pos_embed.data_ptr<float>() + pos * C;
    for (int64_t i = 0; i < C; ++i) x[i] += pe[i];
  }
  const float* cos_row = cfg_.arch == Arch::kLlama ? rope_cos_.data_ptr<float>() + pos * (D / 2) : nullptr;
  const float* sin_row = cfg_.arch == Arch::kLlama ? rope_sin_.data_ptr<float>() + pos * (D / 2) : nullptr;

  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    const PackedLayer& pw = packed_[static_cast<size_t>(l)];
    // 2. norm → fused q|k|v mat-vec → RoPE
    norm_row(cfg_, x, fptr(lw.attn_norm_w), fptr(lw.attn_norm_b), xn);
    gemv(pw.wqkv, lw.bqkv, xn, q);
    if (cos_row) {
      rope_row(q, H, D, cos_row, sin_row);
      rope_row(k, Hkv, D, cos_row, sin_row);
    }
    if (cfg_.variants.is_ra(l)) std::swap_ranges(q, q + H * D, k);  // RA: cache q rows, probe with k_i
    // 3. KV pipeline: append this token → attend over positions [0, pos], repaired in folded form
    //    (core/kv/repair.h): q' before the kernel, the value correction after.
    KvCodec& cache = kv.layer(l);
    cache.append_token(k, v, pos);
    const RepairLayer::Fast* rf = repair ? repair->fast(l) : nullptr;
    const float* qa = q;
    if (rf) {
      for (int64_t h = 0; h < H; ++h)
        rf->query(q + h * D, h, s.repair_q.data() + h * D, s.repair_gv.data() + h * rf->r,
                  s.repair_tmp.data());
      qa = s.repair_q.data();
    }
    attend_all_heads(cache, qa, H, D, pos + 1, scale, s.att_out.data());  // the codec's own kernel
    if (rf) {
      for (int64_t h = 0; h < H; ++h)
        rf->output(s.repair_gv.data() + h * rf->r, s.att_out.data() + h * D, s.repair_tmp.data());
    }
    if (cfg_.variants.is_sba(l))
      variants::sba_step(cfg_, l, kv, q, k, v, pos, scale, s.var, s.att_out.data());
    // 4. output projection (router layers: two group projections mixed per token) + residual
    if (lw.var.router()) {
      variants::router_step(cfg_, lw.var, s.att_out.data(), x, s.var.e_tok.data(), s.var, xn);
    } else {
      gemv(pw.wo, lw.bo, s.att_out.data(), xn);
    }
    for (int64_t i = 0; i < C; ++i) x[i] += xn[i];
    const bool ctx = lw.var.ctx_active();  // MLP context: keep the attention output for the MLP
    if (ctx) std::memcpy(s.var.ctx_summary.data(), xn, static_cast<size_t>(C) * sizeof(float));
    // 5. MLP + residual
    norm_row(cfg_, x, fptr(lw.mlp_norm_w), fptr(lw.mlp_norm_b), xn);
    gemv(pw.w_in, lw.b_in, xn, s.h_in.data());
    if (ctx) variants::mlp_ctx_step(cfg_, lw.var, s.var.ctx_summary.data(), s.var, s.h_in.data());
    rows::mlp_activation(cfg_, s.h_in.data(), s.h_act.data());
    gemv(pw.w_out, lw.b_out, s.h_act.data(), xn);
    for (int64_t i = 0; i < C; ++i) x[i] += xn[i];
  }
  kv.advance(1);

  // 6. final norm → logits
  norm_row(cfg_, x, fptr(w_.final_norm_w), fptr(w_.final_norm_b), s.hidden.data());
  gemv(packed_head_, at::Tensor(), s.hidden.data(), s.logits.data());
  return s.logits.data();
}

}  // namespace frost
