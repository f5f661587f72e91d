#pragma once
// Speculative decoding's knobs (issue 52), with no LibTorch in sight: the server default is part of
// EngineOptions (engine_options.h, the `engine.speculative` config section) and a request may override the
// method and the draft length (GenerationRequest::speculative, request.h). The engine's policy and the
// drafters are core/generate/speculation.h and core/generate/drafter.h.
#include <cstdint>

namespace frost {

// kServer: the request leaves it to the server (EngineOptions::speculative.method).
//   off     one token per sequence per step
//   ngram   prompt lookup: the continuation of the latest earlier occurrence of the sequence's last 1..3 tokens
//   suffix  suffix decoding: the sequence's own suffix trie and one over recent outputs of other requests
// Jump-forward under a constraint (grammar-forced text drafted and verified in one step) applies to every
// request whose own method is not off when EngineOptions::speculative.jump_forward is set, whatever the
// server's default method.
enum class SpecMethod { kServer, kOff, kNgram, kSuffix };
const char* spec_method_name(SpecMethod m);  // "server" | "off" | "ngram" | "suffix"

struct SpeculativeOptions {
  SpecMethod method = SpecMethod::kOff;  // the default for requests that do not choose (never kServer)
  int32_t num_tokens = 4;                // k: most drafted tokens verified per sequence per step
  // Drafters run only while at most this many sequences decode in a step: past it the step is compute-bound
  // and draft rows cost what they save (vLLM's disable_by_batch_size; the adaptive rule agrees on its own).
  int32_t max_batch = 8;
  // The cost rule of core/generate/speculation.h: draft a token only where its expected yield beats what a
  // verification row costs (measured). false: always draft up to num_tokens (vLLM's fixed k).
  bool adaptive = true;
  // Constrained requests: where the grammar forces the next text, its tokens are drafted too (jump-forward),
  // up to jump_forward_tokens per step, under the same rule (Sequence::shape_draft).
  bool jump_forward = true;
  int32_t jump_forward_tokens = 16;
  // suffix: the shared cache of recent outputs (tokens; 0 = none, each sequence's own trie only).
  int64_t suffix_cache_tokens = 65536;
};

}  // namespace frost
