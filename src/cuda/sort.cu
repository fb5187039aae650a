#include "cuda/sort.hpp"

#include <cub/device/device_radix_sort.cuh>

#include "pmkit/cuda/runtime.hpp"

namespace pmkit::cuda {
namespace {

// Each slot where the sorted key changes fills the starts of the buckets from the
// previous key (exclusive) to its own (inclusive); the last slot fills the rest.
__global__ void bucket_starts_kernel(const std::uint32_t* __restrict__ keys, int shift, std::uint32_t n,
                                     std::uint32_t buckets, std::uint32_t* __restrict__ start) {
  const std::uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const std::uint32_t key = min(keys[s] >> shift, buckets);
  const std::uint32_t from = s == 0 ? 0 : min(keys[s - 1] >> shift, buckets) + 1;
  for (std::uint32_t b = from; b <= key; ++b) start[b] = s;
  if (s == n - 1)
    for (std::uint32_t b = key + 1; b <= buckets; ++b) start[b] = n;
}

}  // namespace

std::size_t sort_pairs_temp_bytes(std::size_t n, int bits) {
  std::size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::uint32_t*>(nullptr),
                                        static_cast<std::uint32_t*>(nullptr), static_cast<const std::uint32_t*>(nullptr),
                                        static_cast<std::uint32_t*>(nullptr), static_cast<int>(n), 0, bits),
        "cub::DeviceRadixSort");
  return bytes;
}

void sort_pairs(void* temp, std::size_t temp_bytes, const std::uint32_t* keys_in, std::uint32_t* keys_out,
                const std::uint32_t* values_in, std::uint32_t* values_out, std::size_t n, int bits) {
  check(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in, values_out,
                                        static_cast<int>(n), 0, bits),
        "cub::DeviceRadixSort");
}

void bucket_starts(const std::uint32_t* sorted_keys, int shift, std::size_t n, std::uint32_t buckets,
                   std::uint32_t* start) {
  const auto n32 = static_cast<std::uint32_t>(n);
  bucket_starts_kernel<<<(n32 + 255) / 256, 256>>>(sorted_keys, shift, n32, buckets, start);
  check_launch("pmkit::cuda::bucket_starts");
}

}  // namespace pmkit::cuda
