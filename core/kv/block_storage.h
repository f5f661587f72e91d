#pragma once
// KvBlockStorage: where the bytes of a KV block pool live, apart from its books (core/kv/block_books.h).
//
// The books say which block a sequence holds; the storage says where block b's bytes are and how a sequence
// of a given KvSpec sits in a block (its KvLayout: positions per block, each layer's regions). Two kinds:
//  - host pages (HostKvStorage, below): one anonymous mapping; the CPU executor's codecs read and write it
//    through SequenceKv (core/kv/kv_pages.h). A block holds a fixed number of bytes, so compact codecs fit
//    proportionally more positions in it.
//  - device pages (core/exec/device_executor.h): memory only the device's executor reads and writes
//    (host_base() is null); the device's own layout fixes the block geometry (positions per block).
//
// Immutable after creation; the engine thread and the executor share it read-only.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv/kv_pages.h"
#include "core/kv/kv_spec.h"

namespace frost {

class KvBlockStorage {
 public:
  virtual ~KvBlockStorage() = default;
  virtual int64_t n_blocks() const = 0;
  virtual int64_t block_bytes() const = 0;
  // Block b's bytes start at host_base() + b · block_bytes(); nullptr when the blocks live in device memory.
  virtual uint8_t* host_base() const = 0;
  // How a sequence of `spec` sits in one block (block_tokens = 0 when not even one position fits).
  virtual KvLayout layout(const KvSpec& spec) const = 0;
  // "host" or the device's name ("cuda:0", "reference"), for logs and errors.
  virtual std::string where() const = 0;
};

// The size check every storage maker applies: INVALID_ARGUMENT naming the sizes unless 1 <= n_blocks <= 2^30
// and block_bytes >= 1.
absl::Status check_kv_pool_size(int64_t n_blocks, int64_t block_bytes);

// Host pages: n_blocks × block_bytes in one anonymous mapping (4 KiB-aligned, transparent huge pages where the
// kernel allows them). A sequence's layout is the densest that fits block_bytes (kv_paged_layout).
class HostKvStorage final : public KvBlockStorage {
 public:
  // INVALID_ARGUMENT for sizes check_kv_pool_size refuses; RESOURCE_EXHAUSTED when the memory cannot be
  // reserved. prefault: commit every page now (MADV_POPULATE_WRITE, else one write per page). Without it the
  // memory is only reserved and pages become resident as blocks are first written — which puts a page fault
  // (a 2 MiB huge page zeroed, or 54 small ones per 221 KiB block) inside the decode step that first writes a
  // block: measured on builtin:15m at 32 streams, ~1 ms of a ~9 ms step while the pool was still cold.
  // Committing up front also makes a memory limit too small for the pool fail at start instead of mid-serving.
  static absl::StatusOr<std::unique_ptr<HostKvStorage>> create(int64_t n_blocks, int64_t block_bytes,
                                                               bool prefault = false);
  ~HostKvStorage() override;
  HostKvStorage(const HostKvStorage&) = delete;
  HostKvStorage& operator=(const HostKvStorage&) = delete;

  int64_t n_blocks() const override { return n_blocks_; }
  int64_t block_bytes() const override { return block_bytes_; }
  uint8_t* host_base() const override { return base_; }
  KvLayout layout(const KvSpec& spec) const override;
  std::string where() const override { return "host"; }

 private:
  HostKvStorage(uint8_t* base, int64_t n_blocks, int64_t block_bytes)
      : base_(base), n_blocks_(n_blocks), block_bytes_(block_bytes) {}
  uint8_t* base_;
  int64_t n_blocks_, block_bytes_;
};

}  // namespace frost
