#pragma once
// The error every backend raises for a rejected particle position, built from the
// coordinates the backend read back (on the GPU: the one offending particle only).
#include <cmath>
#include <cstddef>

#include "core/layout.hpp"
#include "pmkit/error.hpp"

namespace pmkit::detail {

template <int D>
[[noreturn]] void reject_particle(const Layout<D>& layout, const double (&x)[D], std::size_t i) {
  for (int d = 0; d < D; ++d) {
    const Axis& a = layout.axis[d];
    if (!std::isfinite(x[d]))
      fail(ErrorCode::NonFinitePosition, "positions[", d, "][", i, "] = ", x[d],
           ": particle positions must be finite");
    double u;
    if (!a.coordinate(x[d], u))
      fail(ErrorCode::OutOfBounds, "positions[", d, "][", i, "] = ", x[d],
           " lies outside the bounded grid [", a.origin, ", ", a.origin + a.cells * a.spacing,
           "] of dimension ", d);
  }
  fail(ErrorCode::InvalidArgument, "particle ", i, " was rejected but its position looks valid");
}

}  // namespace pmkit::detail
