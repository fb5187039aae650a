// One translation unit per precision and dimension keeps nvcc builds parallel.
#include "cuda/cuda_backend.cuh"
PMKIT_INSTANTIATE_CUDA_BACKEND(float, 2)
