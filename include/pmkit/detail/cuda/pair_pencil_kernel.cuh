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
    const TargetWindow<T> window = target_window(a, active, xi[0]);
    for (std::uint32_t base = 0; base < *staged; base += shape.capacity) {
      const std::uint32_t stop = min(*staged, base + shape.capacity);
      __syncthreads();  // the previous stage has been read
      stage_sources<Kernel::inputs>(a, rows, false, base, stop, shape.capacity, src_pos, src_in);
      __syncthreads();
      if (!active) continue;
      for (int r = 0; r < kRows; ++r) {
        if (rows[r].pieces.count == 0) continue;
        std::uint32_t from, to, self;
        target_row_range(a, rows[r], cell_starts + r * starts_width, src_pos, cx, pencil.x0, i, base, stop, window,
                         from, to, self);
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
