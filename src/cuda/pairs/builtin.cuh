#pragma once
// The CUDA pair traversal compiled for the built-in pair kernels, so that callers
// compiled by a plain C++ compiler run them on the CUDA backend. One .cu per precision
// includes this with PMKIT_PAIRS_T set.
#include "pmkit/cuda/pairs.cuh"

namespace pmkit::detail {

#define PMKIT_INSTANTIATE_PAIRS(D, KERNEL)                                                                 \
  template void device_pair_compute<PMKIT_PAIRS_T, D, KERNEL>(DevicePairs<PMKIT_PAIRS_T, D>&, const KERNEL&, \
                                                              PairMethod, Span<View<const PMKIT_PAIRS_T>>,   \
                                                              Span<View<PMKIT_PAIRS_T>>);
PMKIT_INSTANTIATE_PAIRS(2, pair_kernels::LennardJones<2>)
PMKIT_INSTANTIATE_PAIRS(3, pair_kernels::LennardJones<3>)
PMKIT_INSTANTIATE_PAIRS(2, pair_kernels::NeighbourCount)
PMKIT_INSTANTIATE_PAIRS(3, pair_kernels::NeighbourCount)
PMKIT_INSTANTIATE_PAIRS(2, pair_kernels::EwaldRealSpace<2>)
PMKIT_INSTANTIATE_PAIRS(3, pair_kernels::EwaldRealSpace<3>)
#undef PMKIT_INSTANTIATE_PAIRS

}  // namespace pmkit::detail
