#pragma once
// Helpers of the CUDA tests: whether a GPU is present, device arrays, and sizes that
// shrink under compute-sanitizer. Only for builds with the CUDA backend.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "pmkit/view.hpp"
#include "test_support.hpp"

namespace pmkit::test {

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define PMKIT_REQUIRE_GPU() \
  if (!::pmkit::test::have_gpu()) GTEST_SKIP() << "no CUDA device"

// Sizes shrink under compute-sanitizer (PMKIT_TEST_SMALL, test_support.hpp's sanitizing()),
// which is ~100x slower.
inline std::size_t scaled(std::size_t n) { return sanitizing() ? std::max<std::size_t>(n / 16, 1) : n; }

template <class T>
struct DeviceVector {
  T* ptr = nullptr;
  std::size_t size = 0;
  explicit DeviceVector(std::size_t n) : size(n) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<std::size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  DeviceVector(const std::vector<T>& host) : DeviceVector(host.size()) { upload(host); }
  ~DeviceVector() { cudaFree(ptr); }
  DeviceVector(const DeviceVector&) = delete;
  void upload(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), size * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> host(size);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, size * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  View<T> view() { return View<T>(ptr, size); }
  View<const T> cview() const { return View<const T>(ptr, size); }
};

}  // namespace pmkit::test
