#include "kernels/cpu/isa.h"

#include <atomic>

namespace frost::kernels {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#if __GNUC__ >= 12
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
#endif
  return f;
}

std::atomic<int>& active() {
  static std::atomic<int> a{static_cast<int>(best_isa())};
  return a;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa best_isa() {
  const CpuFeatures& f = cpu_features();
  return f.avx512 ? Isa::kAvx512 : f.avx2 ? Isa::kAvx2 : Isa::kScalar;
}

Isa active_isa() { return static_cast<Isa>(active().load(std::memory_order_relaxed)); }

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(best_isa()); }

bool set_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

bool parse_isa(const std::string& name, Isa* out) {
  if (name == "auto") *out = best_isa();
  else if (name == "avx512") *out = Isa::kAvx512;
  else if (name == "avx2") *out = Isa::kAvx2;
  else if (name == "scalar") *out = Isa::kScalar;
  else return false;
  return true;
}

}  // namespace frost::kernels
