#pragma once
// KV-cache corruption models, evaluation only (docs/kv_repair.md, "Pipeline, per attention layer": corrupt C(K, V) —
// gaussian noise, quantization, bit flips, zeroing; either fresh per step or persistent at write time).
//
// A "row" below is one run of D = x.size(-1) values: one token of one kv head.
//
//   gaussian:a   out = x + a · rms(row) · N(0, 1) per element, rms(row) = sqrt(mean(row²)).
//                A row whose rms is 0 or not finite gets no noise (it is returned bit-exact).
//                a ≥ 0 (finite).
//   quantize:b   symmetric round-to-nearest per row with b bits, no zero point, exactly as
//                core/kv/codec_quant.cc does it: Q = 2^(b-1) - 1, s = max|row| / Q,
//                out = s · clamp(round(x / s), -Q, Q). So quantize:8 == the int8 codec's decode and
//                quantize:4 == the int4 codec's decode. A row whose max |x| is 0 or not finite
//                decodes to zeros (as in the codec); NaN elements stay NaN. b is an integer in
//                2..16. Deterministic: the seed, stream and step do not matter.
//   bitflip:p    every bit of each element's IEEE-754 fp32 representation flips independently
//                with probability p in [0, 1]. Sign and exponent bits included by default, so a
//                flip can turn a value huge, Inf or NaN; that is part of the model and kept.
//                With bitflip_exclude_exponent (",exclude_exponent") only the 23 mantissa bits
//                and the sign bit can flip (p is then per eligible bit): finite inputs stay finite
//                and the magnitude changes by less than a factor of 2.
//   zero:f       each element is set to +0 independently with probability f in [0, 1]; the others
//                are unchanged (bit-exact).
//   none         identity (a bit-exact copy).
//
// Modes. corrupt() itself is the same function in both modes; the mode tells the KV pipeline how
// to use it. kFreshPerStep: the stored cache stays clean and the pipeline corrupts what attention
// reads at every decode step, passing that step, so each step draws new noise.
// kPersistentAtWrite: the pipeline corrupts the rows being written once, passing the first written
// position as `step`, and stores the result; later reads see the same corrupted values.
//
// Randomness: each call seeds its own at::CPUGeneratorImpl from a mix of (spec.seed, stream, step)
// and never touches the global RNG. The same triple gives bit-identical output. The generator keeps
// 32 bits of seed, so two different triples coincide with probability about 2^-32.
#include <cstdint>
#include <string>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"

namespace frost {

enum class CorruptionKind { kNone, kGaussian, kQuantize, kBitFlip, kZero };
enum class CorruptionMode { kFreshPerStep, kPersistentAtWrite };

struct CorruptionSpec {
  CorruptionKind kind = CorruptionKind::kNone;
  // gaussian: sigma relative to the row's RMS (≥ 0); quantize: bits (integer 2..16);
  // bitflip: probability per bit (0..1); zero: probability per element (0..1); none: unused (0).
  double amount = 0;
  CorruptionMode mode = CorruptionMode::kFreshPerStep;
  uint64_t seed = 0;
  bool bitflip_exclude_exponent = false;  // bitflip only: never flip the 8 exponent bits

  // Canonical text: "<kind>[:<amount>][,persistent][,seed=N][,exclude_exponent]". The amount is
  // written with the fewest digits that read back to the same double (an integer for quantize);
  // defaults (fresh, seed 0) are left out; exclude_exponent appears only for bitflip.
  // parse_corruption(s.to_string()) gives back s for every s that parse_corruption returns.
  std::string to_string() const;
};

const char* corruption_kind_name(CorruptionKind k);  // "none" | "gaussian" | "quantize" | "bitflip" | "zero"

// Parses "none" | "gaussian:A" | "quantize:B" | "bitflip:P" | "zero:F", optionally followed by
// comma-separated options: "persistent" or "fresh" (default), "seed=N" (unsigned 64-bit decimal),
// and for bitflip "exclude_exponent". Whitespace around parts is ignored; names are lowercase.
// Each option may appear once. Errors are INVALID_ARGUMENT naming the spec, the bad part and what
// is allowed, e.g. `kv corruption "quantize:17": bits 17 out of range (expected quantize:B with B an
// integer 2..16 bits)`.
absl::StatusOr<CorruptionSpec> parse_corruption(const std::string& text);

// Returns a new float32 tensor of x's shape (contiguous) holding C(x); x is not modified. x must be
// float32 with at least one dimension; its last dimension is the head dim D (e.g. [Hkv, T, D]).
// `stream` distinguishes K/V and layers (e.g. 2·layer + is_v), `step` the decode step (fresh per
// step) or write position (persistent). TORCH_CHECK fails on a wrong dtype or an invalid spec
// (amount out of range): both are programming errors, specs come from parse_corruption.
// Computed on the CPU; the result is on x's device.
at::Tensor corrupt(const at::Tensor& x, const CorruptionSpec& spec, uint64_t stream, uint64_t step);

}  // namespace frost
