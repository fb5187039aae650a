#pragma once
// The compacted pencil methods: the x-pencil's blocks and staging, a walk that runs the
// kernel's body only for the candidates in range, and a target's neighbouring rows split
// over several warps where the particles are too few to fill the GPU otherwise.
#include "pmkit/detail/cuda/pair_window.cuh"

namespace pmkit::detail::pair_traversal {

// Launch shape of the compacted methods: the pencil's shape, the targets a block walks at
// once (`lanes`, whole warps; the block has kParts times as many threads) and how many
// blocks share one pencil's targets (`chunks`: block b of a pencil takes its passes b,
// b + chunks, ... of `lanes` targets each).
struct CompactShape {
  PencilShape pencil;
  int lanes = 32;
  int chunks = 1;
};

// Byte offset, in a compacted block's dynamic shared memory, of the parts' partial sums
// (after the stage and the cell-start table, aligned for T), and the bytes in all.
template <class T, int D>
__host__ __device__ constexpr std::size_t compact_partials_offset(int capacity, int length,
                                                                  std::size_t bytes_per_source) {
  const std::size_t end = std::size_t(capacity) * bytes_per_source +
                          std::size_t(kNeighbourRows<D>) * cell_starts_per_row(length) * sizeof(std::uint32_t);
  return (end + sizeof(T) - 1) / sizeof(T) * sizeof(T);
}
// Bytes after the partial sums, so that a chunk's test may read up to 31 positions past a
// stage's last source wherever that lies.
template <class T, int D>
constexpr std::size_t kCompactPadding = 32 * sizeof(PackedPosition<T, D>);
template <class T, int D>
__host__ __device__ constexpr std::size_t compact_shared_bytes(const CompactShape& s, std::size_t bytes_per_source,
                                                               int parts, int outputs) {
  return compact_partials_offset<T, D>(s.pencil.capacity, s.pencil.length, bytes_per_source) +
         std::size_t(parts - 1) * outputs * s.lanes * sizeof(T) + kCompactPadding<T, D>;
}

// A target's walk over stage indices [from, to) of one staged row, in chunks of 32
// candidates: first the distance test of the whole chunk into a mask of those in range
// (no branch: the test alone, a fifth of the body's cost), then the kernel on each set
// bit, in increasing order. A warp's lanes then run the body together on their own
// pairs, where the x-pencil's walk runs it for every candidate any lane has in range
// (with an erfc in the body and a fifth of the candidates in range, most lanes idle).
// The pairs reach the accumulators in the order of the x-pencil's walk, with the same
// arithmetic.
template <bool kOwnRow, int kInputs, class T, int D, class Kernel, int kIn, int kOut>
__device__ __forceinline__ void walk_compacted(const Kernel& kernel, const PackedPosition<T, D>* src_pos,
                                               const T* src_in, int capacity, std::uint32_t base, std::uint32_t from,
                                               std::uint32_t to, std::uint32_t self, T cutoff2, const T (&xi)[D],
                                               const T (&in_i)[kIn], T (&acc)[kOut]) {
  for (std::uint32_t chunk = from; chunk < to; chunk += 32) {
    const std::uint32_t first = chunk - base;
    std::uint32_t hits = 0;
    // Past the row's end the reads stay in the block's shared memory (kCompactPadding)
    // and are masked below.
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      T r[D];
      const T r2 = separation(xi, src_pos[first + k], r);
      hits |= (r2 < cutoff2 ? 1u : 0u) << k;
    }
    if (to - chunk < 32) hits &= (1u << (to - chunk)) - 1u;
    if (kOwnRow && self - chunk < 32) hits &= ~(1u << (self - chunk));
    while (hits) {
      const std::uint32_t l = first + static_cast<std::uint32_t>(__ffs(hits) - 1);
      hits &= hits - 1u;
      T r_ij[D], in_j[kIn], discard[kOut];
      const T r2 = separation(xi, src_pos[l], r_ij);
#pragma unroll
      for (int k = 0; k < kInputs; ++k) in_j[k] = src_in[k * capacity + l];
      kernel(r_ij, r2, in_i, in_j, acc, discard);
    }
  }
}

// The compacted x-pencil (kParts = 1) and the row split (kParts = 3^(D-1)): a block's
// threads are kParts groups of shape.lanes, each group walking kNeighbourRows / kParts of
// the rows for the same targets (group p the rows p * rows/kParts ...), their outputs
// added in shared memory in a fixed order (the same bits every run). The block stages
// its pencil's rows as the x-pencil does (the cut to the x-window too) and takes the
// passes of its chunk. With one row a warp and a chunk of 32 targets a block, a system of
// 10^4 particles at 100 a cell runs ~3000 warps instead of the x-pencil's ~400: the
// body's latency then hides behind other warps.
template <class T, int D, class Kernel, int kParts>
__global__ void __launch_bounds__(512)
    compact_pencil_kernel(const Args<T, D, inputs_of<Kernel>(), Kernel::outputs> a, const Kernel kernel,
                          const CompactShape shape) {
  constexpr int kIn = inputs_of<Kernel>(), kOut = Kernel::outputs;
  constexpr int kRows = kNeighbourRows<D>;
  static_assert(kRows % kParts == 0, "the rows split evenly over the parts");
  constexpr int kPartRows = kRows / kParts;
  const std::uint32_t chunk = blockIdx.x % shape.chunks;
  const auto [pencil, targets_begin, targets_end, src_pos, src_in, rows, staged, cell_starts, starts_width] =
      pencil_block<Kernel::inputs>(a, shape.pencil, false, blockIdx.x / shape.chunks);
  const std::uint32_t lanes = shape.lanes, stride = shape.chunks * lanes;
  if (targets_begin + chunk * lanes >= targets_end) return;  // the whole block: none of its pencil's passes
  const int part = kParts == 1 ? 0 : static_cast<int>(threadIdx.x / lanes);
  const std::uint32_t lane = kParts == 1 ? threadIdx.x : threadIdx.x % lanes;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* partial = reinterpret_cast<T*>(
      shared_bytes + compact_partials_offset<T, D>(shape.pencil.capacity, shape.pencil.length,
                                                   sizeof(PackedPosition<T, D>) + Kernel::inputs * sizeof(T)));

  for (std::uint32_t first = targets_begin + chunk * lanes; first < targets_end; first += stride) {
    const std::uint32_t i = first + lane;
    const bool active = i < targets_end;
    T xi[D] = {}, in_i[kIn] = {}, acc[kOut] = {};
    const int cx = load_target<Kernel::inputs>(a, active, i, pencil.x0, xi, in_i);
    const TargetWindow<T> window = target_window(a, active, xi[0]);
    for (std::uint32_t base = 0; base < *staged; base += shape.pencil.capacity) {
      const std::uint32_t stop = min(*staged, base + shape.pencil.capacity);
      __syncthreads();  // the previous stage has been read
      stage_sources<Kernel::inputs>(a, rows, false, base, stop, shape.pencil.capacity, src_pos, src_in);
      __syncthreads();
      if (!active) continue;
      for (int rr = 0; rr < kPartRows; ++rr) {
        const int r = part * kPartRows + rr;
        if (rows[r].pieces.count == 0) continue;
        std::uint32_t from, to, self;
        target_row_range(a, rows[r], cell_starts + r * starts_width, src_pos, cx, pencil.x0, i, base, stop, window,
                         from, to, self);
        if (rows[r].own)
          walk_compacted<true, Kernel::inputs>(kernel, src_pos, src_in, shape.pencil.capacity, base, from, to, self,
                                               a.g.cutoff2, xi, in_i, acc);
        else
          walk_compacted<false, Kernel::inputs>(kernel, src_pos, src_in, shape.pencil.capacity, base, from, to, self,
                                                a.g.cutoff2, xi, in_i, acc);
      }
    }
    if constexpr (kParts > 1) {
      // Parts 1.. hand their sums to part 0, which adds them in part order.
      if (part > 0)
#pragma unroll
        for (int k = 0; k < kOut; ++k) partial[((part - 1) * kOut + k) * lanes + lane] = acc[k];
      __syncthreads();
      if (part == 0)
        for (int p = 0; p < kParts - 1; ++p)
#pragma unroll
          for (int k = 0; k < kOut; ++k) acc[k] += partial[(p * kOut + k) * lanes + lane];
      // The next pass's parts write again only after its first stage's barrier.
    }
    if (part == 0 && active) write_outputs(a, kernel, i, acc);
  }
}

}  // namespace pmkit::detail::pair_traversal
