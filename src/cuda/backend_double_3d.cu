// The 3D double plan's constructor, binning and arrays; its spreads and interpolations are
// units of their own (backend_double_3d_spread.cu, backend_double_3d_interp.cu), so that the
// longest compiles of the plan build in parallel (instantiate.cuh).
#include "cuda/plan/instantiate.cuh"
PMKIT_CUDA_BACKEND_SPREAD(extern template, double, 3)
PMKIT_CUDA_BACKEND_INTERP(extern template, double, 3)
PMKIT_INSTANTIATE_CUDA_BACKEND(double, 3)
