// The CUDA pair traversal compiled for the built-in pair kernels (float), so that callers
// compiled by a plain C++ compiler can use them on the CUDA backend.
#include "pmkit/cuda/pairs.cuh"

namespace pmkit::detail {

#define PMKIT_INSTANTIATE_PAIRS(D, KERNEL)                                                             \
  template void device_pair_compute<float, D, KERNEL>(DevicePairCells<float, D>&, const KERNEL&, PairMethod, \
                                                     Span<View<const float>>, Span<View<float>>);
PMKIT_INSTANTIATE_PAIRS(2, pair_kernels::LennardJones<2>)
PMKIT_INSTANTIATE_PAIRS(3, pair_kernels::LennardJones<3>)
PMKIT_INSTANTIATE_PAIRS(2, pair_kernels::CheapSynthetic)
PMKIT_INSTANTIATE_PAIRS(3, pair_kernels::CheapSynthetic)
PMKIT_INSTANTIATE_PAIRS(2, pair_kernels::ExpensiveSynthetic)
PMKIT_INSTANTIATE_PAIRS(3, pair_kernels::ExpensiveSynthetic)
#undef PMKIT_INSTANTIATE_PAIRS

}  // namespace pmkit::detail
