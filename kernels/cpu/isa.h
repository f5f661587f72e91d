#pragma once
// Which SIMD kernels this process runs, chosen at run time from what the CPU has (CPUID), so one binary
// runs on every x86-64 machine: the AVX-512 machines, the AVX2-only ones, and (slowly, but correctly) a
// baseline x86-64. Kernels written this way (kernels/cpu/gemm.cc) compile every variant with GCC's
// per-function target attributes and pick one per call through active_isa().
//
// The choice can be narrowed (never widened beyond the CPU) by the config (model.kernels) or, in tests and
// benchmarks, per call: every variant is held to the same scalar reference, bit for bit.
#include <cstdint>
#include <string>

namespace frost::kernels {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C (x86-64-v3)
  bool avx512 = false;       // AVX-512 F, BW, DQ, VL (x86-64-v4)
  bool avx512_vnni = false;  // VPDPBUSD
  bool avx512_bf16 = false;  // VDPBF16PS
};

const CpuFeatures& cpu_features();
// The widest variant this CPU runs.
Isa best_isa();
// The variant kernels run now: best_isa(), or what set_isa() narrowed it to.
Isa active_isa();
// Narrows the kernels to `isa`; false (nothing changed) when the CPU cannot run it. Process-wide; call it
// at start (frostd does, from model.kernels), not while kernels run.
bool set_isa(Isa isa);
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);  // "scalar" | "avx2" | "avx512"
// "auto" → best_isa(); false for an unknown name.
bool parse_isa(const std::string& name, Isa* out);

}  // namespace frost::kernels
