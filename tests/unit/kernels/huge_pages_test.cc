// kernels/cpu/huge_pages.h: the arena that holds the packed weights — copies are exact and independent of
// their source, aligned for the SIMD kernels, live as long as their tensors (slabs and big mappings are
// unmapped with their last tensor), and the memory is advised for transparent huge pages where the kernel
// offers them, so the packed matrices the GEMM streams (pack_matrix / pack_quantized) sit in
// huge-page-eligible mappings.
#include "kernels/cpu/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"

namespace frost::kernels {
namespace {

// The smaps block of the mapping that holds `p`: its "THPeligible:" value (-1: no such field or mapping).
int thp_eligible(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

// True when this kernel's THP mode lets an madvise'd mapping have huge pages ("always" or "madvise").
bool thp_available() {
  const std::string mode = transparent_hugepage_mode();
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

TEST(HugePagesTest, CopyIsExactAlignedAndIndependent) {
  for (const at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kByte, at::kChar}) {
    const at::Tensor src = (at::randn({37, 301}) * 50).to(dt);
    const at::Tensor strided = src.t();  // not contiguous: the copy must still be
    for (const at::Tensor& t : {src, strided}) {
      at::Tensor c = huge_page_copy(t);
      ASSERT_EQ(c.scalar_type(), dt);
      ASSERT_EQ(c.sizes(), t.sizes());
      ASSERT_TRUE(c.is_contiguous());
      ASSERT_TRUE(at::equal(c, t)) << dt;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data_ptr()) % 64, 0u);
      if (huge_pages_enabled()) {
        EXPECT_NE(c.data_ptr(), t.data_ptr());
        c.fill_(0);  // writing the copy leaves the source alone
        EXPECT_FALSE(at::equal(c, t)) << dt;
      }
    }
  }
}

TEST(HugePagesTest, EmptyAndScalarTensors) {
  const at::Tensor e = huge_page_copy(at::empty({0, 32}));
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.sizes(), at::IntArrayRef({0, 32}));
  const at::Tensor s = huge_page_copy(at::scalar_tensor(3.5));
  EXPECT_EQ(s.item<double>(), 3.5);
}

TEST(HugePagesTest, MappingsLiveAsLongAsTheirTensors) {
  if (!huge_pages_enabled()) GTEST_SKIP() << "FROST_HUGE_PAGES=0";
  const HugePageStats before = huge_page_stats();
  {  // more than half a slab: a mapping of its own, rounded up to 2 MiB, gone with its tensor
    const int64_t n = kSlabBytes / 4 / 2 + 1000;  // floats
    at::Tensor big = huge_page_copy(at::arange(n, at::kFloat));
    const HugePageStats with = huge_page_stats();
    EXPECT_EQ(with.mappings, before.mappings + 1);
    EXPECT_EQ(with.bytes_mapped - before.bytes_mapped,
              (n * 4 + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data_ptr()) % kHugePageBytes, 0u);
    EXPECT_EQ(big[n - 1].item<float>(), static_cast<float>(n - 1));
  }
  EXPECT_EQ(huge_page_stats().mappings, before.mappings);
  EXPECT_EQ(huge_page_stats().bytes_mapped, before.bytes_mapped);

  // Small pieces share slabs: fill three slabs' worth, drop every other tensor, and the rest keep their
  // values; once all are gone, at most the arena's current slab is left.
  std::vector<at::Tensor> pieces;
  const int64_t piece = int64_t{1} << 20;  // floats: 4 MiB each, 8 per slab
  for (int64_t i = 0; i < 3 * kSlabBytes / (4 * piece); ++i)
    pieces.push_back(huge_page_copy(at::full({piece}, float(i))));
  EXPECT_GE(huge_page_stats().mappings, before.mappings + 2);
  for (size_t i = 0; i < pieces.size(); i += 2) pieces[i] = at::Tensor();
  for (size_t i = 1; i < pieces.size(); i += 2) {
    ASSERT_EQ(pieces[i].min().item<float>(), float(i));
    ASSERT_EQ(pieces[i].max().item<float>(), float(i));
  }
  pieces.clear();
  EXPECT_LE(huge_page_stats().mappings, before.mappings + 1);
}

TEST(HugePagesTest, PackedWeightsSitInHugePageEligibleMemory) {
  if (!huge_pages_enabled()) GTEST_SKIP() << "FROST_HUGE_PAGES=0";
  if (!thp_available()) GTEST_SKIP() << "transparent huge pages are off on this kernel";
  // A logits-sized matrix (builtin:15m: 32000 × 288) and a layer-sized one, fp32 and int8.
  const at::Tensor head = at::randn({32000, 288}), layer = at::randn({864, 288});
  const PackedMatrix ph = pack_matrix(head), pl = pack_matrix(layer);
  const PackedMatrix q8 = pack_quantized(quantize_int8(layer, 32));
  for (const PackedMatrix* pm : {&ph, &pl, &q8}) {
    const int e = thp_eligible(pm->panels.data_ptr());
    if (e < 0) GTEST_SKIP() << "this kernel's smaps has no THPeligible field";
    EXPECT_EQ(e, 1) << pack_format_name(pm->format);
  }
  EXPECT_EQ(thp_eligible(q8.scales.data_ptr()), 1);
  // An ordinary LibTorch tensor of the same size is not (madvise mode), which is why the arena exists; in
  // "always" mode it may be.
  if (transparent_hugepage_mode().find("[madvise]") != std::string::npos) {
    const at::Tensor plain = head.clone();
    EXPECT_EQ(thp_eligible(plain.data_ptr()), 0);
  }
}

}  // namespace
}  // namespace frost::kernels
