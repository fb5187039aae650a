// The 3D float plan's interpolations (instantiate.cuh; the constructor's unit is
// backend_float_3d.cu).
#include "cuda/plan/instantiate.cuh"
PMKIT_CUDA_BACKEND_INTERP(template, float, 3)
