#pragma once
// The largest weight one mesh node takes from one particle, which bounds the fixed-point
// accumulation (kernels/fixed_point.cuh): the kernel's peak 1D weight
// (kernels::peak_weight_1d, from the weight functor the kernels evaluate) to the power
// D. peak_gradient bounds spread_gradient's contributions alike. Host code.
#include <algorithm>
#include <cmath>

#include "pmkit/kernels.hpp"

namespace pmkit::cuda {

inline double peak_weight(const Kernel& kernel, int dims) {
  const double peak = kernels::dispatch(kernel, [](auto k) { return kernels::peak_weight_1d<decltype(k)>(); });
  return std::pow(peak, dims);
}

// A bound on |dW/du_d| of one node's D-dimensional weight, over every particle and axis:
// the largest 1D weight derivative times the peak 1D weight to the power D - 1 (a node's
// gradient component is one 1D derivative times D - 1 weights). The derivative's largest
// magnitude is taken over kSamples points of s in [0, 1] per node, plus the most it can
// rise between two points (half a step times the bound on its own derivative, the sum
// of its coefficients' magnitudes): a bound, not an estimate, and within ~0.1% of the
// maximum. The same derivative functor the kernels evaluate
// (kernels::weight_derivatives_1d).
inline double peak_gradient(const Kernel& kernel, int dims) {
  const double peak_derivative = kernels::dispatch(kernel, [](auto k) {
    using K = decltype(k);
    constexpr int S = K::support;
    constexpr int kSamples = 1024;
    constexpr kernels::PieceTable<S> second = kernels::derivative_pieces<S>(kernels::Derivative<K>::pieces());
    double rise = 0;  // the largest |d^2 w / ds^2| of any node, bounded by its coefficients
    for (int node = 0; node < S; ++node) {
      double sum = 0;
      for (int j = 0; j < S; ++j) sum += std::fabs(second.c[node][j]);
      rise = std::max(rise, sum);
    }
    double largest = 0;
    for (int i = 0; i <= kSamples; ++i) {
      double dw[S];
      kernels::weight_derivatives_1d<K, double>(static_cast<double>(i) / kSamples, dw);
      for (int node = 0; node < S; ++node) largest = std::max(largest, std::fabs(dw[node]));
    }
    return largest + rise * 0.5 / kSamples;
  });
  return peak_derivative * std::pow(peak_weight(kernel, 1), dims - 1);
}

}  // namespace pmkit::cuda
