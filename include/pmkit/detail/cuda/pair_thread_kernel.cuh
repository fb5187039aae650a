#pragma once
// The thread-per-particle methods: one thread (or three) per target walks its
// neighbouring x-rows from global memory.
#include "pmkit/detail/cuda/pair_rows.cuh"

namespace pmkit::detail::pair_traversal {

// Thread per particle (kParts = 1) and three threads per particle (kParts = 3): target i's
// neighbouring x-rows are split into kParts consecutive parts (three: one z-plane of three
// rows each in 3D, one row each in 2D), each walked from global memory by a thread of a
// warp of its own, so that a warp's 32 lanes (32 consecutive targets) walk the same
// neighbouring rows and share their loads in L1. The parts' outputs meet in shared memory
// and are added in a fixed order (the same bits every run). Where cells hold few particles
// a thread's nine rows are a serial chain of dependent loads and there are too few targets
// to fill the GPU with warps that hide it; in three parts the chain is three rows long. Blocks are kParts warps of 32 targets, or 128 targets in one part.
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

}  // namespace pmkit::detail::pair_traversal
