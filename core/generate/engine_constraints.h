#pragma once
// EngineConstraints: what the engine needs for structured output, kept out of its loop — the token vocabulary
// as constrained decoding sees it, and the compile cache (ConstraintCompiler, constraint_compiler.h: bounded
// compiler threads, a time budget, cancellation, a byte-bounded cache of compiled constraints and refusals).
//
// Engine::submit() asks lookup() on the caller's thread: a cached outcome is used (or refused) at once, and a
// spec the cache does not hold is compiled with compile_async(). Every error names the request's constraint
// field ("constraint: ..."), so the transports report it as a refusal of that field.
//
// Thread-safe. compile_async()'s callback runs on a compiler thread (or the compiler's watcher) and must not
// block.
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/cancel.h"
#include "core/constrain/constraint.h"
#include "core/constrain/token_mask.h"
#include "core/generate/constraint_compiler.h"
#include "core/generate/engine_options.h"
#include "core/model/model_loader.h"

namespace frost {

// The vocabulary as constrained decoding sees it: each token's bytes; special tokens, BOS and the embedding's
// padding rows (ids past the tokenizer's vocabulary) never text; the model's EOS ids (else the tokenizer's)
// allowed once the output is complete. FAILED_PRECONDITION when the model has no tokenizer. Builds a trie
// over the vocabulary: milliseconds for 32k tokens.
absl::StatusOr<std::shared_ptr<const constrain::TokenVocab>> build_constraint_vocab(const LoadedModel& model);

class EngineConstraints {
 public:
  // `opt` checked (check_engine_options, engine_options.h); starts the compiler's threads.
  EngineConstraints(std::shared_ptr<const LoadedModel> model, const EngineOptions& opt);
  EngineConstraints(const EngineConstraints&) = delete;
  EngineConstraints& operator=(const EngineConstraints&) = delete;

  // What a constrained request starts with: the vocabulary its matcher walks (built on the first constrained
  // request, then shared) and, when the cache holds `spec`, the compiled constraint (null: compile_async()).
  // A cached refusal is the error, as is a model without a tokenizer.
  struct Lookup {
    std::shared_ptr<const constrain::TokenVocab> vocab;
    ConstraintCompiler::Compiled compiled;
  };
  absl::StatusOr<Lookup> lookup(const constrain::ConstraintSpec& spec);

  // ConstraintCompiler::compile_async, with every error — returned, or handed to `done` — naming the
  // constraint field.
  absl::Status compile_async(const constrain::ConstraintSpec& spec, std::shared_ptr<const CancelToken> cancel,
                             ConstraintCompiler::Done done);

  ConstraintCompilerStats stats() const { return compiler_.stats(); }
  // Stops every compile (their callbacks get CANCELLED) and refuses new ones. Idempotent.
  void shutdown() { compiler_.shutdown(); }

 private:
  absl::StatusOr<std::shared_ptr<const constrain::TokenVocab>> vocab();

  const std::shared_ptr<const LoadedModel> model_;
  ConstraintCompiler compiler_;
  absl::Mutex mu_;
  std::shared_ptr<const constrain::TokenVocab> vocab_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost
