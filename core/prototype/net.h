#pragma once
// PrototypeNet: the trainable modules of the prototype regression method
// (docs/prototype.md), as plain tensors with names.
//
// Letters: B batch, S tokens, C backbone width (d_model), d = d_h, m / m_q memory / query tokens,
// K prototypes, N training examples.
//
//   W_m, W_q          Linear C→d without bias ("H W_m")
//   Compressor        Perceiver block: Z = Q_lat + Attn(LN(Q_lat), LN(X), LN(X)); Z += FFN(LN(Z));
//                     out = LN(Z). Memory (m latents) and query (m_q latents) compressors are
//                     identical in structure. Padding tokens are masked out of the attention.
//   KeyReadout        k = Attn(q_key, M, M)[0]: a single learned latent over the memory tokens
//   LabelEmbedder E   e(y) = Linear(GELU(Linear([(y-mu)/(sigma+eps)]))), mu/sigma from train labels
//   g_emb             Linear-GELU-Linear d→d→d (Stage A auxiliary head)
//   InferenceHead     r_0 → L layers of { R += Attn(LN(R), LN(Q_q)); R += Attn(LN(R), LN(Mem));
//                     R += FFN(LN(R)) } → f_out = Linear-GELU-Linear(LN(R)) → z; y = a+(b-a)σ(z)
//                     (pre-norm residual blocks: the seed's "FFN + layer norms, transformer
//                     block style"; pre-norm keeps Stage B's 1,152-token memory stable)
//   resTR             Z1 = Z + α MHSA(Z); Z_out = Z1 + β FFN_relu(Z1)  (no norms, per its seed)
//   slots             s_k, K×d (Stage B selector)
// Every Attn is multi-head (H heads, d/H each) with q/k/v/o projections with bias.
//
// Initialisation (choice): Linear weights and biases U(-1/sqrt(in), 1/sqrt(in)) as torch.nn.Linear;
// LayerNorm 1/0; latents, q_key and r_0 N(0, 0.02²) (every use passes through a LayerNorm or an
// attention projection, so only their directions matter); slots N(0, 1) (normalised before use).
// All draws come from one generator seeded by cfg.seed, so a config + seed gives the same net. The draws
// are made on the CPU and the tensors then moved to the net's device (core/prototype/device.h): the same
// initial values on every device.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/prototype/config.h"

namespace frost::prototype {

// Ordered named tensors: parameters (trainable) and buffers (label statistics). The names are
// the tensor names in checkpoints and artifacts.
class ParamSet {
 public:
  explicit ParamSet(at::Device device = at::kCPU) : device_(device) {}
  at::Device device() const { return device_; }
  // Stored as float unless `dtype` says otherwise (the linear probe keeps double: docs/prototype.md), on
  // device() (moved there when `t` is elsewhere).
  at::Tensor add(const std::string& name, at::Tensor t, bool trainable = true,
                 at::ScalarType dtype = at::kFloat);
  const std::vector<std::pair<std::string, at::Tensor>>& items() const { return items_; }
  bool trainable(const std::string& name) const;
  at::Tensor get(const std::string& name) const;  // undefined when absent
  // Trainable tensors whose names start with one of `prefixes`.
  std::vector<std::pair<std::string, at::Tensor>> trainable_with_prefix(
      const std::vector<std::string>& prefixes) const;
  // Copies values in place (shape- and name-checked; from any device): INVALID_ARGUMENT naming the tensor
  // when a name is missing or a shape differs. The tensors keep their identity (optimizer state and
  // module views stay valid).
  absl::Status load(const std::vector<std::pair<std::string, at::Tensor>>& values);
  int64_t numel() const;

 private:
  at::Device device_;
  std::vector<std::pair<std::string, at::Tensor>> items_;
  std::vector<bool> trainable_;
};

struct Linear {
  at::Tensor w, b;  // [out, in], [out] or undefined
  at::Tensor operator()(const at::Tensor& x) const;
};
struct LayerNorm {
  at::Tensor w, b;
  at::Tensor operator()(const at::Tensor& x) const;
};
struct Attention {
  Linear q, k, v, o;
  int64_t heads = 1;
  // q_in [B, nq, d]; kv [Bk, nk, d] with Bk == B or 1 (shared memory); key_mask [Bk, nk] bool
  // (true = attend) or undefined. bias [B, nk] (added to every head's logits of every query
  // row) or undefined. probs_out, when given, receives the softmax [B, H, nq, nk].
  at::Tensor operator()(const at::Tensor& q_in, const at::Tensor& kv, const at::Tensor& key_mask,
                        at::Tensor* probs_out = nullptr, const at::Tensor& bias = at::Tensor()) const;
};
struct FFN {
  Linear fc1, fc2;
  bool relu = false;  // GELU otherwise
  at::Tensor operator()(const at::Tensor& x) const;
};
struct Compressor {
  at::Tensor latents;  // [n, d]
  LayerNorm ln_q, ln_kv, ln_ff, ln_out;
  Attention attn;
  FFN ffn;
  at::Tensor operator()(const at::Tensor& x, const at::Tensor& mask) const;  // [B,S,d] → [B,n,d]
};
struct HeadLayer {
  LayerNorm ln_r1, ln_q, ln_r2, ln_mem, ln_ff;
  Attention att_q, att_mem;
  FFN ffn;
};
struct InferenceHead {
  at::Tensor r0;  // [d]
  std::vector<HeadLayer> layers;
  LayerNorm ln_out;
  Linear out1, out2;
  // q_tokens [B, m_q, d]; mem [Bm, n, d] (Bm == B or 1). Returns z [B]. mem_probs, when given,
  // receives each layer's memory-attention weights [B, H, 1, n]. mem_bias [B, n], when defined,
  // is added to the memory-attention logits of every layer and head (the key_bias departure).
  at::Tensor operator()(const at::Tensor& q_tokens, const at::Tensor& mem,
                        std::vector<at::Tensor>* mem_probs = nullptr,
                        const at::Tensor& mem_bias = at::Tensor()) const;
};

// Invariant guards of resTR (counted; see RestrStats).
struct RestrStats {
  int64_t applied = 0;         // examples refined (alpha or beta > 0) and kept
  int64_t fallback_shape = 0;  // output shape differed → identity
  int64_t fallback_nonfinite = 0;
  int64_t fallback_norm = 0;  // ||Z_out|| > (1 + eps) ||Z_in|| → identity
  void add(const RestrStats& o);
  int64_t fallbacks() const { return fallback_shape + fallback_nonfinite + fallback_norm; }
};

struct ResTR {
  Attention attn;
  FFN ffn;  // ReLU, no normalisation (the seed's "2-layer ReLU network")
  // z [B, n, d]; alpha, beta [B] in [0, 1]. Each example whose output breaks an invariant
  // (shape, finite values, norm inflation bound with `norm_eps`, Frobenius norm over its n×d
  // tokens) gets its input back unchanged. `fallback_out` [B] bool marks them when given.
  // `inflation_out` [B], when given, receives ||Z_out|| / ||Z_in|| before the guard, with its
  // gradient (the Stage B guard penalty).
  at::Tensor operator()(const at::Tensor& z, const at::Tensor& alpha, const at::Tensor& beta, double norm_eps,
                        RestrStats* stats = nullptr, at::Tensor* fallback_out = nullptr,
                        at::Tensor* inflation_out = nullptr) const;
};

class PrototypeNet {
 public:
  // d_model: backbone width; [a, b]: label bounds; mu/sigma: training-label mean/std; device: where the
  // parameters live (the inputs of every method must be there too).
  PrototypeNet(const PrototypeConfig& cfg, int64_t d_model, double a, double b, double mu, double sigma,
               at::Device device = at::kCPU);

  const PrototypeConfig& cfg() const { return cfg_; }
  int64_t d_model() const { return d_model_; }
  at::Device device() const { return ps_.device(); }
  double a() const { return a_; }
  double b() const { return b_; }
  ParamSet& params() { return ps_; }
  const ParamSet& params() const { return ps_; }

  // Stage A trains everything except resTR and the slots; Stage B trains the slots, W_q, the
  // query compressor, E, the inference head and resTR (the seed's lists; resTR is ours).
  std::vector<std::pair<std::string, at::Tensor>> stage_a_params() const;
  std::vector<std::pair<std::string, at::Tensor>> stage_b_params() const;

  at::Tensor query_tokens(const at::Tensor& h, const at::Tensor& mask) const;   // [B, m_q, d]
  at::Tensor memory_tokens(const at::Tensor& h, const at::Tensor& mask) const;  // [B, m, d]
  at::Tensor key(const at::Tensor& mem) const;                                  // [B, d] (raw)
  at::Tensor normalize(const at::Tensor& k) const;    // k / (||k||_2 + eps) along the last dim
  at::Tensor label_embed(const at::Tensor& y) const;  // [*] → [*, d]
  at::Tensor emb_predict(const at::Tensor& k) const;  // g_emb
  at::Tensor bound(const at::Tensor& z) const;        // a + (b-a) σ(z)

  // The linear probe (cfg.probe == "ridge", docs/prototype.md): z_probe [B] double = logit of the
  // ridge prediction on the masked mean of h [B,S,C], clipped into (a, b). The probe is evaluated in
  // double (pooling, weights, logit), so it orders rows as the report's ridge baseline does: float
  // rounding would tie or swap near-equal predictions and move Spearman in the 6th digit.
  // Zeros (of h's dtype) without a probe.
  at::Tensor probe_logit(const at::Tensor& h, const at::Tensor& mask) const;
  // ŷ from the head's z [B] and z_probe [B]: a + (b-a) σ(z_probe + c + s·z) in double with a probe
  // (c: the level offset, s: the residual scale), else bound(z).
  at::Tensor output(const at::Tensor& z_head, const at::Tensor& z_probe) const;
  bool has_probe() const { return probe_w_.defined(); }
  // Probe in raw feature space: pred(x) = x·w + bias (w [C]); s = the residual scale; c = a constant
  // logit offset (the head's mean residual where only its level held up on held-out rows).
  void set_probe(const at::Tensor& w, double bias);
  void set_probe_scale(double s);
  double probe_scale() const;
  void set_probe_offset(double c);
  double probe_offset() const;

  const InferenceHead& head() const { return head_; }
  const ResTR& restr() const { return restr_; }
  at::Tensor slots() const { return slots_; }

 private:
  PrototypeConfig cfg_;
  int64_t d_model_;
  double a_, b_;
  ParamSet ps_;
  Linear w_m_, w_q_;
  Compressor mem_comp_, query_comp_;
  at::Tensor q_key_;
  Attention key_attn_;
  Linear e1_, e2_;
  at::Tensor label_mu_, label_sigma_;
  Linear g1_, g2_;
  InferenceHead head_;
  ResTR restr_;
  at::Tensor slots_;
  at::Tensor probe_w_, probe_b_, probe_scale_,
      probe_offset_;  // double buffers; undefined when cfg.probe == "none"
};

// The flattened prototype memory Mem = [P_1; ...; P_K] with P_k = [M_k; l_k] (the seed's
// block layout, which block_key_bias and the attribution's per-block sums rely on): memory
// tokens [K, m, d] and label tokens [K, d] → [1, K(m+1), d].
at::Tensor prototype_memory(const at::Tensor& mem, const at::Tensor& label_tokens);

// The key_bias logits of a prototype memory: gamma * cos(query key, prototype key) for every
// token of each block. q_keys [B, d] and proto_keys [K, d] are normalised keys; returns
// [B, K * block] (block = m + 1), or an undefined tensor when gamma == 0.
at::Tensor block_key_bias(const at::Tensor& q_keys, const at::Tensor& proto_keys, int64_t block,
                          double gamma);

// Huber loss per element with threshold delta (the seed's L_reg).
at::Tensor huber(const at::Tensor& pred, const at::Tensor& target, double delta);

}  // namespace frost::prototype
