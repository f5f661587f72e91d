#include "core/constrain/constraint.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/constrain/gbnf.h"
#include "core/constrain/json_schema.h"
#include "core/constrain/regex.h"

namespace frost::constrain {

const char* kind_name(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::kNone: return "none";
    case ConstraintSpec::Kind::kJsonSchema: return "json_schema";
    case ConstraintSpec::Kind::kJsonObject: return "json_object";
    case ConstraintSpec::Kind::kRegex: return "regex";
    case ConstraintSpec::Kind::kGrammar: return "grammar";
  }
  return "unknown";
}

std::shared_ptr<MaskCache> CompiledConstraint::mask_cache(const std::shared_ptr<const TokenVocab>& vocab) const {
  absl::MutexLock lock(&mu_);
  caches_.erase(std::remove_if(caches_.begin(), caches_.end(), [](const auto& e) { return e.first.expired(); }),
                caches_.end());
  for (const auto& [weak, cache] : caches_) {
    if (weak.lock() == vocab) return cache;
  }
  auto cache = std::make_shared<MaskCache>(cache_entries_);
  caches_.emplace_back(vocab, cache);
  return cache;
}

size_t CompiledConstraint::cached_mask_bytes() const {
  absl::MutexLock lock(&mu_);
  size_t b = 0;
  for (const auto& [weak, cache] : caches_) b += cache->stats().bytes;
  return b;
}

std::unique_ptr<Matcher> CompiledConstraint::matcher(std::shared_ptr<const TokenVocab> vocab) const {
  auto cache = mask_cache(vocab);
  return std::make_unique<Matcher>(grammar_, std::move(vocab), std::move(cache));
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compile_constraint(const ConstraintSpec& spec,
                                                                             const CompileLimits& limits,
                                                                             const CompileControl& control) {
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar;
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonSchema: grammar = compile_json_schema(spec.text, limits, control); break;
    case ConstraintSpec::Kind::kJsonObject: grammar = compile_json_object(limits, control); break;
    case ConstraintSpec::Kind::kRegex: grammar = compile_regex(spec.text, limits, control); break;
    case ConstraintSpec::Kind::kGrammar: grammar = parse_gbnf(spec.text, limits, control); break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("constraint kind '", kind_name(spec.kind), "' has nothing to compile"));
  }
  if (!grammar.ok()) return grammar.status();
  return std::shared_ptr<const CompiledConstraint>(
      std::make_shared<CompiledConstraint>(spec.kind, *std::move(grammar), limits.mask_cache_entries));
}

}  // namespace frost::constrain
