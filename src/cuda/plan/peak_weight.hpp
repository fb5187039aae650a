#pragma once
// The largest weight one mesh node takes from one particle, which bounds the fixed-point
// accumulation (kernels/fixed_point.cuh): the kernel's 1D weight at a particle on the
// node (the kernels are symmetric and peak there) to the power D, from the same weight
// functor the kernels evaluate (kernels::weights_1d). Host code.
#include <cmath>

#include "pmkit/kernels.hpp"

namespace pmkit::cuda {

inline double peak_weight(const Kernel& kernel, int dims) {
  const double peak = kernels::dispatch(kernel, [](auto k) {
    using K = decltype(k);
    constexpr int S = K::support;
    double w[S];
    // A particle on a node: local coordinate 0 (even S) or 1/2 (odd S, whose nodes are
    // shifted by half a cell); the node is the stencil's middle one.
    kernels::weights_1d<K, double>(S % 2 == 1 ? 0.5 : 0.0, w);
    return w[(S - 1) / 2];
  });
  return std::pow(peak, dims);
}

}  // namespace pmkit::cuda
