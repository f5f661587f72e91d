#pragma once
// The only place allowed to branch on the LibTorch version (1.13 from Debian vs 2.x pip).
#include <torch/version.h>

#ifndef TORCH_VERSION_MAJOR
#error "torch/version.h did not define TORCH_VERSION_MAJOR"
#endif

#define FROST_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
