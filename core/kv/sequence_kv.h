#pragma once
// SequenceKv: the KV cache of one sequence, all layers, preallocated to spec.max_tokens.
// Owned by whoever runs the sequence (the engine thread); not thread-safe.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kv/codec.h"
#include "core/kv/corruption.h"
#include "core/kv/kv_spec.h"

namespace frost {

class RepairSet;
class FimKvSplice;

// The optional stages of the KV pipeline between the codec and attention (DESIGN.md, "The KV
// pipeline"; ../shared/seeds/kv-repair-operators.md §1): corrupt C(K, V), then repair R_phi.
struct KvStages {
  // kNone = off. kFreshPerStep corrupts what attention reads, every step (reference path only:
  // Transformer::forward; decode_step refuses it). kPersistentAtWrite corrupts the rows being
  // written, once, before the codec stores them (both paths).
  CorruptionSpec corruption;
  std::shared_ptr<const RepairSet> repair;  // null = off
  // Which form forward() uses for repaired layers (core/kv/repair.h); decode_step always folds.
  enum class RepairPath { kFolded, kFactorised, kMaterialised };
  RepairPath repair_path = RepairPath::kFolded;
  // FIMKVSplice (temporal; core/kv/fisher.h), evaluation only, reference path: every unrepaired layer's
  // K and V (per query head, [H, S, D]) are replaced by their rank-r temporal reconstruction before
  // attention. Needs a fresh sequence run as one forward() of exactly the basis' window.
  std::shared_ptr<const FimKvSplice> temporal;
};

// What a training forward() collects from the protected layers (off by default).
struct KvTaps {
  bool contraction = false;  // sum RepairLayer::contraction_penalty over protected layers
  at::Tensor contraction_sum;
  bool attention = false;  // keep every layer's attention output [H, T, D] (before W_o)
  std::vector<at::Tensor> attention_out;
  bool probs = false;  // keep every unrepaired layer's attention probabilities [H, T, S] (Fisher analysis)
  std::vector<at::Tensor> attention_probs;
  bool queries = false;  // keep every layer's query rows [T, H, D] as they probe the cache (post-RoPE,
                         // after the RA swap; KVSplice's attention-aware PCA)
  std::vector<at::Tensor> query_rows;
  void clear() {
    query_rows.clear();
    contraction_sum = at::Tensor();
    attention_out.clear();
    attention_probs.clear();
  }
};

class SequenceKv {
 public:
  explicit SequenceKv(const KvSpec& spec);

  const KvSpec& spec() const { return spec_; }
  KvCodec& layer(int64_t i) { return *layers_[static_cast<size_t>(i)]; }
  const KvCodec& layer(int64_t i) const { return *layers_[static_cast<size_t>(i)]; }
  // Layer i's reverse store, a second codec of spec.codec whose K slot holds q rows (SBA layers,
  // spec.reverse_layers; core/model/variants.h); nullptr for other layers.
  KvCodec* reverse(int64_t i) { return reverse_.empty() ? nullptr : reverse_[static_cast<size_t>(i)].get(); }

  // Number of positions written so far (the next token's position).
  int64_t n_tokens() const { return n_tokens_; }
  int64_t capacity() const { return spec_.max_tokens; }
  // Called by the model after all layers stored `n` more tokens.
  void advance(int64_t n) { n_tokens_ += n; }
  // Forget everything after the first `n` positions (n <= n_tokens()). O(1).
  void truncate(int64_t n);
  void reset() { n_tokens_ = 0; }

  void set_stages(KvStages stages) { stages_ = std::move(stages); }
  const KvStages& stages() const { return stages_; }
  KvTaps& taps() { return taps_; }

  int64_t bytes_per_token() const;  // all layers
  int64_t bytes_allocated() const { return bytes_per_token() * spec_.max_tokens; }
  int64_t bytes_in_use() const { return bytes_per_token() * n_tokens_; }

 private:
  KvSpec spec_;
  std::vector<std::unique_ptr<KvCodec>> layers_;
  std::vector<std::unique_ptr<KvCodec>> reverse_;  // n_layer entries (null = none) or empty
  int64_t n_tokens_ = 0;
  KvStages stages_;
  KvTaps taps_;
};

}  // namespace frost
