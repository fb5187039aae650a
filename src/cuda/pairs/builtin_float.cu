// The built-in pair kernels on the CUDA backend, float (see builtin.cuh).
#define PMKIT_PAIRS_T float
#include "cuda/pairs/builtin.cuh"
