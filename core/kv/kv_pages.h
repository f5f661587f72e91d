#pragma once
// KV memory in blocks (vLLM's PagedAttention): where one sequence's rows live and how kernels find them.
//
// A block is a fixed number of bytes of a pool (core/kv/block_storage.h; its books: core/kv/block_books.h). A layout
// (KvLayout, below) decides how many positions one block holds — block_tokens, which depends on the
// codec: a block holds kv_block_tokens positions at fp32 and proportionally more for compact codecs, so
// an int4 cache really stores ~7x more tokens in the same memory — and where each layer's regions sit
// inside it. Position t of a sequence lives in block table[t / block_tokens], row t % block_tokens.
//
// Inside a block every layer has up to four regions (K rows, V rows, and for int8/int4 or int8 latents
// their fp32 scales). A region is [groups, block_tokens, row_bytes]: groups = kv heads for per-head rows
// (float, int8, int4), 1 for KVSplice latents (one row for all heads). Regions start 64-byte aligned.
// A standalone sequence (tests, jobs, Generator) has one private block of exactly its capacity: then the
// layout is the classic preallocated [Hkv, Tmax, D] per layer.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace frost {

// One region: rows of row_bytes, grouped [groups, block_tokens, row_bytes] at byte `off` of a block.
struct KvRegion {
  int64_t off = -1;  // -1: the codec has no such region
  int64_t groups = 0;
  int64_t row_bytes = 0;
  bool present() const { return off >= 0; }
};

// The regions of one layer's store (a layer, or an SBA layer's reverse store).
struct KvLayerFormat {
  KvRegion k, v;    // rows
  KvRegion ks, vs;  // per-row fp32 scales (quantised codecs), else absent
  int64_t bytes_per_token() const {
    int64_t b = 0;
    for (const KvRegion* r : {&k, &v, &ks, &vs})
      if (r->present()) b += r->groups * r->row_bytes;
    return b;
  }
};

// The positions a sequence holds, through its block table. Kernels read it; the owner (SequenceKv)
// grows and shrinks `table`.
//
// Sliding windows: a sequence whose every layer slides gives back the blocks no future query reads
// (SequenceKv::release_outside_window). They are always the first `released` entries of the table, which keeps
// its indexing by t / block_tokens and marks them kReleased (-1): positions below released_below() must never be
// read. Readers check holds_from(start) (kv_gather, the codecs' attend entry points) and read [start, n) only.
struct KvPages {
  static constexpr int32_t kReleased = -1;
  uint8_t* base = nullptr;   // the pool's storage: block b starts at base + b * block_bytes
  int64_t block_bytes = 0;   // bytes per block
  int64_t block_tokens = 0;  // positions per block (this sequence's layout)
  std::vector<int32_t> table;
  int64_t released = 0;  // the first `released` entries of table are kReleased
  int64_t capacity() const { return static_cast<int64_t>(table.size()) * block_tokens; }
  // The first position still held (0 unless a sliding window released blocks).
  int64_t released_below() const { return released * block_tokens; }
  bool holds_from(int64_t start) const { return start >= released * block_tokens; }
  int64_t blocks_held() const { return static_cast<int64_t>(table.size()) - released; }
  uint8_t* block_of(int64_t t) const {
    return base + static_cast<int64_t>(table[static_cast<size_t>(t / block_tokens)]) * block_bytes;
  }
};

// A read-only view of one region of one sequence for kernels (copied by value; valid while the table is
// unchanged). Row (g, t): block(t) + off + (g * block_tokens + t % block_tokens) * row_bytes.
struct KvPagedRows {
  const uint8_t* base = nullptr;
  const int32_t* table = nullptr;
  int64_t block_bytes = 0, block_tokens = 0;
  int64_t off = 0, row_bytes = 0;

  KvPagedRows() = default;
  KvPagedRows(const KvPages& p, const KvRegion& r)
      : base(p.base), table(p.table.data()), block_bytes(p.block_bytes), block_tokens(p.block_tokens),
        off(r.off), row_bytes(r.row_bytes) {}

  // Contiguous [groups, t_max, row_bytes] storage as one block (no pool): attend_one's caches and a codec's
  // decoded rows.
  static KvPagedRows contiguous(const void* base, int64_t t_max, int64_t row_bytes) {
    static const int32_t kFirstBlock = 0;
    KvPagedRows r;
    r.base = static_cast<const uint8_t*>(base);
    r.table = &kFirstBlock;
    r.block_tokens = t_max;
    r.row_bytes = row_bytes;
    return r;
  }

  const uint8_t* row(int64_t g, int64_t t) const {
    const int64_t b = t / block_tokens;
    return base + static_cast<int64_t>(table[b]) * block_bytes + off + (g * block_tokens + (t - b * block_tokens)) * row_bytes;
  }
  // Calls fn(first_row_ptr, t0, count) for the rows [0, n) of group g, one call per contiguous run (one
  // block); rows of a run are row_bytes apart.
  template <typename Fn>
  void for_runs(int64_t g, int64_t n, Fn&& fn) const {
    for (int64_t t0 = 0, b = 0; t0 < n; t0 += block_tokens, ++b) {
      const int64_t cnt = n - t0 < block_tokens ? n - t0 : block_tokens;
      fn(base + static_cast<int64_t>(table[b]) * block_bytes + off + g * block_tokens * row_bytes, t0, cnt);
    }
  }
  // The same for the rows [start, n) (a sliding window): the first run starts inside its block.
  template <typename Fn>
  void for_runs_from(int64_t g, int64_t start, int64_t n, Fn&& fn) const {
    for (int64_t t0 = start; t0 < n;) {
      const int64_t b = t0 / block_tokens, in = t0 - b * block_tokens;
      const int64_t cnt = n - t0 < block_tokens - in ? n - t0 : block_tokens - in;
      fn(base + static_cast<int64_t>(table[b]) * block_bytes + off + (g * block_tokens + in) * row_bytes, t0, cnt);
      t0 += cnt;
    }
  }
};

// How a sequence's layers sit in a block (see above).
struct KvLayout {
  int64_t block_bytes = 0;
  int64_t block_tokens = 0;
  std::vector<KvLayerFormat> layers;   // n_layer entries
  std::vector<KvLayerFormat> reverse;  // n_layer entries (absent regions) or empty: SBA reverse stores
  int64_t bytes_per_token() const;     // payload, all layers and reverse stores (no padding)
};

// Fills the offsets of `layers` / `reverse` (their groups and row_bytes set, offsets ignored) for the
// largest block_tokens whose regions fit block_bytes; block_tokens = 0 when not even one position fits.
KvLayout make_kv_layout(std::vector<KvLayerFormat> layers, std::vector<KvLayerFormat> reverse,
                        int64_t block_bytes);
// The layout of one block holding exactly `tokens` positions (a standalone sequence's single block).
KvLayout kv_layout_for_tokens(std::vector<KvLayerFormat> layers, std::vector<KvLayerFormat> reverse, int64_t tokens);
// Bytes of a block holding `tokens` positions of these formats (regions 64-byte aligned).
int64_t kv_block_bytes_for(const std::vector<KvLayerFormat>& layers, const std::vector<KvLayerFormat>& reverse,
                           int64_t tokens);

}  // namespace frost
