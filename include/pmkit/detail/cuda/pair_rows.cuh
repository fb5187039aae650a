#pragma once
// The CUDA pair traversal's common pieces (device code, compiled by nvcc for each kernel
// type): a launch's arguments, the ranges of a neighbouring x-row of cells, a particle's
// inputs and outputs, the separation of two particles.
#include <cstdint>

#include "pmkit/detail/pair_geometry.hpp"
#include "pmkit/pair_kernels.hpp"
#include "pmkit/view.hpp"

namespace pmkit::detail::pair_traversal {

template <class T, int D, int kIn, int kOut>
struct Args {
  PairGeometry<T, D> g;
  const PackedPosition<T, D>* __restrict__ pos;
  const std::uint32_t* __restrict__ start;
  const std::uint32_t* __restrict__ perm;
  const T* __restrict__ inputs;  // gathered into sorted order: inputs[k * n + slot]
  // The binning's corner lists (DevicePairView), or null where it built none.
  const std::uint32_t* __restrict__ corner_index;
  const std::uint32_t* __restrict__ corner_start;
  View<T> out[kOut];
  std::uint32_t n;
};

// The sources of x-cells [x_lo, x_hi] of one row (x_lo may be -1 and x_hi may be nx: the
// cells past the ends, which exist only as periodic images): up to three contiguous
// ranges, in increasing x, each seen shifted by `shift` along x. The ranges are of sorted
// slots, or of entries of a corner list (StagedRow::index), as the row's cell starts are.
template <class T>
struct RowPieces {
  std::uint32_t begin[3], end[3];
  T shift[3];
  std::uint32_t local[4];  // where each piece starts when the pieces are laid end to end
  int count;
  int middle;  // the piece of the in-range cells
};

// f(begin, end, shift_x, middle) for each range of the row's cells [x_lo, x_hi], in
// increasing x (`starts`: the row's cell starts, Args::start or a corner list's): the
// periodic image of the last cell (x_lo = -1), the in-range cells (`middle`), the image
// of the first (x_hi = nx). The thread kernels walk the ranges as they come, in
// registers; RowPieces keeps them for a pencil's row table (its arrays, filled at indices
// known only at run time, would live in local memory in a thread's walk: a chain of local
// stores and loads before each row).
template <class T, int D, int kIn, int kOut, class F>
__device__ __forceinline__ void for_each_row_range(const Args<T, D, kIn, kOut>& a, const std::uint32_t* starts,
                                                   int row, int x_lo, int x_hi, F&& f) {
  const int nx = a.g.ncell[0];
  if (x_lo < 0 && a.g.periodic[0]) f(starts[row + nx - 1], starts[row + nx], -a.g.length[0], false);
  f(starts[row + max(x_lo, 0)], starts[row + min(x_hi, nx - 1) + 1], T(0), true);
  if (x_hi >= nx && a.g.periodic[0]) f(starts[row], starts[row + 1], a.g.length[0], false);
}

template <class T, int D, int kIn, int kOut>
__device__ __forceinline__ RowPieces<T> row_pieces(const Args<T, D, kIn, kOut>& a, const std::uint32_t* starts,
                                                   int row, int x_lo, int x_hi) {
  RowPieces<T> r;
  r.count = 0;
  r.local[0] = 0;
  for_each_row_range(a, starts, row, x_lo, x_hi, [&](std::uint32_t begin, std::uint32_t end, T shift, bool middle) {
    if (middle) r.middle = r.count;
    r.begin[r.count] = begin;
    r.end[r.count] = end;
    r.shift[r.count] = shift;
    r.local[r.count + 1] = r.local[r.count] + (end - begin);
    ++r.count;
  });
  return r;
}

// The neighbouring x-row (dy, dz) of the cell (cy, cz): its first cell and its shift
// along y and z; false past a bounded face (a row past a periodic face wraps, shifted).
template <class T, int D>
__device__ __forceinline__ bool row_of(const PairGeometry<T, D>& g, int cy, int cz, int dy, int dz, int& first_cell,
                                       T& shift_y, T& shift_z) {
  int z = D == 3 ? cz + dz : 0;
  shift_z = 0;
  if (D == 3) {
    const int nz = g.ncell[D - 1];
    if (z < 0 || z >= nz) {
      if (!g.periodic[D - 1]) return false;
      shift_z = z < 0 ? -g.length[D - 1] : g.length[D - 1];
      z = z < 0 ? z + nz : z - nz;
    }
  }
  int y = cy + dy;
  shift_y = 0;
  const int ny = g.ncell[1];
  if (y < 0 || y >= ny) {
    if (!g.periodic[1]) return false;
    shift_y = y < 0 ? -g.length[1] : g.length[1];
    y = y < 0 ? y + ny : y - ny;
  }
  first_cell = (z * ny + y) * g.ncell[0];
  return true;
}

// The x-rows around a cell's own row (3^(D-1)), in the order (dz, dy) = (-1, -1), (-1, 0),
// ..., (1, 1): row r is dy = r % 3 - 1, dz = r / 3 - 1.
template <int D>
constexpr int kNeighbourRows = D == 3 ? 9 : 3;

// The kernel's `count` inputs of a sorted slot (the arrays have at least one element).
template <int count, class T, int kIn>
__device__ __forceinline__ void load_inputs(const T* __restrict__ inputs, std::uint32_t n, std::uint32_t slot,
                                            T (&in)[kIn]) {
#pragma unroll
  for (int k = 0; k < count; ++k) in[k] = inputs[std::size_t(k) * n + slot];
}

template <class T, int D, int kIn, int kOut, class Kernel>
__device__ __forceinline__ void write_outputs(const Args<T, D, kIn, kOut>& a, const Kernel& kernel,
                                              std::uint32_t slot, T (&acc)[kOut]) {
  finish_outputs(kernel, acc);
  const std::uint32_t dst = a.perm[slot];
#pragma unroll
  for (int k = 0; k < kOut; ++k) a.out[k][dst] = acc[k];
}

// r = x - p and its square.
template <class T, int D>
__device__ __forceinline__ T separation(const T (&x)[D], const PackedPosition<T, D>& p, T (&r)[D]) {
  T r2 = 0;
#pragma unroll
  for (int d = 0; d < D; ++d) {
    r[d] = x[d] - component(p, d);
    r2 += r[d] * r[d];
  }
  return r2;
}

template <class Kernel>
constexpr int inputs_of() {
  return Kernel::inputs > 0 ? Kernel::inputs : 1;
}

}  // namespace pmkit::detail::pair_traversal
