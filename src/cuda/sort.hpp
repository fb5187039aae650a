#pragma once
// The device-wide stable sort both binnings use: the pair plan's cells and the mesh
// plan's tiles (set_points' radix path). Keys and values are 32-bit; only the low `bits`
// bits of a key are sorted on, so a sort over a few thousand bins takes two passes of
// cub::DeviceRadixSort, not four. Compiled once (sort.cu), not in every backend unit.
#include <cstddef>
#include <cstdint>

namespace pmkit::cuda {

// The smallest bit count that holds every value 0..largest.
inline int bits_for(std::size_t largest) {
  int bits = 1;
  while (bits < 32 && (std::size_t(1) << bits) <= largest) ++bits;
  return bits;
}

// Temporary storage the sort of n pairs needs (bytes).
std::size_t sort_pairs_temp_bytes(std::size_t n, int bits);

// (keys_out, values_out) = (keys_in, values_in) stably sorted by the low `bits` bits of
// the keys, on the current device and stream 0. The inputs are left as they were.
// n < 2^31 (cub's item count).
void sort_pairs(void* temp, std::size_t temp_bytes, const std::uint32_t* keys_in, std::uint32_t* keys_out,
                const std::uint32_t* values_in, std::uint32_t* values_out, std::size_t n, int bits);

// start[b] = the first slot whose key (shifted right by `shift`) is at least b, for
// b = 0..buckets (start[buckets] = n where no key reaches `buckets`; keys of `buckets`
// itself, the binnings' rejected particles, sort after every bucket and are left out).
// Sorted keys in; n > 0.
void bucket_starts(const std::uint32_t* sorted_keys, int shift, std::size_t n, std::uint32_t buckets,
                   std::uint32_t* start);

}  // namespace pmkit::cuda
