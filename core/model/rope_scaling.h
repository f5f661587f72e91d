#pragma once
// config.json's rope_scaling, as data (core/model/rope.h computes the tables from it; this header stays free of
// LibTorch so ModelConfig can hold it).
#include <cstdint>
#include <vector>

namespace frost {

enum class RopeType { kDefault, kLinear, kDynamic, kLlama3, kYarn, kLongRope };
const char* rope_type_name(RopeType t);  // "default" | "linear" | "dynamic" | "llama3" | "yarn" | "longrope"

// config.json's rope_scaling (absent / null → kDefault).
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                                  // linear, dynamic, llama3, yarn (longrope: derived)
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_pos = 0;                         // llama3, yarn, longrope
  double beta_fast = 32.0, beta_slow = 1.0;             // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;            // yarn (0: absent)
  bool truncate = true;                                 // yarn
  double attention_factor = 0.0;                        // yarn, longrope: 0 → derived as HF derives it
  std::vector<double> short_factor, long_factor;        // longrope, rotary_dim / 2 each
};

}  // namespace frost
