#pragma once
// The CUDA mesh plan's explicit instantiations, for the translation units of each
// precision and dimension (backend_<T>_<D>d*.cu), which nvcc builds in parallel.
//
// PMKIT_INSTANTIATE_CUDA_BACKEND(T, D) is the constructor (make_cuda_backend); its unit
// also compiles every member that CudaBackend's virtual table names and no other unit
// instantiates. A unit of its own takes a phase: PMKIT_CUDA_BACKEND_SPREAD(template, T, D)
// compiles spread and spread_gradient there, and the constructor's unit declares them
// with PMKIT_CUDA_BACKEND_SPREAD(extern template, T, D) so that its virtual table links
// them instead of compiling them again (PMKIT_CUDA_BACKEND_INTERP likewise for interp
// and interp_gradient).
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

// The spreads (P2M): spread and spread_gradient share the tile passes and the heavy
// tiles' sums.
#define PMKIT_CUDA_BACKEND_SPREAD(P, T, D)                                                           \
  namespace pmkit::cuda {                                                                            \
  P void CudaBackend<T, D>::spread(Span<View<const T>>, Span<View<T>>, Accumulate);                  \
  P void CudaBackend<T, D>::spread_gradient(Span<View<const T>>, Span<View<T>>, Accumulate);         \
  }

// The interpolations (M2P): interp and interp_gradient.
#define PMKIT_CUDA_BACKEND_INTERP(P, T, D)                                                           \
  namespace pmkit::cuda {                                                                            \
  P void CudaBackend<T, D>::interp(Span<View<const T>>, Span<View<T>>);                              \
  P void CudaBackend<T, D>::interp_gradient(Span<View<const T>>, Span<View<T>>);                     \
  }
