// Fuzz target: KV repair operator files (core/kv/repair_set.h load_served_repair, repair.safetensors as a
// kv_repair artifact or engine.kv_repair names it) on arbitrary bytes, for a model with head_dim 8, 2 heads
// and 3 layers (the dimensions of the seed, corpus/repair_file_fuzz/seed-*). The loader takes a path: the
// input is written to a tmpfs file per run.
// Promises checked: a rejection is INVALID_ARGUMENT; an accepted file gives protected layers within the
// model with fast copies of the file's rank, and the decode-path operator (Fast::query / output) runs on
// every head within the buffers its contract sizes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/kv/repair_set.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  const RepairDims dims{/*head_dim=*/8, /*n_heads=*/2, /*n_layers=*/3};
  const std::string path =
      fuzz::fuzz_dir().write("repair.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> a = load_served_repair(path, dims, "fuzz", "model");
  if (!a.ok()) {
    fuzz::check_rejection(a.status());
    return 0;
  }
  const RepairSet& set = *(*a)->set;
  FROST_FUZZ_CHECK(!set.layers().empty(), "no protected layers");
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    const bool protected_layer = std::find(set.layers().begin(), set.layers().end(), l) != set.layers().end();
    FROST_FUZZ_CHECK((set.fast(l) != nullptr) == protected_layer, "fast copy of layer " + std::to_string(l));
    const RepairLayer::Fast* f = set.fast(l);
    if (f == nullptr) continue;
    FROST_FUZZ_CHECK(f->d == dims.head_dim && f->r == set.cfg().rank, "fast copy dimensions");
    std::vector<float> q(static_cast<size_t>(f->d), 0.5f), q_out(static_cast<size_t>(f->d));
    std::vector<float> gv(static_cast<size_t>(f->r)), tmp(static_cast<size_t>(4 * f->gate_out + f->r));
    std::vector<float> o(static_cast<size_t>(f->d), 0.25f);
    for (int64_t h = 0; h < dims.n_heads; ++h) {
      f->query(q.data(), h, q_out.data(), gv.data(), tmp.data());
      f->output(gv.data(), o.data(), tmp.data());
    }
  }
  return 0;
}
