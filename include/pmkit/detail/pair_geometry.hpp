#pragma once
// The CUDA pair cell list's geometry as the binning (src/cuda/pairs) and the traversal
// kernels (pmkit/cuda/pairs.cuh) share it: packed sorted positions, the cell of a
// coordinate, the x order inside a cell, and the corner-row test. Plain C++ with host and
// device markers, so that host code (tests, the library) includes it without CUDA.
#include <cstdint>

#include "pmkit/config.hpp"

namespace pmkit::detail {

// Sorted positions, packed for one aligned vector load (w is padding).
template <class T, int D>
struct PackedPosition;
template <class T>
struct alignas(4 * sizeof(T)) PackedPosition<T, 3> {
  T x, y, z, w;
};
template <class T>
struct alignas(2 * sizeof(T)) PackedPosition<T, 2> {
  T x, y;
};
template <class T, int D>
PMKIT_HD inline T& component(PackedPosition<T, D>& p, int d) {
  if constexpr (D == 3) return d == 0 ? p.x : d == 1 ? p.y : p.z;
  else return d == 0 ? p.x : p.y;
}
template <class T, int D>
PMKIT_HD inline T component(const PackedPosition<T, D>& p, int d) {
  if constexpr (D == 3) return d == 0 ? p.x : d == 1 ? p.y : p.z;
  else return d == 0 ? p.x : p.y;
}

// What a kernel launch needs to know of the cells (passed by value to the kernels).
template <class T, int D>
struct PairGeometry {
  int ncell[D];
  T length[D];      // box lengths (periodic shifts)
  T origin[D];
  T inv_width[D];   // cells per unit length
  bool periodic[D];
  T cutoff, cutoff2;
  // Inside a cell, particles are sorted by x quantised to 2^x_bits steps (0: not sorted),
  // so that a row of cells is sorted by x up to one step; x_slack covers that disorder
  // and the rounding of the quantisation.
  int x_bits;
  T x_slack;
};

// The quantised x of a particle inside its cell k (0 <= step < 2^x_bits).
template <class T, int D>
PMKIT_HD inline std::uint32_t pair_x_step(const PairGeometry<T, D>& g, T u, int k) {
  const T fraction = u * g.inv_width[0] - T(k);
  const T steps = T(std::uint32_t(1) << g.x_bits);
  const T s = fraction * steps;
  return s <= T(0) ? 0u : s >= steps - T(1) ? (std::uint32_t(1) << g.x_bits) - 1 : static_cast<std::uint32_t>(s);
}

// Which cell a wrapped coordinate u (0 <= u <= length) lies in; the binning and the
// traversal call this same function so that they agree bit for bit.
template <class T, int D>
PMKIT_HD inline int pair_cell_coordinate(const PairGeometry<T, D>& g, int d, T u) {
  const int k = static_cast<int>(u * g.inv_width[d]);
  return k < g.ncell[d] - 1 ? k : g.ncell[d] - 1;
}

// The corner rows of an x-row in 3D: q = 0..3 is the row at (dy, dz) = corner_offset(q),
// both -1 or +1. A source of the row at that offset can be within the cutoff of the x-row
// only if its distance across y and z to the x-row's cells is below the cutoff: a quarter
// disc of the row's cross-section, ~79% of its sources where cells are a cutoff wide.
PMKIT_HD constexpr int corner_q(int dy, int dz) { return (dy > 0 ? 1 : 0) + (dz > 0 ? 2 : 0); }
PMKIT_HD constexpr int corner_dy(int q) { return q & 1 ? 1 : -1; }
PMKIT_HD constexpr int corner_dz(int q) { return q & 2 ? 1 : -1; }

// Whether a source at wrapped position p, in cell row (sy, sz), can be within the cutoff
// of the x-row at minus corner offset q from its own: its distance across y and z to that
// row's cells (the faces of its own cell that face them), with a margin for the rounding
// of positions and cell bounds, so that it only errs towards keeping a source.
template <class T, int D>
PMKIT_HD inline bool corner_source_live(const PairGeometry<T, D>& g, int q, int sy, int sz,
                                        const PackedPosition<T, D>& p) {
  const T w_y = g.length[1] / T(g.ncell[1]), w_z = g.length[D - 1] / T(g.ncell[D - 1]);
  // The x-row lies below (dy = +1: the source row is above it) or above the source's cell.
  const T gap_y = corner_dy(q) > 0 ? p.y - T(sy) * w_y : T(sy + 1) * w_y - p.y;
  const T gap_z = corner_dz(q) > 0 ? component(p, D - 1) - T(sz) * w_z : T(sz + 1) * w_z - component(p, D - 1);
  const T margin = T(1e-3) * g.cutoff + T(1e-5) * (g.length[1] > g.length[D - 1] ? g.length[1] : g.length[D - 1]);
  const T reach = g.cutoff + margin;
  return gap_y < T(0) || gap_z < T(0) || gap_y * gap_y + gap_z * gap_z < reach * reach;
}

}  // namespace pmkit::detail
