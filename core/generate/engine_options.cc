// EngineOptions' field declarations and its one check (engine_options.h).
#include "core/generate/engine_options.h"

#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace frost {
namespace {

std::vector<ConfigField<SpeculativeOptions>> speculative_fields() {
  using C = SpeculativeOptions;
  using R = ConfigRange;
  // `server` is a request's word for "the default", not a default itself: the config offers three methods.
  return {
      enum_field<C>(
          "method", &C::method,
          std::vector<std::pair<std::string, SpecMethod>>{
              {"off", SpecMethod::kOff}, {"ngram", SpecMethod::kNgram}, {"suffix", SpecMethod::kSuffix}})
          .doc("speculative decoding for requests that do not choose (core/generate/spec_options.h)"),
      int_field<C>("num_tokens", &C::num_tokens, R::in(1, 32))
          .doc("most drafted tokens verified per sequence per step"),
      int_field<C>("max_batch", &C::max_batch, R::in(0, 65536))
          .doc("drafters run only while at most this many sequences decode in a step"),
      bool_field<C>("adaptive", &C::adaptive)
          .doc("draft a token only where its expected yield beats a verification row's cost"),
      bool_field<C>("jump_forward", &C::jump_forward)
          .doc("draft grammar-forced text of constrained requests"),
      int_field<C>("jump_forward_tokens", &C::jump_forward_tokens, R::in(0, 256))
          .doc("most grammar-forced tokens drafted per step"),
      int_field<C>("suffix_cache_tokens", &C::suffix_cache_tokens, R::in(0, int64_t{1} << 30))
          .doc("tokens of recent outputs the suffix drafter shares (0 = none)"),
  };
}

}  // namespace

std::vector<ConfigField<EngineOptions>> engine_option_fields() {
  using C = EngineOptions;
  using R = ConfigRange;
  constexpr double kInt32Max = std::numeric_limits<int32_t>::max();
  return fields_of<C>({
      {
          int_field<C>("max_running", &C::max_running, R::in(1, 65536)).doc("sequences in one step"),
          int_field<C>("max_waiting", &C::max_waiting, R::in(0, kInt32Max))
              .doc("requests waiting for a slot (more: RESOURCE_EXHAUSTED)"),
          int_field<C>("max_batch_tokens", &C::max_batch_tokens, R::in(1, 1 << 20))
              .doc("tokens in one step, decode rows and prompt chunks together (>= max_running)"),
          int_field<C>("kv_block_tokens", &C::kv_block_tokens, R::in(1, 4096)).doc("positions per KV block"),
          bytes_field<C>("kv_cache_bytes", &C::kv_cache_bytes,
                         R::in(0, static_cast<double>(int64_t{1} << 50)))
              .doc("KV pool size (0 = the executor's default for this model and max_running)"),
          bool_field<C>("kv_cache_prefault", &C::kv_cache_prefault)
              .doc("commit the KV pool's memory at start"),
          bool_field<C>("prefix_caching", &C::prefix_caching)
              .doc("reuse the KV blocks of shared prompt prefixes"),
          int_field<C>("constraint_compile_threads", &C::constraint_compile_threads, R::in(1, 64))
              .doc("threads compiling structured-output constraints"),
          int_field<C>("constraint_compile_queue", &C::constraint_compile_queue, R::in(0, 65536))
              .doc("constraints waiting to compile (more: RESOURCE_EXHAUSTED)"),
          int_field<C>("constraint_compile_timeout_ms", &C::constraint_compile_timeout_ms, R::in(1, 600000))
              .doc("most time a constraint compiles, and as long it waits"),
          bytes_field<C>("constraint_cache_bytes", &C::constraint_cache_bytes,
                         R::in(0, static_cast<double>(int64_t{1} << 40)))
              .doc("compiled constraints (and refusals) cached up to this size"),
      },
      group<C, SpeculativeOptions>("speculative", &C::speculative, speculative_fields()),
  });
}

absl::Status check_engine_options(const EngineOptions& o) {
  static const ConfigTable<EngineOptions> table("engine", engine_option_fields(), FieldStyle::kPath);
  if (absl::Status s = table.check(o); !s.ok()) return s;
  if (o.max_batch_tokens < o.max_running)
    return table.field_error("max_batch_tokens", std::to_string(o.max_batch_tokens),
                             absl::StrCat("must be >= engine.max_running (", o.max_running,
                                          ": every running sequence decodes one token per step)"));
  return absl::OkStatus();
}

}  // namespace frost
