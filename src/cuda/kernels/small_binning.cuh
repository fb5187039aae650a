#pragma once
// set_points for few particles in one kernel of one block: where the binning's launches,
// not its work, set its time (tuning::kSmallBinningParticles), the block validates and
// keys every particle, sorts them by tile in shared memory (cub::BlockRadixSort, stable,
// so the order inside a tile is the caller's, as the other scatters give it), writes the
// records, the permutation both ways and each tile's first slot, and cuts the tiles into
// chunks, the entries past the count empty (Chunk). What the partition or the one-pass
// scatter and cut_tiles produce, in one launch.
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "cuda/kernels/records.cuh"
#include "cuda/tuning/tuning.hpp"

namespace pmkit::cuda {

struct SmallBinning {
  static constexpr int kThreads = 1024;
  static constexpr int kItemsPerThread = tuning::kSmallBinningParticles / kThreads;
  static_assert(kItemsPerThread * kThreads == tuning::kSmallBinningParticles, "whole items a thread");
  using Sort = cub::BlockRadixSort<std::uint32_t, kThreads, kItemsPerThread, std::uint32_t>;
  using Scan = cub::BlockScan<std::uint32_t, kThreads>;
  union Shared {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
    std::uint32_t sorted_keys[tuning::kSmallBinningParticles];
  };
};

// Launched with one block of SmallBinning::kThreads threads and sizeof(Shared) bytes of
// dynamic shared memory; n <= tuning::kSmallBinningParticles. key_bits: bits of
// num_tiles (a rejected particle's key, after every tile). Writes tile_start (num_tiles
// + 1 entries), the chunks (room for `capacity`) and the binning's counts (the chunks';
// the others zero: no heavy tiles, spans or pieces at this size).
template <class T, int D>
__global__ void __launch_bounds__(SmallBinning::kThreads)
    small_binning_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos, std::uint32_t n,
                         int key_bits, unsigned long long* first_bad, Packed<T>* particles, std::uint32_t* perm,
                         std::uint32_t* slot, std::uint32_t* tile_of, std::uint32_t* tile_start, Chunk* chunks,
                         std::uint32_t capacity, std::uint32_t* counts) {
  using B = SmallBinning;
  constexpr int kItems = B::kItemsPerThread;
  extern __shared__ __align__(16) unsigned char small_shared[];
  auto& shared = *reinterpret_cast<typename B::Shared*>(small_shared);
  const std::uint32_t tiles = geo.num_tiles;

  // Keys in the caller's order, blocked: thread t holds items t * kItems + k.
  std::uint32_t key[kItems], index[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const std::uint32_t i = threadIdx.x * kItems + k;
    index[k] = i;
    key[k] = tiles;  // past n, and rejected: after every tile
    if (i < n) {
      Packed<T> p;
      std::uint32_t tile;
      if (bin_or_reject(layout, geo, pos, i, p, tile, first_bad)) key[k] = tile;
      tile_of[i] = key[k];
    }
  }
  B::Sort(shared.sort).Sort(key, index, 0, key_bits);
  __syncthreads();

  // Sorted: slot s = threadIdx.x * kItems + k. Each binned particle's record, the
  // permutation, and the first slot of every tile from the previous key (exclusive) up
  // to this one.
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const std::uint32_t s = threadIdx.x * kItems + k;
    if (s >= n) break;
    if (key[k] < tiles) {
      const std::uint32_t i = index[k];
      Packed<T> p;
      std::uint32_t tile;
      T x[D];
      pos.load(i, x);
      bin_position<T, D, false>(layout, geo, x, p, tile);
      store_record(particles + s, p);
      perm[s] = i;
      slot[i] = s;
    }
  }
  // Tile starts: slot s begins tiles (key[s - 1], key[s]] (from 0 at s = 0); the slots
  // past the binned particles begin every tile after the last key, and the end.
  std::uint32_t* keys_out = shared.sorted_keys;  // the sort's room, free again
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kItems; ++k) keys_out[threadIdx.x * kItems + k] = key[k];
  __syncthreads();
  for (std::uint32_t s = threadIdx.x; s <= n; s += blockDim.x) {
    const std::uint32_t here = s < n ? min(keys_out[s], tiles) : tiles;
    const std::uint32_t before = s == 0 ? 0u : min(keys_out[s - 1], tiles) + 1u;
    for (std::uint32_t t = before; t <= here; ++t) tile_start[t] = s;
  }
  __syncthreads();

  // The cut into chunks of at most tuning::kChunkParticles, as cut_tiles: a tile's chunk
  // count, their scan over the tiles, then each tile's chunks (a thread a tile).
  std::uint32_t total = 0;
  for (std::uint32_t first = 0; first < tiles; first += blockDim.x) {
    const std::uint32_t t = first + threadIdx.x;
    const std::uint32_t begin = t < tiles ? tile_start[t] : 0u;
    const std::uint32_t count = t < tiles ? tile_start[t + 1] - begin : 0u;
    const std::uint32_t pieces = (count + tuning::kChunkParticles - 1) / tuning::kChunkParticles;
    std::uint32_t offset, round_total;
    B::Scan(shared.scan).ExclusiveSum(pieces, offset, round_total);
    __syncthreads();
    for (std::uint32_t c = 0; c < pieces; ++c) {
      const std::uint32_t lo = c * tuning::kChunkParticles;
      chunks[total + offset + c] = Chunk{t, begin + lo, min(count - lo, std::uint32_t(tuning::kChunkParticles))};
    }
    total += round_total;
  }
  for (std::uint32_t c = total + threadIdx.x; c < capacity; c += blockDim.x) chunks[c] = Chunk{0, 0, 0};
  if (threadIdx.x < kBinCounts) counts[threadIdx.x] = threadIdx.x == kChunkCount ? total : 0u;
}

}  // namespace pmkit::cuda
