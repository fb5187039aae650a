// The 3D float plan's constructor, binning and arrays; its spreads and interpolations are
// units of their own (backend_float_3d_spread.cu, backend_float_3d_interp.cu), so that the
// longest compiles of the plan build in parallel (instantiate.cuh).
#include "cuda/plan/instantiate.cuh"
PMKIT_CUDA_BACKEND_SPREAD(extern template, float, 3)
PMKIT_CUDA_BACKEND_INTERP(extern template, float, 3)
PMKIT_INSTANTIATE_CUDA_BACKEND(float, 3)
