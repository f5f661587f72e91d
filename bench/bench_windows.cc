#include "bench/bench_windows.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/kv/repair_train.h"

namespace frost::bench {

absl::StatusOr<BenchWindows> load_bench_windows(const LoadedModel& m, const std::string& data, int64_t window,
                                                int64_t calib, int64_t eval, int64_t self_sample,
                                                uint64_t seed) {
  BenchWindows w;
  const int32_t bos = m.tokenizer->bos_id();
  if (data == "self") {
    FROST_ASSIGN_OR_RETURN(w.calib, sample_windows(*m.model, bos, calib, window, seed + 1));
    FROST_ASSIGN_OR_RETURN(w.eval, sample_windows(*m.model, bos, eval, window, seed + 2));
  } else {
    FROST_ASSIGN_OR_RETURN(auto tr, load_text_jsonl(data + "/train.jsonl"));
    FROST_ASSIGN_OR_RETURN(auto te, load_text_jsonl(data + "/test.jsonl"));
    FROST_ASSIGN_OR_RETURN(w.calib, make_text_windows(*m.tokenizer, tr, window, calib));
    FROST_ASSIGN_OR_RETURN(w.eval, make_text_windows(*m.tokenizer, te, window, eval));
  }
  if (self_sample > 0) {
    FROST_ASSIGN_OR_RETURN(auto s, sample_windows(*m.model, bos, self_sample, window, seed + 3));
    w.calib.insert(w.calib.end(), s.begin(), s.end());
  }
  if (w.calib.empty() || w.eval.empty())
    return absl::InvalidArgumentError(absl::StrCat("not enough text for one window of ", window, " tokens"));
  return w;
}

}  // namespace frost::bench
