#pragma once
// Helpers of the CUDA tests: whether a GPU is present and views of device buffers
// (cuda::DeviceBuffer). Only for builds with the CUDA backend.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "cuda/graph.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/view.hpp"
#include "test_support.hpp"

namespace pmkit::test {

using cuda::DeviceBuffer;

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

// Views of a device buffer's whole length, for the plans' calls.
template <class T>
View<T> device_view(cuda::DeviceBuffer<T>& buffer) {
  return View<T>(buffer.get(), buffer.size());
}
template <class T>
View<const T> device_cview(const cuda::DeviceBuffer<T>& buffer) {
  return View<const T>(buffer.get(), buffer.size());
}

// A non-blocking stream (no implicit order with the legacy default stream), so that work
// a plan ran off its stream would race with the test's own copies and show.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

}  // namespace pmkit::test
