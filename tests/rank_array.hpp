#pragma once
// A test rank's array: host values, staged through device memory on CUDA ranks.
#include <utility>
#include <vector>

#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
#endif

namespace pmkit::test {

// A rank's arrays, on the host or (CUDA ranks) staged through device memory.
template <class V>
class RankArray {
 public:
  RankArray(std::vector<V> host, bool device) : host_(std::move(host)), device_(device) {
#if defined(PMKIT_WITH_CUDA)
    if (device_) buffer_ = cuda::DeviceBuffer<V>(host_);
#endif
  }
  V* data() {
#if defined(PMKIT_WITH_CUDA)
    if (device_) return buffer_.get();
#endif
    return host_.data();
  }
  std::vector<V> values() const {
#if defined(PMKIT_WITH_CUDA)
    if (device_) {
      cuda::check(cudaDeviceSynchronize(), "the transforms");
      std::vector<V> out = buffer_.download();
      out.resize(host_.size());
      return out;
    }
#endif
    return host_;
  }

 private:
  std::vector<V> host_;
  bool device_;
#if defined(PMKIT_WITH_CUDA)
  cuda::DeviceBuffer<V> buffer_;
#endif
};

}  // namespace pmkit::test
