#pragma once
// Grid coordinates and their owners, shared by the CPU ranks and the CUDA ranks' kernels
// so that both run the same arithmetic: a position's raw grid coordinate, its wrap into a
// periodic axis' domain, the checks of set_points and migrate, and the rank that owns a
// coordinate (the decomposition's cuts as plain tables, in host or device memory).
#include <array>
#include <cmath>
#include <cstdint>

#include "core/layout.hpp"
#include "distributed/decomposition.hpp"
#include "pmkit/config.hpp"
#include "pmkit/view.hpp"

namespace pmkit::distributed {

// The grid coordinate (x - origin) / h, unwrapped (Axis::coordinate's arithmetic).
PMKIT_HD PMKIT_FORCEINLINE double raw_coordinate(const detail::Axis& a, double x) {
  return a.exact_inverse != 0.0 ? (x - a.origin) * a.exact_inverse : (x - a.origin) / a.spacing;
}

PMKIT_HD PMKIT_FORCEINLINE bool is_finite(double x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

// The next value of T after x towards `to`.
template <class T>
PMKIT_HD PMKIT_FORCEINLINE T step_towards(T x, T to) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) return nextafterf(x, to);
  else return nextafter(x, to);
#else
  return std::nextafter(x, to);
#endif
}

// x - periods * length, a product and a difference each rounded, never fused: the host's
// and the device's wrap round alike.
PMKIT_HD PMKIT_FORCEINLINE double minus_periods(double x, double periods, double length) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(x, __dmul_rn(periods, length));
#else
  return x - periods * length;
#endif
}

// x moved by whole periods into the periodic axis' domain: a value of T whose grid
// coordinate lies in [0, cells]. Returns it and sets u to its coordinate.
template <class T>
PMKIT_HD T wrap_position(const detail::Axis& a, double x, double& u) {
  u = raw_coordinate(a, x);
  if (u >= 0 && u <= a.cells) return static_cast<T>(x);
  T wrapped = static_cast<T>(minus_periods(x, floor(u / a.cells), a.cells * a.spacing));
  // The subtraction's rounding may leave it a step outside: step back in.
  for (int step = 0; step < 64; ++step) {
    u = raw_coordinate(a, static_cast<double>(wrapped));
    if (u < 0) wrapped = step_towards(wrapped, T(INFINITY));
    else if (u > a.cells) wrapped = step_towards(wrapped, T(-INFINITY));
    else break;
  }
  return wrapped;
}

// The owners of grid coordinates: per axis the rank coordinate of each cell (a table in
// host or device memory) and the rank grid's shape.
template <int D>
struct Owners {
  detail::Axis axis[D];
  const int* owner_of_cell[D];
  int ranks[D];

  // The rank owning grid coordinates u (each in [0, cells]: a periodic one wrapped
  // already): per axis the rank of cell floor(u), the last one at u = cells; row-major
  // over the rank grid, the last axis fastest (Decomposition::rank_of).
  PMKIT_HD int rank_of(const double (&u)[D]) const {
    int r = 0;
    for (int d = 0; d < D; ++d) {
      const double f = floor(u[d]);
      const int c = f >= axis[d].cells ? ranks[d] - 1 : owner_of_cell[d][f < 0 ? 0 : static_cast<std::int64_t>(f)];
      r = r * ranks[d] + c;
    }
    return r;
  }
  PMKIT_HD double raw(int d, double x) const { return raw_coordinate(axis[d], x); }
};

// The owners of a decomposition over the global grid `global`, their tables the
// decomposition's (host memory: the decomposition must outlive them).
template <int D>
Owners<D> host_owners(const Decomposition<D>& decomposition, const detail::Layout<D>& global) {
  Owners<D> owners{};
  for (int d = 0; d < D; ++d) {
    owners.axis[d] = global.axis[d];
    owners.owner_of_cell[d] = decomposition.axis(d).owner_of_cell.data();
    owners.ranks[d] = decomposition.ranks()[d];
  }
  return owners;
}

// D position columns as a kernel takes them (std::array is the host's).
template <class T, int D>
struct Columns {
  View<const T> c[D];
};

template <class T, int D>
Columns<T, D> columns_of(const std::array<View<const T>, D>& positions) {
  Columns<T, D> columns;
  for (int d = 0; d < D; ++d) columns.c[d] = positions[d];
  return columns;
}

// Particle i's grid coordinates u, checked: finite, and in [0, cells] on every axis. With
// `wrap` (migrate), periodic coordinates are first wrapped into the domain, and `wrapped`
// receives the position on every axis (the input on bounded ones); without, they must
// lie inside already (set_points).
template <class T, int D>
PMKIT_HD bool grid_coordinates(const Columns<T, D>& positions, std::int64_t i, const Owners<D>& owners, bool wrap,
                               double (&u)[D], T (&wrapped)[D]) {
  bool ok = true;
  for (int d = 0; d < D; ++d) {
    const double x = static_cast<double>(positions.c[d][i]);
    if (!is_finite(x)) return false;
    if (wrap && owners.axis[d].kind == detail::AxisKind::Periodic) {
      wrapped[d] = wrap_position<T>(owners.axis[d], x, u[d]);
      continue;
    }
    u[d] = owners.raw(d, x);
    ok = ok && u[d] >= 0 && u[d] <= owners.axis[d].cells;
    wrapped[d] = static_cast<T>(x);
  }
  return ok;
}

// Whether particle i lies outside the block of rank `rank`, is not finite, or lies
// outside [0, cells] on an axis: the particles set_points refuses.
template <class T, int D>
PMKIT_HD bool is_stranger(const Columns<T, D>& positions, std::int64_t i, const Owners<D>& owners, int rank) {
  double u[D];
  T unused[D];
  return !grid_coordinates<T, D>(positions, i, owners, false, u, unused) || owners.rank_of(u) != rank;
}

}  // namespace pmkit::distributed
