#pragma once
// set_points' one-pass scatter (classify -> scan -> scatter), the cut of tiles into chunks
// and the heavy tiles among them, update_points' kernel and Plan::binned_positions' kernel. The partition (the scatter of
// unsorted input) is in partition.cuh.
#include <cstdint>

#include "cuda/kernels/records.cuh"

namespace pmkit::cuda {

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
// (Plan::binned_order) need: one atomic per lane queues a whole run on one counter.
// Random input has no runs and pays a shuffle and a ballot.
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

// Each tile's window among the heavy tiles (more than `heavy` chunks, chunk_count per
// tile; flush_heavy), numbered by an atomic counter (counts[1], zero before), or
// kLightTile; the heavy tiles by window; the chunks' count (chunk_start's total) to
// counts[0], beside it, for one copy back.
static __global__ void heavy_tiles_kernel(std::uint32_t num_tiles, const std::uint32_t* chunk_count,
                                          const std::uint32_t* chunk_start, std::uint32_t heavy,
                                          std::uint32_t* counts, std::uint32_t* slot_of_tile,
                                          std::uint32_t* heavy_tiles) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t == 0) counts[0] = chunk_start[num_tiles];
  if (t >= num_tiles) return;
  std::uint32_t slot = kLightTile;
  if (chunk_count[t] > heavy) {
    slot = atomicAdd(counts + 1, 1u);
    heavy_tiles[slot] = t;
  }
  slot_of_tile[t] = slot;
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

// update_points in one pass, one thread per particle in the caller's order (positions,
// tile and slot read coalesced; only the record's store is scattered): validates every
// particle, writes its new record to its slot of `particles` (a buffer apart from the
// binning in use, which a rejected position leaves as it was), and lists the particles
// whose tile changed since the full binning (tile_of) as away, with their slots, in
// `away_slot` and `away_particles`: the first `capacity` of them. away_count counts them
// all; more than `capacity` means a full binning instead. `particles` null: the count
// alone (a pass that only reads, where a full binning is likely).
template <class T, int D>
__global__ void update_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                              std::size_t n, const std::uint32_t* tile_of, const std::uint32_t* slot,
                              unsigned long long* first_bad, std::uint32_t* away_count, std::uint32_t capacity,
                              Packed<T>* particles, std::uint32_t* away_slot, Packed<T>* away_particles) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  Packed<T> p;
  std::uint32_t tile;
  if (!bin_or_reject(layout, geo, pos, i, p, tile, first_bad)) return;
  const bool away = tile != tile_of[i];
  if (!particles) {
    if (away) atomicAdd(away_count, 1u);
    return;
  }
  const std::uint32_t s = slot[i];
  if (away) {
    const std::uint32_t k = atomicAdd(away_count, 1u);
    if (k < capacity) {
      away_slot[k] = s;
      store_record(away_particles + k, p);
    }
    p.cell = kAwayCell;
  }
  store_record(particles + s, p);
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
