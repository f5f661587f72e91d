#pragma once
// A Hugging Face LLaMA checkpoint (config.json + model.safetensors, F32 / F16 / BF16) read into the CUDA
// model's host layout, with no LibTorch: the GPU machine builds the GPU tests without it. The production
// loader is core/model/weight_map.cc; this one reads the subset the GPU tests use (LLaMA, one file).
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/model.h"

namespace frost::cuda::testing {

struct HfCheckpoint {
  ModelSpec spec;
  std::map<std::string, std::vector<float>> tensors;  // by name, fp32, plus the fused "wqkv.N" / "w_in.N"
  HostWeights weights;                                // pointers into `tensors`
};

// Throws std::runtime_error naming the file and what is wrong.
HfCheckpoint load_hf_llama(const std::string& dir);

}  // namespace frost::cuda::testing
