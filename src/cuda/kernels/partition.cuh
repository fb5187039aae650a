#pragma once
#include <cstdint>

#include <cub/block/block_exchange.cuh>
#include <cub/block/block_radix_sort.cuh>

#include "cuda/kernels/records.cuh"
#include "cuda/tuning/method_choice.hpp"

namespace pmkit::cuda {

// ---------------------------------------------------------------------------------
// Partition: set_points' scatter in two passes whose big stores are coalesced.
//
// A scattered store costs one L2 request per lane, however few the open write fronts:
// about three times a coalesced copy of the same bytes. So every block here sorts its
// items locally by key
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
// caller's order, the same in every run.

// The place of a rejected particle: set_points goes on to its last kernel and reports the
// rejection then (one wait for the device instead of one after the count), so every pass
// after the count leaves rejected particles out.
constexpr std::uint32_t kNoPlace = 0xffffffffu;

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

// Neighbour pairs (i, i + 1), `pairs` of them spread over the caller's order, that lie in
// one tile (n >= 2): set_points keeps the one-pass scatter for input already in binned
// order, whose stores are local there (tuning::kBinnedPairFraction). One pair a thread
// over many blocks (one block would be a chain of dependent loads).
template <class T, int D>
__global__ void same_tile_pairs_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                                       std::size_t n, std::uint32_t pairs, std::uint32_t* same) {
  const std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  bool equal = false;
  if (k < pairs) {
    const std::size_t i = (n - 1) * static_cast<std::size_t>(k) / pairs;
    Packed<T> p;
    std::uint32_t a, b;
    equal = bin_particle<T, D, false>(layout, geo, pos, i, p, a) && bin_particle<T, D, false>(layout, geo, pos, i + 1, p, b) &&
            a == b;
  }
  const int block_same = __syncthreads_count(equal);
  if (threadIdx.x == 0 && block_same > 0) atomicAdd(same, static_cast<std::uint32_t>(block_same));
}

// Count: validates every position (the first bad one is reported, as by classify_kernel)
// and writes each group's count of the block's particles to block_count[block * groups +
// group] (every group, zeros included; a row a block, coalesced). Transposed to group
// order (transpose_counts_kernel), their exclusive scan gives each (group, block) run its
// first place. Those places follow the caller's order inside every group, the same in
// every run (atomic cursors would not be).
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
    if (i < n && bin_or_reject<T, D, false>(layout, geo, x[k], i, p, tile, first_bad))
      atomicAdd(&count[tile >> groups.bits], 1u);
  }
  __syncthreads();
  for (std::uint32_t g = threadIdx.x; g < groups.count; g += blockDim.x)
    block_count[static_cast<std::size_t>(blockIdx.x) * groups.count + g] = count[g];
}

// out[c * rows + r] = in[r * cols + c], through 32 x 32 tiles in shared memory (both sides
// coalesced; strided stores of the count rows are not).
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
// and stored after it (stored from the emit itself, it takes the kernel past 64
// registers, one block an SM).
// Two blocks an SM (their shared memory allows no more) want at most 64 registers;
// with the positions loaded all at once ptxas takes more unbounded, and spills a few
// values once, around the block sort, at 64.
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
    // The positions loaded all at once (bin_particle item by item would have one load in
    // flight a thread) and staged in the items' record slots (each thread its own
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
      valid = bin_position<T, D, false>(layout, geo, x, record, tile);
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
  // load at a time would keep too few bytes in flight).
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
// every run (update_points' stores then advance through the tiles). index holds
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
        if (banks.out) banks.out[dst] = banks.of(sh.records[j]);
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
// slot. Coalesced but for one scattered 4-byte read (a gather costs about half a
// scattered store). kComposePerThread indices a thread, their loads issued together: with
// one a thread, the gathers wait on the place loads one by one.
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

}  // namespace pmkit::cuda
