#pragma once
// Where a rank's block lies inside its local mesh (block plus ghost layers).
#include <array>
#include <cstdint>

#include "core/split.hpp"

namespace pmkit::distributed {

// The owned nodes of a local mesh: where they start, how many, per axis, and the local
// mesh's extent.
template <int D>
struct Region {
  std::array<std::int64_t, D> start{}, shape{}, local{};

  // The owned nodes as the interior box of the local plan's split (core/split.hpp): a
  // particle whose stencil stays inside writes and reads no ghost node. An axis the block
  // holds whole (decomposition.hpp) has no ghost node.
  detail::NodeBox<D> interior() const {
    detail::NodeBox<D> box{};
    for (int d = 0; d < D; ++d) {
      const bool whole = start[d] == 0 && shape[d] == local[d];
      box.lo[d] = whole ? detail::NodeBox<D>::whole_lo() : start[d];
      box.hi[d] = whole ? detail::NodeBox<D>::whole_hi() : start[d] + shape[d];
    }
    return box;
  }

  // Calls f(block_offset, local_offset, length) for each x-row of the block.
  template <class F>
  void for_each_row(F&& f) const {
    const std::int64_t rows = D == 2 ? shape[1] : shape[1] * shape[2];
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t y = r % shape[1], z = D == 3 ? r / shape[1] : 0;
      std::int64_t l = start[0] + (start[1] + y) * local[0];
      if constexpr (D == 3) l += (start[2] + z) * local[0] * local[1];
      f(r * shape[0], l, shape[0]);
    }
  }
};

}  // namespace pmkit::distributed
