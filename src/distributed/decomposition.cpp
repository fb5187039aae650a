// The decomposition's arithmetic (decomposition.hpp): the cuts checked or chosen, each
// axis' owned and stored nodes, the node a ghost stands for, and a rank's block and grid.
#include "distributed/decomposition.hpp"

#include "pmkit/error.hpp"

namespace pmkit::distributed {

using detail::fail;

std::int64_t AxisSplit::owned_begin(int c) const {
  return c == 0 && keep ? -ghost : cuts[c];
}

std::int64_t AxisSplit::owned_end(int c) const {
  if (c + 1 < ranks()) return cuts[c + 1];
  if (boundary == Boundary::Periodic) return cells;
  return keep ? cells + 1 + ghost : cells + 1;
}

bool AxisSplit::canonical(std::int64_t m, std::int64_t& owned) const {
  if (boundary == Boundary::Periodic) {
    owned = ((m % cells) + cells) % cells;
    return true;
  }
  if (keep) {
    owned = m;
    return m >= -ghost && m <= cells + ghost;
  }
  owned = m < 0 ? -m : m > cells ? 2 * cells - m : m;
  return owned >= 0 && owned <= cells;
}

int AxisSplit::owner_of_node(std::int64_t m) const {
  if (m < 0) return 0;
  if (m >= cells) return boundary == Boundary::Periodic ? owner_of_cell[m % cells] : ranks() - 1;
  return owner_of_cell[m];
}

template <int D>
Decomposition<D>::Decomposition(const Grid<D>& grid, int ghost, const RankGrid<D>& split, int size,
                                bool keep_whole) {
  long long product = 1;
  for (int d = 0; d < D; ++d) product *= split.ranks[d];
  if (product != size)
    fail(ErrorCode::InvalidArgument, "the rank grid has ", product, " ranks but the communicator has ", size);
  ranks_ = split.ranks;
  for (int d = 0; d < D; ++d) {
    AxisSplit& a = axes_[d];
    const int p = split.ranks[d];
    a.boundary = grid.boundary[d];
    a.keep = grid.boundary[d] == Boundary::Bounded && grid.ghosts == Ghosts::Keep;
    a.cells = grid.cells[d];
    a.ghost = ghost;
    if (p > a.cells)
      fail(ErrorCode::InvalidArgument, "cannot split grid.cells[", d, "] = ", a.cells, " over ", p,
           " ranks: every rank needs at least one cell (choose fewer ranks along dimension ", d,
           " with RankGrid::ranks)");
    const std::vector<std::int64_t>& given = split.cuts[d];
    if (given.empty()) {
      a.cuts.resize(p + 1);
      for (int c = 0; c <= p; ++c) a.cuts[c] = c * (a.cells / p) + std::min<std::int64_t>(c, a.cells % p);
    } else {
      if (static_cast<int>(given.size()) != p + 1)
        fail(ErrorCode::SizeMismatch, "split.cuts[", d, "] has ", given.size(), " values but ", p,
             " ranks along dimension ", d, " need ", p + 1, " (0, the boundaries, cells)");
      if (given.front() != 0 || given.back() != a.cells)
        fail(ErrorCode::InvalidArgument, "split.cuts[", d, "] runs from ", given.front(), " to ", given.back(),
             ": it must run from 0 to grid.cells[", d, "] = ", a.cells);
      for (int c = 0; c < p; ++c)
        if (given[c + 1] <= given[c])
          fail(ErrorCode::InvalidArgument, "split.cuts[", d, "][", c + 1, "] = ", given[c + 1],
               " is not above split.cuts[", d, "][", c, "] = ", given[c], ": every rank needs at least one cell");
      a.cuts = given;
    }
    a.whole = keep_whole && p == 1 && a.boundary == Boundary::Periodic;
    a.owner_of_cell.resize(a.cells);
    for (int c = 0; c < p; ++c)
      for (std::int64_t i = a.cuts[c]; i < a.cuts[c + 1]; ++i) a.owner_of_cell[i] = c;
  }
}

template <int D>
int Decomposition<D>::rank_of(const std::array<int, D>& coords) const {
  int r = 0;
  for (int d = 0; d < D; ++d) r = r * ranks_[d] + coords[d];
  return r;
}

template <int D>
std::array<int, D> Decomposition<D>::coords_of(int rank) const {
  std::array<int, D> c{};
  for (int d = D - 1; d >= 0; --d) {
    c[d] = rank % ranks_[d];
    rank /= ranks_[d];
  }
  return c;
}

template <int D>
Block<D> Decomposition<D>::block(int rank) const {
  Block<D> b;
  b.ranks = ranks_;
  b.coords = coords_of(rank);
  for (int d = 0; d < D; ++d) {
    const AxisSplit& a = axes_[d];
    const int c = b.coords[d];
    b.first_cell[d] = a.cuts[c];
    b.cells[d] = a.cuts[c + 1] - a.cuts[c];
    b.first_node[d] = a.owned_begin(c) + (a.keep ? a.ghost : 0);
    b.shape[d] = a.owned_end(c) - a.owned_begin(c);
  }
  return b;
}

template <int D>
Grid<D> Decomposition<D>::local_grid(const Grid<D>& grid, int rank) const {
  const std::array<int, D> coords = coords_of(rank);
  Grid<D> local = grid;
  local.ghosts = Ghosts::Keep;
  for (int d = 0; d < D; ++d) {
    const AxisSplit& a = axes_[d];
    if (a.whole) continue;
    local.boundary[d] = Boundary::Bounded;
    local.cells[d] = a.cuts[coords[d] + 1] - a.cuts[coords[d]] + 2;
    local.origin[d] = grid.origin[d] + static_cast<double>(a.cuts[coords[d]] - 1) * grid.spacing[d];
  }
  return local;
}

template class Decomposition<2>;
template class Decomposition<3>;

}  // namespace pmkit::distributed
