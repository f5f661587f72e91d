// Fuzz target: KVSplice files (core/kv/kvsplice.h load_served_kvsplice, kvsplice.safetensors as a kvsplice
// artifact or engine.kv_splice names it) on arbitrary bytes, for a model with 2 layers, 2 kv heads and
// head_dim 4 (the dimensions of the seed, corpus/kvsplice_file_fuzz/seed-*). The loader takes a path: the
// input is written to a tmpfs file per run.
// Promises checked: a rejection is INVALID_ARGUMENT; an accepted file has ranks within [1, d] and fast
// copies of those sizes, and the decode-path kernels (encode / absorb / expand_cols) run on every layer
// and kv group within the buffers their contract sizes.
#include <cstdint>
#include <string>
#include <vector>

#include "core/kv/kvsplice.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  const KvSpliceDims dims{/*n_layers=*/2, /*n_head_kv=*/2, /*head_dim=*/4};
  const std::string path =
      fuzz::fuzz_dir().write("kvsplice.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<std::shared_ptr<const KvSpliceSlot::Active>> a = load_served_kvsplice(path, dims, "fuzz", "model");
  if (!a.ok()) {
    fuzz::check_rejection(a.status());
    return 0;
  }
  const KvSpliceSet& set = *(*a)->set;
  const int64_t d = dims.d();
  FROST_FUZZ_CHECK(set.rank_k() >= 1 && set.rank_k() <= d && set.rank_v() >= 1 && set.rank_v() <= d, "ranks");
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    for (const KvSpliceFast* f : {&set.fast_k(l), &set.fast_v(l)}) {
      const int64_t r = f == &set.fast_k(l) ? set.rank_k() : set.rank_v();
      FROST_FUZZ_CHECK(f->d == d && f->r == r, "fast copy dimensions of layer " + std::to_string(l));
      std::vector<float> x(static_cast<size_t>(d), 0.5f), c(static_cast<size_t>(r)), tmp(static_cast<size_t>(d));
      f->encode(x.data(), c.data(), tmp.data());
      std::vector<float> qt(static_cast<size_t>(r)), out(static_cast<size_t>(dims.head_dim));
      for (int64_t g = 0; g < dims.n_head_kv; ++g) {
        f->absorb(x.data(), g * dims.head_dim, dims.head_dim, qt.data());
        f->expand_cols(c.data(), g * dims.head_dim, dims.head_dim, out.data());
      }
    }
  }
  return 0;
}
