#pragma once
// Internal: the CUDA runtime as the pair traversal for a caller's kernel
// (pmkit/cuda/pairs.cuh) needs it: errors become pmkit::Error, a launch is checked, and a
// call runs on its plan's device. Installed because that public header includes it; not
// an API of its own, and it may change in any release.
#include <cuda_runtime.h>

#include "pmkit/cuda/runtime.hpp"
#include "pmkit/error.hpp"

namespace pmkit::cuda {

inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so later calls are not poisoned
  detail::fail(status == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Device,
               what, ": ", cudaGetErrorString(status));
}

// After a launch: reports launch-configuration errors at once (execution errors surface
// at the next synchronising call).
inline void check_launch(const char* kernel_label) { check(cudaGetLastError(), kernel_label); }

// Makes a plan's device current for the length of a call and then gives the caller's
// back: one thread may drive plans on several GPUs, and a plan's call must neither launch
// on another device nor leave its own one current behind.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    switched_ = previous_ != device;
  }
  ~DeviceScope() {
    if (switched_ && previous_ >= 0) cudaSetDevice(previous_);  // no throw from a destructor
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace pmkit::cuda
