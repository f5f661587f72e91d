// RoPE tables (core/model/rope.h): the inverse frequencies of each rope_scaling type, in fp32 as transformers'
// modeling_rope_utils computes them, then cos / sin of position × inverse frequency times the attention factor.
#include "core/model/rope.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace frost {
namespace {

// inv_freq[j] = 1 / theta^(2j / dim), j < dim / 2, in fp32 (HF: base ** (arange(0, dim, 2).float() / dim)).
at::Tensor default_inv_freq(double theta, int64_t dim) {
  return 1.0 / at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim));
}

// Llama 3.1's frequency-band scaling: wavelengths longer than original/low_freq_factor are divided by the
// factor, shorter than original/high_freq_factor kept, and the band between interpolated smoothly.
at::Tensor llama3_inv_freq(const at::Tensor& inv, const RopeScaling& s) {
  const double old_len = static_cast<double>(s.original_max_pos);
  const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
  const at::Tensor wavelen = 2 * M_PI / inv;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv / s.factor, inv);
  const at::Tensor smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = at::logical_not(wavelen < high_wavelen) * at::logical_not(wavelen > low_wavelen);
  return at::where(medium, smoothed, scaled);
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// YaRN: interpolated (÷ factor) below the correction range of beta_slow..beta_fast rotations over the original
// context, extrapolated (kept) above it, a linear ramp between. Sets *attention_factor when not given.
at::Tensor yarn_inv_freq(double theta, int64_t dim, const RopeScaling& s, double factor, double* attention) {
  const double orig = static_cast<double>(s.original_max_pos);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const at::Tensor pos_freqs = at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim));
  const at::Tensor extrapolation = 1.0 / pos_freqs;
  const at::Tensor interpolation = 1.0 / (factor * pos_freqs);
  const at::Tensor ramp = at::clamp((at::arange(dim / 2, at::kFloat) - low) / (high - low), 0, 1);
  const at::Tensor extrapolation_factor = 1 - ramp;
  if (s.attention_factor > 0) {
    *attention = s.attention_factor;
  } else if (s.mscale > 0 && s.mscale_all_dim > 0) {
    *attention = yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim);
  } else {
    *attention = yarn_mscale(factor, 1.0);
  }
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

}  // namespace

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kYarn: return "yarn";
    case RopeType::kLongRope: return "longrope";
  }
  return "?";
}

RopeTable make_rope_table(double theta, const RopeScaling& s, int64_t rotary_dim, int64_t max_pos,
                          int64_t max_position_embeddings) {
  TORCH_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rope: rotary_dim ", rotary_dim, " must be even and positive");
  const int64_t half = rotary_dim / 2;
  const at::Tensor positions = at::arange(max_pos, at::kLong).to(at::kFloat);
  double attention = 1.0;
  at::Tensor angles;  // [P, half]
  switch (s.type) {
    case RopeType::kDefault:
    case RopeType::kDynamic:  // unscaled within max_position_embeddings (rope.h)
      angles = at::outer(positions, default_inv_freq(theta, rotary_dim));
      break;
    case RopeType::kLinear:
      angles = at::outer(positions, default_inv_freq(theta, rotary_dim) / s.factor);
      break;
    case RopeType::kLlama3:
      angles = at::outer(positions, llama3_inv_freq(default_inv_freq(theta, rotary_dim), s));
      break;
    case RopeType::kYarn: {
      const double factor = s.factor > 0 ? s.factor
                                         : static_cast<double>(max_position_embeddings) /
                                               static_cast<double>(s.original_max_pos);
      angles = at::outer(positions, yarn_inv_freq(theta, rotary_dim, s, factor, &attention));
      break;
    }
    case RopeType::kLongRope: {
      TORCH_CHECK(static_cast<int64_t>(s.short_factor.size()) == half &&
                      static_cast<int64_t>(s.long_factor.size()) == half,
                  "rope: longrope factors must have rotary_dim / 2 = ", half, " entries");
      const double factor = s.factor > 0 ? s.factor
                                         : static_cast<double>(max_position_embeddings) /
                                               static_cast<double>(s.original_max_pos);
      attention = s.attention_factor > 0 ? s.attention_factor
                  : factor <= 1.0        ? 1.0
                                         : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(s.original_max_pos)));
      // inv_freq = 1 / (ext · theta^(2j/dim)), ext = short below original_max_pos, long from there (rope.h).
      const at::Tensor shape = at::arange(0, rotary_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(rotary_dim);
      const at::Tensor base = at::pow(theta, shape);
      const at::Tensor inv_short = 1.0 / (at::tensor(s.short_factor, at::kDouble).to(at::kFloat) * base);
      const at::Tensor inv_long = 1.0 / (at::tensor(s.long_factor, at::kDouble).to(at::kFloat) * base);
      const int64_t n_short = std::min(max_pos, s.original_max_pos);
      angles = at::cat({at::outer(positions.narrow(0, 0, n_short), inv_short),
                        at::outer(positions.narrow(0, n_short, max_pos - n_short), inv_long)},
                       0);
      break;
    }
  }
  RopeTable t;
  t.rotary_dim = rotary_dim;
  t.cos = angles.cos();
  t.sin = angles.sin();
  if (attention != 1.0) {
    t.cos = t.cos * attention;
    t.sin = t.sin * attention;
  }
  t.cos = t.cos.contiguous();
  t.sin = t.sin.contiguous();
  return t;
}

}  // namespace frost
