#pragma once
// The CUDA kernels of the backend: binning, P2M (shared tiles with fixed-point
// accumulation; sorted global atomics), M2P, and the deterministic-mode helpers. Each
// kernel is small; the per-particle stencil is the one shared with the CPU backend
// (core/stencil.hpp). Launches and memory live in cuda_backend.cuh.
#include <cstdint>
#include <type_traits>

#include <cub/block/block_exchange.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_radix_sort.cuh>

#include "core/layout.hpp"
#include "core/stencil.hpp"
#include "cuda/fixed_point.cuh"
#include "cuda/tuning.hpp"

namespace pmkit::cuda {

// One binned particle, in tile order: local coordinates and the linear index of its
// home node (floor(u + shift), wrapped) over the key extents. 16 bytes in float.
template <class T>
struct alignas(4 * sizeof(T)) Packed {
  T s[3];
  std::uint32_t cell;
};

// Stores a record as whole 16-byte vectors: one in float, two in double, where a plain
// struct copy of Packed<double> compiles to three stores (16 + 8 + 4 bytes). A scattered
// store costs one L2 request per lane and instruction, so update_points' double stores
// cost 3x float's (ncu: 50M write requests for 2^24 particles; NOTES 27).
template <class T>
__device__ __forceinline__ void store_record(Packed<T>* to, const Packed<T>& p) {
  static_assert(sizeof(Packed<T>) == 4 * sizeof(T), "a record is four values wide");
  uint4* dst = reinterpret_cast<uint4*>(to);
  if constexpr (sizeof(T) == 4) {
    dst[0] = make_uint4(__float_as_uint(p.s[0]), __float_as_uint(p.s[1]), __float_as_uint(p.s[2]), p.cell);
  } else {
    dst[0] = make_uint4(__double2loint(p.s[0]), __double2hiint(p.s[0]), __double2loint(p.s[1]),
                        __double2hiint(p.s[1]));
    dst[1] = make_uint4(__double2loint(p.s[2]), __double2hiint(p.s[2]), p.cell, 0u);
  }
}

// Geometry of binning: key extents per dimension (nodes a home node can be), tiles.
template <int D>
struct BinGeometry {
  static constexpr int kEdge = tuning::tile_edge(D);  // cells per tile edge
  static_assert((kEdge & (kEdge - 1)) == 0, "tile edges are powers of two");
  int keys[D];   // n (periodic) or n+1 (bounded)
  int tiles[D];  // ceil(keys / kEdge)
  int support;
  std::uint32_t num_tiles;
  double peak_weight;  // largest weight one node gets from one particle (kernel peak ^ D)
  // A cell is its home node's coordinates as bit fields (x lowest; field d starts at
  // bit shift[d]) where they fit in 31 bits, else as a mixed-radix number over keys
  // (shift[0] < 0). Fields decode by shifts; the mixed radix by two run-time divisions,
  // ~20 instructions each with an XU reciprocal, in every kernel that reads a record
  // (bench/NOTES.md 30). 31 bits keep every cell below kAwayCell.
  int shift[D];

  // Sets shift from keys: fields where their widths add up to at most 31 bits, else the
  // mixed radix (only the largest grids: a bounded 1024^3 takes 3 x 11 bits).
  __host__ void choose_cell_encoding() {
    int bits = 0;
    for (int d = 0; d < D; ++d) {
      shift[d] = bits;
      int width = 0;
      while ((std::int64_t(1) << width) < keys[d]) ++width;
      bits += width;
    }
    if (bits > 31) shift[0] = -1;
  }
  __host__ __device__ bool bit_fields() const { return shift[0] >= 0; }

  // One axis of the encoding, from the last axis down to x (so that the binning loop
  // keeps no array of coordinates: that raised partition_kernel from 64 to 84 registers,
  // one block an SM instead of two, NOTES 30).
  __host__ __device__ std::uint32_t encode_axis(std::uint32_t cell, int d, int home) const {
    return bit_fields() ? cell | (static_cast<std::uint32_t>(home) << shift[d])
                        : cell * static_cast<std::uint32_t>(keys[d]) + static_cast<std::uint32_t>(home);
  }
  __host__ __device__ std::uint32_t encode(const int (&home)[D]) const {
    std::uint32_t cell = 0;
    PMKIT_UNROLL
    for (int d = D - 1; d >= 0; --d) cell = encode_axis(cell, d, home[d]);
    return cell;
  }
  __host__ __device__ void decode(std::uint32_t cell, int (&home)[D]) const {
    if (bit_fields()) {
      PMKIT_UNROLL
      for (int d = 0; d < D - 1; ++d)
        home[d] = static_cast<int>((cell >> shift[d]) & ((1u << (shift[d + 1] - shift[d])) - 1u));
      home[D - 1] = static_cast<int>(cell >> shift[D - 1]);
      return;
    }
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      home[d] = static_cast<int>(cell % keys[d]);
      cell /= keys[d];
    }
  }
  __host__ __device__ void tile_coords(std::uint32_t tile, int (&t)[D]) const {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      t[d] = static_cast<int>(tile % tiles[d]);
      tile /= tiles[d];
    }
  }
};

// A block's share of one tile: at most tuning::kChunkParticles particles.
struct Chunk {
  std::uint32_t tile, begin, count;
};

template <class T, int D>
struct PositionArrays {
  const T* data[D];
  std::ptrdiff_t stride[D];
  __device__ double get(int d, std::size_t i) const {
    return static_cast<double>(data[d][static_cast<std::ptrdiff_t>(i) * stride[d]]);
  }
};

// Up to kPropsPerPass particle arrays and meshes handled by one launch.
template <class T>
struct PropPass {
  const T* props[tuning::kPropsPerPass];
  std::ptrdiff_t prop_stride[tuning::kPropsPerPass];
  T* meshes[tuning::kPropsPerPass];                        // spread targets / interp sources (read only)
  T* values[tuning::kPropsPerPass];                        // interp outputs, caller's order
  std::ptrdiff_t value_stride[tuning::kPropsPerPass];
  unsigned long long* exact[tuning::kPropsPerPass];        // deterministic: integer meshes
  const unsigned long long* max_abs_bits;                  // deterministic: max |q| per prop
  int count;
  bool quad_flush;  // float meshes take float4 atomics along x (TileWindow::kQuads, flush_quads)
};

// ---------------------------------------------------------------------------------
// Binning

// A binned slot whose particle has left its tile since the last full binning
// (update_points): the binned kernels skip it, the away list holds its new record.
// Cells are < 2^32 - 1 (the backend checks), so the value is free.
constexpr std::uint32_t kAwayCell = 0xffffffffu;

// Particle i's packed record (local coordinates, home node) and tile; false where its
// position is not valid (non-finite, or outside a bounded axis).
template <class T, int D>
__device__ __forceinline__ bool bin_particle(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                             const PositionArrays<T, D>& pos, std::size_t i, Packed<T>& p,
                                             std::uint32_t& tile) {
  std::uint32_t cell = 0;
  tile = 0;
  PMKIT_UNROLL
  for (int d = D - 1; d >= 0; --d) {
    double u;
    if (!layout.axis[d].coordinate(pos.get(d, i), u)) return false;
    int base;
    double s;
    kernels::locate(geo.support, u, base, s);
    int home = base + (geo.support - 1) / 2;
    if (home >= geo.keys[d]) home -= geo.keys[d];  // periodic: u + 1/2 rounded onto the seam
    cell = geo.encode_axis(cell, d, home);
    tile = tile * geo.tiles[d] + home / BinGeometry<D>::kEdge;  // a power of two: a shift
    p.s[d] = static_cast<T>(s);
  }
  p.cell = cell;
  return true;
}

// bin_particle, or, for an invalid position, the particle's index offered to first_bad
// (the smallest wins, so the error names the first bad particle in the caller's order).
template <class T, int D>
__device__ __forceinline__ bool bin_or_reject(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                              const PositionArrays<T, D>& pos, std::size_t i, Packed<T>& p,
                                              std::uint32_t& tile, unsigned long long* first_bad) {
  if (bin_particle(layout, geo, pos, i, p, tile)) return true;
  atomicMin(first_bad, static_cast<unsigned long long>(i));
  return false;
}

// The counters of set_points: each tile's count is split into 2^sub_bits sub-buckets, by
// the particle's warp (index / 32), so that where tiles are few and full (64 per cell:
// 512 tiles for 2^24 particles) the atomics do not all queue on one counter per tile. A
// tile's particles lie sub-bucket after sub-bucket; the scatter fills each sub-bucket in
// order, so every open sub-bucket is one partly written line in L2, and the backend keeps
// tiles x sub-buckets small (tuning::kMaxWriteFronts).
struct Buckets {
  int sub_bits;
  __device__ __forceinline__ std::uint32_t of(std::uint32_t tile, std::size_t i) const {
    return (tile << sub_bits) + (static_cast<std::uint32_t>(i >> 5) & ((1u << sub_bits) - 1u));
  }
};

// Validates every position, assigns its tile, and its rank within its bucket. All 32
// lanes of every warp take part (blocks are whole warps): the lanes of a run of equal
// buckets take their ranks with one atomic, which is what particles that arrive sorted
// (Plan::binned_order) need: one atomic per lane took set_points 1.8 -> 2.8 ms at 256^3
// and 7.2 ms at 128^3. Random input has no runs and pays a shuffle and a ballot.
template <class T, int D>
__global__ void classify_kernel(detail::Layout<D> layout, BinGeometry<D> geo,
                                PositionArrays<T, D> pos, std::size_t n, Buckets buckets, std::uint32_t* tile_of,
                                std::uint32_t* rank, std::uint32_t* bucket_count,
                                unsigned long long* first_bad) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  Packed<T> p;
  std::uint32_t tile = 0;
  const bool valid = i < n && bin_or_reject(layout, geo, pos, i, p, tile, first_bad);
  const std::uint32_t bucket = valid ? buckets.of(tile, i) : 0xffffffffu;
  if (valid) tile_of[i] = tile;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned up_to_lane = 0xffffffffu >> (31u - lane);  // bits 0..lane
  const std::uint32_t previous = __shfl_up_sync(0xffffffffu, bucket, 1);
  const unsigned run_starts = __ballot_sync(0xffffffffu, lane == 0 || previous != bucket);
  const unsigned head = 31u - __clz(run_starts & up_to_lane);
  const unsigned later_starts = run_starts & ~up_to_lane;
  const unsigned run_end = later_starts ? __ffs(later_starts) - 1u : 32u;
  std::uint32_t first = 0;
  if (valid && lane == head) first = atomicAdd(&bucket_count[bucket], run_end - head);
  first = __shfl_sync(0xffffffffu, first, head);
  if (valid) rank[i] = first + (lane - head);
}

// Chunks of at most `chunk` particles per tile (ceil(count / chunk)); bucket_start is the
// scan of the bucket counts. Also cuts the partition's groups into pieces (there `tile`
// is a group and buckets has no sub-buckets).
static __global__ void chunk_count_kernel(std::uint32_t num_tiles, Buckets buckets, const std::uint32_t* bucket_start,
                                          std::uint32_t chunk, std::uint32_t* chunk_count) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tiles) return;
  const std::uint32_t count = bucket_start[(t + 1) << buckets.sub_bits] - bucket_start[t << buckets.sub_bits];
  chunk_count[t] = (count + chunk - 1) / chunk;
}

// even: the pieces of a tile all of one size (the cell moments' spans: chunk, chunk, rest
// would leave a block with a few particles where a tile is just over the cap); else
// chunk, chunk, ..., the rest.
static __global__ void chunk_fill_kernel(std::uint32_t num_tiles, Buckets buckets, const std::uint32_t* bucket_start,
                                         const std::uint32_t* chunk_start, std::uint32_t chunk, bool even,
                                         Chunk* chunks) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tiles) return;
  const std::uint32_t begin = bucket_start[t << buckets.sub_bits];
  const std::uint32_t count = bucket_start[(t + 1) << buckets.sub_bits] - begin;
  const std::uint32_t pieces = (count + chunk - 1) / chunk;
  for (std::uint32_t k = 0; k < pieces; ++k) {
    const auto lo = static_cast<std::uint32_t>(even ? std::uint64_t(count) * k / pieces : std::uint64_t(k) * chunk);
    const auto hi =
        static_cast<std::uint32_t>(even ? std::uint64_t(count) * (k + 1) / pieces : min(count, (k + 1) * chunk));
    chunks[chunk_start[t] + k] = Chunk{t, begin + lo, hi - lo};
  }
}

// Writes each particle, packed, to its slot in tile order; perm (slot -> caller's index)
// and slot (caller's index -> slot) record the permutation both ways.
template <class T, int D>
__global__ void scatter_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                               std::size_t n, Buckets buckets, const std::uint32_t* tile_of,
                               const std::uint32_t* rank, const std::uint32_t* bucket_start, Packed<T>* particles,
                               std::uint32_t* perm, std::uint32_t* slot) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t dst = bucket_start[buckets.of(tile_of[i], i)] + rank[i];
  Packed<T> p;
  std::uint32_t tile;
  bin_particle(layout, geo, pos, i, p, tile);  // classify validated every position
  store_record(particles + dst, p);
  perm[dst] = static_cast<std::uint32_t>(i);
  slot[i] = dst;
}

// ---------------------------------------------------------------------------------
// Partition: set_points' scatter in two passes whose big stores are coalesced.
//
// A scattered store costs one L2 request per lane, however few the open write fronts
// (bench/NOTES.md 17: 2^24 16-byte records to 512 random buckets 0.58 ms, a coalesced
// copy of the same bytes 0.185). So every block here sorts its items locally by key
// (cub::BlockRadixSort) and stores them in that order, consecutive threads writing
// consecutive slots of one run of equal keys (place_runs):
//   count (count_groups_kernel): validates, counts per group of 2^bits consecutive tiles;
//   pass 1 (partition_kernel): blocks of the caller's order -> group order, runs of
//     ~kItems / groups (8 records: a 128-byte line, at 2^24 / 256^3);
//   pass 2 (count_piece_tiles_kernel, place_kernel), where groups hold several tiles:
//     each group's pieces -> tile order, runs of ~kItems / tiles a group (64);
//   compose_slot_kernel: slot (caller -> pass-1 place) -> binned slot.
// Where the groups are the tiles (bits = 0) pass 1 writes the binning itself.
// Every place comes from counts in block order (scans, not atomic cursors) and the block
// sorts are stable, so the whole is a stable sort by tile: a tile's particles keep the
// caller's order, the same in every run (bench/NOTES.md 26).

// Pass 1's groups: tile >> bits; count of them; key_bits: the sort's bits, enough for
// the key `count` that marks a block's unused items.
struct Groups {
  int bits;
  std::uint32_t count;
  int key_bits;
};

// The block of both passes: kPerThread items a thread, one item per block-local index
// j = threadIdx.x + k * kThreads (coalesced loads), records staged in shared memory.
template <class T>
struct PartitionBlock {
  static constexpr int kThreads = tuning::kPartitionThreads;
  static constexpr int kPerThread = tuning::partition_items_per_thread(sizeof(T));
  static constexpr int kItems = kThreads * kPerThread;
  static constexpr int kMaxKeys = tuning::kMaxPartitionKeys;
  static_assert(kItems <= 65536, "block-local indices are 16-bit (the low half of a sort value)");
  using Sort = cub::BlockRadixSort<std::uint16_t, kThreads, kPerThread, std::uint32_t, tuning::kPartitionRadixBits>;
  // Items are loaded striped (coalesced); the sort is stable in the blocked order, so
  // they are exchanged to blocked first and equal keys keep the block-local order.
  using KeyExchange = cub::BlockExchange<std::uint16_t, kThreads, kPerThread>;
  using ValueExchange = cub::BlockExchange<std::uint32_t, kThreads, kPerThread>;
  // Dynamic shared memory (> 48 KB; the backend opts in). The union's members live one
  // after the other, with barriers between (place_runs).
  struct Shared {
    union {
      typename Sort::TempStorage sort;
      typename KeyExchange::TempStorage key_exchange;
      typename ValueExchange::TempStorage value_exchange;
      std::uint16_t sorted_key[kItems];
      std::uint32_t dst[kItems];  // by block-local index: where the item went
    } u;
    std::uint32_t run_first[kMaxKeys];  // a run's first sorted place, then its dst - first place
    std::uint32_t run_end[kMaxKeys];
    Packed<T> records[kItems];  // by block-local index
  };
  __device__ static Shared& shared() {
    extern __shared__ __align__(16) unsigned char partition_smem[];
    return *reinterpret_cast<Shared*>(partition_smem);
  }
  __device__ static std::uint32_t local(int k) { return threadIdx.x + k * kThreads; }
};

// Sorts the block's items (held striped: item k of thread t has block-local index
// local(k)) stably by key (bits [0, end_bit); the low 16 bits of a value are the item's
// block-local index), so each run keeps the block-local order. Then gives each run of
// equal keys below `unused` its place, first(key, items in the run) = the global slot of
// the run's first item, and calls emit(slot, value) for every item in the sorted order,
// striped: thread t takes sorted places t, t + kThreads, ..., so consecutive lanes store
// consecutive slots of a run (whole lines where runs are long enough). emit may write
// sh.u.dst.
template <class T, class First, class Emit>
__device__ __forceinline__ void place_runs(typename PartitionBlock<T>::Shared& sh,
                                           std::uint16_t (&key)[PartitionBlock<T>::kPerThread],
                                           std::uint32_t (&value)[PartitionBlock<T>::kPerThread], int end_bit,
                                           std::uint32_t unused, First&& first, Emit&& emit) {
  using B = PartitionBlock<T>;
  __syncthreads();  // records staged; sh.u may still be read by a previous use
  typename B::KeyExchange(sh.u.key_exchange).StripedToBlocked(key);
  __syncthreads();
  typename B::ValueExchange(sh.u.value_exchange).StripedToBlocked(value);
  __syncthreads();
  typename B::Sort(sh.u.sort).SortBlockedToStriped(key, value, 0, end_bit);
  __syncthreads();
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) sh.u.sorted_key[B::local(k)] = key[k];
  __syncthreads();
  unsigned starts = 0;  // bit k: sorted place local(k) begins a run
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::uint32_t p = B::local(k);
    if (key[k] >= unused) continue;
    if (p == 0 || sh.u.sorted_key[p - 1] != key[k]) {
      sh.run_first[key[k]] = p;
      starts |= 1u << k;
    }
    if (p == B::kItems - 1 || sh.u.sorted_key[p + 1] != key[k]) sh.run_end[key[k]] = p + 1;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k)
    if (starts & (1u << k)) {
      const std::uint32_t p = B::local(k);
      sh.run_first[key[k]] = first(static_cast<std::uint32_t>(key[k]), sh.run_end[key[k]] - p) - p;
    }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k)
    if (key[k] < unused) emit(sh.run_first[key[k]] + B::local(k), value[k]);
  __syncthreads();
}

// Neighbour pairs (i, i + 1), `pairs` of them spread over the caller's order, that lie in
// one tile (n >= 2): set_points keeps the one-pass scatter for input already in binned
// order, whose stores are local there (tuning::kBinnedPairFraction). One pair a thread
// over many blocks (80850e8's one-block probe was a chain of dependent loads: 0.079 ms).
template <class T, int D>
__global__ void same_tile_pairs_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                                       std::size_t n, std::uint32_t pairs, std::uint32_t* same) {
  const std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  bool equal = false;
  if (k < pairs) {
    const std::size_t i = (n - 1) * static_cast<std::size_t>(k) / pairs;
    Packed<T> p;
    std::uint32_t a, b;
    equal = bin_particle(layout, geo, pos, i, p, a) && bin_particle(layout, geo, pos, i + 1, p, b) && a == b;
  }
  const int block_same = __syncthreads_count(equal);
  if (threadIdx.x == 0 && block_same > 0) atomicAdd(same, static_cast<std::uint32_t>(block_same));
}

// Count: validates every position (the first bad one is reported, as by classify_kernel)
// and writes each group's count of the block's particles to block_count[block * groups +
// group] (every group, zeros included; a row a block, coalesced). Transposed to group
// order (transpose_counts_kernel), their exclusive scan gives each (group, block) run its
// first place. Those places follow the caller's order inside every group, the same in
// every run (atomic cursors did not: bench/NOTES.md 26).
template <class T, int D>
__global__ void __launch_bounds__(tuning::kPartitionThreads)
    count_groups_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos, std::size_t n,
                        Groups groups, std::uint32_t* block_count, unsigned long long* first_bad) {
  using B = PartitionBlock<T>;
  __shared__ std::uint32_t count[tuning::kMaxPartitionKeys];
  for (std::uint32_t g = threadIdx.x; g < groups.count; g += blockDim.x) count[g] = 0;
  __syncthreads();
  const std::size_t base = blockIdx.x * static_cast<std::size_t>(B::kItems);
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::size_t i = base + B::local(k);
    Packed<T> p;
    std::uint32_t tile;
    if (i < n && bin_or_reject(layout, geo, pos, i, p, tile, first_bad)) atomicAdd(&count[tile >> groups.bits], 1u);
  }
  __syncthreads();
  for (std::uint32_t g = threadIdx.x; g < groups.count; g += blockDim.x)
    block_count[static_cast<std::size_t>(blockIdx.x) * groups.count + g] = count[g];
}

// out[c * rows + r] = in[r * cols + c], through 32 x 32 tiles in shared memory (both sides
// coalesced; strided stores of the count rows measured 46 us at 2^24: NOTES 26).
static __global__ void transpose_counts_kernel(const std::uint32_t* in, std::uint32_t rows, std::uint32_t cols,
                                               std::uint32_t* out) {
  __shared__ std::uint32_t tile[32][33];
  const std::uint32_t c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (std::uint32_t y = threadIdx.y; y < 32; y += blockDim.y) {
    const std::uint32_t r = r0 + y, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[y][threadIdx.x] = in[static_cast<std::size_t>(r) * cols + c];
  }
  __syncthreads();
  for (std::uint32_t y = threadIdx.y; y < 32; y += blockDim.y) {
    const std::uint32_t c = c0 + y, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[static_cast<std::size_t>(c) * rows + r] = tile[threadIdx.x][y];
  }
}

// Where pass 1 writes, by pass-1 place: records, and the caller's index of each (perm
// where the groups are the tiles; else the input of pass 2, with the tile within the
// group in keys); by caller's index: the place (slot, or pass 2's input to compose).
template <class T>
struct PartitionOut {
  Packed<T>* records;
  std::uint32_t* index;
  std::uint16_t* keys;  // null where the groups are the tiles
  std::uint32_t* place;
};

// Pass 1: the count's blocks (positions validated there) bin again, sort by group and
// store each group's run at its place from the scanned counts (block_start, laid out as
// block_count). Also writes tile_of (update_points), coalesced.
template <class T, int D>
__global__ void __launch_bounds__(tuning::kPartitionThreads)
    partition_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos, std::size_t n,
                     Groups groups, const std::uint32_t* block_start, std::uint32_t* tile_of, PartitionOut<T> out) {
  using B = PartitionBlock<T>;
  typename B::Shared& sh = B::shared();
  const std::size_t base = blockIdx.x * static_cast<std::size_t>(B::kItems);
  std::uint16_t key[B::kPerThread];
  std::uint32_t value[B::kPerThread];  // block-local index | tile within the group << 16
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::uint32_t j = B::local(k);
    const std::size_t i = base + j;
    key[k] = static_cast<std::uint16_t>(groups.count);
    value[k] = j;
    Packed<T> record;
    std::uint32_t tile;
    if (i < n && bin_particle(layout, geo, pos, i, record, tile)) {
      sh.records[j] = record;
      tile_of[i] = tile;
      const std::uint32_t g = tile >> groups.bits;
      key[k] = static_cast<std::uint16_t>(g);
      value[k] |= (tile - (g << groups.bits)) << 16;
    }
  }
  place_runs<T>(
      sh, key, value, groups.key_bits, groups.count,
      [&](std::uint32_t g, std::uint32_t) { return block_start[static_cast<std::size_t>(g) * gridDim.x + blockIdx.x]; },
      [&](std::uint32_t dst, std::uint32_t v) {
        const std::uint32_t j = v & 0xffffu;
        store_record(out.records + dst, sh.records[j]);
        out.index[dst] = static_cast<std::uint32_t>(base + j);
        if (out.keys) out.keys[dst] = static_cast<std::uint16_t>(v >> 16);
        sh.u.dst[j] = dst;
      });
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::size_t i = base + B::local(k);
    if (i < n) out.place[i] = sh.u.dst[B::local(k)];
  }
}

// Pass 2, counting: each piece (a Chunk of at most PartitionBlock::kItems of one group;
// its `tile` is the group) writes its count of particles per tile of the group to
// piece_count (zeros included) and adds them to tile_count (sums: the same whatever the
// atomics' order). Keys are read coalesced (2 bytes each); shared counters.
static __global__ void __launch_bounds__(tuning::kPartitionThreads)
    count_piece_tiles_kernel(Groups groups, std::uint32_t num_tiles, const Chunk* pieces,
                             const std::uint32_t* num_pieces, const std::uint16_t* keys, std::uint32_t* tile_count,
                             std::uint32_t* piece_count) {
  __shared__ std::uint32_t count[tuning::kMaxPartitionKeys];
  if (blockIdx.x >= *num_pieces) return;
  const Chunk piece = pieces[blockIdx.x];
  const std::uint32_t first_tile = piece.tile << groups.bits;
  const std::uint32_t tiles = min(1u << groups.bits, num_tiles - first_tile);
  for (std::uint32_t t = threadIdx.x; t < tiles; t += blockDim.x) count[t] = 0;
  __syncthreads();
  for (std::uint32_t k = threadIdx.x; k < piece.count; k += blockDim.x) atomicAdd(&count[keys[piece.begin + k]], 1u);
  __syncthreads();
  std::uint32_t* row = piece_count + (static_cast<std::size_t>(blockIdx.x) << groups.bits);
  for (std::uint32_t t = threadIdx.x; t < tiles; t += blockDim.x) {
    row[t] = count[t];
    if (count[t] != 0) atomicAdd(tile_count + first_tile + t, count[t]);
  }
}

// Pass 2, moving: each piece sorts by tile within the group and stores its runs at
// tile_start + the counts of the group's earlier pieces in that tile (runs of ~64 at
// 2^24 / 256^3): the binned records and perm. Offsets in piece order, not from atomics:
// with the stable block sorts, a tile's particles keep the caller's order, the same in
// every run (update_points' stores then advance through the tiles: NOTES 26). index holds
// each pass-1 place's caller index; it gets the place's binned slot (read first by the
// same block), for compose_slot_kernel.
template <class T>
__global__ void __launch_bounds__(tuning::kPartitionThreads)
    place_kernel(Groups groups, const Chunk* pieces, const std::uint32_t* num_pieces, const std::uint32_t* piece_start,
                 const std::uint16_t* keys, const Packed<T>* parted, std::uint32_t* index,
                 const std::uint32_t* tile_start, const std::uint32_t* piece_count, Packed<T>* particles,
                 std::uint32_t* perm) {
  using B = PartitionBlock<T>;
  typename B::Shared& sh = B::shared();
  std::uint32_t* caller = reinterpret_cast<std::uint32_t*>(&sh + 1);  // by block-local index
  std::uint32_t* tile_offset = caller + B::kItems;                    // by tile of the group
  if (blockIdx.x >= *num_pieces) return;
  const Chunk piece = pieces[blockIdx.x];
  const std::uint32_t unused = 1u << groups.bits;
  // The pieces of a group are consecutive, in pass-1 order (~8 at 2^24 / 256^3).
  for (std::uint32_t t = threadIdx.x; t < unused; t += blockDim.x) {
    std::uint32_t sum = 0;
    for (std::uint32_t p = piece_start[piece.tile]; p < blockIdx.x; ++p)
      sum += piece_count[(static_cast<std::size_t>(p) << groups.bits) + t];
    tile_offset[t] = sum;
  }
  std::uint16_t key[B::kPerThread];
  std::uint32_t value[B::kPerThread];
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::uint32_t j = B::local(k);
    key[k] = static_cast<std::uint16_t>(unused);
    value[k] = j;
    if (j < piece.count) {
      key[k] = keys[piece.begin + j];
      sh.records[j] = parted[piece.begin + j];
      caller[j] = index[piece.begin + j];
    }
  }
  const std::uint32_t* tile_first = tile_start + (piece.tile << groups.bits);
  place_runs<T>(  // its first barrier orders tile_offset too
      sh, key, value, groups.bits + 1, unused,
      [&](std::uint32_t t, std::uint32_t) { return tile_first[t] + tile_offset[t]; },
      [&](std::uint32_t dst, std::uint32_t j) {
        store_record(particles + dst, sh.records[j]);
        perm[dst] = caller[j];
        sh.u.dst[j] = dst;
      });
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::uint32_t j = B::local(k);
    if (j < piece.count) index[piece.begin + j] = sh.u.dst[j];
  }
}

// The binned slot of each caller's index: slot holds its pass-1 place, binned_of_place
// that place's binned slot. Coalesced but for one scattered 4-byte read (17: a 4-byte
// gather costs ~0.13-0.15 ms at 2^24; a scattered store instead, ~0.3-0.4).
static __global__ void compose_slot_kernel(std::size_t n, const std::uint32_t* binned_of_place, std::uint32_t* slot) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) slot[i] = binned_of_place[slot[i]];
}

// update_points, one thread per particle in the caller's order (positions, tile and
// slot read coalesced; only the record's store is scattered; bench/NOTES.md 9). The check
// pass validates and counts the particles whose tile changed since the full binning
// (tile_of); only if it succeeds does the apply pass write the new records in place and
// list the away ones.
template <class T, int D>
__global__ void update_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                              std::size_t n, const std::uint32_t* tile_of, const std::uint32_t* slot,
                              bool apply, unsigned long long* first_bad, std::uint32_t* away_count,
                              Packed<T>* particles, std::uint32_t* away_slot, Packed<T>* away_particles) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  Packed<T> p;
  std::uint32_t tile;
  if (!bin_or_reject(layout, geo, pos, i, p, tile, first_bad)) return;
  const bool away = tile != tile_of[i];
  if (!apply) {
    if (away) atomicAdd(away_count, 1u);
    return;
  }
  const std::uint32_t s = slot[i];
  if (away) {
    const std::uint32_t k = atomicAdd(away_count, 1u);
    away_slot[k] = s;
    store_record(away_particles + k, p);
    p.cell = kAwayCell;
  }
  store_record(particles + s, p);
}

// ---------------------------------------------------------------------------------
// Per-particle helpers

template <class K, int D, class T>
__device__ __forceinline__ void unpack(const Packed<T>& p, const BinGeometry<D>& geo, int (&base)[D],
                                       T (&s)[D]) {
  geo.decode(p.cell, base);
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    base[d] -= (K::support - 1) / 2;
    s[d] = p.s[d];
  }
}

template <class T>
__device__ __forceinline__ T load_prop(const PropPass<T>& pass, int j, std::uint32_t p) {
  return __ldg(pass.props[j] + static_cast<std::ptrdiff_t>(p) * pass.prop_stride[j]);
}

// ---------------------------------------------------------------------------------
// P2M: shared-memory tiles with fixed-point accumulation.
//
// One block per chunk. The accumulator holds, per property, W words per node of the
// tile's window. Per-block scale (fast mode): from the chunk's sum of |q|, so the
// rounding is relative to what the block holds. Global scale (deterministic mode):
// from max |q| over all particles and N, identical in every block and every run, and
// the block's integer sums go to 64-bit integer meshes.
template <int W>
__device__ __forceinline__ double deterministic_scale(double max_abs, std::size_t n) {
  int log2n = 1;
  while ((std::size_t(1) << log2n) < n) ++log2n;
  const int target = min(FixedPoint<W>::kContributionBits, 62 - log2n);
  return pow2_scale(max_abs, target);
}

// A tile's window: the tile's nodes plus the kernel's reach, as a small mesh of its own
// (node m of the window is logical node tile * edge - (S-1)/2 + m, no wrap inside).
// Its sizes are compile-time constants, so every stencil offset inside it is an
// immediate operand of the shared-memory instruction (ncu on the run-time version: ~14
// instructions per node, of which one was the shared atomic).
template <class K, int D>
struct TileWindow {
  static constexpr int kEdge = BinGeometry<D>::kEdge;
  static constexpr int kWidth = kEdge + K::support - 1;
  static constexpr int kNodes = D == 3 ? kWidth * kWidth * kWidth : kWidth * kWidth;
  static constexpr int kLead = (K::support - 1) / 2;  // nodes the stencil starts before home

  // Window offset of a particle's first stencil node: its home node's place in the tile.
  __device__ __forceinline__ static int origin(const BinGeometry<D>& geo, std::uint32_t cell, const int (&tile)[D]) {
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

  // Mesh index of window node k (the same rule, with x).
  __device__ __forceinline__ static bool mesh_index(const detail::Layout<D>& layout, const int (&tile)[D], int k,
                                                    std::int64_t& index) {
    const bool inside = row_index(layout, tile, k / kWidth, index);
    const int node = layout.axis[0].node(tile[0] * kEdge - kLead + k % kWidth);
    index += node;
    return inside && node >= 0 && node < layout.axis[0].nodes;
  }

  // Quads: the window's x-rows cut at multiples of 4 of the logical x, so that a flush
  // can add 4 nodes with one float4 atomic. Valid where x is periodic with a multiple
  // of 4 nodes (a quad then never straddles the seam) and the mesh is 16-byte aligned.
  static constexpr int kQuads = (kWidth + 3) / 4 + 1;  // covers the row at any alignment
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
// run-time bound (ncu: the run-time bound cost a branch and a load per node).
template <class F>
void with_prop_count(int count, F&& f) {
  static_assert(tuning::kPropsPerPass == 3, "one case per count");
  switch (count) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 3>{}); break;
  }
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
  } else if constexpr (sizeof(T) == 4 && W == 1) {
    return __float2int_rn(a * b);
  } else if constexpr (sizeof(T) == 4) {
    return __float2ll_rn(a * b);
  } else {
    return __double2ll_rn(a * b);  // double contributions reach 2^62 (FixedPoint<3>)
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
// shared-memory wavefronts on average (ncu: 67% of the spread kernel's wavefronts were
// bank conflicts, bench/NOTES.md 8). So set_points also records, per chunk, an order in
// levels: level r holds the r-th particle of every bank that has one, in bank order.
// 32 consecutive particles of a full level start in 32 different banks: one wavefront
// per access. Only the last, partial levels of a chunk mix.
//
// The records stay in arrival order (moving them would need a scattered update of
// `slot`, one random store per particle); order[chunk.begin + k] is the chunk-local
// index of the k-th particle to take. Kernels with few nodes a particle skip it
// (tuning::interleave_pays): order is then null and the arrival order is used.
constexpr int kSharedBanks = 32;  // 4-byte banks, every GPU since Maxwell

template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kSpreadThreads)
    interleave_kernel(BinGeometry<D> geo, const Chunk* chunks, const Packed<T>* particles, std::uint16_t* order) {
  static_assert(tuning::kChunkParticles <= 65536, "chunk-local indices are 16-bit");
  __shared__ std::uint32_t bank_count[kSharedBanks];
  __shared__ std::uint16_t level_first[tuning::kChunkParticles];  // a level's first place in the chunk
  __shared__ std::uint32_t level_banks[tuning::kChunkParticles];  // bit b: the level has bank b
  const Chunk chunk = chunks[blockIdx.x];
  if (threadIdx.x < kSharedBanks) bank_count[threadIdx.x] = 0;
  __syncthreads();
  int tile[D];
  geo.tile_coords(chunk.tile, tile);
  std::uint32_t bank[kSlots], rank[kSlots];
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i >= chunk.count) break;
    bank[r] = static_cast<std::uint32_t>(TileWindow<K, D>::origin(geo, particles[chunk.begin + i].cell, tile)) %
              kSharedBanks;
    rank[r] = atomicAdd(&bank_count[bank[r]], 1u);
  }
  __syncthreads();
  std::uint32_t levels = 0;
#pragma unroll
  for (int b = 0; b < kSharedBanks; ++b) levels = max(levels, bank_count[b]);
  for (std::uint32_t r = threadIdx.x; r < levels; r += blockDim.x) {
    std::uint32_t first = 0, banks = 0;
#pragma unroll
    for (int b = 0; b < kSharedBanks; ++b) {
      const std::uint32_t c = bank_count[b];
      first += min(c, r);  // particles of bank b in the levels before r
      banks |= static_cast<std::uint32_t>(c > r) << b;
    }
    level_first[r] = static_cast<std::uint16_t>(first);
    level_banks[r] = banks;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i >= chunk.count) break;
    const std::uint32_t place = level_first[rank[r]] + __popc(level_banks[rank[r]] & ((1u << bank[r]) - 1u));
    order[chunk.begin + place] = static_cast<std::uint16_t>(i);
  }
}

// The fast float flush by quads (TileWindow::first_quad_x): one float4 atomic adds four
// x-neighbours (global float atomics are done in L2, which takes a float4 as one
// operation: ~2.75x fewer of them for an 11-node row).
template <class K, int D, int NP>
__device__ __forceinline__ void flush_quads(const detail::Layout<D>& layout, const int (&tile)[D],
                                            const int* accumulator, const double* scale, const PropPass<float>& pass) {
  using Window = TileWindow<K, D>;
  const int x0 = tile[0] * Window::kEdge - Window::kLead;
  const int qx0 = Window::first_quad_x(tile);
  constexpr int kRows = Window::kNodes / Window::kWidth;
  for (int k = threadIdx.x; k < kRows * Window::kQuads; k += blockDim.x) {
    const int row = k / Window::kQuads;
    const int qx = qx0 + 4 * (k % Window::kQuads);  // logical x of the quad's first node
    if (qx >= x0 + Window::kWidth) continue;
    std::int64_t index;
    if (!Window::row_index(layout, tile, row, index)) continue;
    index += layout.axis[0].node(qx);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local = qx + e - x0;
        v[e] = local >= 0 && local < Window::kWidth
                   ? static_cast<float>(accumulator[j * Window::kNodes + row * Window::kWidth + local] / scale[j])
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
template <int W, int NP, bool kDeterministic, class T>
__device__ __forceinline__ void block_scales(const Values<T, NP> (&q)[kSlots], const PropPass<T>& pass,
                                             double peak_weight, std::size_t n, double* scale) {
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
      for (int r = 0; r < kSlots; ++r) v += fabs(static_cast<double>(q[r].v[j]));
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      if ((threadIdx.x & 31) == 0) atomicAdd(&block_abs[j], v);  // one per warp
    }
    __syncthreads();
    if (threadIdx.x < NP)
      scale[threadIdx.x] = pow2_scale(block_abs[threadIdx.x] * peak_weight, FixedPoint<W>::kContributionBits);
  }
  __syncthreads();
}

// The window's integer sums to the mesh, after the block's last shared add (all threads
// call): one global atomic per non-zero node and property (four nodes per float4 atomic
// where the mesh allows). A NaN scale (non-finite properties in this block) writes NaN
// to the whole window, as float arithmetic would.
template <class K, int D, class T, int W, int NP, bool kDeterministic>
__device__ __forceinline__ void flush_window(const detail::Layout<D>& layout, const int (&tile)[D],
                                             const int* accumulator, const double* scale, const PropPass<T>& pass) {
  using Window = TileWindow<K, D>;
  if constexpr (W == 1 && !kDeterministic && sizeof(T) == 4) {
    if (pass.quad_flush) {
      flush_quads<K, D, NP>(layout, tile, accumulator, scale, pass);
      return;
    }
  }
  for (int k = threadIdx.x; k < Window::kNodes; k += blockDim.x) {
    std::int64_t index = -1;
    bool inside = true;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const long long v = FixedPoint<W>::combine(accumulator + j * W * Window::kNodes + k, Window::kNodes);
      if (v == 0 && !(isnan(scale[j]) && !kDeterministic)) continue;
      if (index < 0) inside = Window::mesh_index(layout, tile, k, index);
      if (!inside) continue;
      if constexpr (kDeterministic)
        atomicAdd(pass.exact[j] + index, static_cast<unsigned long long>(v));
      else
        atomicAdd(pass.meshes[j] + index, static_cast<T>(static_cast<double>(v) / scale[j]));
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

  // Each thread's properties are gathered (the caller's order: one random read each)
  // once, into registers, and serve both the scale and the accumulation.
  Values<T, NP> q[kSlots];
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    const std::uint32_t p = i < chunk.count ? perm[chunk.begin + taken(order, chunk, i)] : 0;
#pragma unroll
    for (int j = 0; j < NP; ++j) q[r].v[j] = i < chunk.count ? load_prop(pass, j, p) : T(0);
  }

  block_scales<W, NP, kDeterministic>(q, pass, geo.peak_weight, n, scale);

  int tile[D];
  geo.tile_coords(chunk.tile, tile);
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

  flush_window<K, D, T, W, NP, kDeterministic>(layout, tile, accumulator, scale, pass);
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

// The fixed-point value of a node sum already in scaled units: one word in float fast
// mode, 64 bits for the double words (FixedPoint<3>).
template <int W, class T>
__device__ __forceinline__ long long fixed_of(T x) {
  if constexpr (sizeof(T) == 4 && W == 1) return __float2int_rn(x);
  else if constexpr (sizeof(T) == 4) return __float2ll_rn(x);
  else return __double2ll_rn(x);
}

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
    float abs_part = 0;
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
        abs_part += fabsf(static_cast<float>(q[r]));  // a bound for the scale: float is close enough
      }
    }
    double abs_sum = abs_part;
    for (int o = 16; o > 0; o /= 2) abs_sum += __shfl_xor_sync(0xffffffffu, abs_sum, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&block_abs[j], abs_sum);
    __syncthreads();
    if (threadIdx.x == 0) scale[j] = pow2_scale(block_abs[j] * geo.peak_weight, FixedPoint<W>::kContributionBits);
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

  flush_window<K, D, T, W, NP, false>(layout, tile, accumulator, scale, pass);
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
template <class T, int W>
__global__ void finalize_exact_kernel(PropPass<T> pass, std::int64_t size, std::size_t n, double peak_weight,
                                      bool accumulate) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= size) return;
  for (int j = 0; j < pass.count; ++j) {
    const double max_abs = __longlong_as_double(pass.max_abs_bits[j]);
    const long long v = static_cast<long long>(pass.exact[j][i]);
    pass.exact[j][i] = 0;
    T value = isfinite(max_abs)
                  ? static_cast<T>(static_cast<double>(v) / deterministic_scale<W>(max_abs * peak_weight, n))
                                : static_cast<T>(max_abs - max_abs);  // inf/NaN in props: NaN
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
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const Packed<T> particle = particles[i];
  if (particle.cell == kAwayCell) return;
  int base[D];
  T s[D];
  unpack<K, D>(particle, geo, base, s);
  const std::uint32_t p = perm[slots ? slots[i] : i];
  T q[tuning::kPropsPerPass];
#pragma unroll
  for (int j = 0; j < tuning::kPropsPerPass; ++j) q[j] = j < pass.count ? load_prop(pass, j, p) : T(0);
  detail::for_each_node<K, D>(layout, base, s, [&](std::int64_t node, T w) {
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) atomicAdd(pass.meshes[j] + node, q[j] * w);
  });
}

// ---------------------------------------------------------------------------------
// M2P: one thread per particle in tile order (neighbours read neighbouring nodes, so
// the gathers hit in cache), results in binned order (unbin_kernel puts them in the
// caller's). Also serves the away list of update_points (slots: each record's slot).
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    interp_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                  const std::uint32_t* slots, std::size_t n, PropPass<T> pass, T* binned_values,
                  std::size_t binned_stride) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const Packed<T> particle = particles[i];
  if (particle.cell == kAwayCell) return;
  int base[D];
  T s[D];
  unpack<K, D>(particle, geo, base, s);
  T acc[tuning::kPropsPerPass] = {};
  detail::for_each_node<K, D>(layout, base, s, [&](std::int64_t node, T w) {
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) acc[j] += w * __ldg(pass.meshes[j] + node);
  });
  const std::size_t slot = slots ? slots[i] : i;
#pragma unroll
  for (int j = 0; j < tuning::kPropsPerPass; ++j)
    if (j < pass.count) binned_values[j * binned_stride + slot] = acc[j];
}

// The S window values that start at one node, padded to a power of two and aligned as
// a whole, so that interp reads a stencil row with one vector load (two for S > 4 in
// float, S > 2 in double) instead of S scalar ones: the kernel was issue-bound (ncu,
// bench/NOTES.md 14: IPC 2.78, 69% of issue slots), and a row of M'4 took 4 LDS.32.
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

// M2P through shared memory: a block loads its tile's window of each mesh once (with
// the boundary's wrap or fold), then every particle of the chunk reads its S^D nodes
// from shared memory, in the chunk's interleaved order (interleave_kernel). Results go
// to their binned slots (unbin_kernel puts them in the caller's order). The thread's
// particles are loaded before the window, so that the two loads' latencies overlap (ncu:
// stalled on the window load, then on the particle load). Where it fits, the window is
// held as row spans (RowSpan: node k's span holds nodes k .. k + S - 1).
template <class K, int D, class T, int NP>
__global__ void __launch_bounds__(tuning::kSpreadThreads, tuning::interp_tile_blocks_per_sm(sizeof(T)))
    interp_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                        const Packed<T>* particles, const std::uint16_t* order, std::size_t n, PropPass<T> pass,
                        T* binned_values) {
  using Window = TileWindow<K, D>;
  constexpr int S = K::support;
  using Span = typename RowSpan<T, S>::Values;
  constexpr bool kSpans = interp_row_spans<K, D, T, NP>();
  extern __shared__ __align__(16) unsigned char interp_shared[];
  T* window_values = reinterpret_cast<T*>(interp_shared);  // [NP][Window::kNodes]
  Span* window_spans = reinterpret_cast<Span*>(interp_shared);  // [NP][Window::kNodes] (kSpans)
  const Chunk chunk = chunks[blockIdx.x];
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
  for (int k = threadIdx.x; k < Window::kNodes; k += blockDim.x) {
    std::int64_t index;
    const bool inside = Window::mesh_index(layout, tile, k, index);
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

#pragma unroll 1
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i >= chunk.count) break;
    const Packed<T> particle = pick(mine, r);
    if (particle.cell == kAwayCell) continue;
    const int origin = Window::origin(geo, particle.cell, tile);
    T s[D];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) s[d] = particle.s[d];
    T acc[NP] = {};
    for_each_window_row<K, D>(origin, s, [&](int row, T row_weight, const T (&wx)[S]) {
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        T sum = 0;
        if constexpr (kSpans) {
          const Span span = window_spans[j * Window::kNodes + row];
#pragma unroll
          for (int a = 0; a < S; ++a) sum += wx[a] * span.v[a];
        } else {
          const T* values = window_values + j * Window::kNodes + row;
#pragma unroll
          for (int a = 0; a < S; ++a) sum += wx[a] * values[a];
        }
        acc[j] += row_weight * sum;
      }
    });
#pragma unroll
    for (int j = 0; j < NP; ++j) binned_values[j * n + chunk.begin + pick(local, r)] = acc[j];
  }
}

// M2P's last step: each caller's particle reads its value from its binned slot. A
// coalesced write and a scattered read; the other way round (writing through perm),
// every 4-byte store is a read-modify-write of a whole sector (interp was 3-4x the
// floor that way).
template <class T>
__global__ void unbin_kernel(PropPass<T> pass, const T* binned_values, std::size_t n, const std::uint32_t* slot) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t from = slot[i];
  for (int j = 0; j < pass.count; ++j)
    pass.values[j][static_cast<std::ptrdiff_t>(i) * pass.value_stride[j]] = binned_values[j * n + from];
}

}  // namespace pmkit::cuda
