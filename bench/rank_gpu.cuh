#pragma once
// The GPU of an MPI rank in the distributed benchmarks: rank r takes GPU r mod the GPUs
// visible, made current.
#include <cuda_runtime.h>

#include <string>

#include "cuda/runtime.hpp"

// Sets this rank's GPU; returns the number visible and the name of GPU 0 (for the header).
inline int use_rank_gpu(int rank, std::string& name) {
  int devices = 0;
  pmkit::cuda::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  pmkit::cuda::check(cudaSetDevice(rank % devices), "cudaSetDevice");
  cudaDeviceProp prop{};
  pmkit::cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  name = prop.name;
  return devices;
}
