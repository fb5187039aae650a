#pragma once
// P2M by shared-memory tiles with fixed-point accumulation, fast and deterministic modes
// (the deterministic mode's max |q| and its integer meshes' finalisation too).
#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "cuda/kernels/fixed_point.cuh"
#include "cuda/kernels/tiles.cuh"

namespace pmkit::cuda {

// ---------------------------------------------------------------------------------
// P2M: shared-memory tiles with fixed-point accumulation.
//
// One block per chunk. The accumulator holds, per property, W words per node of the
// tile's window. Per-block scale (fast mode): from the chunk's sum of |q|, so the
// rounding is relative to what the block holds (one_word_scale for float). Global
// scale (deterministic mode): from max |q| over all particles and N, identical in every
// block and every run, and the block's integer sums go to 64-bit integer meshes.

// 1 / scale, once a thread, instead of a double division (a reciprocal and ~8 FP64
// operations) per window node: a power-of-two scale (pow2_scale) gives the quotient's
// exact bits, the fast mode's one-word scale (one_word_scale) bits within a double
// rounding.
template <int NP>
__device__ __forceinline__ void unscales(const double* scale, double (&unscale)[NP]) {
#pragma unroll
  for (int j = 0; j < NP; ++j) unscale[j] = 1.0 / scale[j];
}

// The fast float flush by quads (TileWindow::first_quad_x): one float4 atomic adds four
// x-neighbours (global float atomics are done in L2, which takes a float4 as one
// operation: ~2.75x fewer of them for an 11-node row).
template <class K, int D, int NP>
__device__ __forceinline__ void flush_quads(const typename TileWindow<K, D>::IndexTables& tables,
                                            const int (&tile)[D], const int* accumulator, const double* scale,
                                            const PropPass<float>& pass) {
  using Window = TileWindow<K, D>;
  const int x0 = tile[0] * Window::kEdge - Window::kLead;
  const int qx0 = Window::first_quad_x(tile);
  constexpr int kRows = Window::kNodes / Window::kWidth;
  double unscale[NP];
  unscales(scale, unscale);
  for (int k = threadIdx.x; k < kRows * Window::kQuads; k += blockDim.x) {
    const int row = k / Window::kQuads;
    const int quad = k - row * Window::kQuads;
    const int qx = qx0 + 4 * quad;  // logical x of the quad's first node
    if (qx >= x0 + Window::kWidth) continue;
    const std::int64_t row_base = tables.row[row];
    if (row_base < 0) continue;
    const std::int64_t index = row_base + tables.quad[quad];
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local = qx + e - x0;
        v[e] = local >= 0 && local < Window::kWidth
                   ? static_cast<float>(accumulator[j * Window::kNodes + row * Window::kWidth + local] * unscale[j])
                   : 0.f;
      }
      if (v[0] == 0.f && v[1] == 0.f && v[2] == 0.f && v[3] == 0.f) continue;  // NaN is never skipped
#if __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float4*>(pass.meshes[j] + index), make_float4(v[0], v[1], v[2], v[3]));
#else  // no vector atomics before Hopper
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (v[e] != 0.f) atomicAdd(pass.meshes[j] + index + e, v[e]);
#endif
    }
  }
}

// The block's fixed-point scale per property (shared `scale`, all threads call). Fast
// mode: from the sum of |q| over the block's particles (q: each thread's, zero where it
// has none), so the rounding is relative to what the block holds (float: one_word_scale,
// double: 62 bits of it, a power of two). Deterministic mode:
// from max |q| over all particles and N, identical in every block and every run.
// Double sums are taken in units of 2^11 (AbsSum), so that values up to DBL_MAX keep
// their precision.
template <int W, int NP, bool kDeterministic, class T>
__device__ __forceinline__ void block_scales(const Values<T, NP> (&q)[kSlots], const PropPass<T>& pass,
                                             double peak_weight, std::size_t n, double* scale) {
  using Bound = AbsSum<T, tuning::kChunkParticles>;
  __shared__ double block_abs[NP];
  if constexpr (kDeterministic) {
    if (threadIdx.x < NP)
      scale[threadIdx.x] =
          deterministic_scale<W>(__longlong_as_double(pass.max_abs_bits[threadIdx.x]) * peak_weight, n);
  } else {
    if (threadIdx.x < NP) block_abs[threadIdx.x] = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      double v = 0;
#pragma unroll
      for (int r = 0; r < kSlots; ++r) v += Bound::term(q[r].v[j]);
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      if ((threadIdx.x & 31) == 0) atomicAdd(&block_abs[j], v);  // one per warp
    }
    __syncthreads();
    if (threadIdx.x < NP) {
      if constexpr (W == 1)
        scale[threadIdx.x] = one_word_scale(block_abs[threadIdx.x] * peak_weight);
      else
        scale[threadIdx.x] = Bound::scale(block_abs[threadIdx.x], peak_weight, FixedPoint<W>::kContributionBits);
    }
  }
  __syncthreads();
}

// A heavy tile's block (fast mode): its window's sums to the tile's double window, one
// native double atomic per non-zero node and property, node k of property j at
// window[j * kNodes + k] (nodes off the mesh too: finish_heavy_kernel skips them). A
// float atomic a block into the mesh would round each node once per block, partial sums
// as large as the node's total, so that its error would grow like the square root of
// the blocks that reach it.
template <class K, int D, int W, int NP>
__device__ __forceinline__ void flush_heavy(const int* accumulator, const double* scale, double* window) {
  using Window = TileWindow<K, D>;
  double unscale[NP];
  unscales(scale, unscale);
  for (int k = threadIdx.x; k < Window::kNodes; k += blockDim.x) {
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const long long v = FixedPoint<W>::combine(accumulator + j * W * Window::kNodes + k, Window::kNodes);
      if (v == 0 && !isnan(scale[j])) continue;
      atomicAdd(window + j * Window::kNodes + k, static_cast<double>(v) * unscale[j]);
    }
  }
}

// The window's integer sums to the mesh, after the block's last shared add (all threads
// call): one global atomic per non-zero node and property (four nodes per float4 atomic
// where the mesh allows). A NaN scale (non-finite properties in this block) writes NaN
// to the whole window, as float arithmetic would. heavy_window (fast mode; null: none):
// the block's tile is heavy, and its sums go there instead (flush_heavy).
template <class K, int D, class T, int W, int NP, bool kDeterministic>
__device__ __forceinline__ void flush_window(const typename TileWindow<K, D>::IndexTables& tables,
                                             const int (&tile)[D], const int* accumulator, const double* scale,
                                             const PropPass<T>& pass, double* heavy_window = nullptr) {
  using Window = TileWindow<K, D>;
  if constexpr (!kDeterministic) {
    if (heavy_window) {
      flush_heavy<K, D, W, NP>(accumulator, scale, heavy_window);
      return;
    }
  }
  if constexpr (W == 1 && !kDeterministic && sizeof(T) == 4) {
    if (pass.quad_flush) {
      flush_quads<K, D, NP>(tables, tile, accumulator, scale, pass);
      return;
    }
  }
  double unscale[NP];
  unscales(scale, unscale);
  for (int k = threadIdx.x; k < Window::kNodes; k += blockDim.x) {
    std::int64_t index = -1;
    bool inside = true;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const long long v = FixedPoint<W>::combine(accumulator + j * W * Window::kNodes + k, Window::kNodes);
      if (v == 0 && !(isnan(scale[j]) && !kDeterministic)) continue;
      if (index < 0) inside = Window::table_index(tables, k, index);
      if (!inside) continue;
      if constexpr (kDeterministic)
        atomicAdd(pass.exact[j] + index, static_cast<unsigned long long>(v));
      else
        atomicAdd(pass.meshes[j] + index, static_cast<T>(static_cast<double>(v) * unscale[j]));
    }
  }
}

// What a tile spread adds to its accumulator for a particle: q_j times the node's
// weight, on one accumulator a property (spread). GradientDeposit (kernels/gradient.cuh)
// is spread_gradient's. kValues: what a particle carries (pass.props[0, kValues));
// kMeshes: the accumulators; scales: the block's fixed-point scale per accumulator.
template <class K, int D, class T, int W, int NP>
struct PropertyDeposit {
  static constexpr int kValues = NP;
  static constexpr int kMeshes = NP;
  double peak_weight;

  template <bool kDeterministic>
  __device__ __forceinline__ void scales(const Values<T, NP> (&q)[kSlots], const PropPass<T>& pass, std::size_t n,
                                         double* scale) const {
    block_scales<W, NP, kDeterministic>(q, pass, peak_weight, n, scale);
  }

  __device__ __forceinline__ void operator()(int* accumulator, int origin, const T (&s)[D], const Values<T, NP>& qr,
                                             const double* scale) const {
    using Window = TileWindow<K, D>;
    constexpr int S = K::support;
    constexpr bool kFmaRounding = tuning::fma_rounding_pays(S, NP);
    // q times the power-of-two scale, in double (the deterministic scale can pass
    // float's range; the product cannot): contributions are then row weight x q x w_x.
    T qs[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) qs[j] = static_cast<T>(static_cast<double>(qr.v[j]) * scale[j]);
    for_each_window_row<K, D>(origin, s, [&](int row, T row_weight, const T (&wx)[S]) {
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const T wq = row_weight * qs[j];
        int* words = accumulator + j * W * Window::kNodes + row;
#pragma unroll
        for (int a = 0; a < S; ++a)
          FixedPoint<W>::add(words + a, Window::kNodes, to_fixed<W, kFmaRounding>(wq, wx[a]));
      }
    });
  }
};

// The chunk's heavy-tile window (fast float mode), or null where the block flushes to the
// mesh: thread 0 writes it to the shared `window` before accumulate_chunk, whose barriers
// order it, so that no register holds it through the accumulation.
template <class K, int D, class T, bool kDeterministic>
__device__ __forceinline__ void select_heavy_window(const PropPass<T>& pass, const Chunk& chunk, double*& window) {
  if (threadIdx.x != 0) return;
  window = nullptr;
  if constexpr (!kDeterministic && sizeof(T) == 4) {
    const std::uint32_t slot = pass.heavy_slot ? pass.heavy_slot[chunk.tile] : kLightTile;
    if (slot != kLightTile)
      window = pass.heavy_windows + static_cast<std::size_t>(slot) * tuning::kPropsPerPass * TileWindow<K, D>::kNodes;
  }
}

// A tile block's accumulation, up to its flush: clears the accumulator, gathers the
// chunk's values, fills the window's index tables (for the flush), sets the block's
// scales and adds every particle by `deposit`. All threads call; a barrier must follow
// before the flush reads the accumulator.
template <class K, int D, class T, int W, bool kDeterministic, class Deposit>
__device__ __forceinline__ void accumulate_chunk(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                                 const Chunk& chunk, const Packed<T>* particles,
                                                 const std::uint16_t* order, const std::uint32_t* perm,
                                                 std::size_t n, const PropPass<T>& pass, const Deposit& deposit,
                                                 int* accumulator, double* scale, int (&tile)[D],
                                                 typename TileWindow<K, D>::IndexTables& tables) {
  using Window = TileWindow<K, D>;
  constexpr int S = K::support;
  constexpr int NV = Deposit::kValues;
  for (int k = threadIdx.x; k < Window::kNodes * W * Deposit::kMeshes; k += blockDim.x) accumulator[k] = 0;
  if constexpr (!tuning::interleave_pays(S, D)) {
    // Records and perm read once, coalesced (the arrival order): evict-first in L2 leaves
    // it to the property gather and the mesh. Not where a chunk is read in the
    // interleaved order: its record lines serve several warps, some through L2 again.
    particles = streamed(particles);
    perm = streamed(perm);
  }

  // Each thread's properties are gathered once, into registers, and serve both the scale
  // and the accumulation: in the caller's order through perm (one random read each), or,
  // perm null, by slot (the pass moved into binned order first, props_to_places_kernel).
  Values<T, NV> q[kSlots];
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    const std::uint32_t slot = i < chunk.count ? chunk.begin + taken(order, chunk, i) : 0;
    const std::uint32_t p = perm && i < chunk.count ? perm[slot] : slot;
#pragma unroll
    for (int j = 0; j < NV; ++j) q[r].v[j] = i < chunk.count ? load_prop(pass, j, p) : T(0);
  }

  geo.tile_coords(chunk.tile, tile);
  Window::fill_index_tables(layout, tile, tables);  // for the flush; the scales' barriers order them

  deposit.template scales<kDeterministic>(q, pass, n, scale);

#pragma unroll 1  // the stencil is unrolled already; kSlots copies of it only bloat the code
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i >= chunk.count) break;
    const Packed<T> particle = particles[chunk.begin + taken(order, chunk, i)];
    if (particle.cell == kAwayCell) continue;
    const Values<T, NV> qr = pick(q, r);
    const int origin = Window::origin(geo, particle, tile);
    T s[D];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) s[d] = local_coordinate(particle, d);
    deposit(accumulator, origin, s, qr, scale);
  }
}

// A tile spread's block, whatever its deposit (PropertyDeposit, GradientDeposit): the
// chunk's sums in shared memory (accumulate_chunk), then their flush to the meshes, or
// to the heavy tile's window.
template <class K, int D, class T, int W, bool kDeterministic, class Deposit>
__device__ __forceinline__ void spread_tile_block(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                                  const Chunk* chunks, const Packed<T>* particles,
                                                  const std::uint16_t* order, const std::uint32_t* perm, std::size_t n,
                                                  const PropPass<T>& pass, const Deposit& deposit) {
  using Window = TileWindow<K, D>;
  constexpr int NM = Deposit::kMeshes;
  extern __shared__ int accumulator[];  // [NM][W][Window::kNodes]
  __shared__ double scale[NM];
  const Chunk chunk = chunks[blockIdx.x];
  if (chunk.count == 0) return;  // past the binning's chunks (Chunk)
  if (!pass.parts.takes(geo, chunk.tile)) return;  // another part's tile (TileParts)
  int tile[D];
  __shared__ typename Window::IndexTables tables;
  __shared__ double* heavy_window;
  select_heavy_window<K, D, T, kDeterministic>(pass, chunk, heavy_window);
  accumulate_chunk<K, D, T, W, kDeterministic>(layout, geo, chunk, particles, order, perm, n, pass, deposit,
                                               accumulator, scale, tile, tables);
  __syncthreads();

  flush_window<K, D, T, W, NM, kDeterministic>(tables, tile, accumulator, scale, pass, heavy_window);
}

template <class K, int D, class T, int W, int NP, bool kDeterministic>
__global__ void __launch_bounds__(tuning::kSpreadThreads)
    spread_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                        const Packed<T>* particles, const std::uint16_t* order, const std::uint32_t* perm,
                        std::size_t n, PropPass<T> pass) {
  spread_tile_block<K, D, T, W, kDeterministic>(layout, geo, chunks, particles, order, perm, n, pass,
                                                PropertyDeposit<K, D, T, W, NP>{geo.peak_weight});
}

// The heavy tiles' double windows (flush_heavy) to the mesh after the tile spread: one
// float atomic per non-zero node and property for a whole tile, each window cleared for
// the next spread. A block a heavy tile (num_heavy of them, on the device).
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kSpreadThreads)
    finish_heavy_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const std::uint32_t* heavy_tiles,
                        const std::uint32_t* num_heavy, PropPass<T> pass, int meshes) {
  using Window = TileWindow<K, D>;
  if (blockIdx.x >= *num_heavy) return;  // the grid covers the bound
  int tile[D];
  geo.tile_coords(heavy_tiles[blockIdx.x], tile);
  __shared__ typename Window::IndexTables tables;
  Window::fill_index_tables(layout, tile, tables);
  __syncthreads();
  double* window = pass.heavy_windows + static_cast<std::size_t>(blockIdx.x) * tuning::kPropsPerPass * Window::kNodes;
  for (int k = threadIdx.x; k < Window::kNodes; k += blockDim.x) {
    std::int64_t index;
    const bool inside = Window::table_index(tables, k, index);
    for (int j = 0; j < meshes; ++j) {
      const double v = window[j * Window::kNodes + k];
      if (v == 0) continue;  // NaN is never skipped
      window[j * Window::kNodes + k] = 0;
      if (inside) atomicAdd(pass.meshes[j] + index, static_cast<T>(v));
    }
  }
}

// Deterministic mode: max |q| per property (non-negative doubles order like their bits).
template <class T>
__global__ void max_abs_kernel(PropPass<T> pass, std::size_t n, unsigned long long* max_abs_bits) {
  double local[tuning::kPropsPerPass] = {};
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) {
        // NaN would lose every fmax; count it as inf, which finalize turns into NaN.
        const double a = fabs(static_cast<double>(load_prop(pass, j, i)));
        local[j] = isnan(a) ? HUGE_VAL : fmax(local[j], a);
      }
  }
#pragma unroll
  for (int j = 0; j < tuning::kPropsPerPass; ++j) {
    if (j >= pass.count) break;
    double v = local[j];
    for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) atomicMax(max_abs_bits + j, static_cast<unsigned long long>(__double_as_longlong(v)));
  }
}

// Deterministic mode: integer mesh -> caller's mesh; clears the integer mesh for next time.
// The global scale's reciprocal once a block, not a scale (a loop over n's bits, frexp,
// ldexp) and a double division a node: the scale is a power of two, so v * (1 / scale)
// has the quotient's exact bits (as the fast flush). Non-finite
// properties (max |q| inf or NaN) give a NaN scale (pow2_scale), so NaN everywhere.
template <class T, int W>
__global__ void finalize_exact_kernel(PropPass<T> pass, std::int64_t size, std::size_t n, double peak_weight,
                                      bool accumulate) {
  __shared__ double unscale[tuning::kPropsPerPass];
  if (threadIdx.x < pass.count) {
    const double max_abs = __longlong_as_double(pass.max_abs_bits[threadIdx.x]);
    unscale[threadIdx.x] = 1.0 / deterministic_scale<W>(max_abs * peak_weight, n);
  }
  __syncthreads();
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= size) return;
  for (int j = 0; j < pass.count; ++j) {
    const long long v = static_cast<long long>(pass.exact[j][i]);
    pass.exact[j][i] = 0;
    const T value = static_cast<T>(static_cast<double>(v) * unscale[j]);
    pass.meshes[j][i] = accumulate ? pass.meshes[j][i] + value : value;
  }
}

}  // namespace pmkit::cuda
