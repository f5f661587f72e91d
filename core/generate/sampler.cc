#include "core/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/common/check.h"
#include "kernels/cpu/exp.h"

namespace frost {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

// Argmax in one pass; ties → lowest id; NaN never wins; all -inf/NaN → 0. Sixteen independent lanes (lane l
// sees ids ≡ l mod 16, in increasing order, so each keeps its lowest-id maximum) as two 8-wide GCC vectors of
// values and of ids (compare and select, whatever the build's -march; GCC left the scalar form of the
// lanes unvectorised): 10.0 → 2.5 µs over 32,000 logits. sample_full takes its maximum from here too.
int32_t argmax(const float* x, int32_t n) {
  using Vec8f = float __attribute__((vector_size(32)));
  using Vec8i = int32_t __attribute__((vector_size(32)));
  constexpr int32_t kLanes = 16;
  Vec8f v0, v1;
  Vec8i i0, i1;
  const Vec8i step = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int32_t l = 0; l < 8; ++l) {
    v0[l] = v1[l] = kNegInf;
    i0[l] = i1[l] = -1;
  }
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec8f x0, x1;
    std::memcpy(&x0, x + i, sizeof x0);
    std::memcpy(&x1, x + i + 8, sizeof x1);
    const Vec8i gt0 = x0 > v0, gt1 = x1 > v1;
    v0 = gt0 ? x0 : v0;
    v1 = gt1 ? x1 : v1;
    i0 = gt0 ? step + i : i0;
    i1 = gt1 ? step + (i + 8) : i1;
  }
  float best_v[kLanes];
  int32_t best_i[kLanes];
  for (int32_t l = 0; l < 8; ++l) {
    best_v[l] = v0[l];
    best_v[l + 8] = v1[l];
    best_i[l] = i0[l];
    best_i[l + 8] = i1[l];
  }
  for (int32_t l = 0; i + l < n; ++l) {
    if (x[i + l] > best_v[l]) {
      best_v[l] = x[i + l];
      best_i[l] = i + l;
    }
  }
  int32_t best = -1;
  for (int32_t l = 0; l < kLanes; ++l) {
    if (best_i[l] < 0) continue;
    if (best < 0 || best_v[l] > x[best] || (best_v[l] == x[best] && best_i[l] < best)) {
      best = best_i[l];
    }
  }
  return best < 0 ? 0 : best;
}

// (value desc, id asc): a total order, so every standard library sorts candidates alike.
template <typename C>
bool before(const C& a, const C& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// Puts the (mid - first) first-ranked elements of [first, last) into [first, mid), sorted.
// A heap (partial_sort) is cheapest for a few; selection + introsort for many.
template <typename It>
void sort_prefix(It first, It mid, It last) {
  auto cmp = [](const auto& a, const auto& b) { return before(a, b); };
  if (mid - first <= 128) {
    std::partial_sort(first, mid, last, cmp);
  } else {
    std::nth_element(first, mid, last, cmp);
    std::sort(first, mid, cmp);
  }
}

}  // namespace

Sampler::Sampler(const SamplingParams& p, int32_t vocab_size)
    : temperature_(p.temperature),
      top_k_(p.top_k >= vocab_size ? 0 : p.top_k),
      top_p_(p.top_p),
      min_p_(p.min_p),
      repetition_penalty_(p.repetition_penalty),
      presence_penalty_(p.presence_penalty),
      frequency_penalty_(p.frequency_penalty),
      n_logprobs_(std::min(p.logprobs, vocab_size)),
      n_vocab_(vocab_size),
      greedy_(p.temperature == 0.0f || p.top_k == 1),
      seed_(p.seed.has_value() ? *p.seed : random_seed()),
      rng_(seed_) {
  FROST_DCHECK(vocab_size > 0);
  const auto n = static_cast<size_t>(vocab_size);
  if (repetition_penalty_ != 1.0f) in_context_.assign(n, 0);
  if (presence_penalty_ != 0.0f || frequency_penalty_ != 0.0f) gen_count_.assign(n, 0);
  penalize_ = !in_context_.empty() || !gen_count_.empty();
  if (penalize_) logits_.resize(n);
  if (!greedy_) cand_.resize(n);
  if (!greedy_ && top_k_ == 0 && top_p_ >= 1.0f && min_p_ <= 0.0f) {
    probs_.resize(n);
    block_sums_.resize((n + kBlock - 1) / kBlock);
  }
  if (n_logprobs_ > 0) top_buf_.resize(n);
}

void Sampler::add_prompt(absl::Span<const int32_t> ids) {
  if (in_context_.empty()) return;  // only repetition_penalty looks at the prompt
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab_ || in_context_[id]) continue;
    in_context_[id] = 1;
    context_ids_.push_back(id);
  }
}

const float* Sampler::penalized(const float* raw, const uint32_t* allowed) {
  // 1-3. Penalties (and a constraint's mask) work on a copy; without them the raw logits are read directly.
  if (!penalize_ && !allowed) return raw;
  if (logits_.size() != static_cast<size_t>(n_vocab_)) logits_.resize(static_cast<size_t>(n_vocab_));
  std::copy(raw, raw + n_vocab_, logits_.begin());
  if (allowed) {
    for (int32_t w = 0; w < (n_vocab_ + 31) / 32; ++w) {
      const uint32_t bits = allowed[w];
      if (bits == 0xFFFFFFFFu) continue;
      const int32_t end = std::min(n_vocab_, (w + 1) * 32);
      if (bits == 0) {  // most words of a JSON mask: a plain fill the compiler vectorises
        std::fill(logits_.begin() + w * 32, logits_.begin() + end, kNegInf);
        continue;
      }
      for (int32_t i = w * 32; i < end; ++i)
        if (!((bits >> (i - w * 32)) & 1u)) logits_[static_cast<size_t>(i)] = kNegInf;
    }
  }
  if (penalize_) apply_penalties(logits_.data());
  return logits_.data();
}

SampledToken Sampler::sample(const float* raw, const uint32_t* allowed) {
  SampledToken out;
  // A masked row with few allowed tokens, greedy or plain temperature: only those visited (sample_sparse, the
  // dense path's token); -1 sends the rest down the dense path.
  const bool sparse = allowed != nullptr && sparse_masks_ && !penalize_ && (greedy_ || !probs_.empty());
  out.id = sparse ? sample_sparse(raw, allowed) : -1;
  if (out.id < 0) {
    const float* logits = penalized(raw, allowed);
    if (greedy_) {
      // 4. Greedy: a single pass, no RNG.
      out.id = argmax(logits, n_vocab_);
    } else if (probs_.empty() || (out.id = sample_full(logits)) < 0) {
      // truncation, or degenerate logits: the general path (sample_full, when it applies, is the vectorised
      // plain temperature draw over the whole vocabulary)
      build_candidates(logits);
      out.id = draw_candidate();
    }
  }
  if (n_logprobs_ >= 0) fill_logprobs(raw, out);
  record(out.id);
  return out;
}

int32_t Sampler::sample_full(const float* logits) {
  // The maximum is argmax's (NaN never wins); all -inf / NaN gives logits[0], not finite: the general path.
  const float l_max = logits[argmax(logits, n_vocab_)];
  const float inv_t = 1.0f / temperature_;
  if (!std::isfinite(l_max) || !std::isfinite(inv_t)) return -1;  // the general path handles these
  // 5. p = exp((l − l_max) / T), NaN → 0 (kernels/cpu/exp.h)
  softmax::exp_shifted(logits, n_vocab_, l_max, inv_t, probs_.data());
  // 9. Inverse-CDF draw over ids in ascending order: block sums (double) locate the block, then the ids.
  double total = 0.0;
  const auto n_blocks = static_cast<int32_t>(block_sums_.size());
  for (int32_t b = 0; b < n_blocks; ++b) {
    // Eight independent partial sums (ids ≡ j mod 8, in order), then added in a fixed order: the same result
    // on every machine, and eight dependency chains instead of one (this pass was the draw's bottleneck).
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int32_t begin = b * kBlock, end = std::min(n_vocab_, (b + 1) * kBlock);
    int32_t i = begin;
    for (; i + 8 <= end; i += 8)
      for (int j = 0; j < 8; ++j) lane[j] += probs_[static_cast<size_t>(i + j)];
    for (int j = 0; i < end; ++i, ++j) lane[j] += probs_[static_cast<size_t>(i)];
    const double s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    block_sums_[static_cast<size_t>(b)] = s;
    total += s;
  }
  const double r = uniform01() * total;
  double cum = 0.0;
  for (int32_t b = 0; b < n_blocks; ++b) {
    if (cum + block_sums_[static_cast<size_t>(b)] <= r) {
      cum += block_sums_[static_cast<size_t>(b)];
      continue;
    }
    // Within the block, ids in order (a sum in another order than the block's: rounding may carry the draw
    // past the block's end, into the next one).
    const int32_t end = std::min(n_vocab_, (b + 1) * kBlock);
    for (int32_t i = b * kBlock; i < end; ++i) {
      cum += probs_[static_cast<size_t>(i)];
      if (cum > r) return i;
    }
  }
  // r rounded up to the total: the last id with weight (p_max == 1 exists, so there is one).
  for (int32_t i = n_vocab_ - 1; i > 0; --i)
    if (probs_[static_cast<size_t>(i)] > 0.0f) return i;
  return 0;
}

// Constrained rows (issue 54). A JSON mask usually leaves a few percent of the vocabulary (digits, a key's
// next characters, punctuation), and the dense path then spends most of its time on refused tokens: copying
// the row with their logits set to -inf, exponentiating them to 0 and adding those zeros. This path visits
// the allowed ids alone, in increasing order, and does for each exactly what the dense path does: argmax's
// rule for the maximum (strictly greater wins, so ties go to the lowest id; NaN never wins), the same
// exp_nonpositive (kernels/cpu/exp.h: its AVX-512 form, which the dense path runs, is bit-identical), the
// same per-block sums of eight lanes (ids ≡ j mod 8, increasing) added in the same order, the same walk to
// the drawn id. A refused id adds exactly +0.0 to each of those sums and never ends the walk (the walk stops
// where the running sum first exceeds r, which adding zero cannot cause), so leaving it out changes no bit:
// the same uniform gives the same token. Where more than 1/kSparseShare of the vocabulary is allowed (inside
// a free string) it answers -1 and the dense path runs: its vectorised passes over V beat a scalar loop over
// that many ids (the share is a choice, not a measured break-even: builtin:15m's digits are ~1/10 of V).
int32_t Sampler::sample_sparse(const float* raw, const uint32_t* allowed) {
  constexpr int32_t kSparseShare = 8;
  static_assert(kBlock % 8 == 0, "a block's lanes are its ids mod 8");
  const int32_t n_words = (n_vocab_ + 31) / 32;
  int32_t n = 0;
  for (int32_t w = 0; w < n_words; ++w) n += __builtin_popcount(allowed[w]);
  if (n > n_vocab_ / kSparseShare) return -1;
  sparse_ids_.clear();
  float l_max = kNegInf;
  int32_t best = -1;
  for (int32_t w = 0; w < n_words; ++w) {
    for (uint32_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
      const int32_t id = w * 32 + __builtin_ctz(bits);
      if (id >= n_vocab_) break;  // bits past V: the dense path never reads them either
      sparse_ids_.push_back(id);
      if (raw[id] > l_max) {
        l_max = raw[id];
        best = id;
      }
    }
  }
  // Every allowed logit -inf or NaN: the dense path's degenerate cases (argmax 0, the general path) decide.
  if (best < 0) return -1;
  if (greedy_) return best;
  const float inv_t = 1.0f / temperature_;
  if (!std::isfinite(l_max) || !std::isfinite(inv_t)) return -1;  // sample_full's general-path cases
  sparse_p_.resize(sparse_ids_.size());
  sparse_blocks_.clear();
  double total = 0.0;
  for (size_t k = 0; k < sparse_ids_.size();) {
    const int32_t b = sparse_ids_[k] / kBlock;
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const size_t begin = k;
    for (; k < sparse_ids_.size() && sparse_ids_[k] / kBlock == b; ++k) {
      const int32_t id = sparse_ids_[k];
      sparse_p_[k] = softmax::exp_nonpositive((raw[id] - l_max) * inv_t);
      lane[id % 8] += sparse_p_[k];  // kBlock is a multiple of 8: sample_full's lane of id is id % 8
    }
    const double s =
        ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    sparse_blocks_.push_back({begin, k, s});
    total += s;
  }
  const double r = uniform01() * total;
  double cum = 0.0;
  for (const SparseBlock& blk : sparse_blocks_) {
    if (cum + blk.sum <= r) {
      cum += blk.sum;
      continue;
    }
    for (size_t k = blk.begin; k < blk.end; ++k) {
      cum += sparse_p_[k];
      if (cum > r) return sparse_ids_[k];
    }
  }
  for (size_t k = sparse_ids_.size(); k-- > 0;)
    if (sparse_ids_[k] > 0 && sparse_p_[k] > 0.0f) return sparse_ids_[k];
  return 0;
}

void Sampler::plan_device_draw(bool* greedy, float* temperature, int32_t* top_k, float* top_p, float* min_p,
                               double* u) {
  *greedy = greedy_;
  *temperature = temperature_;
  *top_k = top_k_;
  *top_p = top_p_;
  *min_p = min_p_;
  *u = greedy_ ? 0.0 : uniform01();  // sample() draws exactly once per non-greedy token
}

SampledToken Sampler::accept_device_token(int32_t id) {
  SampledToken out;
  out.id = id;
  record(id);
  return out;
}

void Sampler::apply_penalties(float* logits) const {
  if (!in_context_.empty()) {
    // HF RepetitionPenaltyLogitsProcessor: once per distinct token.
    for (int32_t id : context_ids_) {
      const float v = logits[id];
      logits[id] = v > 0.0f ? v / repetition_penalty_ : v * repetition_penalty_;
    }
  }
  if (!gen_count_.empty()) {
    // OpenAI presence / frequency penalties over generated tokens.
    for (int32_t id : gen_ids_) {
      const auto count = static_cast<float>(gen_count_[id]);
      logits[id] -= presence_penalty_ + frequency_penalty_ * count;
    }
  }
}

void Sampler::build_candidates(const float* logits) {
  float l_max = kNegInf;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    const float v = std::isnan(logits[i]) ? kNegInf : logits[i];
    cand_[i] = Candidate{v, i};
    l_max = std::max(l_max, v);
  }
  n_cand_ = n_vocab_;
  cand_sorted_ = false;
  const auto begin = cand_.begin();

  // 6. top_k (temperature > 0 keeps the order, so selecting before scaling is equivalent).
  if (top_k_ > 0) {
    sort_prefix(begin, begin + top_k_, begin + n_cand_);
    n_cand_ = top_k_;
    cand_sorted_ = true;
  }

  // 5. Temperature and softmax numerators p = exp((l - l_max) / T), so p_max == 1 exactly
  // (top_k keeps the maximum).
  if (std::isfinite(l_max)) {
    const float inv_t = 1.0f / temperature_;
    if (std::isfinite(inv_t)) {
      for (int32_t i = 0; i < n_cand_; ++i) {
        cand_[i].value = softmax::exp_nonpositive((cand_[i].value - l_max) * inv_t);
      }
    } else {
      // A tiny T: dividing keeps (l_max - l_max) / T == 0 where 0 * inf would be NaN.
      for (int32_t i = 0; i < n_cand_; ++i) {
        cand_[i].value = std::exp((cand_[i].value - l_max) / temperature_);
      }
    }
  } else {
    // All -inf, or some +inf: the tokens at l_max share the mass.
    for (int32_t i = 0; i < n_cand_; ++i) cand_[i].value = cand_[i].value == l_max ? 1.0f : 0.0f;
  }

  // 7. top_p: sort lazily, only as far as the nucleus reaches (64, 256, 1024, ... tokens);
  // each step sorts the remainder, whose elements all rank below the sorted prefix.
  if (top_p_ < 1.0f) {
    double total = 0.0;
    for (int32_t i = 0; i < n_cand_; ++i) total += cand_[i].value;
    const double target = static_cast<double>(top_p_) * total;
    int32_t n_sorted = cand_sorted_ ? n_cand_ : 0;
    int32_t keep = n_cand_;  // if rounding never reaches the target: keep everything
    double cum = 0.0;
    for (int32_t i = 0; i < n_cand_; ++i) {
      if (i == n_sorted) {
        const int32_t next = std::min(n_cand_, std::max<int32_t>(64, n_sorted * 4));
        sort_prefix(begin + n_sorted, begin + next, begin + n_cand_);
        n_sorted = next;
      }
      cum += cand_[i].value;
      if (cum >= target) {
        keep = i + 1;
        break;
      }
    }
    n_cand_ = keep;
    cand_sorted_ = true;
  }

  // 8. min_p: p / p_max >= min_p with p_max == 1; the max itself always stays.
  if (min_p_ > 0.0f) {
    int32_t j = 0;
    for (int32_t i = 0; i < n_cand_; ++i) {
      if (cand_[i].value >= min_p_) cand_[j++] = cand_[i];  // stable: keeps the order
    }
    n_cand_ = j;
  }
}

int32_t Sampler::draw_candidate() {
  // 9. Inverse-CDF draw over the live candidates in their current order.
  double total = 0.0;
  for (int32_t i = 0; i < n_cand_; ++i) total += cand_[i].value;
  const double r = uniform01() * total;
  double cum = 0.0;
  for (int32_t i = 0; i < n_cand_; ++i) {
    cum += cand_[i].value;
    if (cum > r) return cand_[i].id;
  }
  // r rounded up to the total: the last candidate with weight.
  for (int32_t i = n_cand_ - 1; i > 0; --i) {
    if (cand_[i].value > 0.0f) return cand_[i].id;
  }
  return cand_[0].id;
}

void Sampler::record(int32_t id) {
  if (id < 0 || id >= n_vocab_) return;
  if (!in_context_.empty() && !in_context_[id]) {
    in_context_[id] = 1;
    context_ids_.push_back(id);
  }
  if (!gen_count_.empty() && gen_count_[id]++ == 0) gen_ids_.push_back(id);
}

void Sampler::fill_logprobs(const float* raw, SampledToken& out) {
  // log_softmax of the raw logits in double: x_i - m - log(sum_j exp(x_j - m)).
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < n_vocab_; ++i) {
    if (raw[i] > m) m = raw[i];  // NaN never compares greater
  }
  const bool finite = std::isfinite(m);
  // Shifted logit; with no finite max (all -inf / NaN, or some +inf) the tokens at the max
  // share the mass equally.
  auto shifted = [&](int32_t i) -> double {
    const double v = raw[i];
    if (finite) return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v - m;
    return v == m ? 0.0 : -std::numeric_limits<double>::infinity();
  };
  double sum = 0.0;
  for (int32_t i = 0; i < n_vocab_; ++i) sum += std::exp(shifted(i));
  const double log_sum = std::log(sum);
  out.logprob = static_cast<float>(shifted(out.id) - log_sum);
  if (n_logprobs_ <= 0) return;

  for (int32_t i = 0; i < n_vocab_; ++i) {
    top_buf_[i] = Candidate{static_cast<float>(shifted(i) - log_sum), i};
  }
  sort_prefix(top_buf_.begin(), top_buf_.begin() + n_logprobs_, top_buf_.end());
  out.top.reserve(static_cast<size_t>(n_logprobs_));
  for (int32_t i = 0; i < n_logprobs_; ++i) {
    out.top.push_back(TokenLogprob{top_buf_[i].id, top_buf_[i].value});
  }
}

double Sampler::uniform01() {
  // The top 53 bits of one mt19937_64 output, scaled to [0, 1): exact and portable.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

}  // namespace frost
