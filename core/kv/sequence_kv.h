#pragma once
// SequenceKv: the KV cache of one sequence, all layers, preallocated to spec.max_tokens.
// Owned by whoever runs the sequence (the engine thread); not thread-safe.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/kv/codec.h"
#include "core/kv/kv_spec.h"

namespace frost {

class SequenceKv {
 public:
  explicit SequenceKv(const KvSpec& spec);

  const KvSpec& spec() const { return spec_; }
  KvCodec& layer(int64_t i) { return *layers_[static_cast<size_t>(i)]; }
  const KvCodec& layer(int64_t i) const { return *layers_[static_cast<size_t>(i)]; }

  // Number of positions written so far (the next token's position).
  int64_t n_tokens() const { return n_tokens_; }
  int64_t capacity() const { return spec_.max_tokens; }
  // Called by the model after all layers stored `n` more tokens.
  void advance(int64_t n) { n_tokens_ += n; }
  // Forget everything after the first `n` positions (n <= n_tokens()). O(1).
  void truncate(int64_t n);
  void reset() { n_tokens_ = 0; }

  int64_t bytes_per_token() const;  // all layers
  int64_t bytes_allocated() const { return bytes_per_token() * spec_.max_tokens; }
  int64_t bytes_in_use() const { return bytes_per_token() * n_tokens_; }

 private:
  KvSpec spec_;
  std::vector<std::unique_ptr<KvCodec>> layers_;
  int64_t n_tokens_ = 0;
};

}  // namespace frost
