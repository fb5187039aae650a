#pragma once
// The CUDA pair traversal compiled for the built-in pair kernels, so that callers
// compiled by a plain C++ compiler run them on the CUDA backend. One .cu per precision
// includes this with PMKIT_PAIRS_T set.
#include "pmkit/cuda/pairs.cuh"

namespace pmkit::detail {

PMKIT_CUDA_BUILTIN_PAIR_TRAVERSALS(template, PMKIT_PAIRS_T)

}  // namespace pmkit::detail
