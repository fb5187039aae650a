#pragma once
// The head of the pencil kernels (x-pencil, block per cell, half shell): a block's
// pencil of cells, its targets, its table of neighbouring rows and their sources staged
// in shared memory.
#include "pmkit/detail/cuda/pair_rows.cuh"

namespace pmkit::detail::pair_traversal {

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
// `pencil` numbers the pencils row by row (a block's index, or a group of blocks' that
// share a pencil).
struct Pencil {
  int x0, x1, x_hi, own_row, cy, cz;
};

template <class T, int D>
__device__ __forceinline__ Pencil pencil_of(const PairGeometry<T, D>& g, int length, int extend,
                                            std::uint32_t pencil) {
  const int nx = g.ncell[0];
  const int pencils_per_row = (nx + length - 1) / length;
  const int row_index = pencil / pencils_per_row;
  Pencil p;
  p.x0 = (pencil % pencils_per_row) * length;
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
// starts come from the arguments then (a pointer read from the row table costs the
// half shell registers, and so blocks an SM).
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
// warp up to `extend` cells past x1; with extend 0, exactly the targets of its cells.
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
// pencil: the block's pencil (pencil_of).
template <int kInputs, class T, int D, int kIn, int kOut>
__device__ __forceinline__ PencilBlock<T, D> pencil_block(const Args<T, D, kIn, kOut>& a, const PencilShape& shape,
                                                          bool half, std::uint32_t pencil) {
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
  // Whole warps for the half shell only: the x-pencil gains nothing by them
  // (docs/tuning.md#kwholewarpsfrom).
  const int extend = half ? shape.extend : 0;
  b.pencil = pencil_of(a.g, shape.length, extend, pencil);
  b.targets_begin = pencil_targets(a, b.pencil.own_row, b.pencil.x0, extend);
  b.targets_end = pencil_targets(a, b.pencil.own_row, b.pencil.x1, extend);
  stage_row_table(a, b.pencil, half, rows, staged);
  // Each target's cells in each row come from here rather than from global memory (a
  // load's latency before every row's search).
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

}  // namespace pmkit::detail::pair_traversal
