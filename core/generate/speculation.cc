#include "core/generate/speculation.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"

namespace frost {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kServer:
      return "server";
    case SpecMethod::kOff:
      return "off";
    case SpecMethod::kNgram:
      return "ngram";
    case SpecMethod::kSuffix:
      return "suffix";
  }
  return "?";
}

void RoundCost::observe(int64_t rows, double seconds, double draft_seconds) {
  constexpr double kDecay = 0.99;
  const auto x = static_cast<double>(rows);
  d_ = kDecay * d_ + (1 - kDecay) * draft_seconds;
  seconds = std::max(0.0, seconds - draft_seconds);
  // A round the OS preempted (a time slice lost to another process: milliseconds against a round of tens of
  // microseconds) would pull a least-squares fit anywhere for the ~50 rounds it weighs in; on a busy machine
  // such rounds made b look as large as a round, θ → 1 and speculation stop. Once fitted, a round over
  // kOutlier times what the fit predicts for it is left out, unless kStreak rounds in a row are: then the
  // cost itself changed, and the fit follows it. (Clamping such rounds to kOutlier× instead still moved b by
  // half.)
  constexpr double kOutlier = 2.0;
  constexpr int kStreak = 8;
  if (const std::optional<Fit> f = fit();
      f && seconds > kOutlier * (f->a + f->b * x) && ++outliers_ < kStreak)
    return;
  outliers_ = 0;
  w_ = kDecay * w_ + 1;
  sx_ = kDecay * sx_ + x;
  sy_ = kDecay * sy_ + seconds;
  sxx_ = kDecay * sxx_ + x * x;
  sxy_ = kDecay * sxy_ + x * seconds;
  syy_ = kDecay * syy_ + seconds * seconds;
}

// Fitted when the rows varied (drafts, prompt chunks) and the slope stands out of the noise: b > 2 standard
// errors (s² / (w · var(rows)), s² the residual variance, w the weights' sum as the sample size). Without the
// second test a busy machine's noise made a fit (issue 54): at 32 streams the rows vary by a draft row or
// two, round times by 10% and more when other work runs, and the slope of that noise — often near 0 or
// negative, clamped to 1e-9 — said rows were free, θ fell to ~0, and jump-forward drafted a quarter more rows
// at an acceptance of 0.3% (builtin:15m over HTTP). A fit the noise swamps keeps the last one, or the
// fallback.
std::optional<RoundCost::Fit> RoundCost::fit() const {
  if (w_ < 8) return std::nullopt;
  const double mx = sx_ / w_, my = sy_ / w_;
  const double var_x = sxx_ / w_ - mx * mx;
  if (var_x <= 0.05) return std::nullopt;
  const double cov = sxy_ / w_ - mx * my;
  const double resid = std::max(0.0, syy_ / w_ - my * my - cov * cov / var_x);
  if (!(cov > 0 && cov * cov * w_ > 4 * resid * var_x)) return std::nullopt;
  Fit f;
  f.b = std::max(1e-9, cov / var_x);
  f.a = std::max(0.0, my - f.b * mx);
  return f;
}

double RoundCost::per_row_s() const {
  const std::optional<Fit> f = fit();
  return f ? f->b : 0.0;
}

double RoundCost::fixed_s() const {
  const std::optional<Fit> f = fit();
  return f ? f->a : 0.0;
}

double RoundCost::threshold(int64_t seqs, int64_t rows, double fallback) {
  if (const std::optional<Fit> f = fit()) {
    a_ = f->a;
    b_ = f->b;
  }
  if (a_ < 0 || seqs <= 0) return fallback;
  return std::min(
      1.0, static_cast<double>(seqs) * b_ / (a_ + d_ + b_ * static_cast<double>(std::max(rows, seqs))));
}

Speculation::Speculation(SpecMethod method, int32_t k, int32_t vocab_size, const SuffixCache* shared)
    : method_(method), k_(std::max(1, k)) {
  if (method == SpecMethod::kSuffix) {
    SuffixOptions o;
    o.max_depth = kSuffixDepth;
    o.max_match = kSuffixDepth - 1;
    o.vocab_size = vocab_size;
    drafter_ = std::make_unique<SuffixDrafter>(o, shared);
  } else if (method == SpecMethod::kNgram) {
    PromptLookupOptions o;
    o.vocab_size = vocab_size;
    drafter_ = std::make_unique<PromptLookupDrafter>(o);
  }
}

int32_t Speculation::length(double theta) {
  const double alpha = acceptance();
  int32_t n = 0;
  for (double p = alpha; n < k_ && p > theta; p *= alpha) ++n;
  if (n > 0) {
    since_probe_ = 0;
    return n;
  }
  if (++since_probe_ < probe_gap_) return 0;
  since_probe_ = 0;
  return 1;  // a probe: one token, so α can learn that the text became predictable
}

void Speculation::propose(absl::Span<const int32_t> tokens, int32_t n, std::vector<int32_t>* out) {
  out->clear();
  if (drafter_) drafter_->propose(tokens, n, out);  // n = 0 only syncs the index
}

void Speculation::record(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  constexpr double kDecay = 0.7;  // per verified draft: the last few drafts dominate
  acc_ = kDecay * acc_ + accepted;
  tot_ = kDecay * tot_ + drafted;
  probe_gap_ = accepted > 0 ? 4 : std::min(64, 2 * probe_gap_);
}

}  // namespace frost
