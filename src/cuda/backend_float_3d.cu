// One translation unit per precision and dimension keeps nvcc builds parallel.
#include "cuda/plan/instantiate.cuh"
PMKIT_INSTANTIATE_CUDA_BACKEND(float, 3)
