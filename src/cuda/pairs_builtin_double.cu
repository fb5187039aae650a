// The built-in pair kernels on the CUDA backend, double (see pairs_builtin.cuh).
#define PMKIT_PAIRS_T double
#include "cuda/pairs_builtin.cuh"
