#pragma once
// Synthetic pair kernels for benchmarking and testing the traversal: a cheap one (a few
// flops) and an expensive one (transcendental functions), both symmetric sums. Not part of
// the library: on the CUDA backend they run through pmkit::cuda::compute
// (pmkit/cuda/pairs.cuh) in a file compiled by nvcc.
#include <cmath>

#include "pmkit/config.hpp"

namespace pmkit::bench {

struct CheapSynthetic {
  static constexpr int inputs = 0;
  static constexpr int outputs = 1;
  double cutoff = 1.0;
  template <class T>
  PMKIT_HD void operator()(const T*, T r2, const T*, const T*, T* out_i, T* out_j) const {
    const T w = T(cutoff * cutoff) - r2;
    out_i[0] += w;
    out_j[0] += w;
  }
};

struct ExpensiveSynthetic {
  static constexpr int inputs = 1;  // a weight per particle
  static constexpr int outputs = 1;
  double cutoff = 1.0;
  template <class T>
  PMKIT_HD void operator()(const T*, T r2, const T* in_i, const T* in_j, T* out_i, T* out_j) const {
    using std::cos;
    using std::exp;
    using std::sqrt;
    const T r = sqrt(r2);
    const T w = exp(-r2) * cos(r) / (T(1) + r);
    out_i[0] += w * in_j[0];
    out_j[0] += w * in_i[0];
  }
};

}  // namespace pmkit::bench
