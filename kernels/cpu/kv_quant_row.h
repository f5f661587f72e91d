#pragma once
// One head row of K or V → int8 / int4 with one fp32 scale: the definition the CPU KV codec
// (core/kv/codec_quant.cc) stores and the CUDA append kernel (kernels/cuda/ops.cu) reproduces bit for bit.
// Plain C++ (no LibTorch), so the GPU tests can hold the device's bytes to it on a machine without LibTorch.
//
// s = max_i |x_i| / Q with Q = 127 (int8) or 7 (int4); s = 0 for a row of zeros or a non-finite maximum;
// q_i = clamp(nearbyint(x_i · (1/s)), −Q, Q) (round half to even; 1/s = 0 when s = 0). int4 packs element
// 2j in the low nibble of byte j and 2j+1 in the high nibble, two's complement. Decoded: x̂_i = s · q_i.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace frost::kernels {

inline int kv_quant_max(int bits) { return bits == 8 ? 127 : 7; }

// Writes D (int8) or D/2 (int4) bytes to dst; returns the row's scale.
inline float kv_quantize_row(const float* x, int64_t d, int bits, uint8_t* dst) {
  float amax = 0;
  for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int qm = kv_quant_max(bits);
  const float s = amax > 0 && std::isfinite(amax) ? amax / static_cast<float>(qm) : 0.f;
  const float inv = s > 0 ? 1.f / s : 0.f;
  auto quant = [&](float xi) {
    const float r = std::nearbyint(xi * inv);
    return static_cast<int>(std::clamp(r, static_cast<float>(-qm), static_cast<float>(qm)));
  };
  if (bits == 8) {
    auto* q = reinterpret_cast<int8_t*>(dst);
    for (int64_t i = 0; i < d; ++i) q[i] = static_cast<int8_t>(quant(x[i]));
  } else {
    for (int64_t j = 0; j < d / 2; ++j) {
      const int lo = quant(x[2 * j]), hi = quant(x[2 * j + 1]);
      dst[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
  return s;
}

// Element i of a quantized row (the value before the scale).
inline int kv_quant_element(const uint8_t* row, int64_t i, int bits) {
  if (bits == 8) return reinterpret_cast<const int8_t*>(row)[i];
  const int b = row[i / 2];
  const int n = (i % 2 == 0) ? (b & 0xF) : ((b >> 4) & 0xF);
  return n >= 8 ? n - 16 : n;
}

}  // namespace frost::kernels
