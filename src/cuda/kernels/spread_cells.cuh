#pragma once
#include <cstdint>

#include "cuda/kernels/spread_tiles.cuh"

namespace pmkit::cuda {

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
// The sort and the gather cost more than the atomics saved in the cases measured
// (docs/tuning.md#kcellspanparticles), so only an explicit SpreadMethod::CudaCellMoments
// runs it.
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
// that a thread has that many in flight (one at a time, the loops would be a chain of
// dependent global loads at 16 warps an SM).
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
  if (span.count == 0) return;  // past the binning's spans (Chunk)
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
      for (int d = 0; d < D; ++d) coords[d * kSpan + i] = local_coordinate(p[r], d);
      std::uint32_t c = kNoCell;
      if (p[r].cell != kAwayCell) {
        int home[D];
        geo.decode(p[r], home);
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
    // every spread; gathered in cell order, the dependent perm and property loads would
    // stall the block), and the scale.
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

}  // namespace pmkit::cuda
