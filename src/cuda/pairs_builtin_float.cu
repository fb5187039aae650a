// The built-in pair kernels on the CUDA backend, float (see pairs_builtin.cuh).
#define PMKIT_PAIRS_T float
#include "cuda/pairs_builtin.cuh"
