#pragma once
// Long-lived, read-mostly buffers (the packed weights every decode step streams) in memory that the kernel
// may back with transparent huge pages.
//
// Why: a decode step reads every packed weight once (builtin:15m fp32: ~60 MB per token at batch 1, mostly
// the 37 MB logits matrix). LibTorch's allocator hands big tensors glibc's mmap'd chunks, 4 KiB pages unless
// THP is "always" (Debian's default is "madvise"), so the stream costs a TLB miss (a page walk, and in a VM a
// two-dimensional one) every 4 KiB. Measured on builtin:15m, 2 threads, a 2-vCPU EPYC VM with
// `frost-bench huge-pages` (the step's packed GEMMs over an arena copy and a LibTorch copy, alternated in one
// process, 5 runs): 1 row 1.06–1.29× faster, 32 rows 1.03–1.09×.
//
// How: slabs of kSlabBytes, 2 MiB aligned, advised MADV_HUGEPAGE and filled by a bump pointer (64-byte
// aligned pieces); a request of more than half a slab gets a mapping of its own. A slab is unmapped when the
// last tensor in it dies (each tensor's deleter holds it), so a model's packed weights go with the model; the
// space of a dead tensor inside a live slab is not reused (at most one slab is kept alive that way per
// hot swap). Best effort: where THP is off ("never"), or FROST_HUGE_PAGES=0 is set, it is ordinary memory.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace frost::kernels {

inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;
inline constexpr int64_t kSlabBytes = int64_t{32} << 20;

// A contiguous copy of t in the arena (same sizes, dtype, values). When huge_pages_enabled() is false it is
// t.contiguous() (which may be t itself). t must be a CPU tensor.
at::Tensor huge_page_copy(const at::Tensor& t);

// An uninitialised contiguous tensor of `sizes` / `options` in the arena (at::empty when huge pages are off), for
// a producer that writes every element itself (the packers: one pass instead of a build and a copy).
at::Tensor huge_page_empty(at::IntArrayRef sizes, const at::TensorOptions& options);

// False when the environment sets FROST_HUGE_PAGES=0 (read once): huge_page_copy then allocates through
// LibTorch as before (to compare, or for a host whose THP settings hurt).
bool huge_pages_enabled();

// The kernel's THP setting as /sys/kernel/mm/transparent_hugepage/enabled shows it ("always [madvise] never":
// the arena gets huge pages under "always" or "madvise"); empty where the file cannot be read.
std::string transparent_hugepage_mode();

struct HugePageStats {
  int64_t mappings = 0;      // slabs and own mappings alive
  int64_t bytes_mapped = 0;  // their size
};
HugePageStats huge_page_stats();

}  // namespace frost::kernels
