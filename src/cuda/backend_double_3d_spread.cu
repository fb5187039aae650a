// The 3D double plan's spreads (instantiate.cuh; the constructor's unit is backend_double_3d.cu).
#include "cuda/plan/instantiate.cuh"
PMKIT_CUDA_BACKEND_SPREAD(template, double, 3)
