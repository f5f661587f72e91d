// Fuzz target: training job specs (core/jobs/job_spec.h) — the JSON a SubmitJob request carries and the
// journal stores — and the journal's progress records.
//
// Input: byte 0 picks the kind (prototype, kv_repair, kvsplice); the rest is the JSON text. Promises:
//   - spec_from_json rejects with INVALID_ARGUMENT; an accepted spec survives spec_to_json → spec_from_json
//     unchanged (the journal's round trip), and its JSON text is then stable;
//   - progress_from_json ("lenient") accepts or returns nullopt, and what it returns round-trips through
//     progress_to_json;
//   - config_entries_from_json never throws.
#include <cstdint>
#include <optional>
#include <string>

#include "core/jobs/job_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  if (size == 0) return 0;
  static const char* const kKinds[] = {"prototype", "kv_repair", "kvsplice"};
  const std::string kind = kKinds[data[0] % 3];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  absl::StatusOr<jobs::JobSpec> spec = jobs::spec_from_json(kind, text);
  if (!spec.ok()) {
    fuzz::check_rejection(spec.status());
  } else {
    FROST_FUZZ_CHECK(jobs::job_kind_name(*spec) == kind, "spec of another kind");
    const std::string j1 = jobs::spec_to_json(*spec);
    absl::StatusOr<jobs::JobSpec> back = jobs::spec_from_json(kind, j1);
    FROST_FUZZ_CHECK(back.ok(), "spec_to_json output is refused: " + back.status().ToString() + "\n" + j1);
    FROST_FUZZ_CHECK(*back == *spec, "spec changed in a to_json/from_json round trip: " + j1);
    FROST_FUZZ_CHECK(jobs::spec_to_json(*back) == j1, "spec_to_json is not stable: " + j1);
  }

  if (std::optional<jobs::JobProgress> p = jobs::progress_from_json(text)) {
    const std::string j = jobs::progress_to_json(*p);
    std::optional<jobs::JobProgress> q = jobs::progress_from_json(j);
    FROST_FUZZ_CHECK(q.has_value(), "progress_to_json output is refused: " + j);
    FROST_FUZZ_CHECK(*q == *p, "progress changed in a round trip: " + j);
  }

  (void)jobs::config_entries_from_json(text);
  return 0;
}
