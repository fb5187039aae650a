#pragma once
// A pencil target's walk over a staged row: its cells in the stage, the cut to the x-window
// of its warp or its own, the walk itself; and the register budgets of the pencil kernels.
#include <type_traits>

#include "pmkit/detail/cuda/pair_pencil_block.cuh"

namespace pmkit::detail::pair_traversal {

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
// The staged x are sorted up to a disorder d <= x_slack / 2 (see pair_geometry.hpp), so a
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

// A pencil target's x-window, the same for its whole walk: with x-sorted cells, each
// staged row narrows to the sources within a cutoff of the x-range of the warp's targets
// (2.3 instead of 3 cell widths at 100 a cell), found by one binary search the whole warp
// shares. A warp spread over more than a cell (few particles a cell) searches per lane
// (`per_lane`) instead: each target then visits 2 rather than 3 cell widths of every row.
// The bounds are widened by x_slack. All lanes call it.
template <class T>
struct TargetWindow {
  T lo, hi;
  bool per_lane;
};
template <class T, int D, int kIn, int kOut>
__device__ __forceinline__ TargetWindow<T> target_window(const Args<T, D, kIn, kOut>& a, bool active, T x) {
  T warp_lo, warp_hi;
  warp_x_range(active, x, warp_lo, warp_hi);
  TargetWindow<T> w;
  w.per_lane = warp_hi - warp_lo > a.g.cutoff;
  const T reach = a.g.cutoff + a.g.x_slack;
  w.lo = (w.per_lane ? x : warp_lo) - reach;
  w.hi = (w.per_lane ? x : warp_hi) + reach;
  return w;
}

// Target i's sources in staged row `row` (cell-start table `starts`) within the stage
// [base, stop): its three cells cx-1 .. cx+1 as stage indices [from, to), cut to its
// window where cells are x-sorted, and its own stage index `self` if the row is its own.
template <class T, int D, int kIn, int kOut>
__device__ __forceinline__ void target_row_range(const Args<T, D, kIn, kOut>& a, const StagedRow<T>& row,
                                                 const std::uint32_t* starts, const PackedPosition<T, D>* src_pos,
                                                 int cx, int x0, std::uint32_t i, std::uint32_t base,
                                                 std::uint32_t stop, const TargetWindow<T>& w, std::uint32_t& from,
                                                 std::uint32_t& to, std::uint32_t& self) {
  std::uint32_t lo, cx_start, next_start, hi;
  target_cells(row, starts, cx, x0, i, lo, cx_start, next_start, hi, self);
  from = max(lo, base);
  to = min(hi, stop);
  if (a.g.x_bits == 0 || from >= to) return;
  if (w.per_lane) {
    // The lane's window ends lie in its cells cx-1 and cx+1 (in cells at most a cutoff +
    // x_slack wide; in wider ones the window only comes out wider), so each end is
    // searched in one cell: a third of the range, two lifting steps fewer.
    cut_to_x_window(src_pos, base, from, min(to, cx_start), max(from, next_start), to, w.lo, w.hi, from, to);
  } else {
    // The part of the row in this stage, the same search in every lane (broadcast reads).
    const RowPieces<T>& rp = row.pieces;
    const std::uint32_t search_from = max(row.base, base);
    const std::uint32_t search_to = min(row.base + rp.local[rp.count], stop);
    cut_to_x_window(src_pos, base, search_from, search_to, search_from, search_to, w.lo, w.hi, from, to);
  }
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
// them to 3 blocks of 512 threads an SM, at most 42 registers: more blocks an SM against
// a longer body, which pays off at some densities and not at others, so Auto times both
// (docs/tuning.md#kfewregisters). Explicit methods take the default, the compiler's own
// choice (0 blocks: no minimum, as `__launch_bounds__(512)`; a minimum of 1 makes ptxas
// take other, larger allocations). Double has the default only: it spills under the cap.
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

// Candidates a trip of the x-pencil's walk where cells are dense (3D float): the wider
// trip overlaps the shared loads and FMA chains of a window of hundreds of candidates,
// and costs where windows are short (docs/tuning.md#kdenseunroll). Its own kernel, so
// that the other launches keep their code.
constexpr int kDenseUnroll = 8;

}  // namespace pmkit::detail::pair_traversal
