#pragma once
// Shared by the prototype unit tests (prototype_*_test.cc): seeded generators, unit rows and a small
// PrototypeConfig that trains in a moment on builtin:tiny.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>

#include "core/prototype/config.h"

namespace frost::prototype::prototype_testing {

inline at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

inline at::Tensor unit_rows(at::Tensor x) { return x / x.norm(2, 1, true); }

inline PrototypeConfig small_cfg() {
  PrototypeConfig c;
  c.max_tokens = 16;
  c.d_h = 32;
  c.H = 4;
  c.m = 3;
  c.m_q = 2;
  c.K = 4;
  c.T = 8;
  c.L = 2;
  c.ffn_mult = 2;
  c.epochs_a = 2;
  c.epochs_b = 2;
  c.batch_size = 8;
  c.label_hidden = 8;
  c.rlcs_k = 3;
  return c;
}

}  // namespace frost::prototype::prototype_testing
