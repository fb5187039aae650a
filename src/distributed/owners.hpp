#pragma once
// Grid coordinates and their owners, shared by the CPU ranks and the CUDA ranks' kernels
// so that both run the same arithmetic: a position's raw grid coordinate, its wrap into a
// periodic axis' domain, the checks of set_points and migrate, and the rank that owns a
// coordinate (the decomposition's cuts as plain tables, in host or device memory).
#include <array>
#include <cmath>
#include <cstdint>

#include "pmkit/detail/layout.hpp"
#include "distributed/decomposition.hpp"
#include "pmkit/config.hpp"
#include "pmkit/view.hpp"

namespace pmkit::distributed {

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

// origin + u * spacing, a product and a sum each rounded, never fused: the host's and the
// device's positions round alike.
PMKIT_HD PMKIT_FORCEINLINE double plus_product(double origin, double u, double spacing) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(origin, __dmul_rn(u, spacing));
#else
  return origin + u * spacing;
#endif
}

// Whether grid coordinate u lies in the axis' domain: [0, cells) on a periodic axis (the
// seam's coordinate `cells` is 0's, where migrate puts it), [0, cells] on a bounded one.
PMKIT_HD PMKIT_FORCEINLINE bool in_domain(const detail::Axis& a, double u) {
  return u >= 0 && (a.kind == detail::AxisKind::Periodic ? u < a.cells : u <= a.cells);
}

// A particle's coordinate x (a value of T) on axis a as migrate places it, and its grid
// coordinate u: x itself where it lies in the domain already. Otherwise, on a periodic
// axis, x moved by whole periods into [origin, origin + cells h): its grid coordinate
// wrapped into [0, cells) as the mesh plan wraps it (Axis::coordinate, so that both
// plans put a particle in the same cell), back to a position of T, and stepped in where
// that rounding left it outside (onto origin + cells h, say). False for an x that is not
// finite, is too far from the origin to wrap (its distance in cells overflows), or lies
// outside a bounded axis.
template <class T>
PMKIT_HD PMKIT_FORCEINLINE bool place(const detail::Axis& a, double x, T& placed, double& u) {
  placed = static_cast<T>(x);
  u = a.unwrapped_coordinate(x);
  if (in_domain(a, u)) return true;
  if (a.kind != detail::AxisKind::Periodic || !a.coordinate(x, u)) return false;
  placed = static_cast<T>(plus_product(a.origin, u, a.spacing));
  for (int step = 0; step < 64; ++step) {
    u = a.unwrapped_coordinate(static_cast<double>(placed));
    if (u < 0) placed = step_towards(placed, T(INFINITY));
    else if (u >= a.cells) placed = step_towards(placed, T(-INFINITY));
    else return true;
  }
  return false;
}

// The owners of grid coordinates: per axis the rank coordinate of each cell (a table in
// host or device memory) and the rank grid's shape.
template <int D>
struct Owners {
  detail::Axis axis[D];
  const int* owner_of_cell[D];
  int ranks[D];

  // The rank owning grid coordinates u (each in its axis' domain: in_domain): per axis
  // the rank of cell floor(u), the last one at a bounded axis' u = cells; row-major
  // over the rank grid, the last axis fastest (Decomposition::rank_of).
  PMKIT_HD PMKIT_FORCEINLINE int rank_of(const double (&u)[D]) const {
    int r = 0;
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      const double f = floor(u[d]);
      const int c = f >= axis[d].cells ? ranks[d] - 1 : owner_of_cell[d][f < 0 ? 0 : static_cast<std::int64_t>(f)];
      r = r * ranks[d] + c;
    }
    return r;
  }
  PMKIT_HD double raw(int d, double x) const { return axis[d].unwrapped_coordinate(x); }
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

// A particle at x (values of T) by the one rule of owner, migrate and set_points: its grid
// coordinates u, each in its axis' domain (in_domain). With `wrap` (migrate, owner) x is
// placed as migrate places it (place), and `placed` receives the position; without
// (set_points), x must lie in the domain already. False for a particle that is not
// finite, lies outside a bounded axis, is too far to wrap or (without `wrap`) lies
// outside a periodic axis' domain; its owner is owners.rank_of(u).
template <class T, int D>
PMKIT_HD PMKIT_FORCEINLINE bool locate(const Owners<D>& owners, const double (&x)[D], bool wrap, double (&u)[D], T (&placed)[D]) {
  // Every axis, unrolled and through scalars, so that a kernel keeps u and placed in
  // registers (not in local memory, which costs a pass over the positions twice over).
  bool all = true;
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    double ud = 0;
    T pd = T(0);
    bool ok = is_finite(x[d]);
    if (ok && wrap) {
      ok = place<T>(owners.axis[d], x[d], pd, ud);
    } else if (ok) {
      ud = owners.raw(d, x[d]);
      pd = static_cast<T>(x[d]);
      ok = in_domain(owners.axis[d], ud);
    }
    u[d] = ud;
    placed[d] = pd;
    all = all && ok;
  }
  return all;
}

// locate for particle i of position columns.
template <class T, int D>
PMKIT_HD PMKIT_FORCEINLINE bool grid_coordinates(const Columns<T, D>& positions, std::int64_t i, const Owners<D>& owners, bool wrap,
                               double (&u)[D], T (&placed)[D]) {
  double x[D];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) x[d] = static_cast<double>(positions.c[d][i]);
  return locate<T, D>(owners, x, wrap, u, placed);
}

// Whether particle i lies outside the block of rank `rank`, is not finite, or lies
// outside an axis' domain: the particles set_points refuses.
template <class T, int D>
PMKIT_HD bool is_stranger(const Columns<T, D>& positions, std::int64_t i, const Owners<D>& owners, int rank) {
  double u[D];
  T unused[D];
  return !grid_coordinates<T, D>(positions, i, owners, false, u, unused) || owners.rank_of(u) != rank;
}

}  // namespace pmkit::distributed
