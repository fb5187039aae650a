#pragma once
// The whole CUDA mesh plan, every phase, for one translation unit per precision and
// dimension (backend_<T>_<D>d.cu), so that nvcc builds them in parallel.
#include "cuda/plan/arrays.cuh"
#include "cuda/plan/gradient.cuh"
#include "cuda/plan/interp.cuh"
#include "cuda/plan/make_plan.cuh"
#include "cuda/plan/set_points.cuh"
#include "cuda/plan/spread.cuh"

#define PMKIT_INSTANTIATE_CUDA_BACKEND(T, D)                                                          \
  namespace pmkit::detail {                                                                           \
  template <>                                                                                         \
  std::unique_ptr<Backend<T, D>> make_cuda_backend<T, D>(const Grid<D>& g, const Kernel& k,           \
                                                         const Options& o) {                          \
    return std::make_unique<cuda::CudaBackend<T, D>>(g, k, o);                                        \
  }                                                                                                   \
  }
