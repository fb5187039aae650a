#pragma once
// CUDA traversal of the pair cell lists for a caller's pair kernel. Include this from a
// file compiled by nvcc to use PairPlan::compute with your own kernel on the CUDA backend
// (the built-in kernels are compiled into the library already).
//
// Four methods are full shell: every particle (a "target") sums its own outputs over the
// "sources" of the 3^D cells around its cell, so no two threads write the same output and
// no atomics are needed. The particles are sorted by cell with x fastest, so the three
// cells of one neighbouring x-row are one contiguous range of sorted slots: a row is one
// range (two or three on a periodic seam, each with its periodic image shift).
//
// - thread per particle: each thread reads its sources from global memory (the threads of
//   a warp share cells, so the reads hit L1);
// - three threads per particle: the same with a particle's rows in three parts, each
//   walked by a warp of its own (for few particles a cell: thread_per_particle_kernel);
// - x-pencil: a block takes L consecutive cells of an x-row; it stages cells x0-1 .. x0+L
//   of all 3^(D-1) neighbouring rows into shared memory at once (in stages if they do not
//   fit), and every target reads its three cells of each row from there. Where cells
//   hold 4 or more particles the binning also sorts each cell by x, and each staged row
//   is cut by binary search to the x-window within a cutoff of the warp's targets (or of
//   each lane's target, when a warp spans more than a cell). Where cells are dense (3D),
//   the binning also lists, for each of the four corner rows (dy and dz both nonzero),
//   only the sources that can be within the cutoff of the x-row, and those rows are
//   staged from these lists (pair_cells.hpp, corner_source_live);
// - block per cell: the x-pencil with L = 1.
//
// The fourth, the half shell, calls the kernel once per pair (Newton's third law): the
// x-pencil's blocks and staging on the rows ahead of the target only (see
// half_shell_kernel), the source's share summed over a warp in registers and added with
// one atomic per source and warp. Its results vary in the last bits from run to run.
// Where cells are dense, its blocks' targets are whole warps, the last running on into the
// next pencil's first cell (pencil_targets).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <typeindex>
#include <type_traits>

#include "pmkit/pairs.hpp"

namespace pmkit::detail {
namespace pair_traversal {

template <class T, int D, int kIn, int kOut>
struct Args {
  PairGeometry<T, D> g;
  const PackedPosition<T, D>* __restrict__ pos;
  const std::uint32_t* __restrict__ start;
  const std::uint32_t* __restrict__ perm;
  const T* __restrict__ inputs;  // gathered into sorted order: inputs[k * n + slot]
  // The binning's corner lists (DevicePairCells), or null where it built none.
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

// Thread per particle (kParts = 1) and three threads per particle (kParts = 3): target i's
// neighbouring x-rows are split into kParts consecutive parts (three: one z-plane of three
// rows each in 3D, one row each in 2D), each walked from global memory by a thread of a
// warp of its own, so that a warp's 32 lanes (32 consecutive targets) walk the same
// neighbouring rows and share their loads in L1. The parts' outputs meet in shared memory
// and are added in a fixed order (the same bits every run). Where cells hold few particles
// a thread's nine rows are a serial chain of dependent loads and there are too few targets
// to fill the GPU with warps that hide it (bench/NOTES.md P34); in three parts the chain
// is three rows long. Blocks are kParts warps of 32 targets, or 128 targets in one part.
template <class T, int D, class Kernel, int kParts>
__global__ void __launch_bounds__(128)
    thread_per_particle_kernel(const Args<T, D, inputs_of<Kernel>(), Kernel::outputs> a, const Kernel kernel) {
  constexpr int kIn = inputs_of<Kernel>(), kOut = Kernel::outputs, kRows = kNeighbourRows<D>;
  static_assert(kRows % kParts == 0, "the rows split evenly");
  const int part = kParts == 1 ? 0 : static_cast<int>(threadIdx.x / 32);
  const std::uint32_t i = kParts == 1 ? blockIdx.x * blockDim.x + threadIdx.x : blockIdx.x * 32 + threadIdx.x % 32;
  if (kParts == 1 && i >= a.n) return;  // with parts, every thread reaches the barrier
  T acc[kOut] = {};
  if (i < a.n) {
    const PackedPosition<T, D> pi = a.pos[i];
    T xi[D];
    int cell[3] = {0, 0, 0};
#pragma unroll
    for (int d = 0; d < D; ++d) {
      xi[d] = component(pi, d);
      cell[d] = pair_cell_coordinate(a.g, d, xi[d]);
    }
    T in_i[kIn], in_j[kIn];
    load_inputs<Kernel::inputs>(a.inputs, a.n, i, in_i);
    for (int r = part * (kRows / kParts); r < (part + 1) * (kRows / kParts); ++r) {
      int row;
      T shift_y, shift_z;
      if (!row_of(a.g, cell[1], cell[2], r % 3 - 1, D == 3 ? r / 3 - 1 : 0, row, shift_y, shift_z)) continue;
      for_each_row_range(a, a.start, row, cell[0] - 1, cell[0] + 1,
                         [&](std::uint32_t begin, std::uint32_t end, T shift_x, bool) {
        // The target seen from the sources' image: r = x_i - (x_j + shift).
        T t[D];
        t[0] = xi[0] - shift_x;
        t[1] = xi[1] - shift_y;
        if (D == 3) t[D - 1] = xi[D - 1] - shift_z;
        // Unrolled so that several source loads are in flight (they hit L1, but in order).
#pragma unroll 4
        for (std::uint32_t j = begin; j < end; ++j) {
          T r_ij[D];
          const T r2 = separation(t, a.pos[j], r_ij);
          if (r2 < a.g.cutoff2 && j != i) {
            T discard[kOut];
            load_inputs<Kernel::inputs>(a.inputs, a.n, j, in_j);
            kernel(r_ij, r2, in_i, in_j, acc, discard);
          }
        }
      });
    }
  }
  if constexpr (kParts > 1) {
    __shared__ T partial[kParts - 1][kOut][32];
    if (part > 0)
#pragma unroll
      for (int k = 0; k < kOut; ++k) partial[part - 1][k][threadIdx.x % 32] = acc[k];
    __syncthreads();
    if (part > 0) return;
#pragma unroll
    for (int p = 0; p < kParts - 1; ++p)
#pragma unroll
      for (int k = 0; k < kOut; ++k) acc[k] += partial[p][k][threadIdx.x];
  }
  if (i < a.n) write_outputs(a, kernel, i, acc);
}

// Launch shape of the pencil kernel: cells per pencil, threads, shared sources per stage,
// and `extend` (half shell only): how many cells past its pencil a block may take targets
// from, so that its targets fill whole warps (see pencil_targets).
struct PencilShape {
  int length = 1;
  int threads = 64;
  int capacity = 64;
  int extend = 0;
};

// The half shell stages the rows ahead and its own.
template <int D>
constexpr int kHalfShellRows = D == 3 ? 5 : 2;

// One neighbouring row of a pencil as staged in shared memory: its pieces and shifts,
// and where it starts in the stage (the rows are laid end to end). A corner row of a
// full-shell block, where the binning built corner lists, is staged from its list: its
// pieces and cell starts (`starts`) then count list entries, and `index` maps them to
// sorted slots (null: the row's own slots, starts = Args::start).
template <class T>
struct StagedRow {
  RowPieces<T> pieces;
  T shift_y, shift_z;
  std::uint32_t base;
  int first_cell;
  bool own;
  const std::uint32_t* starts;
  const std::uint32_t* index;
};

// The sorted slot of source m of a row's pieces laid end to end, and its piece's x shift.
// By selects: a RowPieces indexed by a run-time piece would live in local memory.
template <class T>
__device__ __forceinline__ std::uint32_t piece_slot(const RowPieces<T>& rp, std::uint32_t m, T& shift_x) {
  const bool first_piece = m < rp.local[1], third = rp.count > 2 && m >= rp.local[2];
  shift_x = first_piece ? rp.shift[0] : third ? rp.shift[2] : rp.shift[1];
  return first_piece ? rp.begin[0] + m : third ? rp.begin[2] + (m - rp.local[2]) : rp.begin[1] + (m - rp.local[1]);
}

// The cells of a pencil block: cells x0 .. x1-1 of the x-row (cy, cz), whose first cell
// is own_row; its targets lie in cells x0 .. x_hi-1 (x_hi = x1 + extend, at most nx).
struct Pencil {
  int x0, x1, x_hi, own_row, cy, cz;
};

template <class T, int D>
__device__ __forceinline__ Pencil pencil_of(const PairGeometry<T, D>& g, int length, int extend) {
  const int nx = g.ncell[0];
  const int pencils_per_row = (nx + length - 1) / length;
  const int row_index = blockIdx.x / pencils_per_row;
  Pencil p;
  p.x0 = (blockIdx.x % pencils_per_row) * length;
  p.x1 = min(p.x0 + length, nx);
  p.x_hi = min(p.x1 + extend, nx);
  p.own_row = row_index * nx;
  p.cy = row_index % g.ncell[1];
  p.cz = D == 3 ? row_index / g.ncell[1] : 0;
  return p;
}

// The block's table of the 3^(D-1) neighbouring rows, cells x0-1 .. x_hi of each, and the
// sources of all of them (`staged`). The half shell needs only the rows ahead (dz > 0, or
// dz = 0 and dy >= 0) and its own row from x0 on: the others are left empty, so that they
// are neither staged nor walked. Called by the whole block (it has barriers).
template <class T, int D, int kIn, int kOut>
__device__ __forceinline__ void stage_row_table(const Args<T, D, kIn, kOut>& a, const Pencil& p, bool half,
                                                StagedRow<T>* rows, std::uint32_t& staged) {
  constexpr int kRows = kNeighbourRows<D>;
  if (threadIdx.x < kRows) {
    StagedRow<T> row;
    const int dy = threadIdx.x % 3 - 1, dz = D == 3 ? static_cast<int>(threadIdx.x) / 3 - 1 : 0;
    row.own = dy == 0 && dz == 0;
    // The half shell maps stage entries back to sorted slots for its atomics (piece_slot):
    // it stages whole rows.
    const bool from_list = !half && dy != 0 && dz != 0 && a.corner_index != nullptr;
    const int q = corner_q(dy, dz);
    const int starts_per_list = a.g.ncell[0] * a.g.ncell[1] * (D == 3 ? a.g.ncell[D - 1] : 1) + 1;
    const std::uint32_t* starts = from_list ? a.corner_start + q * starts_per_list : a.start;
    row.starts = starts;
    row.index = from_list ? a.corner_index : nullptr;
    const bool wanted = !half || dz > 0 || (dz == 0 && dy >= 0);
    if (wanted && row_of(a.g, p.cy, p.cz, dy, dz, row.first_cell, row.shift_y, row.shift_z)) {
      row.pieces = row_pieces(a, starts, row.first_cell, half && row.own ? p.x0 : p.x0 - 1, p.x_hi);
    } else {
      row.pieces.count = 0;
      row.pieces.middle = 0;
      row.pieces.local[0] = 0;
    }
    rows[threadIdx.x] = row;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t base = 0;
    for (int r = 0; r < kRows; ++r) {
      rows[r].base = base;
      base += rows[r].pieces.local[rows[r].pieces.count];
    }
    staged = base;
  }
  __syncthreads();
}

// What the head of both pencil kernels sets up: the block's pencil, its targets (sorted
// slots [targets_begin, targets_end)), and its shared memory: the staged sources
// (positions, then the inputs, src_in[k * capacity + l]), the table of neighbouring rows,
// filled (`half`: the half shell's rows), the count of staged sources, and where cells
// x0-1 .. x_hi+1 of each row start in the stage (`cell_starts`, `starts_width` entries a
// row, after the inputs). Called by the whole block.
template <class T, int D>
struct PencilBlock {
  Pencil pencil;
  std::uint32_t targets_begin, targets_end;
  PackedPosition<T, D>* src_pos;
  T* src_in;
  StagedRow<T>* rows;
  const std::uint32_t* staged;
  const std::uint32_t* cell_starts;
  int starts_width;
};

// Entries of a row of the cell-start table for blocks of up to `cells` target cells
// (length + extend): cells x0-1 .. x0+cells+1.
__host__ __device__ constexpr int cell_starts_per_row(int cells) { return cells + 3; }

// The stage index of a sorted slot (a list entry, for a row staged from a corner list) of
// a staged row's in-range cells (its middle piece).
template <class T>
__device__ __forceinline__ std::uint32_t staged_index(const StagedRow<T>& row, std::uint32_t slot) {
  const RowPieces<T>& rp = row.pieces;
  const std::uint32_t mid = rp.middle ? rp.begin[1] : rp.begin[0];
  const std::uint32_t mid_local = row.base + (rp.middle ? rp.local[1] : rp.local[0]);
  return mid_local + (slot - mid);
}

// The stage index where cell c (x0-1 <= c <= x_hi+1) of a staged row starts: the row's
// start for c = -1 (the periodic image of the last cell, or nothing), its end past cell
// nx, else the cell's first sorted slot in the middle piece. A target's three cells
// cx-1 .. cx+1 are then [start of cx-1, start of cx+2). `half` as in stage_sources: the
// starts come from the arguments then (the pointer read from the row table cost the LJ
// half shell 7 registers, 2 blocks an SM instead of 3; bench/NOTES.md P30).
template <class T, int D, int kIn, int kOut>
__device__ __forceinline__ std::uint32_t staged_cell_start(const Args<T, D, kIn, kOut>& a, const StagedRow<T>& row,
                                                           bool half, int c) {
  if (c < 0) return row.base;
  if (c > a.g.ncell[0]) return row.base + row.pieces.local[row.pieces.count];
  return staged_index(row, (half ? a.start : row.starts)[row.first_cell + c]);
}

// Where the targets of the pencil that starts at cell x of the row start (the row's end
// for x = nx). A block's targets are a whole number of warps, counted from the row's
// first slot: the first slot of cell x rounded up to the next warp, where that lies in
// cells x .. x+extend-1 (else cell x+extend's first slot). So the block of cells x0 ..
// x1-1 takes the end of cell x0 only from the next whole warp on and carries its last
// warp up to `extend` cells past x1 (bench/NOTES.md P27); with extend 0, exactly the
// targets of its cells.
template <class T, int D, int kIn, int kOut>
__device__ __forceinline__ std::uint32_t pencil_targets(const Args<T, D, kIn, kOut>& a, int own_row, int x,
                                                        int extend) {
  const int nx = a.g.ncell[0];
  if (x >= nx) return a.start[own_row + nx];
  const std::uint32_t cell_first = a.start[own_row + x];
  if (extend == 0) return cell_first;
  const std::uint32_t row_first = a.start[own_row];
  const std::uint32_t whole_warps = row_first + (cell_first - row_first + 31u) / 32u * 32u;
  return min(whole_warps, a.start[own_row + min(x + extend, nx)]);
}

// kInputs: the kernel's inputs a source (0 for Lennard-Jones: its stage holds positions only).
template <int kInputs, class T, int D, int kIn, int kOut>
__device__ __forceinline__ PencilBlock<T, D> pencil_block(const Args<T, D, kIn, kOut>& a, const PencilShape& shape,
                                                          bool half) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ StagedRow<T> rows[kNeighbourRows<D>];
  __shared__ std::uint32_t staged;
  PencilBlock<T, D> b;
  b.src_pos = reinterpret_cast<PackedPosition<T, D>*>(shared_bytes);
  b.src_in = reinterpret_cast<T*>(b.src_pos + shape.capacity);
  std::uint32_t* cell_starts = reinterpret_cast<std::uint32_t*>(b.src_in + kInputs * shape.capacity);
  b.rows = rows;
  b.staged = &staged;
  b.cell_starts = cell_starts;
  // Whole warps for the half shell only: the x-pencil measured no faster with them
  // (bench/NOTES.md P27), and with extend 0 its code is as before.
  const int extend = half ? shape.extend : 0;
  b.pencil = pencil_of(a.g, shape.length, extend);
  b.targets_begin = pencil_targets(a, b.pencil.own_row, b.pencil.x0, extend);
  b.targets_end = pencil_targets(a, b.pencil.own_row, b.pencil.x1, extend);
  stage_row_table(a, b.pencil, half, rows, staged);
  // Each target's cells in each row come from here rather than from global memory (a
  // load's latency before every row's search; bench/NOTES.md P23, P24).
  b.starts_width = cell_starts_per_row(shape.length + extend);
  const int cells = b.pencil.x_hi - b.pencil.x0 + 3;
  for (int e = threadIdx.x; e < kNeighbourRows<D> * cells; e += blockDim.x) {
    const int r = e / cells, k = e % cells;
    if (rows[r].pieces.count > 0)
      cell_starts[r * b.starts_width + k] = staged_cell_start(a, rows[r], half, b.pencil.x0 - 1 + k);
  }
  __syncthreads();
  return b;
}

// Stage indices [base, stop) of the rows into shared memory, each source shifted to the
// image its targets see. `half`: the half shell's rows, never staged from a corner list
// (stage_row_table), so its code has no list load. Called by the whole block, between
// barriers.
template <int kInputs, class T, int D, int kIn, int kOut>
__device__ __forceinline__ void stage_sources(const Args<T, D, kIn, kOut>& a, const StagedRow<T>* rows, bool half,
                                              std::uint32_t base, std::uint32_t stop, int capacity,
                                              PackedPosition<T, D>* src_pos, T* src_in) {
  constexpr int kRows = kNeighbourRows<D>;
  for (int r = 0; r < kRows; ++r) {
    const RowPieces<T>& rp = rows[r].pieces;
    const std::uint32_t row_base = rows[r].base;
    const std::uint32_t from = max(row_base, base), to = min(row_base + rp.local[rp.count], stop);
    const std::uint32_t* index = half ? nullptr : rows[r].index;
    for (std::uint32_t l = from + threadIdx.x; l < to; l += blockDim.x) {
      T shift_x;
      std::uint32_t slot = piece_slot(rp, l - row_base, shift_x);
      if (index) slot = index[slot];
      PackedPosition<T, D> p = a.pos[slot];
      p.x += shift_x;
      p.y += rows[r].shift_y;
      if constexpr (D == 3) p.z += rows[r].shift_z;
      src_pos[l - base] = p;
#pragma unroll
      for (int k = 0; k < kInputs; ++k) src_in[k * capacity + (l - base)] = a.inputs[std::size_t(k) * a.n + slot];
    }
  }
}

// A target's three cells cx-1 .. cx+1 of a staged row, as stage indices [lo, hi), where
// cells cx and cx+1 start (cx_start, next_start), and its own stage index if the row is
// its own (else none); `starts` is the row's part of the cell-start table, from cell
// x0-1. Of a half-shell own row (staged from x0 on) only hi and self are meaningful.
template <class T>
__device__ __forceinline__ void target_cells(const StagedRow<T>& row, const std::uint32_t* starts, int cx, int x0,
                                             std::uint32_t i, std::uint32_t& lo, std::uint32_t& cx_start,
                                             std::uint32_t& next_start, std::uint32_t& hi, std::uint32_t& self) {
  const int k = cx - x0;  // cell cx-1
  lo = starts[k];
  cx_start = starts[k + 1];
  next_start = starts[k + 2];
  hi = starts[k + 3];
  self = row.own ? staged_index(row, i) : 0xffffffffu;
}

// The x-range of the warp's active targets (+inf, -inf if none). All lanes call it.
template <class T>
__device__ __forceinline__ void warp_x_range(bool active, T x, T& lo, T& hi) {
  lo = active ? x : T(INFINITY);
  hi = active ? x : -T(INFINITY);
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
  }
}

// [from, to) cut to the sources whose x may lie in [window_lo, window_hi] (the bounds
// already widened by x_slack), by binary searches over parts of the staged row that holds
// [from, to) (ranges below); stage index l at stage[l - base].
//
// The staged x are sorted up to a disorder d <= x_slack / 2 (see pair_cells.hpp), so a
// search is conservative if the source before its lower bound was seen below window_lo
// (every earlier one is then below window_lo + d) and the source at its upper bound was
// seen above window_hi (or the bound is the end).
//
// Both bounds are found by binary lifting in one loop: `at` is the last source known to
// lie below the bound (from - 1 at first), and steps s = 2^k, ..., 2, 1 move it to at + s
// where that source (clamped to the last) is still below. Before step s, at + 2s is past
// the end or a source seen not below, which gives both guarantees: the bound at + 1
// follows a source seen below (or starts its range), and is a source seen not below (or
// ends its range). The two searches' shared loads issue together: one chain of log2 n
// dependent loads instead of two, ~13 instructions a step for both.
//
// The lower bound is searched in [lo_from, lo_to) and the upper one in [hi_from, hi_to)
// (either may be empty: that bound is then left as it is); the sources before lo_from
// and from hi_to on must be outside the window or outside [from, to) already.
template <class T, int D>
__device__ __forceinline__ void cut_to_x_window(const PackedPosition<T, D>* stage, std::uint32_t base,
                                                std::uint32_t lo_from, std::uint32_t lo_to, std::uint32_t hi_from,
                                                std::uint32_t hi_to, T window_lo, T window_hi, std::uint32_t& from,
                                                std::uint32_t& to) {
  const bool has_lo = lo_from < lo_to, has_hi = hi_from < hi_to;
  if (!has_lo && !has_hi) return;
  // An empty range searches the other one's (valid stage indices) and is ignored.
  if (!has_lo) lo_from = hi_from, lo_to = hi_to;
  if (!has_hi) hi_from = lo_from, hi_to = lo_to;
  const std::uint32_t lo_last = lo_to - 1 - base, hi_last = hi_to - 1 - base;
  // Stage offsets; `at` wraps when its range starts at the stage's first source and
  // unwraps below.
  std::uint32_t lo_at = lo_from - 1 - base, hi_at = hi_from - 1 - base;
  for (std::uint32_t step = 1u << (31 - __clz(max(lo_to - lo_from, hi_to - hi_from))); step > 0; step /= 2) {
    const std::uint32_t lo_probe = min(lo_at + step, lo_last), hi_probe = min(hi_at + step, hi_last);
    if (stage[lo_probe].x < window_lo) lo_at = lo_probe;  // first x >= window_lo
    if (stage[hi_probe].x <= window_hi) hi_at = hi_probe;  // first x > window_hi
  }
  if (has_lo) from = max(from, lo_at + 1 + base);
  if (has_hi) to = min(to, hi_at + 1 + base);
}

// A pencil block's target i (its lane active): position and inputs into xi and in_i, and
// its x cell as the result; an inactive lane keeps its zeros and gets the pencil's first
// cell.
template <int kInputs, class T, int D, int kIn, int kOut>
__device__ __forceinline__ int load_target(const Args<T, D, kIn, kOut>& a, bool active, std::uint32_t i, int x0,
                                           T (&xi)[D], T (&in_i)[kIn]) {
  if (!active) return x0;
  const PackedPosition<T, D> pi = a.pos[i];
#pragma unroll
  for (int d = 0; d < D; ++d) xi[d] = component(pi, d);
  const int cx = pair_cell_coordinate(a.g, 0, xi[0]);
  load_inputs<kInputs>(a.inputs, a.n, i, in_i);
  return cx;
}

// A target's walk over stage indices [from, to) of one staged row (stage index l at
// l - base). Only the target's own row holds the target itself: the other rows (8 of 9
// in 3D) are walked without the self test, two of a candidate's ~12 test instructions.
// kUnroll candidates a loop trip (see kDenseUnroll).
template <bool kOwnRow, int kUnroll, int kInputs, class T, int D, class Kernel, int kIn, int kOut>
__device__ __forceinline__ void walk_staged(const Kernel& kernel, const PackedPosition<T, D>* src_pos,
                                            const T* src_in, int capacity, std::uint32_t base, std::uint32_t from,
                                            std::uint32_t to, std::uint32_t self, T cutoff2, const T (&xi)[D],
                                            const T (&in_i)[kIn], T (&acc)[kOut]) {
#pragma unroll kUnroll
  for (std::uint32_t l = from; l < to; ++l) {
    T r_ij[D];
    const T r2 = separation(xi, src_pos[l - base], r_ij);
    if (r2 < cutoff2 && (!kOwnRow || l != self)) {
      T in_j[kIn], discard[kOut];
#pragma unroll
      for (int k = 0; k < kInputs; ++k) in_j[k] = src_in[k * capacity + (l - base)];
      kernel(r_ij, r2, in_i, in_j, acc, discard);
    }
  }
}

// Register budget of the pencil and half-shell kernels: kFewRegisters (float only) holds
// them to 3 blocks of 512 threads an SM, at most 42 registers (the built-in kernels then
// take 38-40). At 100 a cell (384-thread blocks) the LJ kernels' 50-53 registers let 3
// blocks an SM run, 40 let 4: 5-6% faster; at 1 and 10 a cell the held code was 2-4%
// slower (bench/NOTES.md P14). So Auto times both; explicit methods take the default,
// the compiler's own choice (0 blocks: no minimum, as `__launch_bounds__(512)`; a
// minimum of 1 makes ptxas take other, larger allocations). Double has the default
// only: it spills under the cap.
template <class T>
constexpr bool kHasFewRegisters = sizeof(T) == 4;
constexpr int min_blocks_of_512(bool few_registers) { return few_registers ? 3 : 0; }

// f(std::true_type) for the held budget where asked and compiled, else f(std::false_type).
template <class T, class F>
void with_register_budget(bool few_registers, F&& f) {
  if constexpr (kHasFewRegisters<T>) {
    if (few_registers) return f(std::true_type{});
  }
  f(std::false_type{});
}

// The x-pencil's walk unrolled by 8 where cells are dense (32 or more a cell, 3D float):
// there each window holds hundreds of candidates whose shared loads and FMA chains the
// wider trip overlaps (Lennard-Jones at 100 a cell -2%, the expensive kernel's x-pencil
// +1.7%; bench/NOTES.md P33), while at 10 a cell an 8-unrolled walk cost 2-3% (P19). Its
// own kernel, so that the other launches keep their code.
constexpr int kDenseUnroll = 8;

template <class T, int D, class Kernel, bool kFewRegisters, int kUnroll>
__global__ void __launch_bounds__(512, min_blocks_of_512(kFewRegisters))
    pencil_kernel(const Args<T, D, inputs_of<Kernel>(), Kernel::outputs> a, const Kernel kernel,
                  const PencilShape shape) {
  constexpr int kIn = inputs_of<Kernel>(), kOut = Kernel::outputs;
  constexpr int kRows = kNeighbourRows<D>;
  // The 3^(D-1) neighbouring rows, cells x0-1 .. x_hi of each, are staged together (in
  // stages of `capacity` sources if they do not fit), so that their loads overlap.
  const auto [pencil, targets_begin, targets_end, src_pos, src_in, rows, staged, cell_starts, starts_width] =
      pencil_block<Kernel::inputs>(a, shape, false);

  for (std::uint32_t first = targets_begin; first < targets_end; first += blockDim.x) {
    const std::uint32_t i = first + threadIdx.x;
    const bool active = i < targets_end;
    T xi[D] = {}, in_i[kIn] = {}, acc[kOut] = {};
    const int cx = load_target<Kernel::inputs>(a, active, i, pencil.x0, xi, in_i);
    // The x-range of the warp's targets: with x-sorted cells, each staged row narrows to
    // the sources within a cutoff of it (2.3 instead of 3 cell widths at 100 a cell), found
    // by one binary search the whole warp shares.
    T warp_lo, warp_hi;
    warp_x_range(active, xi[0], warp_lo, warp_hi);
    // A warp spread over more than a cell (few particles a cell) searches per lane instead:
    // each target then visits 2 rather than 3 cell widths of every row.
    const bool lane_windows = warp_hi - warp_lo > a.g.cutoff;
    const T reach = a.g.cutoff + a.g.x_slack;
    const T window_lo = (lane_windows ? xi[0] : warp_lo) - reach;
    const T window_hi = (lane_windows ? xi[0] : warp_hi) + reach;
    for (std::uint32_t base = 0; base < *staged; base += shape.capacity) {
      const std::uint32_t stop = min(*staged, base + shape.capacity);
      __syncthreads();  // the previous stage has been read
      stage_sources<Kernel::inputs>(a, rows, false, base, stop, shape.capacity, src_pos, src_in);
      __syncthreads();
      if (!active) continue;
      for (int r = 0; r < kRows; ++r) {
        const RowPieces<T>& rp = rows[r].pieces;
        if (rp.count == 0) continue;
        const std::uint32_t row_base = rows[r].base;
        // This target's three cells cx-1 .. cx+1, as positions in the stage.
        std::uint32_t lo, cx_start, next_start, hi, self;
        target_cells(rows[r], cell_starts + r * starts_width, cx, pencil.x0, i, lo, cx_start, next_start, hi, self);
        std::uint32_t from = max(lo, base), to = min(hi, stop);
        if (a.g.x_bits > 0 && from < to) {
          if (lane_windows) {
            // The lane's window ends lie in its cells cx-1 and cx+1 (in cells at most a
            // cutoff + x_slack wide; in wider ones the window only comes out wider), so each
            // end is searched in one cell: a third of the range, two lifting steps fewer.
            cut_to_x_window(src_pos, base, from, min(to, cx_start), max(from, next_start), to, window_lo, window_hi,
                            from, to);
          } else {
            // The part of the row in this stage, the same search in every lane (broadcast reads).
            const std::uint32_t search_from = max(row_base, base);
            const std::uint32_t search_to = min(row_base + rp.local[rp.count], stop);
            cut_to_x_window(src_pos, base, search_from, search_to, search_from, search_to, window_lo, window_hi,
                            from, to);
          }
        }
        // Only the own row holds the target itself (the same row in the whole block).
        if (rows[r].own)
          walk_staged<true, kUnroll, Kernel::inputs>(kernel, src_pos, src_in, shape.capacity, base, from, to, self,
                                                     a.g.cutoff2, xi, in_i, acc);
        else
          walk_staged<false, kUnroll, Kernel::inputs>(kernel, src_pos, src_in, shape.capacity, base, from, to, self,
                                                      a.g.cutoff2, xi, in_i, acc);
      }
    }
    if (active) write_outputs(a, kernel, i, acc);
  }
}

// One chunk of 32 staged sources for a warp of half-shell targets: at step m, lane k
// takes source (k + m) mod 32 and hands `share` (the shares of the source it holds) to
// lane k - 1, so that after 32 steps lane k holds the warp's share of source k. A lane
// evaluates only its sources [first, end) of the chunk; with kWhole, all 32 of them in
// every lane (no tests).
template <bool kWhole, int kInputs, class T, int D, class Kernel, int kIn, int kOut>
__device__ __forceinline__ void walk_chunk(const Kernel& kernel, const PackedPosition<T, D>* chunk_pos,
                                           const T* chunk_in, int capacity, unsigned lane, unsigned first,
                                           unsigned end, T cutoff2, const T (&xi)[D], const T (&in_i)[kIn],
                                           T (&acc)[kOut], T (&share)[kOut]) {
#pragma unroll 8
  for (unsigned m = 0; m < 32; ++m) {
    const unsigned k = (lane + m) & 31u;
    if (kWhole || (k >= first && k < end)) {
      T r_ij[D];
      const T r2 = separation(xi, chunk_pos[k], r_ij);
      if (r2 < cutoff2) {
        T in_j[kIn];
#pragma unroll
        for (int q = 0; q < kInputs; ++q) in_j[q] = chunk_in[q * capacity + k];
        kernel(r_ij, r2, in_i, in_j, acc, share);
      }
    }
#pragma unroll
    for (int q = 0; q < kOut; ++q) share[q] = __shfl_sync(0xffffffffu, share[q], (lane + 1) & 31u);
  }
}

// Half shell on the x-pencil's blocks: a target takes the sources of its own cell of
// higher sorted slot, the cell after it in x, and the three cells of each row ahead (dy
// = +1 in its z-layer, all three rows of z-layer +1): 13 of the 26 neighbour cells in 3D,
// 4 of 8 in 2D. A pair seen through the cell offset o from one particle is seen through
// -o from the other, and exactly one of o, -o is ahead, so each pair is evaluated once,
// on periodic axes of two cells too (the two images of such a neighbour are different
// offsets).
//
// The reaction: a warp walks the union of its lanes' ranges of a row in chunks of 32
// sources, lane k taking source k + m (mod 32) at step m. The lanes' sources differ at
// every step, so a lane adds the source's share to a register array, which it then hands
// one lane down; after 32 steps lane k holds the whole warp's share of source k. That
// costs Kernel::outputs shuffles a step, where a warp-wide reduction per source would
// cost five times as many. The shares and, at the end, each target's own sum go to `sums`
// (zeroed before) by atomics in sorted order, so that a warp's atomics hit consecutive
// addresses; scatter_sums_kernel then writes them in the caller's order. The order in
// which the atomics land varies, so the last bits do.
template <class T, int D, class Kernel, bool kFewRegisters>
__global__ void __launch_bounds__(512, min_blocks_of_512(kFewRegisters))  // as pencil_kernel
    half_shell_kernel(const Args<T, D, inputs_of<Kernel>(), Kernel::outputs> a, const Kernel kernel,
                      const PencilShape shape, T* __restrict__ sums) {
  constexpr int kIn = inputs_of<Kernel>(), kOut = Kernel::outputs;
  constexpr int kRows = kNeighbourRows<D>;
  constexpr unsigned kAll = 0xffffffffu;
  const auto [pencil, targets_begin, targets_end, src_pos, src_in, rows, staged, cell_starts, starts_width] =
      pencil_block<Kernel::inputs>(a, shape, true);
  const unsigned lane = threadIdx.x % 32;

  // blockDim.x is a multiple of 32 and every thread runs the same iterations, so each
  // warp is whole in the shuffles below.
  for (std::uint32_t first = targets_begin; first < targets_end; first += blockDim.x) {
    const std::uint32_t i = first + threadIdx.x;
    const bool active = i < targets_end;
    T xi[D] = {}, in_i[kIn] = {}, acc[kOut] = {};
    const int cx = load_target<Kernel::inputs>(a, active, i, pencil.x0, xi, in_i);
    const bool warp_active = __any_sync(kAll, active);
    // Every lane walks the warp's range (idle where it leaves the lane's own), so the
    // warp's x-window cuts it, also where the warp spans more than a cell.
    T warp_lo, warp_hi;
    warp_x_range(active, xi[0], warp_lo, warp_hi);
    const T reach = a.g.cutoff + a.g.x_slack;
    const T window_lo = warp_lo - reach, window_hi = warp_hi + reach;
    for (std::uint32_t base = 0; base < *staged; base += shape.capacity) {
      const std::uint32_t stop = min(*staged, base + shape.capacity);
      __syncthreads();  // the previous stage has been read
      stage_sources<Kernel::inputs>(a, rows, true, base, stop, shape.capacity, src_pos, src_in);
      __syncthreads();
      if (!warp_active) continue;  // the same in all lanes
      for (int r = 0; r < kRows; ++r) {
        const RowPieces<T>& rp = rows[r].pieces;
        if (rp.count == 0) continue;
        const std::uint32_t row_base = rows[r].base;
        std::uint32_t lo, cx_start, next_start, hi, self;
        target_cells(rows[r], cell_starts + r * starts_width, cx, pencil.x0, i, lo, cx_start, next_start, hi, self);
        if (rows[r].own) lo = self + 1;  // the own cell's pairs once; cell cx+1 whole
        std::uint32_t from = max(lo, base), to = min(hi, stop);
        if (!active || from >= to) {
          from = 0xffffffffu;
          to = 0;
        }
        std::uint32_t walk_from = from, walk_to = to;
        for (int offset = 16; offset > 0; offset /= 2) {
          walk_from = min(walk_from, __shfl_xor_sync(kAll, walk_from, offset));
          walk_to = max(walk_to, __shfl_xor_sync(kAll, walk_to, offset));
        }
        if (walk_from >= walk_to) continue;  // the same in all lanes
        if (a.g.x_bits > 0) {
          // The same search in every lane (broadcast reads), inside the walk: as conservative.
          const std::uint32_t search_from = walk_from, search_to = walk_to;
          cut_to_x_window(src_pos, base, search_from, search_to, search_from, search_to, window_lo, window_hi,
                          walk_from, walk_to);
        }
        // A lane evaluates only inside the walk, whose chunks hand every share back to a
        // lane that adds it; the walk lies inside [base, stop) and inside this row.
        from = max(from, walk_from);
        to = min(to, walk_to);
        for (std::uint32_t chunk = walk_from; chunk < walk_to; chunk += 32) {
          // This lane's sources in the chunk, [lane_first, lane_end) from the chunk's start.
          const unsigned lane_first = from <= chunk ? 0u : min(from - chunk, 32u);
          const unsigned lane_end = to <= chunk ? 0u : min(to - chunk, 32u);
          const PackedPosition<T, D>* chunk_pos = src_pos + (chunk - base);
          const T* chunk_in = src_in + (chunk - base);
          T share[kOut] = {};
          // Most chunks lie inside every lane's range: those skip the per-source tests.
          if (__all_sync(kAll, lane_first == 0 && lane_end == 32))
            walk_chunk<true, Kernel::inputs>(kernel, chunk_pos, chunk_in, shape.capacity, lane, lane_first,
                                             lane_end, a.g.cutoff2, xi, in_i, acc, share);
          else
            walk_chunk<false, Kernel::inputs>(kernel, chunk_pos, chunk_in, shape.capacity, lane, lane_first,
                                              lane_end, a.g.cutoff2, xi, in_i, acc, share);
          const std::uint32_t l = chunk + lane;  // the source whose share this lane now holds
          if (l < walk_to) {
            T shift_x;
            const std::size_t slot = piece_slot(rp, l - row_base, shift_x);
#pragma unroll
            for (int k = 0; k < kOut; ++k)
              if (share[k] != T(0)) atomicAdd(sums + std::size_t(k) * a.n + slot, share[k]);
          }
        }
      }
    }
    if (active) {
#pragma unroll
      for (int k = 0; k < kOut; ++k) atomicAdd(sums + std::size_t(k) * a.n + i, acc[k]);
    }
  }
}

// The half shell's sums, from sorted order to the caller's (finished there).
template <class T, int D, int kIn, int kOut, class Kernel>
__global__ void scatter_sums_kernel(const Args<T, D, kIn, kOut> a, const Kernel kernel, const T* __restrict__ sums) {
  const std::uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= a.n) return;
  T value[kOut];
#pragma unroll
  for (int k = 0; k < kOut; ++k) value[k] = sums[std::size_t(k) * a.n + s];
  write_outputs(a, kernel, s, value);
}

template <class T>
__global__ void gather_inputs_kernel(const View<const T> in0, const View<const T> in1, const View<const T> in2,
                                     const View<const T> in3, int count, const std::uint32_t* __restrict__ perm,
                                     std::uint32_t n, T* __restrict__ sorted) {
  const std::uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const std::uint32_t src = perm[s];
  const View<const T> views[4] = {in0, in1, in2, in3};
  for (int k = 0; k < count; ++k) sorted[std::size_t(k) * n + s] = views[k][src];
}

// The x-pencil's and the half shell's targets per block: Auto times the first two for
// both, and the x-pencil also with the third (whole rows of 32 cells at 10 a cell: fewer,
// fuller blocks and less staged halo; the first is what an explicit method takes).
constexpr int kPencilTargets[3] = {256, 128, 512};

// Bytes of a pencil block's cell-start table (see PencilBlock), and the longest pencil.
template <int D>
constexpr std::size_t cell_starts_bytes(int pencil_length) {
  return kNeighbourRows<D> * cell_starts_per_row(pencil_length) * sizeof(std::uint32_t);
}
constexpr int kMaxPencilLength = 224;

// `rows`: the neighbouring rows the method stages (3^(D-1), or the half shell's 5 or 2);
// `whole_warps`: the half shell's blocks take whole warps of targets where cells are dense.
template <class T, int D>
PencilShape pencil_shape(const DevicePairCells<T, D>& cells, int length, int targets_per_block,
                         std::size_t bytes_per_source, int rows, bool whole_warps) {
  const double per_cell = std::max(cells.mean_per_cell(), 0.5);
  const int nx = cells.geometry.ncell[0];
  PencilShape s;
  if (length <= 0) {  // x-pencil: enough cells for the targets wanted, balanced along the row
    const int want = std::clamp(static_cast<int>(targets_per_block / per_cell + 0.5), 2, nx);
    const int pencils = (nx + want - 1) / want;
    length = (nx + pencils - 1) / pencils;
  }
  // At most kMaxPencilLength cells, so that the cell-start table (9 rows) stays near 8 KB.
  s.length = std::max(1, std::min({length, nx, kMaxPencilLength}));
  // Half shell from 32 a cell: a block's targets are whole warps, its last warp running on
  // into the next pencil's first cell, which it stages too. Otherwise the block's partly
  // filled last warp costs a full one's shuffles and atomics (about one warp in 10 at 100
  // a cell: -6 to -10% there). At 10 a cell (4 cells more staged a row) the larger stage
  // cost a block an SM, and the x-pencil gained nothing (bench/NOTES.md P27).
  s.extend = whole_warps && s.length > 1 && per_cell >= 32 ? 1 : 0;
  const int targets = static_cast<int>(s.length * per_cell * 1.25 + 31) / 32 * 32;
  s.threads = std::clamp(targets, 64, 512);
  const int staged = static_cast<int>(rows * (s.length + s.extend + 2) * per_cell * 1.3 + 31) / 32 * 32;
  // The stage and the cell-start table in 44 KB; with the row table under 48 KB, no opt-in.
  const int max_capacity =
      static_cast<int>((44 * 1024 - cell_starts_bytes<D>(s.length + s.extend)) / bytes_per_source);
  s.capacity = std::clamp(staged, s.threads, std::max(s.threads, max_capacity));
  return s;
}

// A launch of a method: its x-pencil targets per block and register budget (pencil and
// half shell only).
struct Variant {
  int pencil_targets;
  bool few_registers;
};

template <class T, int D, class Kernel>
void launch(DevicePairCells<T, D>& cells, const Kernel& kernel, PairMethod method, Variant variant,
            const Args<T, D, inputs_of<Kernel>(), Kernel::outputs>& args) {
  if (cells.n == 0) return;
  if (method == PairMethod::CudaThreadPerParticle) {
    const unsigned blocks = static_cast<unsigned>((cells.n + 127) / 128);
    thread_per_particle_kernel<T, D, Kernel, 1><<<blocks, 128>>>(args, kernel);
    cuda::check_launch("pmkit PairPlan: thread-per-particle kernel");
    return;
  }
  if (method == PairMethod::CudaThreeThreadsPerParticle) {
    const unsigned blocks = static_cast<unsigned>((cells.n + 31) / 32);
    thread_per_particle_kernel<T, D, Kernel, 3><<<blocks, 3 * 32>>>(args, kernel);
    cuda::check_launch("pmkit PairPlan: three-threads-per-particle kernel");
    return;
  }
  // Only the kernel's own inputs: a kernel without any (Lennard-Jones) stages 16 bytes a
  // float source, not 20 (at 10 a cell, 6 blocks an SM instead of 5; bench/NOTES.md P25).
  const std::size_t bytes_per_source = sizeof(PackedPosition<T, D>) + Kernel::inputs * sizeof(T);
  const bool half = method == PairMethod::CudaHalfShell;
  const int staged_rows = half ? kHalfShellRows<D> : kNeighbourRows<D>;
  const PencilShape shape = pencil_shape(cells, method == PairMethod::CudaBlockPerCell ? 1 : 0,
                                         variant.pencil_targets, bytes_per_source, staged_rows, half);
  const int nx = cells.geometry.ncell[0];
  const std::size_t rows = cells.cells / static_cast<std::size_t>(nx);
  const unsigned blocks = static_cast<unsigned>(rows * ((nx + shape.length - 1) / shape.length));
  const std::size_t shared = shape.capacity * bytes_per_source + cell_starts_bytes<D>(shape.length + shape.extend);
  if (!half) {
    constexpr bool kMayUnroll = D == 3 && std::is_same_v<T, float>;
    const bool dense = kMayUnroll && method == PairMethod::CudaXPencil && cells.mean_per_cell() >= 32;
    with_register_budget<T>(variant.few_registers, [&](auto few) {
      constexpr bool kFew = decltype(few)::value;
      if (dense)
        pencil_kernel<T, D, Kernel, kFew, kMayUnroll ? kDenseUnroll : 4>
            <<<blocks, shape.threads, shared>>>(args, kernel, shape);
      else
        pencil_kernel<T, D, Kernel, kFew, 4><<<blocks, shape.threads, shared>>>(args, kernel, shape);
    });
    cuda::check_launch("pmkit PairPlan: pencil kernel");
    return;
  }
  constexpr int kOut = Kernel::outputs;
  cells.sorted_outputs.reserve(kOut * cells.n, "PairPlan::compute: half-shell sums");
  T* sums = cells.sorted_outputs.get();
  cuda::check(cudaMemsetAsync(sums, 0, kOut * cells.n * sizeof(T)), "pmkit PairPlan: zero the half-shell sums");
  with_register_budget<T>(variant.few_registers, [&](auto few) {
    half_shell_kernel<T, D, Kernel, decltype(few)::value><<<blocks, shape.threads, shared>>>(args, kernel, shape, sums);
  });
  cuda::check_launch("pmkit PairPlan: half-shell kernel");
  scatter_sums_kernel<<<static_cast<unsigned>((cells.n + 255) / 256), 256>>>(args, kernel,
                                                                              static_cast<const T*>(sums));
  cuda::check_launch("pmkit PairPlan: half-shell scatter");
}

}  // namespace pair_traversal

template <class T, int D, class Kernel>
void device_pair_compute(DevicePairCells<T, D>& cells, const Kernel& kernel, PairMethod method,
                         Span<View<const T>> inputs, Span<View<T>> outputs) {
  namespace pt = pair_traversal;
  constexpr int kIn = pt::inputs_of<Kernel>(), kOut = Kernel::outputs;
  static_assert(Kernel::inputs <= 4, "the CUDA pair traversal takes at most 4 inputs per particle");
  const cuda::DeviceScope on_device(cells.device);
  for (std::size_t k = 0; k < inputs.size(); ++k) cells.device_pointers.require(inputs[k].data, "inputs", k);
  for (std::size_t k = 0; k < outputs.size(); ++k) cells.device_pointers.require(outputs[k].data, "outputs", k);

  pt::Args<T, D, kIn, kOut> args;
  args.g = cells.geometry;
  args.pos = cells.pos.get();
  args.start = cells.start.get();
  args.perm = cells.perm.get();
  args.corner_index = cells.corner_lists ? cells.corner_index.get() : nullptr;
  args.corner_start = cells.corner_lists ? cells.corner_start.get() : nullptr;
  args.n = static_cast<std::uint32_t>(cells.n);
  args.inputs = nullptr;
  for (int k = 0; k < kOut; ++k) args.out[k] = outputs[k];
  if (Kernel::inputs > 0 && cells.n > 0) {
    cells.sorted_inputs.reserve(Kernel::inputs * cells.n, "PairPlan::compute: sorted inputs");
    const View<const T> none;
    auto in = [&](int k) { return k < Kernel::inputs ? inputs[k] : none; };
    pt::gather_inputs_kernel<T><<<static_cast<unsigned>((cells.n + 255) / 256), 256>>>(
        in(0), in(1), in(2), in(3), Kernel::inputs, cells.perm.get(), args.n, cells.sorted_inputs.get());
    cuda::check_launch("pmkit PairPlan: gather inputs");
    args.inputs = cells.sorted_inputs.get();
  }

  // One launch between the plan's two events, not waited for; cells.kernel_seconds()
  // reads its device time (waiting then).
  cells.make_events();
  auto launch_between_events = [&](PairMethod m, pt::Variant v) {
    cuda::check(cudaEventRecord(cells.events[0]), "cudaEventRecord");
    pt::launch(cells, kernel, m, v, args);
    cuda::check(cudaEventRecord(cells.events[1]), "cudaEventRecord");
    cells.kernel_time_pending = true;
  };
  auto timed_launch = [&](PairMethod m, pt::Variant v) {
    launch_between_events(m, v);
    return cells.kernel_seconds();
  };

  pt::Variant variant{pt::kPencilTargets[0], false};
  auto found = cells.chosen.find(std::type_index(typeid(Kernel)));
  if (found != cells.chosen.end()) variant = {found->second.pencil_targets, false};
  if (method == PairMethod::Auto) {
    const double per_cell = cells.mean_per_cell();
    if (found != cells.chosen.end() && per_cell <= 2 * found->second.per_cell &&
        2 * per_cell >= found->second.per_cell) {
      method = found->second.method;
      variant.few_registers = found->second.few_registers;
    } else {
      // One-time timing of each candidate (the x-pencil with three block sizes, the half
      // shell with two, each of the first sizes also with fewer registers in float): once
      // untimed (it loads the kernel and allocates scratch), then the best of three timed
      // runs. The half shell is timed with its zeroing and scatter.
      struct Candidate {
        PairMethod method;
        pt::Variant variant;
      };
      const int* targets = pt::kPencilTargets;
      const Candidate candidates[] = {{PairMethod::CudaThreadPerParticle, {targets[0], false}},
                                      {PairMethod::CudaThreeThreadsPerParticle, {targets[0], false}},
                                      {PairMethod::CudaBlockPerCell, {targets[0], false}},
                                      {PairMethod::CudaXPencil, {targets[0], false}},
                                      {PairMethod::CudaXPencil, {targets[1], false}},
                                      {PairMethod::CudaXPencil, {targets[2], false}},
                                      {PairMethod::CudaXPencil, {targets[0], true}},
                                      {PairMethod::CudaHalfShell, {targets[0], false}},
                                      {PairMethod::CudaHalfShell, {targets[1], false}},
                                      {PairMethod::CudaHalfShell, {targets[0], true}}};
      double best = 0;
      for (const Candidate& c : candidates) {
        if (c.variant.few_registers && !pt::kHasFewRegisters<T>) continue;  // not compiled: the default's twin
        pt::launch(cells, kernel, c.method, c.variant, args);
        const double seconds = std::min(
            {timed_launch(c.method, c.variant), timed_launch(c.method, c.variant), timed_launch(c.method, c.variant)});
        if (method == PairMethod::Auto || seconds < best) {
          method = c.method;
          variant = c.variant;
          best = seconds;
        }
      }
      cells.chosen[std::type_index(typeid(Kernel))] = {method, variant.pencil_targets, variant.few_registers,
                                                       per_cell};
    }
  }
  // Scratch allocated outside the timed launch (it synchronises).
  if (method == PairMethod::CudaHalfShell)
    cells.sorted_outputs.reserve(kOut * cells.n, "PairPlan::compute: half-shell sums");
  // The call's launch, not waited for: compute is asynchronous on the default stream, as
  // Plan::spread and interp are with device arrays; last_timings() reads its device time.
  launch_between_events(method, variant);
  cells.last_method = method;
}

}  // namespace pmkit::detail
