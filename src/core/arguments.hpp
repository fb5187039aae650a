#pragma once
// The argument checks the front ends make before any work: particle arrays (one value
// per particle, data present, positive strides), the particle count, and outputs apart
// from inputs.
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

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

// Whether the bytes [a, a + a_bytes) and [b, b + b_bytes) share one. Only the addresses
// are compared (nothing is read), so host and device pointers alike.
inline bool bytes_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// Whether an element of `view` (positive stride where it has more than one element) lies
// in the contiguous `count` elements from `run`. Exact for strided views: a view whose
// elements straddle the run without touching it (a component of an array of structures
// around another array) does not meet it.
template <class A, class B>
bool view_meets_run(const View<A>& view, const B* run, std::size_t count) {
  using T = std::remove_const_t<A>;
  static_assert(std::is_same<T, std::remove_const_t<B>>::value, "a view and a run of one element type");
  if (view.size == 0 || count == 0) return false;
  const auto first = reinterpret_cast<std::uintptr_t>(view.data);
  const auto begin = reinterpret_cast<std::uintptr_t>(run);
  const std::size_t step = view.size > 1 ? static_cast<std::size_t>(view.stride) * sizeof(T) : sizeof(T);
  // The first element that ends after the run begins, the only one that can meet it
  // before the elements pass its end.
  std::size_t k = 0;
  if (first + sizeof(T) <= begin) k = (begin - first - sizeof(T)) / step + 1;
  if (k >= view.size) return false;
  return bytes_overlap(reinterpret_cast<const void*>(first + k * step), sizeof(T), run, count * sizeof(T));
}

// The mesh plan's calls: no particle array shares an element with a mesh (each mesh a
// contiguous `mesh_size` elements), whichever of the two the call reads and which it
// writes; `call` and the names make the message.
template <class P, class M>
void require_apart(const char* call, const char* particles_name, const Span<P>& particles, const char* meshes_name,
                   const Span<M>& meshes, std::size_t mesh_size) {
  for (std::size_t i = 0; i < particles.size(); ++i)
    for (std::size_t j = 0; j < meshes.size(); ++j)
      if (view_meets_run(particles[i], meshes[j].data, mesh_size))
        fail(ErrorCode::InvalidArgument, call, ": ", particles_name, "[", i, "] and ", meshes_name, "[", j,
             "] overlap; a call's outputs must not share memory with its inputs (pass separate arrays)");
}

}  // namespace pmkit::detail
