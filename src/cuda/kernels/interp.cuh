#pragma once
// M2P kernels: one thread per particle gathering from the mesh, or the tile's window
// staged in shared memory; then unbin_kernel, the caller's order.
#include <cstdint>

#include "cuda/kernels/tiles.cuh"

namespace pmkit::cuda {

// Where interp puts a particle's values: at its binned slot, for unbin_kernel to put in
// the caller's order (coalesced stores here, a gather there), or, with `perm`, straight
// at the caller's index (one scattered store a value; the backend takes it only where
// the outputs fit in L2 beside the mesh, so the stores merge there instead of costing a
// sector's read-modify-write in DRAM each: tuning::interp_direct_pays).
template <class T>
struct InterpOutput {
  T* binned;                   // [count][binned_stride]
  std::size_t binned_stride;
  const std::uint32_t* perm;   // binned slot -> caller's index, or null

  // kDirect fixed at compile time (the tile kernels: a run-time choice there cost them
  // 8 bytes of spill at their register budgets, ptxas), or read off perm.
  template <bool kDirect, int N>
  __device__ __forceinline__ void store_as(const PropPass<T>& pass, int count, std::size_t slot,
                                           const T (&acc)[N]) const {
    if constexpr (kDirect) {
      const std::ptrdiff_t i = perm[slot];
#pragma unroll
      for (int j = 0; j < N; ++j)
        if (j < count) pass.values[j][i * pass.value_stride[j]] = acc[j];
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j)
        if (j < count) binned[j * binned_stride + slot] = acc[j];
    }
  }
  template <int N>
  __device__ __forceinline__ void store(const PropPass<T>& pass, int count, std::size_t slot, const T (&acc)[N]) const {
    if (perm)
      store_as<true>(pass, count, slot, acc);
    else
      store_as<false>(pass, count, slot, acc);
  }
};

// ---------------------------------------------------------------------------------
// M2P: one thread per particle in tile order (neighbours read neighbouring nodes, so
// the gathers hit in cache), results in binned order (unbin_kernel puts them in the
// caller's). Also serves the away list of update_points (slots: each record's slot).
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    interp_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                  const std::uint32_t* slots, ItemCount items, PropPass<T> pass, InterpOutput<T> out) {
  with_own_record<K, D>(geo, particles, items, [&](std::size_t i, const int (&base)[D], const T (&s)[D]) {
    T acc[tuning::kPropsPerPass] = {};
    detail::for_each_node<K, D>(layout, base, s, [&](std::int64_t node, T w) {
#pragma unroll
      for (int j = 0; j < tuning::kPropsPerPass; ++j)
        if (j < pass.count) acc[j] += w * __ldg(pass.meshes[j] + node);
    });
    out.store(pass, pass.count, slots ? slots[i] : i, acc);
  });
}

// The S window values that start at one node, padded to a power of two and aligned as
// a whole, so that interp reads a stencil row with one vector load (two for S > 4 in
// float, S > 2 in double) instead of S scalar ones: the kernel is bound by issued
// instructions, and a row of M'4 in scalars is 4 LDS.32.
template <class T, int S>
struct RowSpan {
  static constexpr int kPad = S <= 2 ? 2 : S <= 4 ? 4 : 8;
  static constexpr int kAlign = kPad * sizeof(T) < 16 ? kPad * sizeof(T) : 16;
  struct alignas(kAlign) Values {
    T v[kPad];
  };
};

// Whether interp stages its window as row spans (tuning::interp_row_spans_pay).
template <class K, int D, class T, int NP>
constexpr bool interp_row_spans() {
  return tuning::interp_row_spans_pay(D, sizeof(T)) &&
         std::size_t(NP) * TileWindow<K, D>::kNodes * sizeof(typename RowSpan<T, K::support>::Values) <=
             tuning::kInterpRowSpanBytes;
}
template <class K, int D, class T, int NP>
constexpr std::size_t interp_tiles_shared_bytes() {
  return std::size_t(NP) * TileWindow<K, D>::kNodes *
         (interp_row_spans<K, D, T, NP>() ? sizeof(typename RowSpan<T, K::support>::Values) : sizeof(T));
}

// The window of a tile kernel's meshes in shared memory, as a stencil row reads it:
// row(j, r) gives the S values from window node r of mesh j on, indexable by [a] (a row
// span: one vector load; or a pointer into the plain window: S scalar loads).
template <class K, int D, class T, bool kSpans>
struct StagedWindow {
  using Span = typename RowSpan<T, K::support>::Values;
  struct Pointer {
    const T* values;
    __device__ __forceinline__ T operator[](int a) const { return values[a]; }
  };
  struct Vector {
    Span span;
    __device__ __forceinline__ T operator[](int a) const { return span.v[a]; }
  };
  const unsigned char* shared;
  __device__ __forceinline__ auto row(int j, int r) const {
    constexpr int kNodes = TileWindow<K, D>::kNodes;
    if constexpr (kSpans) return Vector{reinterpret_cast<const Span*>(shared)[j * kNodes + r]};
    else return Pointer{reinterpret_cast<const T*>(shared) + j * kNodes + r};
  }
};

// What interp's tile kernel computes at a particle from the staged window: its NP
// values, one a mesh. (interp_gradient's: kernels/gradient.cuh.)
template <int NP>
struct ValueGather {
  static constexpr int kMeshes = NP;   // meshes staged in the window
  static constexpr int kOutputs = NP;  // values a particle stores
  template <class K, int D, class T, class Window>
  __device__ __forceinline__ void operator()(const Window& window, int origin, const T (&s)[D],
                                             T (&acc)[kOutputs]) const {
    constexpr int S = K::support;
    for_each_window_row<K, D>(origin, s, [&](int row, T row_weight, const T (&wx)[S]) {
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const auto values = window.row(j, row);
        T sum = 0;
#pragma unroll
        for (int a = 0; a < S; ++a) sum += wx[a] * values[a];
        acc[j] += row_weight * sum;
      }
    });
  }
};

// M2P through shared memory: a block loads its tile's window of each mesh once (with
// the boundary's wrap or fold), then every particle of the chunk reads its S^D nodes
// from shared memory, in the chunk's interleaved order (interleave_kernel). Results go
// through `out` (InterpOutput, GradientOutput: binned slots, or the caller's order). The thread's
// particles are loaded before the window, so that the two loads' latencies overlap
// instead of stalling the block twice. Where it fits, the window is
// held as row spans (RowSpan: node k's span holds nodes k .. k + S - 1). What a
// particle computes from the window is the Gather's (ValueGather: its values;
// GradientGather: their gradients), on Gather::kMeshes meshes. The kernel declares the
// shared memory: the window (interp_shared, interp_tiles_shared_bytes) and the tables.
template <class K, int D, class T, bool kDirect, class Gather, class Output>
__device__ __forceinline__ void interp_tiles_block(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                                   const Chunk* chunks, const Packed<T>* particles,
                                                   const std::uint16_t* order, const PropPass<T>& pass,
                                                   const Output& out, const Gather& gather,
                                                   unsigned char* interp_shared,
                                                   typename TileWindow<K, D>::IndexTables& tables) {
  using Window = TileWindow<K, D>;
  constexpr int S = K::support;
  constexpr int NP = Gather::kMeshes;
  using Span = typename RowSpan<T, S>::Values;
  constexpr bool kSpans = interp_row_spans<K, D, T, NP>();
  T* window_values = reinterpret_cast<T*>(interp_shared);  // [NP][Window::kNodes]
  Span* window_spans = reinterpret_cast<Span*>(interp_shared);  // [NP][Window::kNodes] (kSpans)
  const Chunk chunk = chunks[blockIdx.x];
  if (chunk.count == 0) return;  // past the binning's chunks (Chunk)
  if (!pass.parts.takes(geo, chunk.tile)) return;  // another part's tile (TileParts)
  Packed<T> mine[kSlots] = {};
  std::uint32_t local[kSlots] = {};
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i < chunk.count) {
      local[r] = taken(order, chunk, i);
      mine[r] = particles[chunk.begin + local[r]];
    }
  }
  int tile[D];
  geo.tile_coords(chunk.tile, tile);
  Window::fill_index_tables(layout, tile, tables);
  __syncthreads();
  for (int k = threadIdx.x; k < Window::kNodes; k += blockDim.x) {
    std::int64_t index;
    const bool inside = Window::table_index(tables, k, index);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const T value = inside ? __ldg(pass.meshes[j] + index) : T(0);
      if constexpr (kSpans) {
        // Node k is entry a of the spans that start a nodes earlier. Entries past the
        // window's end, and those that run into the next row, are never read.
        PMKIT_UNROLL
        for (int a = 0; a < S; ++a)
          if (k >= a) window_spans[j * Window::kNodes + k - a].v[a] = value;
      } else {
        window_values[j * Window::kNodes + k] = value;
      }
    }
  }
  __syncthreads();
  const StagedWindow<K, D, T, kSpans> window{interp_shared};

#pragma unroll 1
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i >= chunk.count) break;
    const Packed<T> particle = pick(mine, r);
    if (particle.cell == kAwayCell) continue;
    const int origin = Window::origin(geo, particle, tile);
    T s[D];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) s[d] = local_coordinate(particle, d);
    T acc[Gather::kOutputs] = {};
    gather.template operator()<K, D>(window, origin, s, acc);
    out.template store_as<kDirect>(pass, Gather::kOutputs, chunk.begin + pick(local, r), acc);
  }
}

template <class K, int D, class T, int NP, bool kDirect>
__global__ void __launch_bounds__(tuning::kSpreadThreads, tuning::interp_tile_blocks_per_sm(sizeof(T), D, K::support, NP))
    interp_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                        const Packed<T>* particles, const std::uint16_t* order, std::size_t n, PropPass<T> pass,
                        InterpOutput<T> out) {
  extern __shared__ __align__(16) unsigned char interp_shared[];
  __shared__ typename TileWindow<K, D>::IndexTables tables;
  interp_tiles_block<K, D, T, kDirect>(layout, geo, chunks, particles, order, pass, out, ValueGather<NP>{},
                                       interp_shared, tables);
}

// M2P's last step where the outputs do not fit in L2: each caller's particle reads its
// value from its binned slot. A coalesced write and a scattered read; the other way round
// (writing through perm), every 4-byte store is a read-modify-write of a whole sector in
// DRAM.
template <class T>
__global__ void unbin_kernel(PropPass<T> pass, const T* binned_values, std::size_t n, const std::uint32_t* slot) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t from = slot[i];
  for (int j = 0; j < pass.count; ++j)
    pass.values[j][static_cast<std::ptrdiff_t>(i) * pass.value_stride[j]] = binned_values[j * n + from];
}

}  // namespace pmkit::cuda
