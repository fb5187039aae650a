#pragma once
// Benchmark programs stop at the first CUDA error, naming the call.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace pmkit::bench {
inline void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
}  // namespace pmkit::bench
