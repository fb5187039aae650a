#pragma once
// The deterministic distributed spread: every particle's contributions in 128-bit fixed
// point, so that a node's sum does not depend on which rank adds which contribution, in
// which order.
//
// A contribution q * w is formed in double from the particle's stencil as the single-rank
// CPU plan forms it (grid coordinate, base node and local coordinate in T, weights in
// double), scaled by 2^e and rounded to an integer. The scale is common to all ranks:
// from the largest |q| of the property over all ranks and the total particle count, so
// that no node's sum can overflow (a node takes at most S^D contributions per particle,
// the weights are at most 1, hence |sum| < n S^D max|q| 2^e <= 2^126). A contribution of
// magnitude above 2^(e - 53) max|q| is an integer once scaled: it is kept exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/layout.hpp"
#include "core/stencil.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::distributed {

using Exact = __int128;

// Bits of a node sum: 126 of the 127 of a signed 128-bit integer, one kept free.
constexpr int kExactSumBits = 126;

// The scale 2^e for a property of largest |q| `max_abs` over `count` particles of a
// kernel of `support` nodes per dimension in D dimensions. 1 for max_abs = 0.
inline double exact_scale(double max_abs, std::uint64_t count, int support, int dims) {
  if (!(max_abs > 0)) return 1.0;
  int bits = kExactSumBits;
  for (std::uint64_t c = 1; c < count; c *= 2) --bits;
  for (std::uint64_t s = 1, all = static_cast<std::uint64_t>(std::pow(support, dims)); s < all; s *= 2) --bits;
  int exponent;
  std::frexp(max_abs, &exponent);  // max_abs < 2^exponent
  // At most 2^1022, so that 1 / scale stays a normal double (max_abs below ~1e-270).
  return std::ldexp(1.0, std::min(bits - exponent, 1022));
}

// Adds particle p's contributions to the fixed-point meshes (one per property).
// base: the stencil's first node in the local mesh's logical nodes; s: its local
// coordinate as the single-rank plan keeps it.
template <class K, class T, int D>
void deposit_exact(const detail::Layout<D>& local, const int (&base)[D], const T (&s)[D], const double* q,
                   const double* scale, int count, Exact* const* meshes) {
  double sd[D];
  for (int d = 0; d < D; ++d) sd[d] = static_cast<double>(s[d]);
  detail::for_each_node<K, D>(local, base, sd, [&](std::int64_t idx, double w) {
    for (int j = 0; j < count; ++j) meshes[j][idx] += static_cast<Exact>(std::nearbyint(q[j] * w * scale[j]));
  });
}

// A node's value from its fixed-point sum: the sum rounded to double once, unscaled by
// the power of two (exact), then rounded to T.
inline double exact_value(Exact sum, double inverse_scale) {
  return static_cast<double>(sum) * inverse_scale;
}

}  // namespace pmkit::distributed
