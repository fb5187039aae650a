#pragma once
// The block decomposition of a grid over a Cartesian grid of ranks, the same on every
// rank: which rank owns a node (owners.hpp: a position), and where a node lies in a
// rank's local mesh (its block plus ghost layers).
//
// Nodes are counted as logical nodes m: 0 .. cells-1 on a periodic axis, 0 .. cells on a
// bounded one, -g .. cells+g with Ghosts::Keep (g the kernel's ghost width). A rank's
// local mesh spans the logical nodes [cut - 1 - g, cut_next + 1 + g] per axis: its cells,
// one margin cell either side, and g ghost nodes past them: the storage of a bounded
// Ghosts::Keep grid of cells + 2 cells whose origin is node cut - 1. A periodic axis
// that one rank holds whole may instead stay periodic in the local mesh (`whole`): its
// cells nodes, no ghost, the local plan wrapping the stencils as the single-rank plan
// does, and nothing of it to exchange.
#include <array>
#include <cstdint>
#include <vector>

#include "pmkit/distributed.hpp"
#include "pmkit/grid.hpp"

namespace pmkit::distributed {

// One axis of the decomposition.
struct AxisSplit {
  Boundary boundary = Boundary::Periodic;
  bool keep = false;               // bounded with Ghosts::Keep
  std::int64_t cells = 0;
  int ghost = 0;                   // the kernel's ghost width
  std::vector<std::int64_t> cuts;  // ranks + 1 cell boundaries, 0 .. cells
  std::vector<int> owner_of_cell;  // rank coordinate per cell
  bool whole = false;              // periodic, one rank, kept periodic in the local mesh

  int ranks() const { return static_cast<int>(cuts.size()) - 1; }
  // Owned logical nodes of rank coordinate c: [owned_begin, owned_end).
  std::int64_t owned_begin(int c) const;
  std::int64_t owned_end(int c) const;
  // First logical node of rank c's local mesh, and its node count.
  std::int64_t local_begin(int c) const { return whole ? 0 : cuts[c] - 1 - ghost; }
  std::int64_t local_nodes(int c) const { return whole ? cells : cuts[c + 1] - cuts[c] + 3 + 2 * ghost; }
  // The logical node that holds logical node m's value: m wrapped on a periodic axis,
  // mirrored about the end node with Ghosts::Fold; false for a node past the mesh.
  bool canonical(std::int64_t m, std::int64_t& owned) const;
  // Rank coordinate owning canonical node m.
  int owner_of_node(std::int64_t m) const;
};

template <int D>
class Decomposition {
 public:
  // ranks and cuts as the caller's RankGrid, checked; `size` ranks in all. keep_whole: a
  // periodic axis of one rank stays periodic in the local meshes (AxisSplit::whole).
  Decomposition(const Grid<D>& grid, int ghost, const RankGrid<D>& split, int size, bool keep_whole = false);

  const AxisSplit& axis(int d) const { return axes_[d]; }
  const std::array<int, D>& ranks() const { return ranks_; }
  int rank_of(const std::array<int, D>& coords) const;  // row-major, the last axis fastest
  std::array<int, D> coords_of(int rank) const;
  // The block a rank owns, as the public Block describes it.
  Block<D> block(int rank) const;
  // A rank's local mesh as a grid: bounded, Ghosts::Keep, cells + 2 cells per axis (a
  // whole axis: the grid's own).
  Grid<D> local_grid(const Grid<D>& grid, int rank) const;

 private:
  std::array<AxisSplit, D> axes_;
  std::array<int, D> ranks_{};
};

}  // namespace pmkit::distributed
