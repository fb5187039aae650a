#pragma once
// Grid<D>: a uniform Cartesian mesh in D = 2 or 3 dimensions.
//
// Mesh values live on nodes x_i = origin + i * spacing. Per dimension:
//  * Periodic: `cells` nodes, i = 0 .. cells-1; the domain [origin, origin + cells*h)
//    repeats. Positions anywhere on the real line are wrapped into it.
//  * Bounded:  `cells` cells, so cells+1 nodes i = 0 .. cells on the closed domain
//    [origin, origin + cells*h]; particles must lie inside it. A kernel reaches
//    ghost_width() nodes past either end. With Ghosts::Fold those ghost contributions
//    are folded back onto the interior by mirror reflection about the end node (node
//    -k onto k, node cells+k onto cells-k), which conserves mass; interp then reads
//    ghost values as the mirrored interior values (the exact adjoint). With
//    Ghosts::Keep the mesh arrays carry the ghost layers themselves (cells+1+2g nodes,
//    interior node i stored at i+g): spread returns them, interp reads them as given.
// Storage: one contiguous array per field, x fastest: index = i0 + n0*(i1 + n1*i2).
// A pair plan on the same particles takes the same Grid (PairPlan(grid, cutoff): its
// domain, Box<D>::of(grid), in pmkit/pairs.hpp).
#include <array>
#include <cstddef>
#include <cstdint>

namespace pmkit {

enum class Boundary { Periodic, Bounded };
enum class Ghosts { Fold, Keep };

template <int D>
struct Grid {
  static_assert(D == 2 || D == 3, "pmkit grids are 2D or 3D");
  static constexpr int dim = D;

  std::array<double, D> origin{};
  std::array<double, D> spacing{};
  std::array<std::int64_t, D> cells{};
  std::array<Boundary, D> boundary{};  // value-initialised: Periodic
  Ghosts ghosts = Ghosts::Fold;         // how bounded dimensions treat ghost nodes

  // A periodic box of `cells` cells of width h starting at `origin`.
  static Grid periodic(std::array<std::int64_t, D> cells, double h = 1.0, double origin = 0.0) {
    Grid g;
    g.cells = cells;
    g.spacing.fill(h);
    g.origin.fill(origin);
    g.boundary.fill(Boundary::Periodic);
    return g;
  }
  // A bounded box [origin, origin + cells*h] in every dimension.
  static Grid bounded(std::array<std::int64_t, D> cells, double h = 1.0, double origin = 0.0,
                      Ghosts ghosts = Ghosts::Fold) {
    Grid g = periodic(cells, h, origin);
    g.boundary.fill(Boundary::Bounded);
    g.ghosts = ghosts;
    return g;
  }
};

using Grid2 = Grid<2>;
using Grid3 = Grid<3>;

// Throws pmkit::Error if the grid is unusable with a kernel of the given ghost width
// (non-positive or non-finite cells/spacing, non-finite origin, a bounded dimension
// too small to fold into, or a mesh too large to index).
template <int D>
void validate(const Grid<D>& grid, int ghost_width);

// Number of nodes stored per dimension for a kernel of the given ghost width.
template <int D>
std::array<std::int64_t, D> mesh_shape(const Grid<D>& grid, int ghost_width);

template <int D>
std::int64_t mesh_size(const Grid<D>& grid, int ghost_width) {
  std::int64_t n = 1;
  for (auto e : mesh_shape(grid, ghost_width)) n *= e;
  return n;
}

}  // namespace pmkit
