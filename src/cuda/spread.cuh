#pragma once
// P2M kernels: shared-memory tiles with fixed-point accumulation (fast and deterministic
// modes), cell moments for dense cells, and one thread per particle with global atomics.
#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "cuda/fixed_point.cuh"
#include "cuda/mesh_rows.cuh"
#include "cuda/tiles.cuh"

namespace pmkit::cuda {

// ---------------------------------------------------------------------------------
// P2M: shared-memory tiles with fixed-point accumulation.
//
// One block per chunk. The accumulator holds, per property, W words per node of the
// tile's window. Per-block scale (fast mode): from the chunk's sum of |q|, so the
// rounding is relative to what the block holds. Global scale (deterministic mode):
// from max |q| over all particles and N, identical in every block and every run, and
// the block's integer sums go to 64-bit integer meshes.

// 1 / scale, once a thread: a scale is a power of two (or 1, or NaN), so multiplying by
// its reciprocal gives the quotient's exact bits, without a double division (a reciprocal
// and ~8 FP64 operations) per window node.
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
// has none), so the rounding is relative to what the block holds. Deterministic mode:
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
    if (threadIdx.x < NP)
      scale[threadIdx.x] = Bound::scale(block_abs[threadIdx.x], peak_weight, FixedPoint<W>::kContributionBits);
  }
  __syncthreads();
}

// The window's integer sums to the mesh, after the block's last shared add (all threads
// call): one global atomic per non-zero node and property (four nodes per float4 atomic
// where the mesh allows). A NaN scale (non-finite properties in this block) writes NaN
// to the whole window, as float arithmetic would.
template <class K, int D, class T, int W, int NP, bool kDeterministic>
__device__ __forceinline__ void flush_window(const typename TileWindow<K, D>::IndexTables& tables,
                                             const int (&tile)[D], const int* accumulator, const double* scale,
                                             const PropPass<T>& pass) {
  using Window = TileWindow<K, D>;
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

template <class K, int D, class T, int W, int NP, bool kDeterministic>
__global__ void __launch_bounds__(tuning::kSpreadThreads)
    spread_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                        const Packed<T>* particles, const std::uint16_t* order, const std::uint32_t* perm,
                        std::size_t n, PropPass<T> pass) {
  using Window = TileWindow<K, D>;
  constexpr int S = K::support;
  constexpr bool kFmaRounding = tuning::fma_rounding_pays(S, NP);
  extern __shared__ int accumulator[];  // [NP][W][Window::kNodes]
  __shared__ double scale[NP];
  const Chunk chunk = chunks[blockIdx.x];
  for (int k = threadIdx.x; k < Window::kNodes * W * NP; k += blockDim.x) accumulator[k] = 0;
  if constexpr (!tuning::interleave_pays(S, D)) {
    // Records and perm read once, coalesced (the arrival order): evict-first in L2 leaves
    // it to the property gather and the mesh (linear 2^24 on 256^3 -3%, 2D M'4 2^22
    // -10%). Not where a chunk is read in the interleaved order: its record lines serve
    // several warps, some through L2 again (M'4 128^3 +5%; bench/NOTES.md 54).
    particles = streamed(particles);
    perm = streamed(perm);
  }

  // Each thread's properties are gathered once, into registers, and serve both the scale
  // and the accumulation: in the caller's order through perm (one random read each), or,
  // perm null, by slot (the pass moved into binned order first, props_to_places_kernel).
  Values<T, NP> q[kSlots];
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    const std::uint32_t slot = i < chunk.count ? chunk.begin + taken(order, chunk, i) : 0;
    const std::uint32_t p = perm && i < chunk.count ? perm[slot] : slot;
#pragma unroll
    for (int j = 0; j < NP; ++j) q[r].v[j] = i < chunk.count ? load_prop(pass, j, p) : T(0);
  }

  int tile[D];
  geo.tile_coords(chunk.tile, tile);
  __shared__ typename Window::IndexTables tables;  // for the flush; block_scales' barriers order them
  Window::fill_index_tables(layout, tile, tables);

  block_scales<W, NP, kDeterministic>(q, pass, geo.peak_weight, n, scale);

#pragma unroll 1  // the stencil is unrolled already; kSlots copies of it only bloat the code
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i >= chunk.count) break;
    const Packed<T> particle = particles[chunk.begin + taken(order, chunk, i)];
    if (particle.cell == kAwayCell) continue;
    const Values<T, NP> qr = pick(q, r);
    const int origin = Window::origin(geo, particle.cell, tile);
    T s[D];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) s[d] = particle.s[d];
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
  __syncthreads();

  flush_window<K, D, T, W, NP, kDeterministic>(tables, tile, accumulator, scale, pass);
}

// ---------------------------------------------------------------------------------
// P2M for dense cells: cell moments (SpreadMethod::CudaCellMoments).
//
// All particles whose home node is the same (a "cell" here) weight their S^D nodes by
// the same S polynomials per dimension: the kernel's pieces, written in t = s - 1/2
// (kernels::centered_pieces). So the cell's contribution to its node k is
//   sum_p q_p prod_d w_{k_d}(t_{p,d}) = sum_j prod_d C[k_d][j_d] * M[j],
//   M[j] = sum_p q_p prod_d t_{p,d}^{j_d},
// S^D moments that one thread sums in registers over its cell's particles, then turns
// into the S^D node values, one dimension at a time (S^D x S x D multiply-adds), and
// adds to the block's window once. The tile kernel pays S^D shared atomics and
// conversions a particle; this pays them a cell, plus the contraction and a sort by cell.
// Measured, the sort and the gather cost more than the atomics saved (bench/NOTES.md
// 31), so only an explicit SpreadMethod::CudaCellMoments runs it.
//
// A block takes a span (up to tuning::kCellSpanParticles of one tile, in binned order),
// ranks its particles within their cells by shared atomics and lists them in cell order
// (16-bit indices in shared memory; the records stay where they are, their local
// coordinates are staged). Then, property by property: the values gathered into shared
// memory, the block's scale from their sum of |q| (as the tile kernel's fast mode), the
// cells summed and contracted, and at the end the window flushed as the tile kernel
// does. The order of the particles inside a cell follows the atomics, so the float sums
// may differ in the last bits between runs: fast mode only.

// One cell's S^D moments (index x fastest), summed and then contracted in registers:
// every loop has compile-time bounds and every coefficient is an immediate.
template <class K, int D, class T>
struct CellMoments {
  static constexpr int S = K::support;
  static constexpr int kCount = D == 3 ? S * S * S : S * S;
  T m[kCount];

  __device__ __forceinline__ void clear() {
    PMKIT_UNROLL
    for (int i = 0; i < kCount; ++i) m[i] = T(0);
  }

  // m[j] += q prod_d t_d^{j_d}.
  __device__ __forceinline__ void add(T q, const T (&t)[D]) {
    T px[S], py[S];
    px[0] = T(1);
    py[0] = D == 2 ? q : T(1);
    PMKIT_UNROLL
    for (int a = 1; a < S; ++a) {
      px[a] = px[a - 1] * t[0];
      py[a] = py[a - 1] * t[1];
    }
    if constexpr (D == 2) {
      PMKIT_UNROLL
      for (int b = 0; b < S; ++b)
        PMKIT_UNROLL
        for (int a = 0; a < S; ++a) m[b * S + a] = fma(py[b], px[a], m[b * S + a]);
    } else {
      T pz = q;
      PMKIT_UNROLL
      for (int c = 0; c < S; ++c) {
        PMKIT_UNROLL
        for (int b = 0; b < S; ++b) {
          const T zy = pz * py[b];
          PMKIT_UNROLL
          for (int a = 0; a < S; ++a) m[(c * S + b) * S + a] = fma(zy, px[a], m[(c * S + b) * S + a]);
        }
        pz *= t[2];
      }
    }
  }

  // Moments -> node values in place: m[k] = sum_j prod_d C[k_d][j_d] m[j].
  __device__ __forceinline__ void contract() {
    contract_along<1>();
    contract_along<S>();
    if constexpr (D == 3) contract_along<S * S>();
  }

 private:
  // The 1D map along the dimension whose index has this stride.
  template <int kStride>
  __device__ __forceinline__ void contract_along() {
    constexpr kernels::PieceTable<S> C = kernels::centered_pieces(K::pieces());
    PMKIT_UNROLL
    for (int hi = 0; hi < kCount / (S * kStride); ++hi)
      PMKIT_UNROLL
      for (int lo = 0; lo < kStride; ++lo) {
        const int base = hi * S * kStride + lo;
        T in[S];
        PMKIT_UNROLL
        for (int j = 0; j < S; ++j) in[j] = m[base + j * kStride];
        PMKIT_UNROLL
        for (int k = 0; k < S; ++k) {
          T v = T(0);
          PMKIT_UNROLL
          for (int j = 0; j < S; ++j)
            if (C.c[k][j] != 0.0) v = fma(T(C.c[k][j]), in[j], v);
          m[base + k * kStride] = v;
        }
      }
  }
};

// Dynamic shared memory of spread_cells_kernel, in this order: the window's words
// (rounded up to 16 bytes); each particle's local coordinates by arrival (D arrays);
// the staged values (first the cell ranks); the cell-order list.
template <class K, int D, class T, int W, int NP>
struct CellShared {
  static constexpr int kSpan = tuning::kCellSpanParticles;
  static constexpr int kAccumulatorWords = (NP * W * TileWindow<K, D>::kNodes + 3) / 4 * 4;
  static constexpr std::size_t kBytes =
      kAccumulatorWords * sizeof(int) + kSpan * ((D + 1) * sizeof(T) + sizeof(std::uint16_t));
  static_assert(sizeof(T) >= sizeof(std::uint32_t), "ranks are staged where the values go");
};

// Loads, atomics and gathers of the span's loops are issued kCellBatch at a time, so
// that a thread has that many in flight (one at a time, the loops were a chain of
// dependent global loads at 16 warps an SM: d58b1b2 measured 1.7x slower than tiles).
constexpr int kCellBatch = 4;
constexpr int kCellGatherBatch = 8;

template <class K, int D, class T, int W, int NP>
__global__ void __launch_bounds__(tuning::kCellThreads, sizeof(T) == 4 ? 2 : 1)
    spread_cells_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* spans,
                        const Packed<T>* particles, const std::uint32_t* perm, PropPass<T> pass) {
  using Window = TileWindow<K, D>;
  using Shared = CellShared<K, D, T, W, NP>;
  constexpr int S = K::support;
  constexpr int kEdge = Window::kEdge;
  constexpr int kEdgeBits = kEdge == 8 ? 3 : kEdge == 16 ? 4 : 5;
  static_assert(kEdge == 1 << kEdgeBits, "tile edges of 8, 16 or 32 cells");
  constexpr int kCells = D == 3 ? kEdge * kEdge * kEdge : kEdge * kEdge;
  constexpr int kCellsPerThread = kCells / tuning::kCellThreads;
  static_assert(kCellsPerThread * tuning::kCellThreads == kCells, "whole cells a thread");
  constexpr int kSpan = Shared::kSpan;
  static_assert(kSpan <= 65536 && kCells <= 65536, "16-bit indices and ranks");
  constexpr std::uint32_t kNoCell = 0xffffffffu;
  constexpr std::uint32_t kStride = kCellBatch * tuning::kCellThreads;
  using Scan = cub::BlockScan<std::uint32_t, tuning::kCellThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ std::uint32_t cell_start[kCells + 1];  // counts, then their exclusive scan
  __shared__ double block_abs[NP];
  __shared__ double scale[NP];
  extern __shared__ __align__(16) unsigned char cell_shared[];
  int* accumulator = reinterpret_cast<int*>(cell_shared);  // [NP][W][Window::kNodes]
  T* coords = reinterpret_cast<T*>(accumulator + Shared::kAccumulatorWords);  // [D][kSpan], by arrival
  T* staged = coords + D * kSpan;  // values, by arrival
  std::uint32_t* code = reinterpret_cast<std::uint32_t*>(staged);  // (cell << 16 | rank), before the values
  std::uint16_t* order = reinterpret_cast<std::uint16_t*>(staged + kSpan);

  const Chunk span = spans[blockIdx.x];
  for (int k = threadIdx.x; k < Shared::kAccumulatorWords; k += blockDim.x) accumulator[k] = 0;
  for (int k = threadIdx.x; k <= kCells; k += blockDim.x) cell_start[k] = 0;
  if (threadIdx.x < NP) block_abs[threadIdx.x] = 0;
  int tile[D];
  geo.tile_coords(span.tile, tile);
  __shared__ typename Window::IndexTables tables;  // for the flush
  Window::fill_index_tables(layout, tile, tables);
  __syncthreads();

  // Stage every particle's local coordinates, and rank it within its cell (tile-local
  // cells: x fastest, kEdge a side).
  for (std::uint32_t base = threadIdx.x; base < span.count; base += kStride) {
    Packed<T> p[kCellBatch];
    PMKIT_UNROLL
    for (int r = 0; r < kCellBatch; ++r) {
      const std::uint32_t i = base + r * tuning::kCellThreads;
      if (i < span.count) p[r] = particles[span.begin + i];
    }
    PMKIT_UNROLL
    for (int r = 0; r < kCellBatch; ++r) {
      const std::uint32_t i = base + r * tuning::kCellThreads;
      if (i >= span.count) break;
      PMKIT_UNROLL
      for (int d = 0; d < D; ++d) coords[d * kSpan + i] = p[r].s[d];
      std::uint32_t c = kNoCell;
      if (p[r].cell != kAwayCell) {
        int home[D];
        geo.decode(p[r].cell, home);
        int local = 0;
        PMKIT_UNROLL
        for (int d = D - 1; d >= 0; --d) local = local * kEdge + home[d] - tile[d] * kEdge;
        c = static_cast<std::uint32_t>(local) << 16 | atomicAdd(&cell_start[local], 1u);
      }
      code[i] = c;
    }
  }
  __syncthreads();
  {
    std::uint32_t counts[kCellsPerThread], aggregate;
    PMKIT_UNROLL
    for (int r = 0; r < kCellsPerThread; ++r) counts[r] = cell_start[threadIdx.x * kCellsPerThread + r];
    Scan(scan_storage).ExclusiveSum(counts, counts, aggregate);
    PMKIT_UNROLL
    for (int r = 0; r < kCellsPerThread; ++r) cell_start[threadIdx.x * kCellsPerThread + r] = counts[r];
    if (threadIdx.x == 0) cell_start[kCells] = aggregate;
  }
  __syncthreads();
  for (std::uint32_t i = threadIdx.x; i < span.count; i += blockDim.x) {
    const std::uint32_t c = code[i];
    if (c != kNoCell) order[cell_start[c >> 16] + (c & 0xffffu)] = static_cast<std::uint16_t>(i);
  }
  __syncthreads();
  const std::uint32_t placed = cell_start[kCells];

#pragma unroll 1
  for (int j = 0; j < NP; ++j) {
    // The values by arrival (perm read coalesced, then one random read each, as in
    // every spread; ncu at 6f215f9: gathered in cell order, the dependent perm and
    // property loads took 40% of the stall samples), and the scale.
    using Bound = AbsSum<T, tuning::kCellSpanParticles>;
    std::conditional_t<sizeof(T) == 4, float, double> abs_part = 0;
    for (std::uint32_t base = threadIdx.x; base < span.count; base += kCellGatherBatch * tuning::kCellThreads) {
      T q[kCellGatherBatch];
      PMKIT_UNROLL
      for (int r = 0; r < kCellGatherBatch; ++r) {
        const std::uint32_t i = base + r * tuning::kCellThreads;
        q[r] = i < span.count ? load_prop(pass, j, perm[span.begin + i]) : T(0);
      }
      PMKIT_UNROLL
      for (int r = 0; r < kCellGatherBatch; ++r) {
        const std::uint32_t i = base + r * tuning::kCellThreads;
        if (i < span.count) staged[i] = q[r];
        // A bound for the scale: float values summed in float are close enough; double
        // values take AbsSum's units, so that any double keeps its precision.
        if constexpr (sizeof(T) == 4) abs_part += fabsf(q[r]);
        else abs_part += Bound::term(q[r]);
      }
    }
    double abs_sum = abs_part;
    for (int o = 16; o > 0; o /= 2) abs_sum += __shfl_xor_sync(0xffffffffu, abs_sum, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&block_abs[j], abs_sum);
    __syncthreads();
    if (threadIdx.x == 0) scale[j] = Bound::scale(block_abs[j], geo.peak_weight, FixedPoint<W>::kContributionBits);
    __syncthreads();
    const double sc = scale[j];
    // A power of two: exact as a T where it is within T's range (it is not only for
    // blocks of values near the smallest floats).
    const bool scale_fits = static_cast<double>(static_cast<T>(sc)) == sc;
    int* words = accumulator + j * W * Window::kNodes;
    // Consecutive lanes take consecutive cells (along x): their window rows are close.
#pragma unroll 1
    for (int r = 0; r < kCellsPerThread; ++r) {
      const int local = threadIdx.x + r * tuning::kCellThreads;
      const std::uint32_t first = cell_start[local], last = cell_start[local + 1];
      if (first == last) continue;
      // Moments of q times the block's scale, so that the node sums come out as the
      // fixed-point values (q * scale in double, as the tile kernel: the scale may pass
      // float's range, the product cannot).
      CellMoments<K, D, T> moments;
      moments.clear();
#pragma unroll 2
      for (std::uint32_t k = first; k < last; ++k) {
        const int i = order[k];
        T t[D];
        PMKIT_UNROLL
        for (int d = 0; d < D; ++d) t[d] = coords[d * kSpan + i] - T(0.5);
        const T q = staged[i];
        moments.add(scale_fits ? q * static_cast<T>(sc) : static_cast<T>(static_cast<double>(q) * sc), t);
      }
      moments.contract();
      int origin = 0;  // the cell's first stencil node in the window
      PMKIT_UNROLL
      for (int d = D - 1; d >= 0; --d) origin = origin * Window::kWidth + ((local >> (d * kEdgeBits)) & (kEdge - 1));
      if constexpr (D == 2) {
        PMKIT_UNROLL
        for (int b = 0; b < S; ++b)
          PMKIT_UNROLL
          for (int a = 0; a < S; ++a)
            FixedPoint<W>::add(words + origin + b * Window::kWidth + a, Window::kNodes,
                               fixed_of<W>(moments.m[b * S + a]));
      } else {
        PMKIT_UNROLL
        for (int c = 0; c < S; ++c)
          PMKIT_UNROLL
          for (int b = 0; b < S; ++b)
            PMKIT_UNROLL
            for (int a = 0; a < S; ++a)
              FixedPoint<W>::add(words + origin + (c * Window::kWidth + b) * Window::kWidth + a, Window::kNodes,
                                 fixed_of<W>(moments.m[(c * S + b) * S + a]));
      }
    }
    __syncthreads();  // the next property's values overwrite `staged`
  }

  flush_window<K, D, T, W, NP, false>(tables, tile, accumulator, scale, pass);
}

// A pass's properties moved into binned order the way set_points' partition moved the
// records (bench/NOTES.md 67): each of its blocks replayed, one block of the same items.
// The block stages its items' values in shared memory (coalesced loads), then stores them
// in the partition's sorted order (sorted: the item of each sorted place), so that
// consecutive lanes store consecutive places of a run. A store in the caller's order sent
// a warp's lanes to 32 runs (67: as slow as random stores), and a gather from global
// memory in the sorted order cost an L2 request a value (67b).
// Every load is issued kPerThread at a time into registers, before any is used: one at a
// time (a loop over j), a warp kept 128 bytes in flight, and the passes ran at about half
// their bytes' time (NOTES 70). The sorted order and the destinations are read once and
// serve every property; the next property's values are loaded before this one is stored.
// Pass 1: block b holds the caller's indices b kItems + j; `to` is the caller's index ->
// pass-1 place (with one level, the binned slot).
template <class T, class Value>
__device__ __forceinline__ void replay_block(std::size_t first, std::uint32_t count, const std::uint16_t* sorted,
                                             const std::uint32_t* to, int props, std::size_t n, Value&& value,
                                             T* out) {
  using B = PartitionBlock<T>;
  constexpr int kPer = B::kPerThread;
  __shared__ std::uint32_t dst[B::kItems];
  __shared__ T staged[B::kItems];
  std::uint32_t d[kPer];   // item local(k)'s destination, then sorted place local(k)'s
  std::uint16_t j[kPer];   // the item of sorted place local(k)
  T v[kPer];               // item local(k)'s value of the property being moved
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const std::uint32_t i = B::local(k);
    d[k] = i < count ? to[first + i] : 0;
    j[k] = i < count ? sorted[first + i] : 0;
    v[k] = i < count ? value(0, first + i) : T(0);
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (B::local(k) < count) dst[B::local(k)] = d[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (B::local(k) < count) d[k] = dst[j[k]];
  for (int p = 0; p < props; ++p) {
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (B::local(k) < count) staged[B::local(k)] = v[k];
    __syncthreads();
    if (p + 1 < props) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) v[k] = B::local(k) < count ? value(p + 1, first + B::local(k)) : T(0);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (B::local(k) < count) out[p * n + d[k]] = staged[j[k]];
    __syncthreads();  // the next property overwrites staged
  }
}
template <class T>
__global__ void __launch_bounds__(tuning::kPartitionThreads)
    props_to_places_kernel(PropPass<T> pass, const std::uint16_t* sorted, const std::uint32_t* place, std::size_t n,
                           T* out) {
  constexpr std::size_t kItems = PartitionBlock<T>::kItems;
  const std::size_t first = blockIdx.x * kItems;
  const std::uint32_t count = static_cast<std::uint32_t>(min(kItems, n - first));
  replay_block<T>(first, count, sorted, place, pass.count, n,
                  [&](int p, std::size_t i) { return load_prop(pass, p, static_cast<std::uint32_t>(i)); }, out);
}
// Pass 2 of two levels: block b is piece b (pieces[b].begin: its first pass-1 place);
// binned_of_place: place -> binned slot; sorted by piece.
template <class T>
__global__ void __launch_bounds__(tuning::kPartitionThreads)
    props_to_slots_kernel(const T* in, const Chunk* pieces, const std::uint16_t* sorted,
                          const std::uint32_t* binned_of_place, int props, std::size_t n, T* out) {
  const Chunk piece = pieces[blockIdx.x];
  replay_block<T>(piece.begin, piece.count, sorted, binned_of_place, props, n,
                  [&](int p, std::size_t place) { return in[p * n + place]; }, out);
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
// has the quotient's exact bits (as the fast flush, bench/NOTES.md 33). Non-finite
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

// ---------------------------------------------------------------------------------
// P2M fallback: one thread per particle in tile order, global atomics. Also spreads the
// away list of update_points (slots: each record's binned slot, for its property).
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    spread_atomics_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                          const std::uint32_t* slots, const std::uint32_t* perm, std::size_t n, PropPass<T> pass) {
  with_own_record<K, D>(geo, particles, n, [&](std::size_t i, const int (&base)[D], const T (&s)[D]) {
    const std::uint32_t p = perm[slots ? slots[i] : i];
    T q[tuning::kPropsPerPass];
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j) q[j] = j < pass.count ? load_prop(pass, j, p) : T(0);
    constexpr int S = K::support;
    detail::for_each_row<K, D>(layout, base, s, [&](std::int64_t row, T w_row, const T (&wx)[S],
                                                    const std::int64_t (&x)[S]) {
#pragma unroll
      for (int j = 0; j < tuning::kPropsPerPass; ++j) {
        if (j >= pass.count) continue;
        T v[S];
#pragma unroll
        for (int a = 0; a < S; ++a) v[a] = q[j] * (w_row * wx[a]);
        add_row(pass.meshes[j], row, x, v);
      }
    });
  });
}

}  // namespace pmkit::cuda
