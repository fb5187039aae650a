#pragma once
// The interface behind DistributedPlan: what one rank does with its local meshes and its
// particles. The front end (distributed_plan.cpp) has checked every argument, agreed by
// all ranks, and times the phases; a host rank (host/host_rank.hpp: CPU ranks, host
// memory and MPI) and a device rank (cuda/device_rank.cuh: CUDA ranks, device memory and
// NCCL or host-staged MPI) implement it. This header needs no CUDA header: the device
// rank's factory is defined in cuda/device_rank.cu, built with the CUDA backend only.
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include <mpi.h>

#include "pmkit/detail/layout.hpp"
#include "core/split.hpp"
#include "distributed/decomposition.hpp"
#include "distributed/region.hpp"
#include "pmkit/distributed.hpp"

namespace pmkit::distributed {

// What a rank backend is built from: the decomposition, this rank's place in it and the
// plan's settings. The backend copies what it keeps.
template <int D>
struct RankSetup {
  const Decomposition<D>& decomposition;
  const Region<D>& region;          // the block inside the local mesh
  const detail::Layout<D>& global;  // the global grid
  const detail::Layout<D>& local;   // the local mesh: block and ghost layers
  MPI_Comm comm;                    // the plan's Cartesian communicator
  const Kernel& kernel;
  const Options& options;
  Transport transport;              // as the caller asked (CUDA ranks resolve Auto)
};

// The ghost passes of halo.hpp: the local meshes' ghost sums added to their owners, the
// owners' values written to the ghost nodes, or the deterministic spread's fixed-point
// ghost sums.
enum class HaloPass { Sum, Fill, ExactSum };

template <class T, int D>
class RankBackend {
 public:
  using Positions = std::array<View<const T>, D>;
  using MutablePositions = std::array<View<T>, D>;

  RankBackend() = default;
  RankBackend(const RankBackend&) = delete;  // a rank's tables point into its own members
  RankBackend& operator=(const RankBackend&) = delete;
  virtual ~RankBackend() = default;

  // Room for `count` local meshes (block and ghosts), one after another; returns the
  // first. Room made here starts at zero, so that the first and last stored plane of each
  // axis, which the ghost fill leaves and no stencil reaches (halo.cpp), hold zeros.
  virtual T* meshes(int count) = 0;
  // The blocks (one per local mesh) -> the local meshes' owned nodes, and back (Overwrite
  // or Add).
  virtual void block_to_local(Span<View<const T>> blocks) = 0;
  virtual void local_to_block(Span<View<T>> blocks, Accumulate mode) = 0;
  // The ghost pass of the first `count` local meshes (or fixed-point meshes: ExactSum) in
  // halo.hpp's two halves: start gathers what it sends and sends it; finish waits for
  // what arrives and adds or writes it. Between them the caller may add to any node but
  // a ghost node (sums), or read any node but a ghost node (Fill), while the messages
  // travel (a CUDA rank: queued work on its stream runs while they do).
  virtual void halo_start(HaloPass pass, int count) = 0;
  virtual void halo_finish(HaloPass pass, int count) = 0;

  // The index of the first of n particles that lies outside this rank's block (or is not
  // finite, or lies outside an axis' domain: owners.hpp's is_stranger), n if none; its
  // position in `position`.
  virtual std::size_t first_stranger(const Positions& positions, std::size_t n, std::array<double, D>& position) = 0;
  // migrate (migration.hpp): every particle to its owner, the same checks, messages and
  // result on every backend; `changed`: whether a particle left or arrived on this rank.
  // The front end has agreed on the number of property arrays.
  virtual std::size_t migrate(const MutablePositions& positions, Span<View<T>> props, std::size_t count,
                              bool& changed) = 0;

  // Whether update_points leaves the check that the particles lie in the block to the
  // local plan's binning (one CUDA rank, not deterministic: no wait; the binning wraps
  // periodic coordinates and rejects the rest as Plan does, reported by a later call).
  virtual bool update_checked_by_binning() const { return false; }
  // Throws an error that an earlier call queued and has not reported (synchronize).
  virtual void raise_deferred() {}

  // The deterministic spread (exact_spread.hpp). locate_exact: the stencils of set_points'
  // n particles (all in the block). largest_values: each property's largest |q| (a value
  // that is not finite fails, named). exact_meshes: room for `count` fixed-point local
  // meshes. spread_exact: the contributions with the ranks' common scales, summed as
  // integers. halo_sum_exact: their ghost sums added to the owners, as integers.
  // exact_to_block: the owned nodes rounded once into the blocks (1 / scale each).
  virtual void locate_exact(const Positions& positions, std::size_t n) = 0;
  virtual void largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs) = 0;
  virtual void exact_meshes(int count) = 0;
  virtual void spread_exact(Span<View<const T>> props, std::size_t n, const std::vector<double>& scale,
                            detail::Part part) = 0;
  virtual void exact_to_block(Span<View<T>> blocks, const std::vector<double>& inverse, Accumulate mode) = 0;

  // The phases' clock: mark(k) records mark k (0 .. kMarks - 1) where the rank's work
  // stands now (a CUDA rank: an event on its stream, no wait); between(a, b) is the
  // seconds from mark a to mark b (a CUDA rank waits for mark b).
  static constexpr int kMarks = 6;
  virtual void mark(int k) = 0;
  virtual double between(int a, int b) const = 0;
  // The transport the rank's messages take (HostMpi on a host rank).
  virtual Transport transport() const = 0;
};

// The overrides of a rank backend's class (host/host_rank.hpp, cuda/device_rank.cuh), all
// but transport(), declared once: inside a class template of parameters T and D.
#define PMKIT_RANK_BACKEND_OVERRIDES                                                                             \
  T* meshes(int count) override;                                                                                 \
  void block_to_local(Span<View<const T>> blocks) override;                                                      \
  void local_to_block(Span<View<T>> blocks, Accumulate mode) override;                                           \
  void halo_start(HaloPass pass, int count) override;                                                            \
  void halo_finish(HaloPass pass, int count) override;                                                           \
  std::size_t first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,                       \
                             std::array<double, D>& position) override;                                          \
  std::size_t migrate(const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count,            \
                      bool& changed) override;                                                                   \
  void locate_exact(const std::array<View<const T>, D>& positions, std::size_t n) override;                      \
  void largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs) override;          \
  void exact_meshes(int count) override;                                                                         \
  void spread_exact(Span<View<const T>> props, std::size_t n, const std::vector<double>& scale,                  \
                    detail::Part part) override;                                                                 \
  void exact_to_block(Span<View<T>> blocks, const std::vector<double>& inverse, Accumulate mode) override;       \
  void mark(int k) override;                                                                                     \
  double between(int a, int b) const override;

template <class T, int D>
using MakeRank = std::unique_ptr<RankBackend<T, D>> (*)(const RankSetup<D>& setup);

// The host rank (host/host_rank.cpp) and the device rank (cuda/device_rank.cu). Both
// build the ghost lists (halo.hpp), a collective call of the communicator.
template <class T, int D>
std::unique_ptr<RankBackend<T, D>> make_host_rank(const RankSetup<D>& setup);
template <class T, int D>
std::unique_ptr<RankBackend<T, D>> make_device_rank(const RankSetup<D>& setup);

// Defines a rank backend's factory (make_host_rank, make_device_rank) as building a
// Rank<T, D>, and instantiates both for the four plans, in the backend's source file.
#define PMKIT_DEFINE_RANK_FACTORY(make, Rank)                                                \
  template <class T, int D>                                                                 \
  std::unique_ptr<RankBackend<T, D>> make(const RankSetup<D>& setup) {                      \
    return std::make_unique<Rank<T, D>>(setup);                                             \
  }                                                                                         \
  template class Rank<float, 2>;                                                            \
  template class Rank<float, 3>;                                                            \
  template class Rank<double, 2>;                                                           \
  template class Rank<double, 3>;                                                           \
  template std::unique_ptr<RankBackend<float, 2>> make<float, 2>(const RankSetup<2>&);      \
  template std::unique_ptr<RankBackend<float, 3>> make<float, 3>(const RankSetup<3>&);      \
  template std::unique_ptr<RankBackend<double, 2>> make<double, 2>(const RankSetup<2>&);    \
  template std::unique_ptr<RankBackend<double, 3>> make<double, 3>(const RankSetup<3>&);

}  // namespace pmkit::distributed
