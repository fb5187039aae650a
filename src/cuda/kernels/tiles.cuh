#pragma once
// What the spread and interp kernels share: a binned record's stencil, the tile's window
// in shared memory (TileWindow) and the order a tile kernel takes a chunk's particles in
// (interleave_kernel, computed by set_points).
#include <cstdint>
#include <type_traits>

#include <cuda/annotated_ptr>

#include "cuda/kernels/records.cuh"

namespace pmkit::cuda {

// ---------------------------------------------------------------------------------
// Per-particle helpers

// A binned record's stencil: its first logical node and its local coordinates.
template <class K, int D, class T>
__device__ __forceinline__ void record_stencil(const BinGeometry<D>& geo, const Packed<T>& p, int (&base)[D],
                                               T (&s)[D]) {
  geo.decode(p, base);
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    base[d] -= (K::support - 1) / 2;
    s[d] = local_coordinate(p, d);
  }
}

// The head of the one-thread-per-particle kernels: each thread takes binned records i,
// i + the grid's threads, ... below items.value() and calls f(i, base, s) with the
// stencil's first logical node and local coordinates, skipping records that are away
// (update_points' list handles them).
template <class K, int D, class T, class F>
__device__ __forceinline__ void with_own_record(const BinGeometry<D>& geo, const Packed<T>* particles,
                                                ItemCount items, F&& f) {
  const std::size_t n = items.value();
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const Packed<T> p = particles[i];
    if (p.cell == kAwayCell) continue;
    int base[D];
    T s[D];
    record_stencil<K, D>(geo, p, base, s);
    f(i, base, s);
  }
}

template <class T>
__device__ __forceinline__ T load_prop(const PropPass<T>& pass, int j, std::uint32_t p) {
  return __ldg(pass.props[j] + static_cast<std::ptrdiff_t>(p) * pass.prop_stride[j]);
}

// A pointer whose loads ask L2 to evict their lines first (CCCL's access property: the
// policy rides in the load's memory descriptor, no extra instruction; L1 keeps its normal
// policy, unlike `.cs` loads). Loads through __ldg drop it.
template <class P>
__device__ __forceinline__ const P* streamed(const P* p) {
  return ::cuda::associate_access_property(p, ::cuda::access_property::streaming{});
}

// A tile's window: the tile's nodes plus the kernel's reach, as a small mesh of its own
// (node m of the window is logical node tile * edge - (S-1)/2 + m, no wrap inside).
// Its sizes are compile-time constants, so every stencil offset inside it is an
// immediate operand of the shared-memory instruction (with run-time sizes, the index
// arithmetic would cost many instructions per node for one shared atomic).
template <class K, int D>
struct TileWindow {
  static constexpr int kEdge = BinGeometry<D>::kEdge;
  static constexpr int kWidth = kEdge + K::support - 1;
  static constexpr int kNodes = D == 3 ? kWidth * kWidth * kWidth : kWidth * kWidth;
  static constexpr int kLead = (K::support - 1) / 2;  // nodes the stencil starts before home

  // Window offset of a particle's first stencil node: its home node's place in the tile
  // (`cell`: the record, or its cell word on grids not wide).
  // (BinGeometry::window_offset gives the same place without the tile, for the banks that
  // place_kernel stores; this form, with the tile the kernels hold anyway, is the one
  // their register budgets are set for.)
  template <class Record>
  __device__ __forceinline__ static int origin(const BinGeometry<D>& geo, const Record& cell, const int (&tile)[D]) {
    int home[D];
    geo.decode(cell, home);
    int offset = 0;
    PMKIT_UNROLL
    for (int d = D - 1; d >= 0; --d) offset = offset * kWidth + home[d] - tile[d] * kEdge;
    return offset;
  }

  // Mesh index of the y (and z) part of window row `row`; false where the window
  // reaches past every node a particle of the tile can touch (the last tiles of
  // bounded axes).
  __device__ __forceinline__ static bool row_index(const detail::Layout<D>& layout, const int (&tile)[D], int row,
                                                   std::int64_t& index) {
    index = 0;
    bool inside = true;
    PMKIT_UNROLL
    for (int d = 1; d < D; ++d) {
      const int local = row % kWidth;
      row /= kWidth;
      const int node = layout.axis[d].node(tile[d] * kEdge - kLead + local);
      inside = inside && node >= 0 && node < layout.axis[d].nodes;
      index += static_cast<std::int64_t>(node) * layout.stride[d];
    }
    return inside;
  }

  // Mesh index of window node k, the same rule with x, from tables that a block fills
  // once (fill_index_tables): each row's y/z part (row_index) and each x's node, -1
  // outside. A window node then costs a division by a constant and two shared loads
  // instead of a wrap or fold per axis (the interp kernel's staging and the flush).
  static constexpr int kRows = kNodes / kWidth;
  static constexpr int kQuads = (kWidth + 3) / 4 + 1;  // see first_quad_x
  struct IndexTables {
    std::int64_t row[kRows];
    int x[kWidth];
    int quad[kQuads];  // the node of each quad's first x (the flush by quads)
  };
  // All threads call; a barrier must follow before the tables are read.
  __device__ __forceinline__ static void fill_index_tables(const detail::Layout<D>& layout, const int (&tile)[D],
                                                           IndexTables& tables) {
    for (int r = threadIdx.x; r < kRows + kWidth + kQuads; r += blockDim.x) {
      if (r < kRows) {
        std::int64_t index;
        tables.row[r] = row_index(layout, tile, r, index) ? index : -1;
      } else if (r < kRows + kWidth) {
        const int node = layout.axis[0].node(tile[0] * kEdge - kLead + (r - kRows));
        tables.x[r - kRows] = node >= 0 && node < layout.axis[0].nodes ? node : -1;
      } else {
        tables.quad[r - kRows - kWidth] = layout.axis[0].node(first_quad_x(tile) + 4 * (r - kRows - kWidth));
      }
    }
  }
  __device__ __forceinline__ static bool table_index(const IndexTables& tables, int k, std::int64_t& index) {
    const int row = k / kWidth;
    const std::int64_t base = tables.row[row];
    const int x = tables.x[k - row * kWidth];
    index = base + x;
    return base >= 0 && x >= 0;
  }

  // Quads: the window's x-rows cut at multiples of 4 of the logical x, so that a flush
  // can add 4 nodes with one float4 atomic. Valid where x is periodic with a multiple
  // of 4 nodes (a quad then never straddles the seam) and the mesh is 16-byte aligned.
  // kQuads (above) covers a row at any alignment.
  __device__ __forceinline__ static int first_quad_x(const int (&tile)[D]) {
    const int x0 = tile[0] * kEdge - kLead;
    return x0 >= 0 ? x0 / 4 * 4 : -((3 - x0) / 4 * 4);  // floor to a multiple of 4
  }
};

// The particle's stencil inside a window, one x-row at a time: f(offset of the row's
// first node, the row's weight w_y (w_z), the S x-weights). Callers fold per-row factors
// (the charge, the scale) into the row weight once instead of once per node.
template <class K, int D, class T, class F>
__device__ __forceinline__ void for_each_window_row(int origin, const T (&s)[D], F&& f) {
  constexpr int S = K::support;
  constexpr int kWidth = TileWindow<K, D>::kWidth;
  T w[D][S];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) kernels::weights_1d<K>(s[d], w[d]);
  if constexpr (D == 2) {
    PMKIT_UNROLL
    for (int b = 0; b < S; ++b) f(origin + b * kWidth, w[1][b], w[0]);
  } else {
    PMKIT_UNROLL
    for (int c = 0; c < S; ++c)
      PMKIT_UNROLL
      for (int b = 0; b < S; ++b) f(origin + (c * kWidth + b) * kWidth, w[2][c] * w[1][b], w[0]);
  }
}

// a[r] for a run-time r: selects with constant indices, so that `a` stays in registers
// (a dynamically indexed register array goes to local memory).
template <int N, class V>
__device__ __forceinline__ V pick(const V (&a)[N], int r) {
  V v = a[0];
  PMKIT_UNROLL
  for (int k = 1; k < N; ++k) v = r == k ? a[k] : v;
  return v;
}

template <class T, int N>
struct Values {
  T v[N];
};

// Calls f(std::integral_constant<int, NP>{}) for a pass of `count` properties: the tile
// kernels are compiled per property count, so their loops over properties have no
// run-time bound (which would cost a branch and a load per node).
template <class F>
void with_prop_count(int count, F&& f) {
  static_assert(tuning::kPropsPerPass == 3, "one case per count");
  switch (count) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 3>{}); break;
  }
}

// A value already in scaled units as the fixed-point integer: one word in float fast
// mode, 64 bits otherwise (double contributions reach 2^62, FixedPoint<3>).
template <int W, class T>
__device__ __forceinline__ long long fixed_of(T x) {
  if constexpr (sizeof(T) == 4 && W == 1) return __float2int_rn(x);
  else if constexpr (sizeof(T) == 4) return __float2ll_rn(x);
  else return __double2ll_rn(x);
}

// The contribution a * b (the row's scaled weight times an x-weight) as the fixed-point
// integer: one word in float fast mode (fits 32 bits by the per-block scale), 64 bits
// otherwise. kFma (float only, tuning::fma_rounding_pays): the product is formed in
// double (exact: 24 x 24 bits) and rounded by adding 1.5 * 2^52 in the same fused
// operation, which leaves round(a * b) in the low bits of the result: one FP64
// instruction instead of a float-to-integer conversion on the quarter-rate XU pipe.
// Exact while |a * b| < 2^51; float contributions stay below 2^41 (FixedPoint<2>).
template <int W, bool kFma, class T>
__device__ __forceinline__ long long to_fixed(T a, T b) {
  if constexpr (sizeof(T) == 4 && kFma) {
    constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: its units are 1
    const double x = __fma_rn(static_cast<double>(a), static_cast<double>(b), kRound);
    if constexpr (W == 1) return __double2loint(x);  // round(a * b) mod 2^32, and |a * b| < 2^31
    else return __double_as_longlong(x) - __double_as_longlong(kRound);
  } else {
    return fixed_of<W>(a * b);
  }
}

// The chunk-local index of the k-th particle a tile kernel takes (see interleave_kernel).
__device__ __forceinline__ std::uint32_t taken(const std::uint16_t* order, const Chunk& chunk, std::uint32_t k) {
  return order ? order[chunk.begin + k] : k;
}

// Particles a thread of a tile kernel handles: threadIdx.x + r * blockDim.x, r < kSlots.
constexpr int kSlots = tuning::kChunkParticles / tuning::kSpreadThreads;
static_assert(kSlots * tuning::kSpreadThreads == tuning::kChunkParticles, "chunk = threads * slots");

// ---------------------------------------------------------------------------------
// The order in which a tile kernel takes its chunk's particles.
//
// A warp of a tile kernel takes 32 particles; each lane adds (or reads) its stencil at
// window offset origin + o, with the same o in all lanes at once. In the scatter's
// (arrival) order the origins are random, and a warp's 32 accesses fall into ~3
// shared-memory wavefronts on average (most of the spread kernel's wavefronts would be
// bank conflicts). So set_points also records, per chunk, an order in
// levels: level r holds the r-th particle of every bank that has one, in bank order.
// 32 consecutive particles of a full level start in 32 different banks: one wavefront
// per access. Only the last, partial levels of a chunk mix.
//
// The records stay in arrival order (moving them would need a scattered update of
// `slot`, one random store per particle); order[chunk.begin + k] is the chunk-local
// index of the k-th particle to take. Kernels with few nodes a particle skip it
// (tuning::interleave_pays): order is then null and the arrival order is used.
constexpr int kSharedBanks = 32;  // 4-byte banks, every GPU since Maxwell

// A chunk of at most one warp's particles sits in one warp in any order, and a warp's
// bank conflicts depend on the set of its addresses, not on which lane holds which: such
// chunks keep the arrival order, written by a few lanes with no barrier (at 8 a tile,
// 2^18 particles on 256^3, that is every one of the 32768 blocks).
constexpr std::uint32_t kMinInterleavedChunk = kSharedBanks + 1;

// A block a chunk. The kernel is a chain of dependent steps (the chunk, its banks, shared
// atomics, two barriers, the level table, the stores) with little work in each. Reading
// each particle's bank from its 16-byte record (a 32-byte sector for 4 bytes), it is
// bound by those bytes; reading the byte place_kernel stored (WindowBanks), by how many
// chunks an SM holds at once, which small blocks raise. kThreads:
// tuning::interleave_threads.
template <class K, int D, class T, int kThreads, bool kFromBanks>
__global__ void __launch_bounds__(kThreads)
    interleave_kernel(BinGeometry<D> geo, const Chunk* chunks, const std::uint32_t* num_chunks,
                      const Packed<T>* particles, const std::uint8_t* banks, std::uint16_t* order) {
  static_assert(tuning::kChunkParticles <= 65536, "chunk-local indices are 16-bit");
  constexpr int kSlotsHere = tuning::kChunkParticles / kThreads;
  static_assert(kSlotsHere * kThreads == tuning::kChunkParticles, "chunk = threads * slots");
  static_assert(kThreads >= kMinInterleavedChunk, "a short chunk is written by one pass of the block");
  static_assert(kThreads % 32 == 0, "whole warps (the level table is built a level a warp)");
  __shared__ std::uint32_t bank_count[kSharedBanks];
  __shared__ std::uint16_t level_first[tuning::kChunkParticles];  // a level's first place in the chunk
  __shared__ std::uint32_t level_banks[tuning::kChunkParticles];  // bit b: the level has bank b
  // Launched with a bound on the chunk count (set_points does not wait for the count).
  if (blockIdx.x >= *num_chunks) return;
  const Chunk chunk = chunks[blockIdx.x];
  if (chunk.count < kMinInterleavedChunk) {  // the arrival order
    if (threadIdx.x < chunk.count) order[chunk.begin + threadIdx.x] = static_cast<std::uint16_t>(threadIdx.x);
    return;
  }
  if (threadIdx.x < kSharedBanks) bank_count[threadIdx.x] = 0;
  __syncthreads();
  int tile[D];
  if constexpr (!kFromBanks) geo.tile_coords(chunk.tile, tile);
  // The chunk's banks loaded all at once, then ranked: loaded one at a time between the
  // atomics, the loads would wait one by one. A particle's bank (5 bits) and its rank in
  // the bank (< 2^11) share a register.
  std::uint32_t bank_rank[kSlotsHere];
#pragma unroll
  for (int r = 0; r < kSlotsHere; ++r) {
    const std::uint32_t i = threadIdx.x + r * kThreads;
    if constexpr (kFromBanks)
      bank_rank[r] = i < chunk.count ? banks[chunk.begin + i] : 0u;
    else if (!geo.wide)
      bank_rank[r] = i < chunk.count ? particles[chunk.begin + i].cell : 0u;
    else  // the cell word alone does not give the home node: the bank from the whole record
      bank_rank[r] = i < chunk.count ? static_cast<std::uint32_t>(TileWindow<K, D>::origin(
                                           geo, particles[chunk.begin + i], tile)) % kSharedBanks
                                     : 0u;
  }
#pragma unroll
  for (int r = 0; r < kSlotsHere; ++r) {
    const std::uint32_t i = threadIdx.x + r * kThreads;
    if (i >= chunk.count) break;
    std::uint32_t bank = bank_rank[r];
    if constexpr (!kFromBanks)
      if (!geo.wide) bank = static_cast<std::uint32_t>(TileWindow<K, D>::origin(geo, bank, tile)) % kSharedBanks;
    bank_rank[r] = atomicAdd(&bank_count[bank], 1u) << 5 | bank;
  }
  __syncthreads();
  // The level table, a level a warp: lane b holds bank b's count. (A thread a level, each
  // summing the 32 counts itself, would hold them in 32 registers: four blocks an SM.)
  static_assert(kSharedBanks == 32, "a lane a bank (and 5 bits a bank in bank_rank)");
  const std::uint32_t lane = threadIdx.x % 32;
  const std::uint32_t count = bank_count[lane];
  const std::uint32_t levels = __reduce_max_sync(~0u, count);
  for (std::uint32_t r = threadIdx.x / 32; r < levels; r += kThreads / 32) {
    const std::uint32_t first = __reduce_add_sync(~0u, min(count, r));  // particles in the levels before r
    const std::uint32_t banks_here = __ballot_sync(~0u, count > r);
    if (lane == 0) {
      level_first[r] = static_cast<std::uint16_t>(first);
      level_banks[r] = banks_here;
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kSlotsHere; ++r) {
    const std::uint32_t i = threadIdx.x + r * kThreads;
    if (i >= chunk.count) break;
    const std::uint32_t bank = bank_rank[r] & 31u, rank = bank_rank[r] >> 5;
    const std::uint32_t place = level_first[rank] + __popc(level_banks[rank] & ((1u << bank) - 1u));
    order[chunk.begin + place] = static_cast<std::uint16_t>(i);
  }
}

}  // namespace pmkit::cuda
