#pragma once
// The engine tests' active KV stages: a random int4 repair operator (layers 0 and 1, rank 4) named
// "kv_repair/1" and a random KVSplice set (ranks 12 / 20) named "kvsplice/1", each in its slot, for the model
// config given — what an engine serving a trained kv_repair and kvsplice job holds (outputs are compared
// within a test, so random weights do).
#include <memory>

#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/kv_dims.h"
#include "core/model/model_config.h"

namespace frost::testing {

struct KvSlots {
  RepairSlot repair;
  KvSpliceSlot splice;
};

// Null when either set cannot be made for `cfg` (the caller asserts).
inline std::unique_ptr<KvSlots> make_kv_slots(const ModelConfig& cfg) {
  RepairConfig rc;
  rc.rank = 4;
  auto rs = RepairSet::create(rc, {0, 1}, repair_dims(cfg), 11);
  auto sp = KvSpliceSet::create(kvsplice_dims(cfg), KvSpliceRanks{12, 20}, 3);
  if (!rs.ok() || !sp.ok()) return nullptr;
  auto slots = std::make_unique<KvSlots>();
  auto ra = std::make_shared<RepairSlot::Active>();
  ra->set = *rs;
  ra->name = "kv_repair/1";
  ra->codec = KvCodecKind::kInt4;
  slots->repair.set(ra);
  auto sa = std::make_shared<KvSpliceSlot::Active>();
  sa->set = *sp;
  sa->name = "kvsplice/1";
  slots->splice.set(sa);
  return slots;
}

}  // namespace frost::testing
