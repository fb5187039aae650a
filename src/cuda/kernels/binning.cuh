#pragma once
// set_points' one-pass scatter (classify -> runs -> sort -> scatter), the cut of tiles into chunks
// and the heavy tiles among them, update_points' kernel and Plan::binned_positions' kernel. The partition (the scatter of
// unsorted input) is in partition.cuh.
#include <cstdint>

#include "cuda/kernels/records.cuh"

namespace pmkit::cuda {

// The one-pass scatter sorts the particles by tile stably, a run at a time: the lanes of
// a warp with equal tiles form a run, the runs are sorted by tile (a stable radix sort
// keeps them in the caller's order inside a tile), and the scan of their lengths in that
// order gives each run its first slot. Input in binned order has
// about one run a warp, so the sort moves a thirty-second of the particles; input in no
// order has a run a particle. A run's key is its tile; rejected particles take the key
// num_tiles, which sorts after every tile, so runs cover every index below n.

// The lanes of the calling warp that start a run (all 32 lanes call it: blocks are
// whole warps): lanes in range whose key differs from the previous lane's.
__device__ __forceinline__ unsigned run_heads(std::uint32_t key, bool in_range) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint32_t previous = __shfl_up_sync(0xffffffffu, key, 1);
  return __ballot_sync(0xffffffffu, in_range && (lane == 0 || previous != key));
}

// The calling lane's run among the warp's heads: its number in the warp (heads up to and
// including the lane, minus one) and its head lane.
struct LaneRun {
  unsigned number;
  unsigned head;
};
__device__ __forceinline__ LaneRun lane_run(unsigned heads) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned up_to_lane = 0xffffffffu >> (31u - lane);  // bits 0..lane
  return LaneRun{static_cast<unsigned>(__popc(heads & up_to_lane)) - 1u, 31u - __clz(heads & up_to_lane)};
}

// Validates every position and records its key (tile_of) and each warp's number of runs
// (warp_runs; every warp of the grid writes its entry, those past n a zero).
template <class T, int D>
__global__ void classify_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                                std::size_t n, std::uint32_t* tile_of, std::uint32_t* warp_runs,
                                unsigned long long* first_bad) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const bool in_range = i < n;
  Packed<T> p;
  std::uint32_t tile = 0;
  const bool valid = in_range && bin_or_reject(layout, geo, pos, i, p, tile, first_bad);
  const std::uint32_t key = valid ? tile : geo.num_tiles;
  if (in_range) tile_of[i] = key;
  const unsigned heads = run_heads(key, in_range);
  if ((threadIdx.x & 31u) == 0) warp_runs[i >> 5] = static_cast<std::uint32_t>(__popc(heads));
}

// The runs, numbered warp after warp (warp_run_start: the scan of warp_runs, whose total
// is the runs' count): each run's key, first index and number (the sort's values);
// run_head[runs] = n closes the last run, so that a run's length is the next run's head
// minus its own. Entries from the count up to `capacity` (the sort's length where the
// host does not know the count) get `pad_key`, which sorts after every run.
struct RunList {
  std::uint32_t* key;
  std::uint32_t* head;
  std::uint32_t* id;
};
static __global__ void emit_runs_kernel(const std::uint32_t* tile_of, std::size_t n,
                                        const std::uint32_t* warp_run_start, RunList runs, std::uint32_t capacity,
                                        std::uint32_t pad_key) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < capacity && i >= warp_run_start[(n + 31) / 32]) {
    runs.key[i] = pad_key;
    runs.id[i] = static_cast<std::uint32_t>(i);
  }
  const bool in_range = i < n;
  const std::uint32_t key = in_range ? tile_of[i] : 0u;
  const unsigned heads = run_heads(key, in_range);
  const unsigned lane = threadIdx.x & 31u;
  if (in_range && ((heads >> lane) & 1u)) {
    const std::uint32_t k = warp_run_start[i >> 5] + lane_run(heads).number;
    runs.key[k] = key;
    runs.head[k] = static_cast<std::uint32_t>(i);
    runs.id[k] = k;
  }
  if (i == 0) runs.head[warp_run_start[(n + 31) / 32]] = static_cast<std::uint32_t>(n);
}

// The length of the j-th run in sorted order (0 past the last: the scan's total; *runs,
// the count, on the device).
struct SortedRunLength {
  const std::uint32_t* sorted_id;
  const std::uint32_t* run_head;
  const std::uint32_t* runs;
  __device__ std::uint32_t operator()(std::uint32_t j) const {
    if (j >= *runs) return 0;
    const std::uint32_t k = sorted_id[j];
    return run_head[k + 1] - run_head[k];
  }
};

// From the runs' first slots in sorted order (sorted_start, runs + 1 entries): each
// run's first slot by its number (run_slot), and each tile's first slot (tile_start,
// num_tiles + 1 entries: the first run whose key is at least the tile's, found by
// bisection over the sorted keys, so that empty tiles cost one search each). *num_runs:
// the count, on the device.
static __global__ void place_runs_kernel(const std::uint32_t* num_runs, std::uint32_t num_tiles,
                                         const std::uint32_t* sorted_key, const std::uint32_t* sorted_id,
                                         const std::uint32_t* sorted_start, std::uint32_t* run_slot,
                                         std::uint32_t* tile_start) {
  const std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  const std::uint32_t runs = *num_runs;
  if (j < runs) run_slot[sorted_id[j]] = sorted_start[j];
  if (j <= num_tiles) {
    std::uint32_t lo = 0, hi = runs;
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (sorted_key[mid] < j)
        lo = mid + 1;
      else
        hi = mid;
    }
    tile_start[j] = sorted_start[lo];
  }
}

// Chunks of at most `chunk` particles per tile (ceil(count / chunk)); tile_start: each
// tile's first slot (num_tiles + 1 entries). Also cuts the partition's groups into pieces
// (there `tile` is a group).
static __global__ void chunk_count_kernel(std::uint32_t num_tiles, const std::uint32_t* tile_start,
                                          std::uint32_t chunk, std::uint32_t* chunk_count) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tiles) return;
  const std::uint32_t count = tile_start[t + 1] - tile_start[t];
  chunk_count[t] = (count + chunk - 1) / chunk;
}

// even: the pieces of a tile all of one size (the cell moments' spans: chunk, chunk, rest
// would leave a block with a few particles where a tile is just over the cap); else
// chunk, chunk, ..., the rest. The entries from the total (chunk_start[num_tiles]) up to
// `capacity` become empty chunks, for the launches sized by the bound (Chunk); total,
// if not null, receives the total. Threads: max(num_tiles, capacity).
static __global__ void chunk_fill_kernel(std::uint32_t num_tiles, const std::uint32_t* tile_start,
                                         const std::uint32_t* chunk_start, std::uint32_t chunk, bool even,
                                         Chunk* chunks, std::uint32_t capacity, std::uint32_t* total) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  const std::uint32_t filled = chunk_start[num_tiles];
  if (t == 0 && total) *total = filled;
  if (t >= filled && t < capacity) chunks[t] = Chunk{0, 0, 0};
  if (t >= num_tiles) return;
  const std::uint32_t begin = tile_start[t];
  const std::uint32_t count = tile_start[t + 1] - begin;
  const std::uint32_t pieces = (count + chunk - 1) / chunk;
  for (std::uint32_t k = 0; k < pieces; ++k) {
    const auto lo = static_cast<std::uint32_t>(even ? std::uint64_t(count) * k / pieces : std::uint64_t(k) * chunk);
    const auto hi =
        static_cast<std::uint32_t>(even ? std::uint64_t(count) * (k + 1) / pieces : min(count, (k + 1) * chunk));
    chunks[chunk_start[t] + k] = Chunk{t, begin + lo, hi - lo};
  }
}

// Each tile's window among the heavy tiles (more than `heavy` chunks, chunk_count per
// tile; flush_heavy), numbered by an atomic counter (counts[kHeavyCount], zero before),
// or kLightTile; the heavy tiles by window.
static __global__ void heavy_tiles_kernel(std::uint32_t num_tiles, const std::uint32_t* chunk_count,
                                          std::uint32_t heavy, std::uint32_t* counts, std::uint32_t* slot_of_tile,
                                          std::uint32_t* heavy_tiles) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tiles) return;
  std::uint32_t slot = kLightTile;
  if (chunk_count[t] > heavy) {
    slot = atomicAdd(counts + kHeavyCount, 1u);
    heavy_tiles[slot] = t;
  }
  slot_of_tile[t] = slot;
}

// Writes each particle, packed, to its slot in tile order: its run's first slot plus its
// place in the run; perm (slot -> caller's index) and slot (caller's index -> slot)
// record the permutation both ways.
template <class T, int D>
__global__ void scatter_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                               std::size_t n, const std::uint32_t* warp_run_start, const std::uint32_t* run_slot,
                               Packed<T>* particles, std::uint32_t* perm, std::uint32_t* slot) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const bool in_range = i < n;
  Packed<T> p;
  std::uint32_t tile = 0;
  // classify recorded a rejected particle; set_points reports it after the last kernel,
  // so the scatter only has to leave it out (its run keeps the key classify gave it).
  const bool valid = in_range && bin_particle(layout, geo, pos, i, p, tile);
  const unsigned heads = run_heads(valid ? tile : geo.num_tiles, in_range);
  if (!valid) return;
  const LaneRun run = lane_run(heads);
  const std::uint32_t dst = run_slot[warp_run_start[i >> 5] + run.number] + ((threadIdx.x & 31u) - run.head);
  store_record(particles + dst, p);
  perm[dst] = static_cast<std::uint32_t>(i);
  slot[i] = dst;
}

// update_points in one pass, one thread per particle in the caller's order (positions,
// tile and slot read coalesced; only the record's store is scattered): validates every
// particle, writes its new record to its slot of `particles` (a buffer apart from the
// binning in use), and lists the particles whose tile changed since the full binning
// (tile_of) as away, with their slots, in `away_slot` and `away_particles` (room for
// all n), counted by away_count. slot null: each particle's slot is its index.
template <class T, int D>
__global__ void update_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                              std::size_t n, const std::uint32_t* tile_of, const std::uint32_t* slot,
                              unsigned long long* first_bad, std::uint32_t* away_count, Packed<T>* particles,
                              std::uint32_t* away_slot, Packed<T>* away_particles) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  Packed<T> p;
  std::uint32_t tile;
  if (!bin_or_reject(layout, geo, pos, i, p, tile, first_bad)) return;
  const std::uint32_t s = slot ? slot[i] : static_cast<std::uint32_t>(i);
  if (tile != tile_of[i]) {
    const std::uint32_t k = atomicAdd(away_count, 1u);
    away_slot[k] = s;
    store_record(away_particles + k, p);
    p.cell = kAwayCell;
  }
  store_record(particles + s, p);
}

// Plan::adopt_binned_order: the caller's particles are in binned order, so each slot is
// its particle's caller index (perm and slot the identity) and tile_of its chunk's tile.
// A block a chunk (those past the chunks' count are empty); nothing but the chunks is
// read.
static __global__ void adopt_order_kernel(const Chunk* chunks, std::uint32_t* perm, std::uint32_t* slot,
                                          std::uint32_t* tile_of) {
  const Chunk c = chunks[blockIdx.x];
  for (std::uint32_t j = threadIdx.x; j < c.count; j += blockDim.x) {
    const std::uint32_t k = c.begin + j;
    perm[k] = k;
    slot[k] = k;
    tile_of[k] = c.tile;
  }
}

// Plan::permute_to_binned's arrays of one launch (strides in elements): up to
// tuning::kPermuteArrays, passed by value as the kernel's parameters.
template <class T>
struct PermuteBatch {
  static constexpr int kCapacity = tuning::kPermuteArrays;
  int count = 0;
  const T* in[kCapacity];
  std::ptrdiff_t in_stride[kCapacity];
  T* out[kCapacity];
  std::ptrdiff_t out_stride[kCapacity];

  bool full() const { return count == kCapacity; }
  void add(const T* from, std::ptrdiff_t from_stride, T* to, std::ptrdiff_t to_stride) {
    in[count] = from;
    in_stride[count] = from_stride;
    out[count] = to;
    out_stride[count] = to_stride;
    ++count;
  }
};

// Plan::permute_to_binned: out[a][k] = in[a][perm[k]] for each array a of the batch (perm:
// binned slot -> caller's index). perm is read once for them all, and a thread's loads
// are all issued before its stores.
template <class T>
__global__ void permute_kernel(const std::uint32_t* perm, std::size_t n, PermuteBatch<T> batch) {
  constexpr int kCapacity = PermuteBatch<T>::kCapacity;
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const auto from = static_cast<std::ptrdiff_t>(perm[k]);
  const auto to = static_cast<std::ptrdiff_t>(k);
  T value[kCapacity];
#pragma unroll
  for (int a = 0; a < kCapacity; ++a)
    if (a < batch.count) value[a] = batch.in[a][from * batch.in_stride[a]];
#pragma unroll
  for (int a = 0; a < kCapacity; ++a)
    if (a < batch.count) batch.out[a][to * batch.out_stride[a]] = value[a];
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
                                      const std::uint32_t* slots, ItemCount items, OffsetArrays<T, D> out) {
  const std::size_t count = items.value();
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < count; k += step) {
    const Packed<T> p = records[k];
    if (p.cell == kAwayCell) continue;
    const std::ptrdiff_t slot = slots ? slots[k] : static_cast<std::ptrdiff_t>(k);
    int home[D];
    geo.decode(p, home);
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      const double u = kernels::unlocate(geo.support, home[d] - (geo.support - 1) / 2,
                                         static_cast<double>(local_coordinate(p, d)));
      out.data[d][slot * out.stride[d]] = static_cast<T>(layout.axis[d].offset(u));
    }
  }
}

}  // namespace pmkit::cuda
