#include "core/generate/engine_constraints.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/field_error.h"

namespace frost {
namespace {

// An error of the request's constraint (core/common/field_error.h), whichever field the transport took it
// from.
absl::Status named(const absl::Status& st) { return prefix_field(st, "constraint"); }

ConstraintCompilerOptions compiler_options(const EngineOptions& opt) {
  ConstraintCompilerOptions co;
  co.threads = opt.constraint_compile_threads;
  co.max_queued = opt.constraint_compile_queue;
  co.timeout_ms = opt.constraint_compile_timeout_ms;
  co.cache_bytes = opt.constraint_cache_bytes;
  return co;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const constrain::TokenVocab>> build_constraint_vocab(
    const LoadedModel& model) {
  const Tokenizer* tok = model.tokenizer.get();
  if (!tok) return absl::FailedPreconditionError("the model has no tokenizer");
  const auto n = static_cast<int32_t>(model.config.n_vocab);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> special(static_cast<size_t>(n), false);
  for (int32_t i = 0; i < n; ++i) {
    if (i >= tok->vocab_size()) {
      special[static_cast<size_t>(i)] = true;  // padding rows of the embedding: never text
      continue;
    }
    special[static_cast<size_t>(i)] = tok->is_special(i) || i == tok->bos_id();
    if (!special[static_cast<size_t>(i)]) bytes[static_cast<size_t>(i)] = tok->token_bytes(i);
  }
  std::vector<int32_t> eos;
  for (int64_t e : model.config.eos_ids)
    if (e >= 0 && e < n) eos.push_back(static_cast<int32_t>(e));
  if (eos.empty() && tok->eos_id() >= 0 && tok->eos_id() < n) eos.push_back(tok->eos_id());
  for (int32_t e : eos) special[static_cast<size_t>(e)] = true;
  return constrain::TokenVocab::create(std::move(bytes), std::move(special), std::move(eos));
}

EngineConstraints::EngineConstraints(std::shared_ptr<const LoadedModel> model, const EngineOptions& opt)
    : model_(std::move(model)), compiler_(compiler_options(opt)) {}

// Built once, on the first constrained request; a failure is not kept (every such request reports it).
absl::StatusOr<std::shared_ptr<const constrain::TokenVocab>> EngineConstraints::vocab() {
  absl::MutexLock l(&mu_);
  if (vocab_) return vocab_;
  absl::StatusOr<std::shared_ptr<const constrain::TokenVocab>> v = build_constraint_vocab(*model_);
  if (!v.ok()) return v.status();
  vocab_ = *std::move(v);
  return vocab_;
}

absl::StatusOr<EngineConstraints::Lookup> EngineConstraints::lookup(const constrain::ConstraintSpec& spec) {
  absl::StatusOr<std::shared_ptr<const constrain::TokenVocab>> v = vocab();
  if (!v.ok()) return named(v.status());
  Lookup out;
  out.vocab = *std::move(v);
  if (std::optional<ConstraintCompiler::Result> hit = compiler_.lookup(spec)) {
    if (!hit->ok()) return named(hit->status());
    out.compiled = **std::move(hit);
  }
  return out;
}

absl::Status EngineConstraints::compile_async(const constrain::ConstraintSpec& spec,
                                              std::shared_ptr<const CancelToken> cancel,
                                              ConstraintCompiler::Done done) {
  absl::Status st = compiler_.compile_async(spec, std::move(cancel),
                                            [done = std::move(done)](ConstraintCompiler::Result r) {
                                              if (!r.ok() && !field_error_of(r.status()))
                                                r = named(r.status());
                                              done(std::move(r));
                                            });
  return st.ok() ? st : named(st);
}

}  // namespace frost
