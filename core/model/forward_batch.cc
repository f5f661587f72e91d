// Transformer batched fast path: one pass over the new tokens of several sequences (continuous batching,
// vLLM's ragged batch). Rows are the new tokens of every sequence, concatenated: decode steps contribute one
// row, prefill chunks many. Every weight matrix is read once per step (kernels::gemm_packed over all rows);
// attention runs per row over its own sequence's cache through that sequence's codec kernel, in parallel
// over rows × heads; the per-row pieces are those of decode_step (core/model/rows.h).
//
// Held to decode_step and forward() by tests/unit/model/forward_batch_test.cc.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/kv/repair_set.h"
#include "core/model/rows.h"
#include "core/model/transformer.h"
#include "kernels/cpu/parallel.h"

namespace frost {
namespace {

// Row r's float block of width w in a [R, w] buffer.
inline float* row(std::vector<float>& v, int64_t r, int64_t w) { return v.data() + r * w; }

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

void Transformer::ensure_packed() const {
  std::call_once(packed_once_, [this] {
    // Quantized models pack their int8 / int4 form (w8a8: int8 for the integer kernels); the others the
    // matrix as it is.
    auto pack = [this](const at::Tensor& m, const kernels::QuantizedMatrix& q) {
      if (!q.defined()) return kernels::pack_matrix(m.contiguous());
      return w_.dtype == WeightDtype::kW8A8 ? kernels::pack_quantized_a8(q) : kernels::pack_quantized(q);
    };
    packed_.resize(w_.layers.size());
    for (size_t l = 0; l < w_.layers.size(); ++l) {
      const LayerWeights& lw = w_.layers[l];
      PackedLayer& p = packed_[l];
      p.wqkv = pack(lw.wqkv, lw.wqkv_q);
      if (lw.wo.defined()) p.wo = pack(lw.wo, lw.wo_q);
      p.w_in = pack(lw.w_in, lw.w_in_q);
      p.w_out = pack(lw.w_out, lw.w_out_q);
    }
    packed_head_ = pack(w_.lm_head, w_.lm_head_q);
  });
}

int64_t Transformer::packed_weight_bytes() const {
  ensure_packed();
  int64_t n = packed_head_.bytes();
  for (const PackedLayer& p : packed_) n += p.wqkv.bytes() + p.wo.bytes() + p.w_in.bytes() + p.w_out.bytes();
  return n;
}

namespace {
int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}
// Norms, biases and variant projections: read whole every step, in their own dtype.
int64_t small_weight_bytes(const ModelWeights& w) {
  int64_t n = tensor_bytes(w.final_norm_w) + tensor_bytes(w.final_norm_b);
  for (const LayerWeights& l : w.layers) {
    for (const at::Tensor* t :
         {&l.attn_norm_w, &l.attn_norm_b, &l.bqkv, &l.bo, &l.mlp_norm_w, &l.mlp_norm_b, &l.b_in, &l.b_out})
      n += tensor_bytes(*t);
    for (const at::Tensor* t : l.var.tensors()) n += tensor_bytes(*t);
  }
  return n;
}
}  // namespace

int64_t Transformer::served_weight_bytes_per_token() const {
  int64_t n = packed_weight_bytes() + small_weight_bytes(w_);
  n += tensor_bytes(w_.tok_embed) / std::max<int64_t>(1, w_.tok_embed.size(0));  // one embedding row
  if (w_.pos_embed.defined()) n += tensor_bytes(w_.pos_embed) / std::max<int64_t>(1, w_.pos_embed.size(0));
  return n;
}

int64_t Transformer::served_weight_bytes() const {
  return packed_weight_bytes() + small_weight_bytes(w_) + tensor_bytes(w_.tok_embed) +
         tensor_bytes(w_.pos_embed);
}

const float* Transformer::forward_batch(const std::vector<StepSeq>& seqs, BatchScratch& s) const {
  ensure_packed();
  const int64_t H = cfg_.n_head, Hkv = cfg_.n_head_kv, D = cfg_.head_dim, C = cfg_.dim;
  const int64_t QKV = cfg_.q_dim() + 2 * cfg_.kv_dim(), HD = cfg_.q_dim();
  const int64_t F = cfg_.ffn_dim, F_in = cfg_.arch == Arch::kLlama ? 2 * F : F;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));

  // 0. rows: validate, then lay the batch out (row r: its sequence, its position)
  int64_t R = 0, n_logits = 0;
  for (const StepSeq& q : seqs) {
    TORCH_CHECK(q.kv && q.tokens && q.n_tokens > 0, "forward_batch: every sequence needs a cache and tokens");
    const int64_t pos = q.kv->n_tokens();
    TORCH_CHECK(pos + q.n_tokens <= q.kv->capacity() && pos + q.n_tokens <= cfg_.max_pos,
                "forward_batch: ", pos + q.n_tokens, " positions exceed capacity ",
                std::min(q.kv->capacity(), cfg_.max_pos));
    for (int64_t i = 0; i < q.n_tokens; ++i)
      TORCH_CHECK(q.tokens[i] >= 0 && q.tokens[i] < cfg_.n_vocab, "forward_batch: token ", q.tokens[i],
                  " out of range [0, ", cfg_.n_vocab, ")");
    R += q.n_tokens;
    n_logits += q.logits ? 1 : 0;
  }
  s.pos.resize(static_cast<size_t>(R));
  s.seq.resize(static_cast<size_t>(R));
  for (int64_t i = 0, r = 0; i < static_cast<int64_t>(seqs.size()); ++i)
    for (int64_t t = 0; t < seqs[static_cast<size_t>(i)].n_tokens; ++t, ++r) {
      s.pos[static_cast<size_t>(r)] = seqs[static_cast<size_t>(i)].kv->n_tokens() + t;
      s.seq[static_cast<size_t>(r)] = i;
    }
  grow(s.x, R * C);
  grow(s.xn, R * C);
  grow(s.qkv, R * QKV);
  grow(s.att, R * HD);
  grow(s.h_in, R * F_in);
  grow(s.h_act, R * F);
  grow(s.final_x, n_logits * C);
  grow(s.logits, n_logits * cfg_.n_vocab);
  const bool router = !cfg_.variants.router_layers.empty(), ctx_any = !cfg_.variants.mlp_ctx_layers.empty();
  if (router) grow(s.e_tok, R * C);
  if (ctx_any) grow(s.ctx_summary, R * C);
  if (s.var_dim != C) {
    variants::size_scratch(cfg_, cfg_.max_pos, &s.var);
    s.var_dim = C;
  }
  bool any_repair = false;
  for (const StepSeq& q : seqs) {
    if (const auto& rs = q.kv->repair()) {
      any_repair = true;
      const int64_t r = rs->cfg().rank;
      grow(s.repair_gv, R * H * r);
      grow(s.repair_tmp, 8 * r);
    }
  }
  if (any_repair) grow(s.qa, R * HD);

  // 1. embeddings (+ learned positions for GPT-2)                         x: [R, C]
  for (int64_t r = 0; r < R; ++r) {
    const StepSeq& q = seqs[static_cast<size_t>(s.seq[static_cast<size_t>(r)])];
    const int64_t pos = s.pos[static_cast<size_t>(r)];
    float* x = row(s.x, r, C);
    rows::embed_row(w_.tok_embed, q.tokens[pos - q.kv->n_tokens()], x);
    if (router) std::memcpy(row(s.e_tok, r, C), x, static_cast<size_t>(C) * sizeof(float));  // router E(x)
    if (cfg_.arch == Arch::kGpt2) {
      const float* pe = w_.pos_embed.data_ptr<float>() + pos * C;
      for (int64_t i = 0; i < C; ++i) x[i] += pe[i];
    }
  }

  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    const PackedLayer& pw = packed_[static_cast<size_t>(l)];
    const bool ra = cfg_.variants.is_ra(l);
    // 2. norm → q|k|v for all rows (one read of wqkv) → RoPE at each row's position
    for (int64_t r = 0; r < R; ++r)
      rows::norm_row(cfg_, row(s.x, r, C), rows::fptr(lw.attn_norm_w), rows::fptr(lw.attn_norm_b),
                     row(s.xn, r, C));
    kernels::gemm_packed(pw.wqkv, s.xn.data(), C, R, rows::fptr(lw.bqkv), s.qkv.data(), QKV);
    for (int64_t r = 0; r < R; ++r) {
      float* q = row(s.qkv, r, QKV);
      float* k = q + HD;
      const int64_t pos = s.pos[static_cast<size_t>(r)];
      if (cfg_.arch == Arch::kLlama) {
        const float* c = rope_cos_.data_ptr<float>() + pos * (D / 2);
        const float* sn = rope_sin_.data_ptr<float>() + pos * (D / 2);
        rows::rope_row(q, H, D, c, sn);
        rows::rope_row(k, Hkv, D, c, sn);
      }
      if (ra) std::swap_ranges(q, q + HD, k);  // RA: cache q rows, probe with k_i
    }
    // 3. KV pipeline, per row in order: append. Every row of the layer is stored before any row attends; a
    //    row reads only positions <= its own, so the result is causal.
    for (int64_t r = 0; r < R; ++r) {
      SequenceKv& kv = *seqs[static_cast<size_t>(s.seq[static_cast<size_t>(r)])].kv;
      float* k = row(s.qkv, r, QKV) + HD;
      float* v = k + Hkv * D;
      const int64_t pos = s.pos[static_cast<size_t>(r)];
      kv.layer(l).append_token(k, v, pos);
    }
    // Repair (folded, core/kv/repair.h): the query correction before the kernel.
    auto repair_of = [&](int64_t r) -> const RepairLayer::Fast* {
      const auto& rs = seqs[static_cast<size_t>(s.seq[static_cast<size_t>(r)])].kv->repair();
      return rs ? rs->fast(l) : nullptr;
    };
    auto query_of = [&](int64_t r) -> const float* {
      return any_repair && repair_of(r) ? row(s.qa, r, HD) : row(s.qkv, r, QKV);
    };
    if (any_repair) {
      for (int64_t r = 0; r < R; ++r)
        if (const RepairLayer::Fast* rf = repair_of(r))
          for (int64_t h = 0; h < H; ++h)
            rf->query(row(s.qkv, r, QKV) + h * D, h, row(s.qa, r, HD) + h * D,
                      s.repair_gv.data() + (r * H + h) * rf->r, s.repair_tmp.data());
    }
    // Attention: tasks of (a tile of up to 32 rows of one sequence, one head), claimed dynamically by the
    // threads (rows differ in length, and a descheduled thread must not hold the others up). A tile reads its
    // K / V rows once (KvCodec::attend_rows); each row's result is the same as alone.
    int64_t work = 0;
    for (int64_t r = 0; r < R; ++r) work += (s.pos[static_cast<size_t>(r)] + 1) * H * D;
    s.tiles.clear();
    for (int64_t r0 = 0; r0 < R;) {
      int64_t r1 = r0 + 1;
      while (r1 < R && r1 - r0 < 32 && s.seq[static_cast<size_t>(r1)] == s.seq[static_cast<size_t>(r0)]) ++r1;
      s.tiles.push_back({r0, r1});
      r0 = r1;
    }
    auto attend_task = [&](int64_t i) {
      const auto [r0, r1] = s.tiles[static_cast<size_t>(i / H)];
      const int64_t h = i % H, nr = r1 - r0;
      const KvCodec& cache = seqs[static_cast<size_t>(s.seq[static_cast<size_t>(r0)])].kv->layer(l);
      const float* q[32];
      float* o[32];
      int64_t n[32];
      for (int64_t x = 0; x < nr; ++x) {
        q[x] = query_of(r0 + x);
        o[x] = row(s.att, r0 + x, HD);
        n[x] = s.pos[static_cast<size_t>(r0 + x)] + 1;
      }
      cache.attend_rows(q, n, nr, H, scale, h, h + 1, o);
    };
    const auto n_tasks = static_cast<int64_t>(s.tiles.size()) * H;
    if (work < (int64_t{1} << 15)) {
      for (int64_t i = 0; i < n_tasks; ++i) attend_task(i);
    } else {
      kernels::parallel_tasks(n_tasks, attend_task);
    }
    if (any_repair) {
      for (int64_t r = 0; r < R; ++r)
        if (const RepairLayer::Fast* rf = repair_of(r))
          for (int64_t h = 0; h < H; ++h)
            rf->output(s.repair_gv.data() + (r * H + h) * rf->r, row(s.att, r, HD) + h * D,
                       s.repair_tmp.data());
    }
    if (cfg_.variants.is_sba(l)) {  // per row in order: the reverse store grows with the rows
      for (int64_t r = 0; r < R; ++r) {
        float* q = row(s.qkv, r, QKV);
        variants::sba_step(cfg_, l, *seqs[static_cast<size_t>(s.seq[static_cast<size_t>(r)])].kv, q, q + HD,
                           q + HD + Hkv * D, s.pos[static_cast<size_t>(r)], scale, s.var, row(s.att, r, HD));
      }
    }
    // 4. output projection (router layers: two group projections mixed per token) + residual
    if (lw.var.router()) {
      for (int64_t r = 0; r < R; ++r)
        variants::router_step(cfg_, lw.var, row(s.att, r, HD), row(s.x, r, C), row(s.e_tok, r, C), s.var,
                              row(s.xn, r, C));
    } else {
      kernels::gemm_packed(pw.wo, s.att.data(), HD, R, rows::fptr(lw.bo), s.xn.data(), C);
    }
    for (int64_t i = 0; i < R * C; ++i) s.x[static_cast<size_t>(i)] += s.xn[static_cast<size_t>(i)];
    const bool ctx = lw.var.ctx_active();  // MLP context: keep the attention output for the MLP
    if (ctx) std::memcpy(s.ctx_summary.data(), s.xn.data(), static_cast<size_t>(R * C) * sizeof(float));
    // 5. MLP + residual
    for (int64_t r = 0; r < R; ++r)
      rows::norm_row(cfg_, row(s.x, r, C), rows::fptr(lw.mlp_norm_w), rows::fptr(lw.mlp_norm_b),
                     row(s.xn, r, C));
    kernels::gemm_packed(pw.w_in, s.xn.data(), C, R, rows::fptr(lw.b_in), s.h_in.data(), F_in);
    for (int64_t r = 0; r < R; ++r) {
      if (ctx) variants::mlp_ctx_step(cfg_, lw.var, row(s.ctx_summary, r, C), s.var, row(s.h_in, r, F_in));
      rows::mlp_activation(cfg_, row(s.h_in, r, F_in), row(s.h_act, r, F));
    }
    kernels::gemm_packed(pw.w_out, s.h_act.data(), F, R, rows::fptr(lw.b_out), s.xn.data(), C);
    for (int64_t i = 0; i < R * C; ++i) s.x[static_cast<size_t>(i)] += s.xn[static_cast<size_t>(i)];
  }
  for (const StepSeq& q : seqs) q.kv->advance(q.n_tokens);

  // 6. final norm → logits, only for the last row of the sequences that asked    logits: [n_logits, V]
  for (int64_t i = 0, r = 0, j = 0; i < static_cast<int64_t>(seqs.size()); ++i) {
    const StepSeq& q = seqs[static_cast<size_t>(i)];
    r += q.n_tokens;
    if (q.logits)
      rows::norm_row(cfg_, row(s.x, r - 1, C), rows::fptr(w_.final_norm_w), rows::fptr(w_.final_norm_b),
                     row(s.final_x, j++, C));
  }
  kernels::gemm_packed(packed_head_, s.final_x.data(), C, n_logits, nullptr, s.logits.data(), cfg_.n_vocab);
  return s.logits.data();
}

}  // namespace frost
