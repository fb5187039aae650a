#pragma once
// The argument checks both plans' front ends make before any work: particle arrays (one
// value per particle, data present, positive strides) and the particle count.
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "pmkit/error.hpp"
#include "pmkit/view.hpp"

namespace pmkit::detail {

// Plans number particles with 32-bit slots, the last value kept free.
inline void check_point_count(std::size_t n) {
  if (n >= std::numeric_limits<std::uint32_t>::max())
    fail(ErrorCode::Unsupported, "set_points with ", n, " particles: a plan holds fewer than 2^32 - 1 particles");
}

// Positions as D arrays of one length; returns that length.
template <class T, int D>
std::size_t check_positions(const std::array<View<const T>, D>& positions) {
  const std::size_t n = positions[0].size;
  for (int d = 0; d < D; ++d) {
    if (positions[d].size != n)
      fail(ErrorCode::SizeMismatch, "positions[", d, "].size = ", positions[d].size,
           " but positions[0].size = ", n, ": every coordinate needs one value per particle");
    if (n > 0 && positions[d].data == nullptr)
      fail(ErrorCode::InvalidArgument, "positions[", d, "].data is null for ", n, " particles");
    if (positions[d].stride <= 0 && n > 1)
      fail(ErrorCode::InvalidArgument, "positions[", d, "].stride = ", positions[d].stride, ": strides must be positive");
  }
  check_point_count(n);
  return n;
}

// Arrays of one value per particle of the plan's n (`what` names them in the message).
template <class P>
void check_particle_arrays(const char* what, const Span<P>& arrays, std::size_t n) {
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].size != n)
      fail(ErrorCode::SizeMismatch, what, "[", i, "].size = ", arrays[i].size, " but the plan has ",
           n, " particles (set_points)");
    if (n > 0 && arrays[i].data == nullptr) fail(ErrorCode::InvalidArgument, what, "[", i, "].data is null");
    if (arrays[i].stride <= 0 && n > 1)
      fail(ErrorCode::InvalidArgument, what, "[", i, "].stride = ", arrays[i].stride, ": strides must be positive");
  }
}

}  // namespace pmkit::detail
