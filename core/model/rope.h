#pragma once
// Rotary position embeddings as the Hugging Face families configure them: the rotation frequencies of
// `rope_theta` and `rope_scaling` (default, linear, dynamic, llama3, yarn, longrope), applied to the first
// `rotary_dim` = head_dim × partial_rotary_factor dimensions of each head (HF's rotate_half pairing j ↔ j +
// rotary_dim/2; the rest pass through).
//
// Every backend reads the same tables (make_rope_table): cos and sin of position × inverse frequency in fp32,
// times the scaling's attention factor (yarn, longrope), [max_pos, rotary_dim / 2]. The inverse frequencies are
// computed in fp32 the way transformers' modeling_rope_utils computes them, so the tables are HF's to the bit
// where the math is the same.
//
// Two choices frost makes where HF's behaviour depends on the length of the whole sequence (and so cannot be
// cached per position, or differs between a prefill and the decode steps after it):
//  * dynamic (NTK): HF rescales the base only once a sequence is longer than max_position_embeddings; frost
//    serves at most max_position_embeddings positions, so the rotation is the unscaled default. (vLLM instead
//    scales for the longest length at every length, which differs from HF at every length.)
//  * longrope (Phi-3.5, Phi-4-mini): HF uses long_factor for every position once the sequence is longer than
//    original_max_position_embeddings, short_factor otherwise; frost uses short_factor for positions below
//    original_max_position_embeddings and long_factor from there on (vLLM's choice): a cached key never
//    changes its rotation. The two agree on every sequence up to original_max_position_embeddings.
#include <ATen/ATen.h>

#include <cstdint>

#include "core/model/rope_scaling.h"

namespace frost {

// The cos / sin of one rotation: [max_pos, rotary_dim / 2] fp32 each, the attention factor folded in.
struct RopeTable {
  at::Tensor cos, sin;
  int64_t rotary_dim = 0;
};

// `max_pos` positions of the rotation of base `theta` under `scaling` over rotary_dim dims (even, > 0);
// `max_position_embeddings` is the config's (longrope's and yarn's derived factors read it).
RopeTable make_rope_table(double theta, const RopeScaling& scaling, int64_t rotary_dim, int64_t max_pos,
                          int64_t max_position_embeddings);

}  // namespace frost
