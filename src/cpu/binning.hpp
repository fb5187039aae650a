#pragma once
// CPU binning: a parallel counting sort of the particles by mesh row (all coordinates
// but x), plus the slab decomposition that makes spread race-free without atomics.
#include <array>
#include <cstdint>
#include <vector>

#include "pmkit/detail/layout.hpp"

namespace pmkit::cpu {

template <class T, int D>
struct Binning {
  std::size_t n = 0;
  std::vector<std::uint32_t> perm;           // sorted slot -> the caller's particle index
  std::array<std::vector<int>, D> base;      // first logical node per dimension
  std::array<std::vector<T>, D> frac;        // local coordinate s in [0, 1) per dimension
  // Slabs: chunk c holds sorted particles [chunk_begin[c], chunk_begin[c+1]); the
  // particles of one chunk touch planes that no other chunk of the same parity
  // touches, so even chunks run in parallel, then odd ones.
  std::vector<std::size_t> chunk_begin;
  // Planes of the last axis the widest chunk reaches (its window, set with the chunks).
  int window_planes = 0;
  // With a split (core/split.hpp): per sorted particle whether its stencil lies inside
  // the interior box, and per chunk which parts it holds (bit 1: boundary, 2: interior).
  std::vector<std::uint8_t> inside, chunk_parts;

  // The stencil position of sorted particle i.
  void load(std::size_t i, int (&b)[D], T (&s)[D]) const {
    for (int d = 0; d < D; ++d) {
      b[d] = base[d][i];
      s[d] = frac[d][i];
    }
  }

  std::size_t num_chunks() const { return chunk_begin.empty() ? 0 : chunk_begin.size() - 1; }
  void resize(std::size_t count) {
    n = count;
    perm.resize(count);
    for (int d = 0; d < D; ++d) {
      base[d].resize(count);
      frac[d].resize(count);
    }
  }
};

// Splits `planes` planes holding plane_start[p+1]-plane_start[p] particles into an
// even number of chunks (or one), each at least `min_width` planes wide, balanced by
// particle count. Returns the particle index where each chunk begins, plus the end.
std::vector<std::size_t> balanced_slabs(const std::vector<std::size_t>& plane_start, int min_width,
                                        int max_chunks);

}  // namespace pmkit::cpu
