#pragma once
// Where a coordinate lies on one axis of a domain, shared by the mesh plan's Axis and the
// pair plan's CPU cell list (host and device).
#include <cmath>

#include "pmkit/config.hpp"

namespace pmkit::detail {

// u is a coordinate relative to the axis' origin, in units where the axis is [0, extent].
// Periodic: u wrapped into [0, extent). Bounded: whether u lies in [0, extent]. False for
// a non-finite u.
PMKIT_HD inline bool wrap_coordinate(double& u, double extent, bool periodic) {
  if (!(u - u == 0.0)) return false;  // NaN or inf (also catches inf - inf)
  if (periodic) {
    if (u >= 0.0 && u < extent) return true;  // inside already: no division to wrap
    // fmod is exact, on the host and the device alike, however far u lies (u - extent *
    // floor(u / extent) rounds its product: far out it leaves u outside, even infinite).
    u = fmod(u, extent);
    if (u < 0.0) u += extent;
    if (u >= extent) u = 0.0;  // -tiny wrapped and rounded up onto the seam
    return true;
  }
  return u >= 0.0 && u <= extent;
}

}  // namespace pmkit::detail
