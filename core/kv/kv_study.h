#pragma once
// KvStudy: what a training or evaluation run does to the KV pipeline beyond serving it, and what it collects.
//
// The serving sequence (SequenceKv) carries only what a served request runs: its codec and, optionally, the
// repair operator. Corruption, the choice of repair form, FIMKVSplice's temporal reconstruction and the
// training taps are studies of that pipeline (docs/kv_repair.md, "Pipeline, per attention layer"): they exist
// only on the reference path, so they live here and are passed explicitly to the reference
// Transformer::forward (core/model/transformer.h) by training and evaluation (core/train). The fast paths (decode_step, forward_batch) take no KvStudy, so a served sequence
// cannot ask them for a stage they do not run: that is a matter of type, not a run-time check.
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "core/kv/corruption.h"

namespace frost {

class FimKvSplice;

// What a training forward() collects (all off by default): flags in, tensors out.
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

struct KvStudy {
  // The corruption stage C(K, V) between the codec and attention; kNone = off. kPersistentAtWrite corrupts
  // the rows being written, once, before the codec stores them (seeded by the first position written);
  // kFreshPerStep corrupts what attention reads, every step. SBA layers refuse it (core/model/variants.h).
  CorruptionSpec corruption;
  // Which form forward() uses for the sequence's repaired layers (core/kv/repair.h): all three are equal up
  // to rounding; the fast paths always fold.
  enum class RepairPath { kFolded, kFactorised, kMaterialised };
  RepairPath repair_path = RepairPath::kFolded;
  // FIMKVSplice (temporal; core/kv/fisher.h), evaluation only: every unrepaired layer's K and V (per query
  // head, [H, S, D]) are replaced by their rank-r temporal reconstruction before attention. Needs a fresh
  // sequence run as one forward() of exactly the basis' window.
  std::shared_ptr<const FimKvSplice> temporal;
  KvTaps taps;
};

}  // namespace frost
