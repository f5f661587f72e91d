#include "kernels/cpu/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

namespace frost::kernels {
namespace {

std::atomic<int64_t> g_mappings{0}, g_bytes_mapped{0};

// One 2 MiB-aligned anonymous mapping, advised for huge pages, unmapped with its last owner.
struct Mapping {
  uint8_t* base = nullptr;
  int64_t bytes = 0;

  explicit Mapping(int64_t want) {
    bytes = (want + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    // Over-reserve by one huge page and trim, so the start is 2 MiB aligned: THP backs only aligned 2 MiB
    // ranges that lie wholly inside an advised mapping.
    const size_t reserve = static_cast<size_t>(bytes + kHugePageBytes);
    void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const auto raw = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (raw + kHugePageBytes - 1) & ~static_cast<uintptr_t>(kHugePageBytes - 1);
    const size_t head = aligned - raw, tail = reserve - head - static_cast<size_t>(bytes);
    if (head) munmap(p, head);
    if (tail) munmap(reinterpret_cast<void*>(aligned + static_cast<uintptr_t>(bytes)), tail);
    base = reinterpret_cast<uint8_t*>(aligned);
    (void)madvise(base, static_cast<size_t>(bytes), MADV_HUGEPAGE);  // EINVAL where THP is compiled out
    g_mappings.fetch_add(1, std::memory_order_relaxed);
    g_bytes_mapped.fetch_add(bytes, std::memory_order_relaxed);
  }
  ~Mapping() {
    munmap(base, static_cast<size_t>(bytes));
    g_mappings.fetch_sub(1, std::memory_order_relaxed);
    g_bytes_mapped.fetch_sub(bytes, std::memory_order_relaxed);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

class Arena {
 public:
  // n bytes, 64-byte aligned, and the mapping that holds them.
  std::pair<uint8_t*, std::shared_ptr<Mapping>> allocate(int64_t n) {
    constexpr int64_t kAlign = 64;
    n = (std::max<int64_t>(n, 1) + kAlign - 1) / kAlign * kAlign;
    if (n > kSlabBytes / 2) {
      auto own = std::make_shared<Mapping>(n);
      return {own->base, own};
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!slab_ || used_ + n > slab_->bytes) {
      slab_ = std::make_shared<Mapping>(kSlabBytes);  // the old slab lives on in its tensors' deleters
      used_ = 0;
    }
    uint8_t* p = slab_->base + used_;
    used_ += n;
    return {p, slab_};
  }

 private:
  std::mutex mu_;
  std::shared_ptr<Mapping> slab_;
  int64_t used_ = 0;
};

Arena& arena() {
  static Arena* a = new Arena();  // never destroyed: tensors may outlive static destruction order
  return *a;
}

}  // namespace

bool huge_pages_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("FROST_HUGE_PAGES");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

at::Tensor huge_page_copy(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "huge_page_copy: need a CPU tensor, got ", t.device());
  if (!huge_pages_enabled()) return t.contiguous();
  const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
  auto [p, owner] = arena().allocate(bytes);
  at::Tensor out = at::from_blob(
      p, t.sizes(), [owner = std::move(owner)](void*) mutable { owner.reset(); }, t.options());
  out.copy_(t);
  return out;
}

at::Tensor huge_page_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (!huge_pages_enabled()) return at::empty(sizes, options);
  int64_t n = 1;
  for (int64_t d : sizes) n *= d;
  const int64_t bytes = n * static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  auto [p, owner] = arena().allocate(std::max<int64_t>(bytes, 1));
  return at::from_blob(p, sizes, [owner = std::move(owner)](void*) mutable { owner.reset(); }, options);
}

std::string transparent_hugepage_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line;
}

HugePageStats huge_page_stats() {
  return {g_mappings.load(std::memory_order_relaxed), g_bytes_mapped.load(std::memory_order_relaxed)};
}

}  // namespace frost::kernels
