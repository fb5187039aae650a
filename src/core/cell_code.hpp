#pragma once
// The number by which the CUDA mesh plan's binned records name a particle's home node
// (the node its stencil is centred on), written for host and device so that its
// arithmetic is tested on the host at grid sizes no test machine allocates.
//
// A home node has keys[d] possible coordinates on axis d (n periodic, n + 1 bounded). Its
// number is the coordinates as bit fields (x lowest) where the fields fit in 31 bits,
// else the mixed-radix number over keys (x fastest). A record holds a 32-bit cell word:
// the number itself where every number is below 2^32 - 1 (0xffffffff stays free for the
// away marker). Wide grids, from 2^32 - 1 home nodes on (2048^3 periodic, 1626^3
// bounded), split the number as high * (2^32 - 1) + low, low < 2^32 - 1 the cell word
// and high < 2^D a bit an axis, which the record keeps in the sign bits of its local
// coordinates (each in [0, 1), so their sign bits are free). A grid holds up to
// 2^D (2^32 - 1) home nodes: 2^35 - 8 in 3D (3250^3), 137 GB of float mesh.
//
// The 32-bit paths are the ones every grid below 2^32 - 1 home nodes takes, as before;
// only wide grids pay for the 64-bit number (a multiply-high and a correction for each
// division by keys[d], in the kernels that decode a record).
#include <cstdint>

#include "pmkit/config.hpp"

namespace pmkit::detail {

// The high 64 bits of the 128-bit product a * b.
PMKIT_HD inline std::uint64_t mul_hi64(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

template <int D>
struct CellCode {
  // Values of the cell word; numbers of wide grids are high * kLowRange + low.
  static constexpr std::uint64_t kLowRange = 0xffffffffull;
  // Home nodes a grid may have: every number below 2^D kLowRange.
  static constexpr std::uint64_t kMaxNodes = (std::uint64_t(1) << D) * kLowRange;

  int keys[D];   // coordinates a home node takes on each axis
  int shift[D];  // bit fields: field d starts at bit shift[d]; shift[0] < 0: mixed radix
  bool wide;     // numbers reach 2^32 - 1: the record holds high apart
  // Wide grids: floor((2^64 - 1) / keys[d]) + 1, the multiplier whose high product
  // divides by keys[d] (to within one, which divide() corrects); 0 where keys[d] = 1.
  std::uint64_t magic[D];

  // Sets the encoding from keys (set before). False where the grid has more than
  // kMaxNodes home nodes, which no record numbers.
  bool choose() {
    int bits = 0;
    std::uint64_t nodes = 1;
    bool fits = true;
    for (int d = 0; d < D; ++d) {
      shift[d] = bits;
      int width = 0;
      while ((std::int64_t(1) << width) < keys[d]) ++width;
      bits += width;
      const auto k = static_cast<std::uint64_t>(keys[d]);
      if (k == 0 || nodes > kMaxNodes / k) fits = false;
      else nodes *= k;
      magic[d] = k > 1 ? ~std::uint64_t(0) / k + 1 : 0;
    }
    if (bits > 31) shift[0] = -1;
    wide = !fits || nodes > kLowRange;
    return fits;
  }
  PMKIT_HD bool bit_fields() const { return shift[0] >= 0; }

  // The 32-bit number of grids that are not wide, one axis at a time from the last axis
  // down to x (the binning loop keeps no array of coordinates).
  PMKIT_HD std::uint32_t encode_axis(std::uint32_t cell, int d, int home) const {
    return bit_fields() ? cell | (static_cast<std::uint32_t>(home) << shift[d])
                        : cell * static_cast<std::uint32_t>(keys[d]) + static_cast<std::uint32_t>(home);
  }
  PMKIT_HD std::uint32_t encode(const int (&home)[D]) const {
    std::uint32_t cell = 0;
    PMKIT_UNROLL
    for (int d = D - 1; d >= 0; --d) cell = encode_axis(cell, d, home[d]);
    return cell;
  }
  // The mixed-radix number in 64 bits (wide grids), the same order of axes.
  PMKIT_HD std::uint64_t encode_axis_wide(std::uint64_t number, int d, int home) const {
    return number * static_cast<std::uint64_t>(keys[d]) + static_cast<std::uint64_t>(home);
  }
  PMKIT_HD std::uint64_t encode_wide(const int (&home)[D]) const {
    std::uint64_t number = 0;
    PMKIT_UNROLL
    for (int d = D - 1; d >= 0; --d) number = encode_axis_wide(number, d, home[d]);
    return number;
  }

  // number = high * kLowRange + low, low < kLowRange (number < kMaxNodes: high < 2^D).
  PMKIT_HD static void split(std::uint64_t number, std::uint32_t& low, std::uint32_t& high) {
    // number = h 2^32 + l = h (2^32 - 1) + (h + l), and h + l < 2 kLowRange.
    std::uint32_t h = static_cast<std::uint32_t>(number >> 32);
    std::uint64_t l = (number & 0xffffffffull) + h;
    if (l >= kLowRange) {
      l -= kLowRange;
      ++h;
    }
    low = static_cast<std::uint32_t>(l);
    high = h;
  }
  PMKIT_HD static std::uint64_t join(std::uint32_t low, std::uint32_t high) {
    return static_cast<std::uint64_t>(high) * kLowRange + low;
  }

  // floor(number / keys[d]) for number < kMaxNodes: the multiply-high is the quotient or
  // one more (magic exceeds 2^64 / keys[d] by at most 1, and number < 2^64).
  PMKIT_HD std::uint64_t divide(std::uint64_t number, int d) const {
    if (magic[d] == 0) return number;
    std::uint64_t q = mul_hi64(number, magic[d]);
    if (q * static_cast<std::uint64_t>(keys[d]) > number) --q;
    return q;
  }

  // The home node of cell word `cell` on a grid that is not wide.
  PMKIT_HD void decode(std::uint32_t cell, int (&home)[D]) const {
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
  // The home node of number high * kLowRange + cell on a wide grid.
  PMKIT_HD void decode_wide(std::uint32_t cell, std::uint32_t high, int (&home)[D]) const {
    std::uint64_t number = join(cell, high);
    PMKIT_UNROLL
    for (int d = 0; d < D - 1; ++d) {
      const std::uint64_t q = divide(number, d);
      home[d] = static_cast<int>(number - q * static_cast<std::uint64_t>(keys[d]));
      number = q;
    }
    home[D - 1] = static_cast<int>(number);
  }
  // Either, as the grid asks (`high`: 0 unless wide).
  PMKIT_HD void decode(std::uint32_t cell, std::uint32_t high, int (&home)[D]) const {
    if (wide)
      decode_wide(cell, high, home);
    else
      decode(cell, home);
  }
};

}  // namespace pmkit::detail
