#include "core/kv/fisher.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace frost {
namespace {

constexpr double kRowSumTolerance = 1e-3;
constexpr double kNullRelative = 1e-10;

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&s, i ? ", " : "", t.size(i));
  return s + "]";
}

// Metrics from eigenvalues in ascending order (as LAPACK returns them).
FisherHeadMetrics metrics_from_ascending(const double* asc, int64_t t) {
  FisherHeadMetrics m;
  m.eigenvalues.resize(t);
  for (int64_t j = 0; j < t; ++j) m.eigenvalues[j] = std::max(0.0, asc[t - 1 - j]);
  const std::vector<double>& l = m.eigenvalues;
  m.energy.assign(t, 1.0);
  m.eigmax = l[0];
  if (m.eigmax <= 0) return m;  // the zero matrix: trace 0, cond = decay = 1, energy ≡ 1
  double trace = 0;
  for (double v : l) trace += v;
  m.trace = trace;
  int64_t k = 0;  // non-null eigenvalues
  while (k < t && l[k] > kNullRelative * m.eigmax) ++k;
  m.cond = m.eigmax / l[k - 1];
  m.decay = m.eigmax / l[std::min<int64_t>(5, k) - 1];
  double cum = 0;
  for (int64_t j = 0; j + 1 < t; ++j) {
    cum += l[j];
    m.energy[j] = std::min(1.0, cum / trace);
  }
  m.energy_r8 = m.energy[std::min<int64_t>(8, t) - 1];
  m.energy_r16 = m.energy[std::min<int64_t>(16, t) - 1];
  return m;
}

// Population mean and std of f(head) over heads.
template <typename F>
std::pair<double, double> mean_std(const std::vector<FisherHeadMetrics>& heads, F f) {
  const double n = static_cast<double>(heads.size());
  double mean = 0;
  for (const auto& h : heads) mean += f(h);
  mean /= n;
  double var = 0;
  for (const auto& h : heads) var += (f(h) - mean) * (f(h) - mean);
  return {mean, std::sqrt(var / n)};
}

FisherLayerMetrics layer_metrics(int64_t layer, const at::Tensor& mean_f) {
  const at::Tensor ev = at::linalg_eigvalsh(mean_f).contiguous();  // [H, T] ascending
  const int64_t h = ev.size(0), t = ev.size(1);
  FisherLayerMetrics lm;
  lm.layer = layer;
  const double* p = ev.data_ptr<double>();
  for (int64_t i = 0; i < h; ++i) lm.heads.push_back(metrics_from_ascending(p + i * t, t));
  std::tie(lm.eigmax_mean, lm.eigmax_std) = mean_std(lm.heads, [](const auto& m) { return m.eigmax; });
  std::tie(lm.trace_mean, lm.trace_std) = mean_std(lm.heads, [](const auto& m) { return m.trace; });
  std::tie(lm.cond_mean, lm.cond_std) = mean_std(lm.heads, [](const auto& m) { return m.cond; });
  std::tie(lm.energy_r8_mean, lm.energy_r8_std) =
      mean_std(lm.heads, [](const auto& m) { return m.energy_r8; });
  std::tie(lm.energy_r16_mean, lm.energy_r16_std) =
      mean_std(lm.heads, [](const auto& m) { return m.energy_r16; });
  std::tie(lm.decay_mean, lm.decay_std) = mean_std(lm.heads, [](const auto& m) { return m.decay; });
  lm.energy_mean.assign(t, 0.0);
  for (const auto& m : lm.heads)
    for (int64_t j = 0; j < t; ++j) lm.energy_mean[j] += m.energy[j] / static_cast<double>(h);
  lm.energy_mean[t - 1] = 1.0;  // exact, so a threshold of 1 is always met at r = T
  return lm;
}

// Σ_i (diag(p_i) − p_i p_iᵀ) of validated probs [H, T, T], rows renormalised, in double.
at::Tensor fisher_sum(const at::Tensor& probs) {
  at::Tensor p = probs.to(at::kCPU, at::kDouble);
  p = p / p.sum(-1, /*keepdim=*/true);
  return at::diag_embed(p.sum(1)) - at::bmm(p.transpose(1, 2), p);
}

absl::Status check_rank(int64_t r, int64_t t) {
  if (r < 1 || r > t)
    return absl::InvalidArgumentError(absl::StrCat("FIM rank must be in 1..", t, " (the window), got ", r));
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_attention_probs(const at::Tensor& probs, int64_t n_heads, int64_t window) {
  if (!probs.defined()) return absl::InvalidArgumentError("attention probs: undefined tensor");
  if (probs.dim() != 3 || probs.size(1) != probs.size(2) || probs.size(1) < 1 || probs.size(0) < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("attention probs must be [H, T, T] with H, T ≥ 1, got ", shape_str(probs)));
  if (!at::isFloatingType(probs.scalar_type()))
    return absl::InvalidArgumentError(absl::StrCat("attention probs must be floating point, got ",
                                                   std::string(c10::toString(probs.scalar_type()))));
  if (n_heads >= 0 && probs.size(0) != n_heads)
    return absl::InvalidArgumentError(
        absl::StrCat("attention probs have ", probs.size(0), " heads, expected ", n_heads));
  if (window >= 0 && probs.size(1) != window)
    return absl::InvalidArgumentError(absl::StrCat("attention probs have window T = ", probs.size(1),
                                                   ", but this accumulator's window is T = ", window));
  const at::Tensor p = probs.to(at::kCPU, at::kDouble);
  if (!at::isfinite(p).all().item<bool>())
    return absl::InvalidArgumentError("attention probs contain a non-finite value (NaN or Inf)");
  if ((p < 0).any().item<bool>())
    return absl::InvalidArgumentError("attention probs contain a negative value");
  const double worst = (p.sum(-1) - 1.0).abs().max().item<double>();
  if (worst > kRowSumTolerance)
    return absl::InvalidArgumentError(absl::StrCat("attention probs rows must sum to 1 (within ",
                                                   kRowSumTolerance, "); the worst row is off by ", worst));
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> window_fisher(const at::Tensor& probs) {
  if (absl::Status s = validate_attention_probs(probs); !s.ok()) return s;
  return fisher_sum(probs) / static_cast<double>(probs.size(1));
}

FisherHeadMetrics fisher_metrics(const at::Tensor& fisher) {
  TORCH_CHECK(fisher.dim() == 2 && fisher.size(0) == fisher.size(1) && fisher.size(0) >= 1,
              "fisher_metrics: need a square [T, T] matrix, got ", fisher.sizes());
  const at::Tensor ev = at::linalg_eigvalsh(fisher.to(at::kCPU, at::kDouble)).contiguous();
  return metrics_from_ascending(ev.data_ptr<double>(), ev.size(0));
}

at::Tensor fisher_top_eigenvectors(const at::Tensor& fisher, int64_t r) {
  TORCH_CHECK(fisher.dim() >= 2 && fisher.size(-1) == fisher.size(-2),
              "fisher_top_eigenvectors: need [.., T, T], got ", fisher.sizes());
  const int64_t t = fisher.size(-1);
  TORCH_CHECK(r >= 1 && r <= t, "fisher_top_eigenvectors: rank ", r, " outside 1..", t);
  at::Tensor vecs = std::get<1>(at::linalg_eigh(fisher.to(at::kCPU, at::kDouble)));  // ascending
  return vecs.narrow(-1, t - r, r).flip({-1}).contiguous();
}

// ---- FisherReport ----

absl::StatusOr<int64_t> FisherReport::suggested_rank(double threshold) const {
  if (!(threshold > 0 && threshold <= 1))
    return absl::InvalidArgumentError(absl::StrCat("energy threshold must be in (0, 1], got ", threshold));
  TORCH_CHECK(window >= 1 && !layers.empty(), "suggested_rank: empty report");
  for (int64_t r = 1; r <= window; ++r) {
    bool ok = true;
    for (const auto& l : layers) ok = ok && l.energy_mean[r - 1] >= threshold;
    if (ok) return r;
  }
  return window;  // unreachable: energy_mean[T − 1] = 1
}

absl::StatusOr<nlohmann::json> FisherReport::to_json(double threshold) const {
  absl::StatusOr<int64_t> r = suggested_rank(threshold);
  if (!r.ok()) return r.status();
  nlohmann::json j = {{"window", window},
                      {"windows", windows},
                      {"rows", rows},
                      {"threshold", threshold},
                      {"suggested_rank", *r}};
  nlohmann::json layers_j = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json lj = {{"layer", l.layer},
                         {"eigmax_mean", l.eigmax_mean},
                         {"eigmax_std", l.eigmax_std},
                         {"trace_mean", l.trace_mean},
                         {"trace_std", l.trace_std},
                         {"cond_mean", l.cond_mean},
                         {"cond_std", l.cond_std},
                         {"energy_r8_mean", l.energy_r8_mean},
                         {"energy_r8_std", l.energy_r8_std},
                         {"energy_r16_mean", l.energy_r16_mean},
                         {"energy_r16_std", l.energy_r16_std},
                         {"decay_mean", l.decay_mean},
                         {"decay_std", l.decay_std},
                         {"energy_mean", l.energy_mean}};
    nlohmann::json heads = nlohmann::json::array();
    for (size_t h = 0; h < l.heads.size(); ++h) {
      const FisherHeadMetrics& m = l.heads[h];
      heads.push_back({{"head", static_cast<int64_t>(h)},
                       {"eigmax", m.eigmax},
                       {"trace", m.trace},
                       {"cond", m.cond},
                       {"energy_r8", m.energy_r8},
                       {"energy_r16", m.energy_r16},
                       {"decay", m.decay},
                       {"energy", m.energy}});
    }
    lj["heads"] = std::move(heads);
    layers_j.push_back(std::move(lj));
  }
  j["layers"] = std::move(layers_j);
  return j;
}

// ---- FisherAccumulator ----

FisherAccumulator::FisherAccumulator(int64_t n_layers, int64_t n_heads)
    : n_heads_(n_heads), sums_(n_layers > 0 ? n_layers : 0), windows_(n_layers > 0 ? n_layers : 0, 0) {
  TORCH_CHECK(n_layers >= 1 && n_heads >= 1, "FisherAccumulator: need n_layers, n_heads ≥ 1, got ", n_layers,
              ", ", n_heads);
}

absl::Status FisherAccumulator::add(int64_t layer, const at::Tensor& probs) {
  if (layer < 0 || layer >= n_layers())
    return absl::InvalidArgumentError(
        absl::StrCat("Fisher accumulator: layer ", layer, " outside 0..", n_layers() - 1));
  if (absl::Status s = validate_attention_probs(probs, n_heads_, window_ > 0 ? window_ : -1); !s.ok())
    return s;
  const at::Tensor f = fisher_sum(probs);
  if (window_ == 0) window_ = probs.size(1);
  if (sums_[layer].defined())
    sums_[layer].add_(f);
  else
    sums_[layer] = f;
  ++windows_[layer];
  return absl::OkStatus();
}

int64_t FisherAccumulator::windows(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < n_layers(), "FisherAccumulator: layer ", layer, " out of range");
  return windows_[layer];
}

int64_t FisherAccumulator::rows(int64_t layer) const { return windows(layer) * window_; }

at::Tensor FisherAccumulator::mean_fisher(int64_t layer) const {
  TORCH_CHECK(windows(layer) > 0, "FisherAccumulator: layer ", layer, " has no window");
  return sums_[layer] / static_cast<double>(rows(layer));
}

absl::StatusOr<FisherReport> FisherAccumulator::finish() const {
  for (int64_t l = 0; l < n_layers(); ++l) {
    if (windows_[l] == 0)
      return absl::FailedPreconditionError(absl::StrCat("Fisher accumulator: layer ", l, " has no window"));
    if (windows_[l] != windows_[0])
      return absl::FailedPreconditionError(absl::StrCat("Fisher accumulator: layer ", l, " has ", windows_[l],
                                                        " windows but layer 0 has ", windows_[0]));
  }
  FisherReport rep;
  rep.window = window_;
  rep.windows = windows_[0];
  rep.rows = rows(0);
  for (int64_t l = 0; l < n_layers(); ++l) rep.layers.push_back(layer_metrics(l, mean_fisher(l)));
  return rep;
}

// ---- FimKvSplice ----

absl::StatusOr<FimKvSplice> FimKvSplice::from_accumulator(const FisherAccumulator& acc, int64_t rank) {
  for (int64_t l = 0; l < acc.n_layers(); ++l)
    if (acc.windows(l) == 0)
      return absl::FailedPreconditionError(
          absl::StrCat("FimKvSplice: layer ", l, " has no calibration window"));
  if (absl::Status s = check_rank(rank, acc.window()); !s.ok()) return s;
  std::vector<at::Tensor> fisher;
  for (int64_t l = 0; l < acc.n_layers(); ++l) fisher.push_back(acc.mean_fisher(l));
  return from_fisher(fisher, rank);
}

absl::StatusOr<FimKvSplice> FimKvSplice::from_fisher(const std::vector<at::Tensor>& fisher, int64_t rank) {
  if (fisher.empty()) return absl::InvalidArgumentError("FimKvSplice: no layers");
  std::vector<at::Tensor> basis;
  for (size_t l = 0; l < fisher.size(); ++l) {
    const at::Tensor& f = fisher[l];
    if (!f.defined() || f.dim() != 3 || f.size(1) != f.size(2) || f.size(0) < 1 || f.size(1) < 1 ||
        !at::isFloatingType(f.scalar_type()) || f.sizes() != fisher[0].sizes())
      return absl::InvalidArgumentError(absl::StrCat("FimKvSplice: layer ", l,
                                                     " Fisher must be [H, T, T] like layer 0 (",
                                                     shape_str(fisher[0]), "), got ", shape_str(f)));
    if (!at::isfinite(f).all().item<bool>())
      return absl::InvalidArgumentError(absl::StrCat("FimKvSplice: layer ", l, " Fisher is not finite"));
    if (absl::Status s = check_rank(rank, f.size(1)); !s.ok()) return s;
    basis.push_back(fisher_top_eigenvectors(f, rank));
  }
  return FimKvSplice(std::move(basis));
}

const at::Tensor& FimKvSplice::basis(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < n_layers(), "FimKvSplice: layer ", layer, " out of range");
  return basis_[layer];
}

at::Tensor FimKvSplice::compress(int64_t layer, const at::Tensor& x) const {
  const at::Tensor& u = basis(layer);
  TORCH_CHECK(x.dim() >= 3 && x.size(-3) == u.size(0) && x.size(-2) == u.size(1),
              "FimKvSplice::compress: need [.., H=", u.size(0), ", T=", u.size(1), ", D], got ", x.sizes());
  return at::matmul(u.transpose(-1, -2).to(x.scalar_type()), x);
}

at::Tensor FimKvSplice::expand(int64_t layer, const at::Tensor& c) const {
  const at::Tensor& u = basis(layer);
  TORCH_CHECK(c.dim() >= 3 && c.size(-3) == u.size(0) && c.size(-2) == u.size(2),
              "FimKvSplice::expand: need [.., H=", u.size(0), ", r=", u.size(2), ", D], got ", c.sizes());
  return at::matmul(u.to(c.scalar_type()), c);
}

// ---- per-window variant ----

absl::StatusOr<FimCompressed> fim_compress(const at::Tensor& k, const at::Tensor& probs, int64_t r) {
  absl::StatusOr<at::Tensor> f = window_fisher(probs);
  if (!f.ok()) return f.status();
  if (!k.defined() || k.dim() != 3 || k.size(0) != probs.size(0) || k.size(1) != probs.size(1))
    return absl::InvalidArgumentError(absl::StrCat("fim_compress: k must be [H, T, D] matching probs ",
                                                   shape_str(probs), ", got ",
                                                   k.defined() ? shape_str(k) : "undefined"));
  if (absl::Status s = check_rank(r, probs.size(1)); !s.ok()) return s;
  FimCompressed out;
  out.basis = fisher_top_eigenvectors(*f, r);
  out.c = at::matmul(out.basis.transpose(-1, -2).to(k.scalar_type()), k);
  return out;
}

at::Tensor fim_expand(const FimCompressed& compressed) {
  TORCH_CHECK(compressed.c.defined() && compressed.basis.defined() && compressed.c.dim() == 3 &&
                  compressed.c.size(0) == compressed.basis.size(0) &&
                  compressed.c.size(1) == compressed.basis.size(2),
              "fim_expand: inconsistent FimCompressed");
  return at::matmul(compressed.basis.to(compressed.c.scalar_type()), compressed.c);
}

}  // namespace frost
