#pragma once
// Shared pieces of the GPU tests: skip visibly without a device, device buffers, random host data.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"

namespace frost::cuda::testing {

// Empty when a CUDA device is usable, else why not (the skip message).
inline std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device visible";
  return "";
}

#define FROST_REQUIRE_GPU()                                           \
  do {                                                                \
    const std::string why_ = ::frost::cuda::testing::no_gpu_reason(); \
    if (!why_.empty()) GTEST_SKIP() << "GPU test skipped: " << why_;  \
  } while (0)

// A device array with its host mirror.
template <typename T>
struct DeviceArray {
  std::vector<T> host;
  T* dev = nullptr;
  explicit DeviceArray(size_t n, T fill = T{}) : host(n, fill) {
    FROST_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dev), std::max<size_t>(1, n * sizeof(T))));
    upload();
  }
  explicit DeviceArray(std::vector<T> h) : host(std::move(h)) {
    FROST_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&dev), std::max<size_t>(1, host.size() * sizeof(T))));
    upload();
  }
  ~DeviceArray() { cudaFree(dev); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void upload() {
    FROST_CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T>& download() {
    FROST_CUDA_CHECK(cudaDeviceSynchronize());
    FROST_CUDA_CHECK(cudaMemcpy(host.data(), dev, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// max |a − b| over max(1, max |b|): the relative error measure the tolerances are stated in.
inline double rel_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, s = 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
    if (std::isnan(a[i]) != std::isnan(b[i])) return 1e30;
    s = std::max(s, static_cast<double>(std::fabs(b[i])));
  }
  return m / s;
}

}  // namespace frost::cuda::testing
