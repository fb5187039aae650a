#pragma once
// The error every backend of both plans raises for a rejected particle position, built
// from the coordinates the backend read back (on the GPU: the one offending particle
// only).
#include <cmath>
#include <cstddef>

#include "pmkit/detail/layout.hpp"
#include "pmkit/error.hpp"

namespace pmkit::detail {

// Particle i at x was rejected: names its first coordinate that is not finite, or that
// inside(d, x[d]) finds outside the bounded `domain` ("grid", "box") [lo[d], hi[d]].
template <int D, class Inside>
[[noreturn]] void reject_position(const double (&x)[D], std::size_t i, const char* domain, const double (&lo)[D],
                                  const double (&hi)[D], Inside&& inside) {
  for (int d = 0; d < D; ++d) {
    if (!std::isfinite(x[d]))
      fail(ErrorCode::NonFinitePosition, "positions[", d, "][", i, "] = ", x[d],
           ": particle positions must be finite");
    if (!inside(d, x[d]))
      fail(ErrorCode::OutOfBounds, "positions[", d, "][", i, "] = ", x[d], " lies outside the bounded ", domain,
           " [", lo[d], ", ", hi[d], "] of dimension ", d);
  }
  fail(ErrorCode::InvalidArgument, "particle ", i, " was rejected but its position looks valid");
}

// The mesh plan's: positions on the grid of `layout`.
template <int D>
[[noreturn]] void reject_particle(const Layout<D>& layout, const double (&x)[D], std::size_t i) {
  // A finite coordinate on a periodic axis wraps, unless its distance from the origin in
  // cells overflows a double.
  for (int d = 0; d < D; ++d) {
    const Axis& a = layout.axis[d];
    double u;
    if (a.kind == AxisKind::Periodic && std::isfinite(x[d]) && !a.coordinate(x[d], u))
      fail(ErrorCode::OutOfBounds, "positions[", d, "][", i, "] = ", x[d], " is too far from the periodic grid's origin ",
           a.origin, " to wrap on dimension ", d, ": its distance in cells is not a finite double");
  }
  double lo[D], hi[D];
  for (int d = 0; d < D; ++d) {
    const Axis& a = layout.axis[d];
    lo[d] = a.origin;
    hi[d] = a.origin + a.cells * a.spacing;
  }
  reject_position<D>(x, i, "grid", lo, hi, [&](int d, double v) {
    double u;
    return layout.axis[d].coordinate(v, u);
  });
}

}  // namespace pmkit::detail
