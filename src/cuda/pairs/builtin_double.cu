// The built-in pair kernels on the CUDA backend, double (see builtin.cuh).
#define PMKIT_PAIRS_T double
#include "cuda/pairs/builtin.cuh"
