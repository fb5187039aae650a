#pragma once
// The half-shell method: each pair once, on the pencil's staging, the reaction summed over
// a warp in registers and added by atomics.
#include "pmkit/detail/cuda/pair_window.cuh"

namespace pmkit::detail::pair_traversal {

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
      pencil_block<Kernel::inputs>(a, shape, true, blockIdx.x);
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

}  // namespace pmkit::detail::pair_traversal
