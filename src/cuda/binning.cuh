#pragma once
// The CUDA backend's binning: the packed particle record and the geometry of tiles, the
// set_points scatter (one pass, or the partition's two coalesced passes) and the
// update_points kernel. The kernels that read the binning are in tiles.cuh, spread.cuh
// and interp.cuh; launches and memory in cuda_backend.cuh.
#include <cstdint>
#include <type_traits>

#include <cub/block/block_exchange.cuh>
#include <cub/block/block_radix_sort.cuh>

#include "core/layout.hpp"
#include "core/stencil.hpp"
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
  // The place of a cell's home node in its tile's window of `width` nodes an edge (x
  // fastest), the tile's first node at 0: TileWindow::origin, and the interleave's bank.
  __host__ __device__ int window_offset(std::uint32_t cell, int width) const {
    int home[D];
    decode(cell, home);
    int offset = 0;
    PMKIT_UNROLL
    for (int d = D - 1; d >= 0; --d) offset = offset * width + (home[d] & (kEdge - 1));  // home - tile * kEdge
    return offset;
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
  __device__ void load(std::size_t i, T (&x)[D]) const {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) x[d] = data[d][static_cast<std::ptrdiff_t>(i) * stride[d]];
  }
};

// A block's kPerThread particles' positions (items local(k) of Block, below n), loaded
// all at once before any is binned: loaded item by item, each thread waited on one
// particle's loads at a time, and the passes that read positions ran at ~1.1-1.3 TB/s
// (count_groups 181 us at 2^24 for 201 MB; bench/NOTES.md 72).
template <class Block, class T, int D>
__device__ __forceinline__ void load_block_positions(const PositionArrays<T, D>& pos, std::size_t base,
                                                     std::size_t n, T (&x)[Block::kPerThread][D]) {
#pragma unroll
  for (int k = 0; k < Block::kPerThread; ++k) {
    const std::size_t i = base + Block::local(k);
    if (i < n) pos.load(i, x[k]);
  }
}

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

// A particle's packed record (local coordinates, home node) and tile, from its position
// x; false where the position is not valid (non-finite, or outside a bounded axis).
template <class T, int D>
__device__ __forceinline__ bool bin_position(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                             const T (&x)[D], Packed<T>& p, std::uint32_t& tile) {
  std::uint32_t cell = 0;
  tile = 0;
  PMKIT_UNROLL
  for (int d = D - 1; d >= 0; --d) {
    double u;
    if (!layout.axis[d].coordinate(static_cast<double>(x[d]), u)) return false;
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

// bin_position of particle i.
template <class T, int D>
__device__ __forceinline__ bool bin_particle(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                             const PositionArrays<T, D>& pos, std::size_t i, Packed<T>& p,
                                             std::uint32_t& tile) {
  T x[D];
  pos.load(i, x);
  return bin_position(layout, geo, x, p, tile);
}

// bin_particle, or, for an invalid position, the particle's index offered to first_bad
// (the smallest wins, so the error names the first bad particle in the caller's order).
template <class T, int D>
__device__ __forceinline__ bool bin_or_reject(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                              const T (&x)[D], std::size_t i, Packed<T>& p, std::uint32_t& tile,
                                              unsigned long long* first_bad) {
  if (bin_position(layout, geo, x, p, tile)) return true;
  atomicMin(first_bad, static_cast<unsigned long long>(i));
  return false;
}
template <class T, int D>
__device__ __forceinline__ bool bin_or_reject(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                              const PositionArrays<T, D>& pos, std::size_t i, Packed<T>& p,
                                              std::uint32_t& tile, unsigned long long* first_bad) {
  T x[D];
  pos.load(i, x);
  return bin_or_reject(layout, geo, x, i, p, tile, first_bad);
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
  Packed<T> p;
  std::uint32_t tile;
  // classify recorded a rejected particle and gave it no rank; set_points reports it
  // after the last kernel, so the scatter only has to leave it out.
  if (!bin_particle(layout, geo, pos, i, p, tile)) return;
  const std::uint32_t dst = bucket_start[buckets.of(tile, i)] + rank[i];
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

// The place of a rejected particle: set_points goes on to its last kernel and reports the
// rejection then (one wait for the device instead of one after the count), so every pass
// after the count leaves rejected particles out.
constexpr std::uint32_t kNoPlace = 0xffffffffu;

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
    std::uint16_t sorted_item[kItems];  // the block-local index of each sorted place
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
// the run's first item, and calls emit(slot, value, sorted place) for every item in the
// sorted order, striped: thread t takes sorted places t, t + kThreads, ..., so consecutive
// lanes store consecutive slots of a run (whole lines where runs are long enough). emit
// may write sh.u.dst.
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
    if (key[k] < unused) emit(sh.run_first[key[k]] + B::local(k), value[k], B::local(k));
  __syncthreads();
}

// The shared-memory bank (window offset mod 32) of each binned particle's home node,
// a byte a particle, stored by place_kernel beside the record for the interleave
// (tiles.cuh), which otherwise reads each 16-byte record's sector for its 4-byte cell
// (ncu at 2^24: 269 MB, 122 us; bench/NOTES.md 77). out null: not stored.
template <int D>
struct WindowBanks {
  std::uint8_t* out;
  BinGeometry<D> geo;
  int width;  // the window's nodes an edge (TileWindow::kWidth)
  __device__ __forceinline__ std::uint8_t of(std::uint32_t cell) const {
    return static_cast<std::uint8_t>(geo.window_offset(cell, width) % 32);
  }
};

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
  T x[B::kPerThread][D];
  load_block_positions<B>(pos, base, n, x);
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::size_t i = base + B::local(k);
    Packed<T> p;
    std::uint32_t tile;
    if (i < n && bin_or_reject(layout, geo, x[k], i, p, tile, first_bad)) atomicAdd(&count[tile >> groups.bits], 1u);
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
  // The block-local index of each sorted place, block b's at b kItems (n in all): the
  // order in which the spread replays this pass for the properties (props_to_places_kernel).
  std::uint16_t* sorted;
};

// Pass 1: the count's blocks (positions validated there) bin again, sort by group and
// store each group's run at its place from the scanned counts (block_start, laid out as
// block_count). Also writes tile_of (update_points) and the block's sorted order
// (out.sorted), both coalesced: the sorted order is staged in shared memory by the emit
// and stored after it (stored from the emit itself, it took the kernel from 64 to 80
// registers, one block an SM, and set_points 1.55 -> 1.90 ms at 2^24: NOTES 67b).
// Two blocks an SM (their shared memory allows no more) want at most 64 registers;
// with the positions loaded all at once ptxas takes 79 unbounded, and spills 12 values
// once, around the block sort, at 64 (48 bytes a thread; NOTES 72).
template <class T, int D>
__global__ void __launch_bounds__(tuning::kPartitionThreads, 2)
    partition_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos, std::size_t n,
                     Groups groups, const std::uint32_t* block_start, std::uint32_t* tile_of, PartitionOut<T> out) {
  using B = PartitionBlock<T>;
  typename B::Shared& sh = B::shared();
  const std::size_t base = blockIdx.x * static_cast<std::size_t>(B::kItems);
  std::uint16_t key[B::kPerThread];
  std::uint32_t value[B::kPerThread];  // block-local index | tile within the group << 16
  static_assert(B::kPerThread <= 32, "one bit an item");
  unsigned placed = 0;  // bit k: item local(k) is a valid particle (it gets a place)
  {
    // The positions loaded all at once (bin_particle item by item had one load in flight
    // a thread: NOTES 72) and staged in the items' record slots (each thread its own
    // items, so no barrier), so that they are not held through the binning loop.
    T x[B::kPerThread][D];
    load_block_positions<B>(pos, base, n, x);
#pragma unroll
    for (int k = 0; k < B::kPerThread; ++k)
      PMKIT_UNROLL
      for (int d = 0; d < D; ++d) sh.records[B::local(k)].s[d] = x[k][d];
  }
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::uint32_t j = B::local(k);
    const std::size_t i = base + j;
    key[k] = static_cast<std::uint16_t>(groups.count);
    value[k] = j;
    Packed<T> record;
    std::uint32_t tile;
    bool valid = false;
    if (i < n) {
      T x[D];
      PMKIT_UNROLL
      for (int d = 0; d < D; ++d) x[d] = sh.records[j].s[d];
      valid = bin_position(layout, geo, x, record, tile);
    }
    if (valid) {
      placed |= 1u << k;
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
      [&](std::uint32_t dst, std::uint32_t v, std::uint32_t sorted_place) {
        const std::uint32_t j = v & 0xffffu;
        store_record(out.records + dst, sh.records[j]);
        out.index[dst] = static_cast<std::uint32_t>(base + j);
        if (out.keys) out.keys[dst] = static_cast<std::uint16_t>(v >> 16);
        sh.sorted_item[sorted_place] = static_cast<std::uint16_t>(j);
        sh.u.dst[j] = dst;
      });
  // A rejected particle (set_points reports it after the last kernel) gets no place.
  // Sorted places past the block's valid items are never read (props_to_places_kernel
  // takes a successful binning's n places only).
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::size_t i = base + B::local(k);
    if (i < n) out.place[i] = (placed >> k) & 1u ? sh.u.dst[B::local(k)] : kNoPlace;
    if (i < n) out.sorted[i] = sh.sorted_item[B::local(k)];
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
  // A piece holds at most kItems keys: each thread's loaded at once, then counted (one
  // load at a time, the loop ran at a third of its bytes' time; NOTES 72).
  using B = PartitionBlock<float>;  // pieces are cut at PartitionBlock<T>::kItems, at most float's
  static_assert(PartitionBlock<double>::kItems <= B::kItems, "a piece fits the float block's items");
  std::uint16_t key[B::kPerThread];
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k)
    if (B::local(k) < piece.count) key[k] = keys[piece.begin + B::local(k)];
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k)
    if (B::local(k) < piece.count) atomicAdd(&count[key[k]], 1u);
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
// same block), for compose_slot_kernel. sorted: the piece-local index of each sorted
// place, by piece (the spread replays this pass for the properties, props_to_slots_kernel).
template <class T, int D>
__global__ void __launch_bounds__(tuning::kPartitionThreads)
    place_kernel(Groups groups, const Chunk* pieces, const std::uint32_t* num_pieces, const std::uint32_t* piece_start,
                 const std::uint16_t* keys, const Packed<T>* parted, std::uint32_t* index,
                 const std::uint32_t* tile_start, const std::uint32_t* piece_count, Packed<T>* particles,
                 std::uint32_t* perm, std::uint16_t* sorted, WindowBanks<D> banks) {
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
      [&](std::uint32_t dst, std::uint32_t j, std::uint32_t sorted_place) {
        store_record(particles + dst, sh.records[j]);
        if (banks.out) banks.out[dst] = banks.of(sh.records[j].cell);
        perm[dst] = caller[j];
        sorted[piece.begin + sorted_place] = static_cast<std::uint16_t>(j);
        sh.u.dst[j] = dst;
      });
#pragma unroll
  for (int k = 0; k < B::kPerThread; ++k) {
    const std::uint32_t j = B::local(k);
    if (j < piece.count) index[piece.begin + j] = sh.u.dst[j];
  }
}

// The binned slot of each caller's index, from its pass-1 place and that place's binned
// slot. Coalesced but for one scattered 4-byte read (17: a 4-byte gather costs ~0.13-0.15 ms
// at 2^24; a scattered store instead, ~0.3-0.4). kComposePerThread indices a thread, their
// loads issued together: one a thread, the gathers waited on the place loads one by one
// (129 us at 2^24, where the bytes take ~65; NOTES 70).
constexpr int kComposePerThread = 4;
static __global__ void compose_slot_kernel(std::size_t n, const std::uint32_t* place,
                                           const std::uint32_t* binned_of_place, std::uint32_t* slot) {
  const std::size_t base = blockIdx.x * static_cast<std::size_t>(blockDim.x) * kComposePerThread + threadIdx.x;
  std::uint32_t p[kComposePerThread];
#pragma unroll
  for (int k = 0; k < kComposePerThread; ++k) {
    const std::size_t i = base + static_cast<std::size_t>(k) * blockDim.x;
    p[k] = i < n ? place[i] : kNoPlace;
  }
#pragma unroll
  for (int k = 0; k < kComposePerThread; ++k) p[k] = p[k] != kNoPlace ? binned_of_place[p[k]] : kNoPlace;
#pragma unroll
  for (int k = 0; k < kComposePerThread; ++k) {
    const std::size_t i = base + static_cast<std::size_t>(k) * blockDim.x;
    if (i < n) slot[i] = p[k];
  }
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

// Plan::binned_positions: record k's position relative to the grid origin, written at
// binned slot k, or, with `slots` (update_points' away list), at slots[k]. The binned
// slot of an away particle holds a stale record; its away record overwrites it in a
// second launch, so the launches run binned records first.
template <class T, int D>
struct OffsetArrays {
  T* data[D];
  std::ptrdiff_t stride[D];
};
template <class T, int D>
__global__ void binned_offsets_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* records,
                                      const std::uint32_t* slots, std::size_t count, OffsetArrays<T, D> out) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= count) return;
  const Packed<T> p = records[k];
  if (p.cell == kAwayCell) return;
  const std::ptrdiff_t slot = slots ? slots[k] : static_cast<std::ptrdiff_t>(k);
  int home[D];
  geo.decode(p.cell, home);
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    const double u = kernels::unlocate(geo.support, home[d] - (geo.support - 1) / 2, static_cast<double>(p.s[d]));
    out.data[d][slot * out.stride[d]] = static_cast<T>(layout.axis[d].offset(u));
  }
}

}  // namespace pmkit::cuda
