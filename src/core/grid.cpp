#include <cmath>
#include <limits>

#include "pmkit/detail/layout.hpp"
#include "pmkit/error.hpp"
#include "pmkit/grid.hpp"

namespace pmkit {

template <int D>
void validate(const Grid<D>& grid, int ghost_width) {
  using detail::fail;
  for (int d = 0; d < D; ++d) {
    if (grid.cells[d] <= 0)
      fail(ErrorCode::InvalidArgument, "grid.cells[", d, "] = ", grid.cells[d],
           ": the number of cells must be positive");
    if (grid.cells[d] > (std::numeric_limits<int>::max() - 2 * ghost_width - 1))
      fail(ErrorCode::InvalidArgument, "grid.cells[", d, "] = ", grid.cells[d],
           ": too many cells in one dimension");
    if (!(grid.spacing[d] > 0) || !std::isfinite(grid.spacing[d]))
      fail(ErrorCode::InvalidArgument, "grid.spacing[", d, "] = ", grid.spacing[d],
           ": the spacing must be positive and finite");
    if (!std::isfinite(grid.origin[d]))
      fail(ErrorCode::InvalidArgument, "grid.origin[", d, "] = ", grid.origin[d],
           ": the origin must be finite");
    if (grid.boundary[d] == Boundary::Bounded && grid.ghosts == Ghosts::Fold &&
        grid.cells[d] < ghost_width)
      fail(ErrorCode::InvalidArgument, "grid.cells[", d, "] = ", grid.cells[d],
           ": a bounded dimension that folds its ghost layers needs at least ", ghost_width,
           " cells for this kernel");
  }
  // The node count must fit a signed 64-bit index, with room for a byte count.
  long double nodes = 1;
  for (auto e : mesh_shape(grid, ghost_width)) nodes *= static_cast<long double>(e);
  if (nodes > static_cast<long double>(std::numeric_limits<std::int64_t>::max() / 16))
    fail(ErrorCode::OutOfMemory, "grid of ", static_cast<double>(nodes),
         " nodes cannot be indexed");
}

template <int D>
std::array<std::int64_t, D> mesh_shape(const Grid<D>& grid, int ghost_width) {
  std::array<std::int64_t, D> shape{};
  for (int d = 0; d < D; ++d) {
    if (grid.boundary[d] == Boundary::Periodic)
      shape[d] = grid.cells[d];
    else if (grid.ghosts == Ghosts::Fold)
      shape[d] = grid.cells[d] + 1;
    else
      shape[d] = grid.cells[d] + 1 + 2 * ghost_width;
  }
  return shape;
}

namespace detail {
template <int D>
Layout<D> make_layout(const Grid<D>& grid, int ghost_width) {
  Layout<D> layout{};
  const auto shape = mesh_shape(grid, ghost_width);
  std::int64_t stride = 1;
  for (int d = 0; d < D; ++d) {
    Axis& a = layout.axis[d];
    a.kind = grid.boundary[d] == Boundary::Periodic ? AxisKind::Periodic
             : grid.ghosts == Ghosts::Fold           ? AxisKind::Fold
                                                     : AxisKind::Keep;
    a.cells = static_cast<int>(grid.cells[d]);
    a.nodes = static_cast<int>(shape[d]);
    a.ghost = ghost_width;
    a.origin = grid.origin[d];
    a.spacing = grid.spacing[d];
    int exponent = 0;
    const bool power_of_two = std::frexp(a.spacing, &exponent) == 0.5;
    a.exact_inverse = power_of_two && std::isfinite(1.0 / a.spacing) ? 1.0 / a.spacing : 0.0;
    layout.stride[d] = stride;
    stride *= shape[d];
  }
  layout.size = stride;
  return layout;
}
template Layout<2> make_layout(const Grid<2>&, int);
template Layout<3> make_layout(const Grid<3>&, int);
}  // namespace detail

template void validate(const Grid<2>&, int);
template void validate(const Grid<3>&, int);
template std::array<std::int64_t, 2> mesh_shape<2>(const Grid<2>&, int);
template std::array<std::int64_t, 3> mesh_shape<3>(const Grid<3>&, int);

}  // namespace pmkit
