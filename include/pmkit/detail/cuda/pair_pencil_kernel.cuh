#pragma once
// The x-pencil and block-per-cell methods: the full shell on a pencil's staged rows.
#include "pmkit/detail/cuda/pair_window.cuh"

namespace pmkit::detail::pair_traversal {

template <class T, int D, class Kernel, bool kFewRegisters, int kUnroll>
__global__ void __launch_bounds__(512, min_blocks_of_512(kFewRegisters))
    pencil_kernel(const Args<T, D, inputs_of<Kernel>(), Kernel::outputs> a, const Kernel kernel,
                  const PencilShape shape) {
  constexpr int kIn = inputs_of<Kernel>(), kOut = Kernel::outputs;
  constexpr int kRows = kNeighbourRows<D>;
  // The 3^(D-1) neighbouring rows, cells x0-1 .. x_hi of each, are staged together (in
  // stages of `capacity` sources if they do not fit), so that their loads overlap.
  const auto [pencil, targets_begin, targets_end, src_pos, src_in, rows, staged, cell_starts, starts_width] =
      pencil_block<Kernel::inputs>(a, shape, false, blockIdx.x);

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

}  // namespace pmkit::detail::pair_traversal
