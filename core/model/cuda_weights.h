#pragma once
// frost's loaded model as the CUDA decoder's host arrays (kernels/cuda/model.h): the bridge a GPU engine
// uploads from. Built only with FROST_CUDA. The fp32 tensors it hands out are kept alive in the result.
#include <ATen/ATen.h>

#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_config.h"
#include "core/model/transformer.h"
#include "kernels/cuda/model.h"

namespace frost {

struct CudaHostModel {
  cuda::ModelSpec spec;
  cuda::HostWeights weights;     // pointers into `keep`
  std::vector<at::Tensor> keep;  // fp32, contiguous; growing the vector moves handles, not the data
};

// FAILED_PRECONDITION naming what the CUDA decoder does not run: architecture variants (RA, SBA, router,
// MLP context), weights other than fp32 / bf16 (the int8 / int4 / w8a8 formats), an activation other than
// the architecture's own, a head_dim that is not a multiple of 8 (or over 128), over 16,384 positions.
absl::StatusOr<CudaHostModel> cuda_host_model(const ModelConfig& cfg, const ModelWeights& w);

}  // namespace frost
