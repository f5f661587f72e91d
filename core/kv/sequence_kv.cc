#include "core/kv/sequence_kv.h"

#include <c10/util/Exception.h>

#include "core/kv/kvsplice.h"

namespace frost {

SequenceKv::SequenceKv(const KvSpec& spec) : spec_(spec) {
  TORCH_CHECK(spec.n_layer > 0 && spec.n_head_kv > 0 && spec.head_dim > 0 && spec.max_tokens > 0,
              "SequenceKv: invalid spec");
  layers_.reserve(static_cast<size_t>(spec.n_layer));
  if (spec.codec == KvCodecKind::kKvSplice) {
    TORCH_CHECK(spec.splice, "SequenceKv: the kvsplice codec needs a KvSpliceSet (no KVSplice is active)");
    const KvSpliceDims& d = spec.splice->dims();
    TORCH_CHECK(d.n_layers == spec.n_layer && d.n_head_kv == spec.n_head_kv && d.head_dim == spec.head_dim,
                "SequenceKv: the KvSpliceSet was made for ", d.n_layers, " layers × ", d.n_head_kv,
                " kv heads × ", d.head_dim, ", the model has ", spec.n_layer, " × ", spec.n_head_kv, " × ",
                spec.head_dim);
  }
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    layers_.push_back(spec.codec == KvCodecKind::kKvSplice
                          ? make_kvsplice_codec(spec.splice, i, spec.max_tokens)
                          : make_codec(spec.codec, spec.n_head_kv, spec.head_dim, spec.max_tokens));
  }
  for (int64_t l : spec.reverse_layers) {
    TORCH_CHECK(l >= 0 && l < spec.n_layer, "SequenceKv: reverse layer ", l, " out of range");
    TORCH_CHECK(spec.codec != KvCodecKind::kKvSplice, "SequenceKv: layer ", l,
                " keeps a reverse (q, v) store (SBA) and the kvsplice codec is not supported there: its "
                "splices are fitted to K rows");
    if (reverse_.empty()) reverse_.resize(static_cast<size_t>(spec.n_layer));
    reverse_[static_cast<size_t>(l)] = make_codec(spec.codec, spec.n_head_kv, spec.head_dim, spec.max_tokens);
  }
}

void SequenceKv::truncate(int64_t n) {
  TORCH_CHECK(n >= 0 && n <= n_tokens_, "SequenceKv::truncate(", n, ") with ", n_tokens_, " tokens");
  n_tokens_ = n;
}

int64_t SequenceKv::bytes_per_token() const {
  int64_t b = 0;
  for (const auto& l : layers_) b += l->bytes_per_token();
  for (const auto& l : reverse_) b += l ? l->bytes_per_token() : 0;
  return b;
}

}  // namespace frost
