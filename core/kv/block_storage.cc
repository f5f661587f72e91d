#include "core/kv/block_storage.h"

#include <sys/mman.h>

#include "absl/strings/str_cat.h"
#include "core/kv/sequence_kv.h"

namespace frost {

absl::Status check_kv_pool_size(int64_t n_blocks, int64_t block_bytes) {
  if (n_blocks <= 0 || block_bytes <= 0 || n_blocks > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block pool: ", n_blocks, " blocks of ", block_bytes, " bytes is not a valid size"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostKvStorage>> HostKvStorage::create(int64_t n_blocks, int64_t block_bytes,
                                                                     bool prefault) {
  if (absl::Status st = check_kv_pool_size(n_blocks, block_bytes); !st.ok()) return st;
  const int64_t bytes = n_blocks * block_bytes;
  // Anonymous mapping, 4 KiB-aligned so every block's 64-byte-aligned regions stay aligned. Without prefault:
  // reserved address space (MAP_NORESERVE), pages committed on first write. With it: accounted against the
  // commit limit here (a strict-overcommit host refuses it now, cleanly) and populated below.
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prefault ? 0 : MAP_NORESERVE);
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV block pool: cannot reserve ", bytes, " bytes (", n_blocks, " blocks of ", block_bytes, ")"));
  }
  // Transparent huge pages where the kernel allows them (madvise mode): attention walks a sequence's blocks,
  // one TLB entry per 2 MiB instead of per 4 KiB page. Best effort.
  (void)madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  if (prefault) {
#ifdef MADV_POPULATE_WRITE
    const bool populated = madvise(p, static_cast<size_t>(bytes), MADV_POPULATE_WRITE) == 0;
#else
    const bool populated = false;
#endif
    if (!populated) {  // kernels before 5.14: touch every page (they read as zero either way)
      volatile uint8_t* b = static_cast<volatile uint8_t*>(p);
      for (int64_t off = 0; off < bytes; off += 4096) b[off] = 0;
    }
  }
  return std::unique_ptr<HostKvStorage>(new HostKvStorage(static_cast<uint8_t*>(p), n_blocks, block_bytes));
}

HostKvStorage::~HostKvStorage() { munmap(base_, static_cast<size_t>(n_blocks_ * block_bytes_)); }

KvLayout HostKvStorage::layout(const KvSpec& spec) const { return kv_paged_layout(spec, block_bytes_); }

}  // namespace frost
