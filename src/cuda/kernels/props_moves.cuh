#pragma once
#include <cstdint>

#include "cuda/kernels/partition.cuh"
#include "cuda/kernels/tiles.cuh"

namespace pmkit::cuda {

// A pass's properties moved into binned order the way set_points' partition moved the
// records: each of its blocks replayed, one block of the same items.
// The block stages its items' values in shared memory (coalesced loads), then stores them
// in the partition's sorted order (sorted: the item of each sorted place), so that
// consecutive lanes store consecutive places of a run. A store in the caller's order sent
// a warp's lanes to 32 runs (as slow as random stores), and a gather from global memory
// in the sorted order costs an L2 request a value.
// Every load is issued kPerThread at a time into registers, before any is used: one at a
// time (a loop over j), a warp keeps only 128 bytes in flight, far from the bandwidth's
// need. The sorted order and the destinations are read once and
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
  if (piece.count == 0) return;  // past the binning's pieces (Chunk)
  replay_block<T>(piece.begin, piece.count, sorted, binned_of_place, props, n,
                  [&](int p, std::size_t place) { return in[p * n + place]; }, out);
}

}  // namespace pmkit::cuda
