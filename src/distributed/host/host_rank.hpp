#pragma once
// The rank backend of a CPU rank: its local meshes in host memory, the ghost exchange of
// halo.hpp, the migration of migration.hpp and the deterministic spread of
// exact_spread.hpp in 128-bit integers over OpenMP threads.
#include <array>
#include <cstdint>
#include <vector>

#include "distributed/exact_spread.hpp"
#include "distributed/halo.hpp"
#include "distributed/owners.hpp"
#include "distributed/rank_backend.hpp"

namespace pmkit::distributed {

template <class T, int D>
class HostRank final : public RankBackend<T, D> {
 public:
  explicit HostRank(const RankSetup<D>& setup);

  PMKIT_RANK_BACKEND_OVERRIDES
  Transport transport() const override { return Transport::HostMpi; }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  Kernel kernel_;
  int num_threads_ = 0;  // the deterministic spread's OpenMP threads (0: OpenMP's default)
  Decomposition<D> decomposition_;
  Owners<D> owners_;  // tables in decomposition_
  Region<D> region_;
  detail::Layout<D> global_, local_;
  std::int64_t first_cell_[D];  // the block's first cell per axis
  Halo halo_;
  std::vector<T> meshes_;    // local meshes (block and ghosts), one per property
  std::vector<Exact> exact_;  // deterministic: the fixed-point local meshes
  // Deterministic: each particle's stencil (base in local logical nodes, local coordinate).
  std::array<std::vector<int>, D> base_;
  std::array<std::vector<T>, D> frac_;
  std::vector<std::uint8_t> inside_;      // whether each stencil lies in the block's owned nodes
  std::vector<std::uint32_t> order_;      // the particles by their stencils' first plane
  std::vector<std::size_t> plane_start_;  // where each plane's particles start in order_
  std::array<double, RankBackend<T, D>::kMarks> marks_{};  // the phases' marks (MPI_Wtime)
};

}  // namespace pmkit::distributed
