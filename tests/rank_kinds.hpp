#pragma once
// What the tests of the distributed FFT and PME share: the kinds of ranks they run on,
// and a rank's array (host values, staged through device memory on CUDA ranks).
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "distributed_support.hpp"
#include "pmkit/distributed.hpp"

#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
#endif

namespace pmkit::test {

// A test's ranks: CPU ranks, or CUDA ranks through a transport.
struct RankKind {
  Backend backend;
  Transport transport;
  const char* label;
};

inline void PrintTo(const RankKind& kind, std::ostream* out) { *out << kind.label; }

inline std::string rank_kind_label(const ::testing::TestParamInfo<RankKind>& info) { return info.param.label; }

// A kind's options (FftOptions, PmeOptions...) on this rank: CUDA ranks take GPU rank mod
// the GPUs there are, made current.
template <class Options>
Options rank_kind_options(const RankKind& kind) {
  Options o;
  o.backend = kind.backend;
#if defined(PMKIT_WITH_CUDA)
  if (o.backend == Backend::Cuda) {
    o.device = world_rank() % visible_gpus();
    cuda::check(cudaSetDevice(o.device), "cudaSetDevice");
  }
#endif
  return o;
}

// CPU ranks; with the CUDA backend, CUDA ranks through Transport::Auto and host-staged MPI.
inline std::vector<RankKind> rank_kinds() {
  std::vector<RankKind> kinds = {{Backend::Cpu, Transport::Auto, "CpuRanks"}};
#if defined(PMKIT_WITH_CUDA)
  kinds.push_back({Backend::Cuda, Transport::Auto, "CudaRanks"});
  kinds.push_back({Backend::Cuda, Transport::HostMpi, "CudaRanksHostMpi"});
#endif
  return kinds;
}

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
