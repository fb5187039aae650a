#pragma once
// The per-particle stencil every backend shares: the S^D nodes a particle reaches and
// their tensor-product weights. Backends pass a functor that does the one thing they
// differ in (add to the mesh, read from it, atomically or not).
#include <cstdint>

#include "core/layout.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::detail {

// Where a particle lands: per dimension the first logical node and the local
// coordinate s in [0, 1). Computed once, in double, at binning time.
template <class K, int D, class R>
PMKIT_HD PMKIT_FORCEINLINE void locate_particle(const double (&u)[D], int (&base)[D], R (&s)[D]) {
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    double sd;
    kernels::locate<K>(u[d], base[d], sd);
    s[d] = static_cast<R>(sd);
  }
}

// Calls f(mesh_index, weight) for each of the S^D nodes of a particle.
template <class K, int D, class T, class F>
PMKIT_HD PMKIT_FORCEINLINE void for_each_node(const Layout<D>& layout, const int (&base)[D],
                                              const T (&s)[D], F&& f) {
  constexpr int S = K::support;
  T w[D][S];
  std::int64_t idx[D][S];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    kernels::weights_1d<K>(s[d], w[d]);
    PMKIT_UNROLL
    for (int k = 0; k < S; ++k) idx[d][k] = layout.axis[d].node(base[d] + k) * layout.stride[d];
  }
  if constexpr (D == 2) {
    PMKIT_UNROLL
    for (int b = 0; b < S; ++b)
      PMKIT_UNROLL
      for (int a = 0; a < S; ++a) f(idx[1][b] + idx[0][a], w[1][b] * w[0][a]);
  } else {
    PMKIT_UNROLL
    for (int c = 0; c < S; ++c)
      PMKIT_UNROLL
      for (int b = 0; b < S; ++b) {
        const T wcb = w[2][c] * w[1][b];
        const std::int64_t off = idx[2][c] + idx[1][b];
        PMKIT_UNROLL
        for (int a = 0; a < S; ++a) f(off + idx[0][a], wcb * w[0][a]);
      }
  }
}

}  // namespace pmkit::detail
