#pragma once
// The decoder's layer sequence, written once: embedding → per layer (norm, q|k|v, positions + KV append,
// attention, output projection + residual, norm, MLP + residual) → the rows that need logits → final norm →
// head (→ the device's draw). run_layer_sequence() is that order, and nothing else; it runs over a LayerOps
// backend, which owns the buffers of a step and does the math of each op (llama.cpp's one graph per
// architecture that every backend executes; gpt-fast's model.py loop):
//
//   CPU        Transformer::forward_batch (core/model/forward_batch.cc): packed GEMMs over all rows,
//   attention
//              through each sequence's KV codec (repair and KVSplice folded in), every architecture variant
//   reference  ReferenceDecoder (core/exec/reference_decoder.cc): the device's layout and the CPU twins of
//              its kernels (kernels/cuda/reference.h); the families' ops too (the CUDA decoder refuses them)
//   CUDA       CudaDecoder (core/exec/cuda_decoder.cc): kernels/cuda and cuBLAS; it may fuse a norm or an
//              activation into the linear that reads it (LLaMA's GEMV), which the op order allows: a norm's
//              or an activation's output is read by the next linear only.
//
// The reference forward (Transformer::forward, transformer.cc) is not a backend: it is the independent twin
// that tests hold every backend to, and the differentiable path training runs.
//
// Data of a step (R = rows, L = rows with logits; shapes per step, C = dim, H = heads, Hkv = kv heads, D =
// head_dim, F = ffn_dim, F_in = 2F for LLaMA (gate | up), F for GPT-2, V = vocab). Every op names what it
// reads and writes; the buffers are the backend's:
//
//   op                        reads                 writes
//   embed                     tokens, positions     x [R, C]               (+ the router's E(x) on the CPU)
//   norm(kAttn | kMlp, l)     x                     h [R, C]
//   linear(kQkv, l)           h                     qkv [R, H·D + 2·Hkv·D]
//   rope_kv_append(l, ra)     qkv                   q, k rotated in place; k, v → the KV cache
//   attention(l)              q, the KV cache       att [R, H·D]
//   qk_norm(l)                qkv                   each q / k head RMS-normed (Qwen 3, Gemma 3)
//   linear(kO, l)             att                   x += W_o att (+ b)   (post norms: y = W_o att, for post_norm)
//   linear(kMlpIn, l)         h                     u [R, F_in]
//   activation(l)             u                     a [R, F]: SwiGLU silu(gate)·up, or gelu_new
//   linear(kMlpOut, l)        a                     x += W_out a (+ b)   (post norms: y = W_out a)
//   post_norm(kAttn | kMlp, l) y                    x += norm(y)  (Gemma's post-attention / post-feedforward norms)
//   gather                    x                     xl [L, C]: the last row of each sequence with logits
//   norm(kFinal)              xl                    hl [L, C]  (the hidden states a Predict feature reads)
//   linear(kHead)             hl                    logits [L, V]
//   logit_softcap             logits                logits = cap · tanh(logits / cap)  (Gemma 2)
//   sample                    logits                ids [L] (a device's draw; the CPU samples on the host)
//   variants (CPU only: core/model/variants.h)
//   sba_mix(l)                q, k, v, att          att = α·att + (1 − α)·attend(k; Q, V); (q, v) → reverse
//   store router_out(l)             att, x, E(x)          x += the router's mix of two group projections (no
//   W_o) keep_block_out(l)         the block's output    ctx [R, C]: what the attention block added to x
//   mlp_ctx_mix(l)            ctx, u                u = (1 − α)·u + α·ctx_up(ctx_down(ctx)) (conductor: if g
//   < 0.5)
//
// A backend declares the features it runs (LayerFeatures); check_layer_features() refuses a model that needs
// another, naming it, before anything is built. The variant ops' default bodies throw: they are reached only
// on a backend that declared the feature.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/model/model_config.h"

namespace frost {

enum class NormSite { kAttn, kMlp, kFinal };
enum class LayerMatrix { kQkv, kO, kMlpIn, kMlpOut, kHead };
// What a step ends with: the logits of the gathered rows, their final-norm hidden states (no head), or the
// token a device draws from the logits.
enum class StepOutput { kLogits, kHidden, kSample };

class LayerOps {
 public:
  virtual ~LayerOps() = default;
  virtual void embed() = 0;
  // `l` is the layer (ignored for kFinal / kHead).
  virtual void norm(NormSite site, int64_t l) = 0;
  virtual void linear(LayerMatrix m, int64_t l) = 0;
  // RoPE (LLaMA; GPT-2's positions are learned, in embed) at each row's position, then k and v into the
  // row's sequence's cache. `ra`: reciprocal attention — q and k swap after RoPE, so the cache stores q rows
  // and k_i probes them.
  virtual void rope_kv_append(int64_t l, bool ra) = 0;
  virtual void attention(int64_t l) = 0;
  virtual void activation(int64_t l) = 0;
  virtual void gather() = 0;
  virtual void sample();
  // The families' ops (model_config.h; default bodies throw, as for the variants below).
  virtual void qk_norm(int64_t l);
  virtual void post_norm(NormSite site, int64_t l);
  virtual void logit_softcap();
  virtual void sba_mix(int64_t l);
  virtual void router_out(int64_t l);
  virtual void keep_block_out(int64_t l);
  virtual void mlp_ctx_mix(int64_t l);
};

// The step's layer order (layer_sequence.cc): the one place it is written.
void run_layer_sequence(const ModelConfig& cfg, LayerOps& ops, StepOutput out);

// What a backend runs beyond the plain LLaMA / GPT-2 layer: the variant ops above, and the families' features
// (`families`: RoPE scaling and partial rotary, sliding windows, q / k norms, post norms, soft caps, scaled
// embeddings and attention, the tanh-GELU gate, q / k / v biases without an o bias — ModelConfig::plain()).
// Attention ops take each layer's window, scale and cap from the config; a backend with `families` runs them all.
struct LayerFeatures {
  bool ra = false, sba = false, router = false, mlp_ctx = false, families = false;
  static LayerFeatures all() { return {true, true, true, true, true}; }
};
// OK, or FAILED_PRECONDITION "<who>: architecture variants: <feature> (config.json frost_variants.<field>)
// <why>" for the first feature of cfg the backend lacks ("<who>: <family> feature: <feature> (config.json
// <field>) <why>" for the families' features). `why` ends the message ("runs only on model.device
// cpu").
absl::Status check_layer_features(const ModelConfig& cfg, const LayerFeatures& have, const std::string& who,
                                  const std::string& why);

}  // namespace frost
