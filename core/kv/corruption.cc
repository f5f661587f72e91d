// KV-cache corruption models (see corruption.h for the definitions and the choices made).
#include "core/kv/corruption.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/common/number_text.h"

namespace frost {
namespace {

constexpr const char* kKinds = "none|gaussian:A|quantize:B|bitflip:P|zero:F";
constexpr const char* kOptions = "persistent|fresh|seed=N|exclude_exponent";

// What each kind's amount means and its allowed range, for error messages.
const char* amount_help(CorruptionKind k) {
  switch (k) {
    case CorruptionKind::kNone: return "none takes no amount";
    case CorruptionKind::kGaussian: return "expected gaussian:A with A >= 0, the noise sigma relative to the row RMS";
    case CorruptionKind::kQuantize: return "expected quantize:B with B an integer 2..16 bits";
    case CorruptionKind::kBitFlip: return "expected bitflip:P with P in 0..1, the flip probability per bit";
    case CorruptionKind::kZero: return "expected zero:F with F in 0..1, the fraction of elements zeroed";
  }
  return "?";
}

// "" when `amount` is valid for `k`, else what is wrong (without the help text).
std::string amount_error(CorruptionKind k, double amount) {
  switch (k) {
    case CorruptionKind::kNone: return "";
    case CorruptionKind::kGaussian:
      if (!std::isfinite(amount) || amount < 0) return absl::StrCat("sigma ", amount, " out of range");
      return "";
    case CorruptionKind::kQuantize:
      if (!(amount >= 2 && amount <= 16) || amount != std::floor(amount))
        return absl::StrCat("bits ", amount, " out of range");
      return "";
    case CorruptionKind::kBitFlip:
      if (!(amount >= 0 && amount <= 1)) return absl::StrCat("probability ", amount, " out of range");
      return "";
    case CorruptionKind::kZero:
      if (!(amount >= 0 && amount <= 1)) return absl::StrCat("fraction ", amount, " out of range");
      return "";
  }
  return "unknown corruption kind";
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A local generator for (seed, stream, step). CPUGeneratorImpl's mt19937 keeps only the low 32
// bits of its seed, so the 64-bit mix is folded into them.
at::Generator make_local_generator(uint64_t seed, uint64_t stream, uint64_t step) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ stream);
  h = splitmix64(h ^ step);
  return at::make_generator<at::CPUGeneratorImpl>((h ^ (h >> 32)) & 0xffffffffULL);
}

// out = x + sigma · rms(row) · N(0, 1); rows with rms 0 or non-finite are copied.
at::Tensor apply_gaussian(const at::Tensor& x, double sigma, at::Generator& gen) {
  if (sigma == 0) return x.clone();
  at::Tensor rms = x.to(at::kDouble).square().mean(-1, /*keepdim=*/true).sqrt();
  at::Tensor ok = at::isfinite(rms).logical_and(rms > 0);
  at::Tensor scale = at::where(ok, rms * sigma, at::zeros_like(rms)).to(at::kFloat);
  at::Tensor noise = at::randn(x.sizes(), gen, x.options());  // at::randn takes gen's lock itself
  return at::where(ok, x + noise * scale, x);
}

// Symmetric per-row quantisation with the same float arithmetic as core/kv/codec_quant.cc.
at::Tensor apply_quantize(const at::Tensor& x, int bits) {
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t d = x.size(-1);
  if (d == 0 || x.numel() == 0) return out;
  const int64_t rows = x.numel() / d;
  const int qm = (1 << (bits - 1)) - 1;
  const float lo = static_cast<float>(-qm), hi = static_cast<float>(qm);
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = src + r * d;
      float* yr = dst + r * d;
      float amax = 0;
      for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(xr[i]));
      const float s = amax > 0 && std::isfinite(amax) ? amax / static_cast<float>(qm) : 0.f;
      const float inv = s > 0 ? 1.f / s : 0.f;
      for (int64_t i = 0; i < d; ++i) {
        if (std::isnan(xr[i])) {
          yr[i] = xr[i];
        } else if (s == 0) {
          yr[i] = 0.f;
        } else {
          // through int, as the codec stores it: a rounded −0 decodes to +0
          const int q = static_cast<int>(std::clamp(std::nearbyint(xr[i] * inv), lo, hi));
          yr[i] = static_cast<float>(q) * s;
        }
      }
    }
  });
  return out;
}

// Flips each eligible bit independently with probability p. The positions of the flips are drawn
// by geometric skipping (gap ~ Geometric(p) between flips over the numel · bits_per_element
// eligible bits), so the cost is O(numel + flips) rather than one draw per bit.
at::Tensor apply_bitflip(const at::Tensor& x, double p, bool exclude_exponent, at::Generator& gen) {
  at::Tensor out = x.clone(at::MemoryFormat::Contiguous);
  if (p <= 0 || out.numel() == 0) return out;
  // eligible bit j of an element: j < 23 → mantissa bit j; j == 23 → sign (exclude_exponent);
  // otherwise all 32 bits in order.
  const int64_t per = exclude_exponent ? 24 : 32;
  const double n_bits = static_cast<double>(out.numel()) * static_cast<double>(per);
  auto* words = reinterpret_cast<uint32_t*>(out.data_ptr<float>());
  static_assert(sizeof(float) == sizeof(uint32_t), "fp32 must be 32 bits");
  const double log_q = std::log1p(-p);  // −inf when p == 1: every gap is 0
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto* impl = gen.get<at::CPUGeneratorImpl>();
  int64_t pos = -1;  // last flipped bit
  while (true) {
    double gap = 0;
    if (p < 1) {
      const double u = static_cast<double>((impl->random64() >> 11) + 1) * 0x1p-53;  // (0, 1]
      gap = std::floor(std::log(u) / log_q);  // P(gap >= k) = (1 - p)^k
    }
    if (gap >= n_bits - 1 - static_cast<double>(pos)) break;
    pos += 1 + static_cast<int64_t>(gap);
    const int64_t elem = pos / per;
    int bit = static_cast<int>(pos % per);
    if (exclude_exponent && bit == 23) bit = 31;
    words[elem] ^= (1u << bit);
  }
  return out;
}

at::Tensor apply_zero(const at::Tensor& x, double f, at::Generator& gen) {
  if (f <= 0) return x.clone();
  at::Tensor u = at::rand(x.sizes(), gen, x.options().dtype(at::kDouble));  // takes gen's lock itself
  return x.masked_fill(u < f, 0.0);
}

}  // namespace

const char* corruption_kind_name(CorruptionKind k) {
  switch (k) {
    case CorruptionKind::kNone: return "none";
    case CorruptionKind::kGaussian: return "gaussian";
    case CorruptionKind::kQuantize: return "quantize";
    case CorruptionKind::kBitFlip: return "bitflip";
    case CorruptionKind::kZero: return "zero";
  }
  return "?";
}

std::string CorruptionSpec::to_string() const {
  std::string s = corruption_kind_name(kind);
  // Whole amounts (quantize bits, a noise of 100) print without exponent: "quantize:4", "gaussian:100".
  if (kind != CorruptionKind::kNone) absl::StrAppend(&s, ":", shortest_number_text(amount));
  if (mode == CorruptionMode::kPersistentAtWrite) absl::StrAppend(&s, ",persistent");
  if (seed != 0) absl::StrAppend(&s, ",seed=", seed);
  if (kind == CorruptionKind::kBitFlip && bitflip_exclude_exponent) absl::StrAppend(&s, ",exclude_exponent");
  return s;
}

absl::StatusOr<CorruptionSpec> parse_corruption(const std::string& text) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("kv corruption \"", text, "\": ", what));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  const absl::string_view head = absl::StripAsciiWhitespace(parts[0]);
  if (head.empty()) return bad(absl::StrCat("empty spec (expected ", kKinds, ")"));

  CorruptionSpec spec;
  const size_t colon = head.find(':');
  const absl::string_view name = absl::StripAsciiWhitespace(head.substr(0, colon));
  const bool has_amount = colon != absl::string_view::npos;
  const absl::string_view amount_text =
      has_amount ? absl::StripAsciiWhitespace(head.substr(colon + 1)) : absl::string_view();
  if (name == "none") {
    spec.kind = CorruptionKind::kNone;
  } else if (name == "gaussian") {
    spec.kind = CorruptionKind::kGaussian;
  } else if (name == "quantize") {
    spec.kind = CorruptionKind::kQuantize;
  } else if (name == "bitflip") {
    spec.kind = CorruptionKind::kBitFlip;
  } else if (name == "zero") {
    spec.kind = CorruptionKind::kZero;
  } else {
    return bad(absl::StrCat("unknown kind \"", name, "\" (expected ", kKinds, ")"));
  }

  if (spec.kind == CorruptionKind::kNone) {
    if (has_amount) return bad(absl::StrCat("unexpected amount \"", amount_text, "\" (none takes no amount)"));
  } else {
    if (amount_text.empty())
      return bad(absl::StrCat("missing amount for ", name, " (", amount_help(spec.kind), ")"));
    if (spec.kind == CorruptionKind::kQuantize) {
      int64_t bits = 0;
      if (!absl::SimpleAtoi(amount_text, &bits))
        return bad(absl::StrCat("bits \"", amount_text, "\" are not an integer (", amount_help(spec.kind), ")"));
      spec.amount = static_cast<double>(bits);
    } else {
      if (!absl::SimpleAtod(amount_text, &spec.amount) || !std::isfinite(spec.amount))
        return bad(absl::StrCat("amount \"", amount_text, "\" is not a finite number (", amount_help(spec.kind),
                                ")"));
    }
    if (std::string err = amount_error(spec.kind, spec.amount); !err.empty())
      return bad(absl::StrCat(err, " (", amount_help(spec.kind), ")"));
  }

  bool mode_seen = false, seed_seen = false, exclude_seen = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view opt = absl::StripAsciiWhitespace(parts[i]);
    if (opt == "persistent" || opt == "fresh") {
      if (mode_seen) return bad(absl::StrCat("mode given twice at \"", opt, "\" (persistent or fresh, once)"));
      mode_seen = true;
      spec.mode = opt == "persistent" ? CorruptionMode::kPersistentAtWrite : CorruptionMode::kFreshPerStep;
    } else if (absl::StartsWith(opt, "seed=")) {
      if (seed_seen) return bad("seed given twice");
      seed_seen = true;
      const absl::string_view v = opt.substr(5);
      if (v.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(v[0])) || !absl::SimpleAtoi(v, &spec.seed))
        return bad(absl::StrCat("seed \"", v, "\" is not an unsigned 64-bit decimal integer (expected seed=N)"));
    } else if (opt == "exclude_exponent") {
      if (spec.kind != CorruptionKind::kBitFlip)
        return bad(absl::StrCat("option exclude_exponent applies only to bitflip, not ", name));
      if (exclude_seen) return bad("exclude_exponent given twice");
      exclude_seen = true;
      spec.bitflip_exclude_exponent = true;
    } else if (opt.empty()) {
      return bad(absl::StrCat("empty option (expected ", kOptions, ")"));
    } else {
      return bad(absl::StrCat("unknown option \"", opt, "\" (expected ", kOptions, ")"));
    }
  }
  return spec;
}

at::Tensor corrupt(const at::Tensor& x, const CorruptionSpec& spec, uint64_t stream, uint64_t step) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "corrupt: expected a float32 tensor, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1, "corrupt: expected a tensor whose last dim is the head dim, got a scalar");
  const std::string err = amount_error(spec.kind, spec.amount);
  TORCH_CHECK(err.empty(), "corrupt: invalid spec ", spec.to_string(), ": ", err);
  // Computed on the CPU (the bit-level models need host memory); the result goes back to x's device.
  const at::Tensor xc = x.cpu().contiguous();
  at::Tensor out;
  switch (spec.kind) {
    case CorruptionKind::kNone:
      out = xc.clone();
      break;
    case CorruptionKind::kQuantize:
      out = apply_quantize(xc, static_cast<int>(spec.amount));
      break;
    case CorruptionKind::kGaussian: {
      at::Generator gen = make_local_generator(spec.seed, stream, step);
      out = apply_gaussian(xc, spec.amount, gen);
      break;
    }
    case CorruptionKind::kBitFlip: {
      at::Generator gen = make_local_generator(spec.seed, stream, step);
      out = apply_bitflip(xc, spec.amount, spec.bitflip_exclude_exponent, gen);
      break;
    }
    case CorruptionKind::kZero: {
      at::Generator gen = make_local_generator(spec.seed, stream, step);
      out = apply_zero(xc, spec.amount, gen);
      break;
    }
  }
  return out.to(x.device());
}

}  // namespace frost
