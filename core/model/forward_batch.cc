// The CPU's serving step: the layer sequence (core/model/layer_sequence.h) over one pass of the new tokens of
// several sequences (continuous batching, vLLM's ragged batch). Rows are the new tokens of every sequence,
// concatenated: decode steps contribute one row, prefill chunks many. Every weight matrix is read once per step
// (kernels::gemm_packed over all rows); attention runs per row over its own sequence's cache through that
// sequence's codec kernel, in parallel over rows × heads; the per-row arithmetic is core/model/rows.h.
// decode_step is this step with one row.
//
// Held to forward() (the independent twin) by tests/unit/model/forward_batch_test.cc and transformer_test.cc.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/kv/repair_set.h"
#include "core/model/layer_sequence.h"
#include "core/model/rope.h"
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
         {&l.attn_norm_w, &l.attn_norm_b, &l.bqkv, &l.bo, &l.mlp_norm_w, &l.mlp_norm_b, &l.b_in, &l.b_out,
          &l.q_norm_w, &l.k_norm_w, &l.post_attn_norm_w, &l.post_mlp_norm_w})
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

// The CPU's LayerOps: each op over every row of the step, in the buffers of a BatchScratch.
struct Transformer::BatchOps final : LayerOps {
  const Transformer& t;
  const ModelConfig& cfg;
  const std::vector<StepSeq>& seqs;
  BatchScratch& s;
  const int64_t R, L, H, Hkv, D, C, QKV, HD, F, F_in;
  const float scale;
  const bool any_repair;

  BatchOps(const Transformer& t_, const std::vector<StepSeq>& seqs_, BatchScratch& s_, int64_t rows,
           int64_t logits, bool repair)
      : t(t_), cfg(t_.cfg_), seqs(seqs_), s(s_), R(rows), L(logits), H(cfg.n_head), Hkv(cfg.n_head_kv),
        D(cfg.head_dim), C(cfg.dim), QKV(cfg.q_dim() + 2 * cfg.kv_dim()), HD(cfg.q_dim()), F(cfg.ffn_dim),
        F_in(cfg.arch == Arch::kLlama ? 2 * cfg.ffn_dim : cfg.ffn_dim),
        scale(static_cast<float>(cfg.attention_scale())), any_repair(repair) {}

  const LayerWeights& lw(int64_t l) const { return t.w_.layers[static_cast<size_t>(l)]; }
  const PackedLayer& pw(int64_t l) const { return t.packed_[static_cast<size_t>(l)]; }
  const StepSeq& seq_of(int64_t r) const { return seqs[static_cast<size_t>(s.seq[static_cast<size_t>(r)])]; }
  int64_t pos_of(int64_t r) const { return s.pos[static_cast<size_t>(r)]; }
  void add_block_out() {  // x += the block's output (in xn)
    for (int64_t i = 0; i < R * C; ++i) s.x[static_cast<size_t>(i)] += s.xn[static_cast<size_t>(i)];
  }

  void embed() override {  // x: [R, C]
    const bool router = !cfg.variants.router_layers.empty();
    for (int64_t r = 0; r < R; ++r) {
      const StepSeq& q = seq_of(r);
      const int64_t pos = pos_of(r);
      float* x = row(s.x, r, C);
      rows::embed_row(t.w_.tok_embed, q.tokens[pos - q.kv->n_tokens()], x);
      if (cfg.embed_scale != 1.0) {  // Gemma: × √C
        const auto es = static_cast<float>(cfg.embed_scale);
        for (int64_t i = 0; i < C; ++i) x[i] *= es;
      }
      if (router) std::memcpy(row(s.e_tok, r, C), x, static_cast<size_t>(C) * sizeof(float));  // router E(x)
      if (cfg.arch == Arch::kGpt2) {
        const float* pe = t.w_.pos_embed.data_ptr<float>() + pos * C;
        for (int64_t i = 0; i < C; ++i) x[i] += pe[i];
      }
    }
  }

  void norm(NormSite site, int64_t l) override {
    if (site == NormSite::kFinal) {  // the gathered rows → final_x [L, C]
      for (int64_t j = 0; j < L; ++j)
        rows::norm_row(cfg, row(s.x, s.logit_rows[static_cast<size_t>(j)], C), rows::fptr(t.w_.final_norm_w),
                       rows::fptr(t.w_.final_norm_b), row(s.final_x, j, C));
      return;
    }
    const LayerWeights& w = lw(l);
    const bool attn = site == NormSite::kAttn;
    for (int64_t r = 0; r < R; ++r)
      rows::norm_row(cfg, row(s.x, r, C), rows::fptr(attn ? w.attn_norm_w : w.mlp_norm_w),
                     rows::fptr(attn ? w.attn_norm_b : w.mlp_norm_b), row(s.xn, r, C));
  }

  void linear(LayerMatrix m, int64_t l) override {
    switch (m) {
      case LayerMatrix::kQkv:
        kernels::gemm_packed(pw(l).wqkv, s.xn.data(), C, R, rows::fptr(lw(l).bqkv), s.qkv.data(), QKV);
        return;
      case LayerMatrix::kO:
        kernels::gemm_packed(pw(l).wo, s.att.data(), HD, R, rows::fptr(lw(l).bo), s.xn.data(), C);
        if (!cfg.post_norms) add_block_out();  // else post_norm adds it
        return;
      case LayerMatrix::kMlpIn:
        kernels::gemm_packed(pw(l).w_in, s.xn.data(), C, R, rows::fptr(lw(l).b_in), s.h_in.data(), F_in);
        return;
      case LayerMatrix::kMlpOut:
        kernels::gemm_packed(pw(l).w_out, s.h_act.data(), F, R, rows::fptr(lw(l).b_out), s.xn.data(), C);
        if (!cfg.post_norms) add_block_out();
        return;
      case LayerMatrix::kHead:
        kernels::gemm_packed(t.packed_head_, s.final_x.data(), C, L, nullptr, s.logits.data(), cfg.n_vocab);
        return;
    }
  }

  void qk_norm(int64_t l) override {
    const auto eps = static_cast<float>(cfg.norm_eps);
    for (int64_t r = 0; r < R; ++r) {
      float* q = row(s.qkv, r, QKV);
      rows::head_rms_norm(q, H, D, rows::fptr(lw(l).q_norm_w), eps);
      rows::head_rms_norm(q + HD, Hkv, D, rows::fptr(lw(l).k_norm_w), eps);
    }
  }

  void post_norm(NormSite site, int64_t l) override {  // x += norm(block output in xn), in place
    const float* w = rows::fptr(site == NormSite::kAttn ? lw(l).post_attn_norm_w : lw(l).post_mlp_norm_w);
    for (int64_t r = 0; r < R; ++r) rows::norm_row(cfg, row(s.xn, r, C), w, nullptr, row(s.xn, r, C));
    add_block_out();
  }

  void logit_softcap() override {
    const auto cap = static_cast<float>(cfg.final_softcap);
    for (int64_t i = 0; i < L * cfg.n_vocab; ++i) s.logits[static_cast<size_t>(i)] = cap * std::tanh(s.logits[static_cast<size_t>(i)] / cap);
  }

  void rope_kv_append(int64_t l, bool ra) override {
    for (int64_t r = 0; r < R; ++r) {
      float* q = row(s.qkv, r, QKV);
      float* k = q + HD;
      const int64_t pos = pos_of(r);
      if (cfg.arch == Arch::kLlama) {
        const RopeTable& rt = t.rope_of(l);
        const int64_t half = rt.rotary_dim / 2;
        const float* c = rt.cos.data_ptr<float>() + pos * half;
        const float* sn = rt.sin.data_ptr<float>() + pos * half;
        rows::rope_row(q, H, D, rt.rotary_dim, c, sn);
        rows::rope_row(k, Hkv, D, rt.rotary_dim, c, sn);
      }
      if (ra) std::swap_ranges(q, q + HD, k);  // RA: cache q rows, probe with k_i
    }
    // Every row of the layer is stored before any row attends; a row reads only positions <= its own, so the
    // result is causal.
    for (int64_t r = 0; r < R; ++r) {
      float* k = row(s.qkv, r, QKV) + HD;
      seq_of(r).kv->layer(l).append_token(k, k + Hkv * D, pos_of(r));
    }
  }

  void attention(int64_t l) override {
    // Repair (folded, core/kv/repair.h): the query correction before the kernel, the value correction after.
    auto repair_of = [&](int64_t r) -> const RepairLayer::Fast* {
      const auto& rs = seq_of(r).kv->repair();
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
    // Tasks of (a tile of up to 32 rows of one sequence, one head), claimed dynamically by the threads (rows
    // differ in length, and a descheduled thread must not hold the others up). A tile reads its K / V rows
    // once (KvCodec::attend_rows); each row's result is the same as alone.
    int64_t work = 0;
    for (int64_t r = 0; r < R; ++r) work += (pos_of(r) + 1) * H * D;
    s.tiles.clear();
    for (int64_t r0 = 0; r0 < R;) {
      int64_t r1 = r0 + 1;
      while (r1 < R && r1 - r0 < 32 && s.seq[static_cast<size_t>(r1)] == s.seq[static_cast<size_t>(r0)]) ++r1;
      s.tiles.push_back({r0, r1});
      r0 = r1;
    }
    // A sliding layer's rows past the window, and every row of a soft-capped layer, take the codec's span kernel
    // (positions [start, pos]); the other rows the tiled one.
    const int64_t window = cfg.window_of(l);
    const auto softcap = static_cast<float>(cfg.attn_softcap);
    auto attend_task = [&](int64_t i) {
      const auto [r0, r1] = s.tiles[static_cast<size_t>(i / H)];
      const int64_t h = i % H;
      const KvCodec& cache = seq_of(r0).kv->layer(l);
      const float* q[32];
      float* o[32];
      int64_t n[32];
      int64_t nr = 0;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t end = pos_of(r) + 1, start = window > 0 && end > window ? end - window : 0;
        if (start > 0 || softcap > 0) {
          cache.attend_window(query_of(r), H, start, end, scale, softcap, h, h + 1, row(s.att, r, HD));
          continue;
        }
        q[nr] = query_of(r);
        o[nr] = row(s.att, r, HD);
        n[nr++] = end;
      }
      if (nr > 0) cache.attend_rows(q, n, nr, H, scale, h, h + 1, o);
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
            rf->output(s.repair_gv.data() + (r * H + h) * rf->r, row(s.att, r, HD) + h * D, s.repair_tmp.data());
    }
  }

  void activation(int64_t) override {
    for (int64_t r = 0; r < R; ++r) rows::mlp_activation(cfg, row(s.h_in, r, F_in), row(s.h_act, r, F));
  }

  void gather() override {  // the last row (and a draft's rows) of each sequence that asked for logits
    s.logit_rows.clear();
    for (int64_t i = 0, r = 0; i < static_cast<int64_t>(seqs.size()); ++i) {
      const StepSeq& q = seqs[static_cast<size_t>(i)];
      r += q.n_tokens;
      for (int64_t j = q.n_logit_rows(); j > 0; --j) s.logit_rows.push_back(r - j);
    }
  }

  void sba_mix(int64_t l) override {  // per row in order: the reverse store grows with the rows
    for (int64_t r = 0; r < R; ++r) {
      float* q = row(s.qkv, r, QKV);
      variants::sba_step(cfg, l, *seq_of(r).kv, q, q + HD, q + HD + Hkv * D, pos_of(r), scale, s.var,
                         row(s.att, r, HD));
    }
  }
  void router_out(int64_t l) override {  // two group projections mixed per token, instead of W_o
    for (int64_t r = 0; r < R; ++r)
      variants::router_step(cfg, lw(l).var, row(s.att, r, HD), row(s.x, r, C), row(s.e_tok, r, C), s.var,
                            row(s.xn, r, C));
    add_block_out();
  }
  void keep_block_out(int64_t l) override {
    if (lw(l).var.ctx_active())
      std::memcpy(s.ctx_summary.data(), s.xn.data(), static_cast<size_t>(R * C) * sizeof(float));
  }
  void mlp_ctx_mix(int64_t l) override {  // the conductor's gate (g >= 0.5) skips it
    const VariantLayerWeights& v = lw(l).var;
    if (!v.ctx_active()) return;
    for (int64_t r = 0; r < R; ++r)
      variants::mlp_ctx_step(cfg, v, row(s.ctx_summary, r, C), s.var, row(s.h_in, r, F_in));
  }
};

const float* Transformer::forward_batch(const std::vector<StepSeq>& seqs, BatchScratch& s) const {
  ensure_packed();
  const int64_t H = cfg_.n_head, C = cfg_.dim, QKV = cfg_.q_dim() + 2 * cfg_.kv_dim(), HD = cfg_.q_dim();
  const int64_t F = cfg_.ffn_dim, F_in = cfg_.arch == Arch::kLlama ? 2 * F : F;

  // rows: validate, then lay the batch out (row r: its sequence, its position)
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
    TORCH_CHECK(q.draft >= 0 && (q.draft == 0 || (q.logits && q.draft < q.n_tokens)), "forward_batch: a draft of ",
                q.draft, " tokens in a row of ", q.n_tokens, q.logits ? "" : " without logits");
    R += q.n_tokens;
    n_logits += q.n_logit_rows();
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
  if (!cfg_.variants.router_layers.empty()) grow(s.e_tok, R * C);
  if (!cfg_.variants.mlp_ctx_layers.empty()) grow(s.ctx_summary, R * C);
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

  BatchOps ops(*this, seqs, s, R, n_logits, any_repair);
  run_layer_sequence(cfg_, ops, StepOutput::kLogits);
  for (const StepSeq& q : seqs) q.kv->advance(q.n_tokens);
  return s.logits.data();
}

const float* Transformer::decode_step(int32_t token, SequenceKv& kv, DecodeScratch& s) const {
  s.token = token;
  s.one.resize(1);
  s.one[0] = StepSeq{&kv, &s.token, 1, true};
  return forward_batch(s.one, s.batch);
}

}  // namespace frost
