#pragma once
// DistributedPlan<T, D>: particle <-> mesh interpolation over the ranks of an MPI
// communicator, each rank holding one block of the mesh and the particles inside it.
//
//   pmkit::DistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, pmkit::Kernel::mp4());
//   n = plan.migrate({x, y, z}, {q, vx, vy, vz}, n);  // particles to the ranks that own them
//   plan.set_points({x, y, z});                        // this rank's n particles
//   plan.spread({q}, {rho});                           // rho: this rank's block
//   plan.interp({phi}, {phi_at_particles});
//   plan.update_points({x, y, z});                     // moved a little, between migrates
//
// Decomposition. The grid's cells are split over a Cartesian grid of ranks (MPI_Dims_create,
// or the caller's RankGrid, with even or the caller's uneven cuts). A rank owns the cells
// [cuts[d][c], cuts[d][c+1]) per dimension (c its rank coordinate) and the nodes at their
// lower corners; on a bounded dimension the last rank also owns node `cells`, and with
// Ghosts::Keep the first and last ranks own the global ghost layers. A rank's block is
// its owned nodes: block_shape() of them, x fastest, the layout of the single-rank mesh
// cut to the block. A particle belongs to the rank whose cells hold it (a particle on a
// bounded upper face, to the last rank).
//
// Exchange. Each rank runs a pmkit::Plan on its block plus ghost layers (the kernel's
// ghost width and one cell more, which absorbs the rounding of a particle on a block's
// face; none along a periodic dimension of one rank, which the local plan wraps itself
// but in deterministic mode). spread adds the ghost layers' sums to their owners (across the periodic seam
// and folded at bounded Ghosts::Fold edges, as the single-rank plan does); interp and
// interp_gradient first fill the ghost layers with the owners' values (the mirrored
// values at a folding edge). A block may be thinner than the ghost layers: their nodes
// go to whichever rank owns them, however far. On several ranks the messages travel while
// the local plan works on the particles whose stencils reach no ghost node (Overlap,
// set_overlap).
//
// Results. spread, interp and interp_gradient equal the single-rank Plan's on the same
// particles to rounding (a node's sum is added in another order). With
// options.deterministic the spread is exact instead: every particle's contributions are
// summed in 128-bit fixed point (a scale common to all ranks, from the largest |q| and
// the total particle count), the ghost sums are exchanged as integers and each node is
// rounded once, so the result is the same bit for bit at any rank count and any cuts,
// on CPU ranks and on CUDA ranks alike (the same integers: the device adds them with
// two 64-bit atomics each), and within a rounding of the exact sum of the contributions.
//
// One rank. On a communicator of one rank the local plan is the Plan of the grid itself,
// whose mesh is the block: spread and interp run it on the caller's arrays, with no
// ghost layers to copy or exchange and no message.
//
// Collective calls. Every call but the accessors is collective: all ranks of the
// communicator make it, in the same order. A call that fails on any rank throws
// pmkit::Error on every rank (the failing rank's own error; on the others one that names
// the failing rank and its message), and leaves the caller's arrays as they were. On
// CUDA ranks the work runs on options.stream, in call order: spread, interp and the
// gradients return once it is queued (the host-staged transport waits for the stream
// before each message), migrate after one wait for its counts, set_points and
// update_points after one wait for their check that the particles lie in the block; the
// caller synchronises the stream before reading results on the host.
//
// One CUDA rank (not deterministic). The steady step waits for nothing: migrate is the
// periodic wraps, queued, and update_points leaves the position check to the local Plan's
// binning, which wraps a periodic coordinate itself and rejects the rest as Plan does on
// device arrays. A position that migrate cannot place (not finite, outside a bounded
// dimension, too far to wrap) leaves every array as it was; its error, or the binning's,
// comes from a later call, or at the latest from synchronize(). So the step (migrate,
// update_points, spread, interp) captures into a CUDA graph on options.stream once an
// eager step of the same sizes has run (Plan's rules for graphs, docs/api.md).
// set_points still waits for its check.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <mpi.h>

#include "pmkit/plan.hpp"

namespace pmkit {

// How the mesh's cells are split over the ranks.
template <int D>
struct RankGrid {
  // Ranks per dimension, their product the communicator's size; a 0 lets MPI_Dims_create
  // choose that dimension's count. All zeros: MPI_Dims_create chooses the whole grid.
  std::array<int, D> ranks{};
  // Optional cell boundaries per dimension: ranks[d] + 1 increasing values from 0 to
  // cells[d] (empty: the cells split as evenly as possible, the larger blocks first).
  std::array<std::vector<std::int64_t>, D> cuts{};
};

// Where one rank sits in the decomposition.
template <int D>
struct Block {
  std::array<int, D> ranks{};                // the rank grid's shape
  std::array<int, D> coords{};               // this rank's place in it
  std::array<std::int64_t, D> first_cell{};  // first owned cell per dimension
  std::array<std::int64_t, D> cells{};       // owned cells per dimension
  // First owned node per dimension, as a single-rank mesh index (Ghosts::Keep: the
  // global ghost layers count from 0, so interior node i is index i + ghost width).
  std::array<std::int64_t, D> first_node{};
  std::array<std::int64_t, D> shape{};       // owned nodes per dimension
};

// How a CUDA rank's messages travel: NCCL between device buffers, or through host memory
// and MPI (for an MPI that does not take device pointers). Auto: NCCL where this build
// has it and every rank has a GPU of its own, else HostMpi (NCCL refuses two ranks on one
// GPU; the ranks compare their GPUs, by host name and PCI bus id, before any NCCL
// set-up). Nccl where two ranks share a GPU, or in a build without NCCL, fails with
// ErrorCode::Unsupported on every rank. CPU ranks use MPI.
enum class Transport { Auto, Nccl, HostMpi };

// Seconds of the last collective call, by phase (on CUDA ranks the device's time between
// events on the stream: last_timings waits for the call's work to finish).
struct DistributedTimings {
  double compute_s = 0;   // the local plan's work and the copies between block and ghosts
  double exchange_s = 0;  // ghost layers: packing, messages, adding or filling, as waited for
  double migrate_s = 0;   // migrate: owners, counts, messages, compaction
  // Of compute_s, the interior work that ran while the ghost messages travelled (0 where
  // the exchange did not overlap it: set_overlap).
  double overlapped_s = 0;
};

// Whether spread, interp and their gradients run the ghost exchange while the local plan
// works on the particles whose stencils reach no ghost node (the interior particles):
// spread deposits the others first, starts the exchange, deposits the interior particles,
// then adds what arrived; interp starts the ghost fill, interpolates the interior
// particles, then the others. Results are those of the exchange after the work: the same
// bit for bit for interp, interp_gradient and the deterministic spread, to rounding for
// spread and spread_gradient (a node's sum is added in another order). Auto: on a rank
// with enough particles for the split to pay (docs/tuning.md#koverlapminparticles);
// Always, Never: on every rank of several, on none. One rank has no exchange.
enum class Overlap { Auto, Always, Never };

template <class T, int D>
class DistributedPlan {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "pmkit plans are float or double");

 public:
  using Positions = std::array<View<const T>, D>;
  using MutablePositions = std::array<View<T>, D>;

  // comm: the ranks that share the grid (the plan keeps its own communicator). options:
  // those of the local plan on every rank (backend, threads, device, stream,
  // deterministic...). On CUDA ranks every array the calls take is device memory.
  DistributedPlan(MPI_Comm comm, const Grid<D>& grid, Kernel kernel, Options options = {},
                  const RankGrid<D>& split = {}, Transport transport = Transport::Auto);
  ~DistributedPlan();
  DistributedPlan(DistributedPlan&&) noexcept;
  DistributedPlan& operator=(DistributedPlan&&) noexcept;
  DistributedPlan(const DistributedPlan&) = delete;
  DistributedPlan& operator=(const DistributedPlan&) = delete;

  // Moves every particle to the rank that owns its position, with its properties. Each
  // array holds `capacity` slots (its size, the same for all of a rank's arrays), the
  // first `count` in use; props[j] may be of any number, the same on every rank.
  // Periodic coordinates are wrapped into the grid's domain [origin, origin + L) as the
  // mesh Plan wraps them (origin + L itself onto the origin); one too far from the origin
  // to wrap (its distance in cells not a finite double) fails with ErrorCode::OutOfBounds,
  // as in Plan::set_points. Returns this rank's new count: its staying particles first,
  // then the arrivals by source rank (each source's in its order). A staying particle
  // keeps its slot, except that those past the new kept count fill, in their order, the
  // slots that leaving particles left below it: the work beyond one pass over the
  // positions is in the number that move, and where no rank has a particle to send the
  // call is that pass, its one wait and one small all-reduce (none on one rank), with
  // the periodic wraps written in place. A particle may cross any number of blocks. If a
  // rank's arrivals would exceed its capacity, or a position is not finite, lies outside a
  // bounded dimension or is too far to wrap, every rank throws and no array is changed (on
  // one CUDA rank, a later call throws: "One CUDA rank" above).
  std::size_t migrate(const MutablePositions& positions, Span<View<T>> props, std::size_t count);

  // This rank's particles (any count, 0 included); each must lie in this rank's block,
  // on a periodic dimension inside [origin, origin + L) (migrate puts it there), or the
  // call fails naming the particle and its owner.
  void set_points(const Positions& positions);
  // The step of a simulation: this rank's particles of the last set_points or
  // update_points (same count, same order), moved, each still in this rank's block; or,
  // after a migrate that moved particles to or from this rank, the particles it returned.
  // The local plan keeps its binning (Plan::update_points: on CUDA ranks re-binned in
  // full only once many particles left their tiles) where no migrate changed the rank's
  // particles, and bins them in full where one did; spread and interp then give what
  // they give after set_points(positions). A particle outside the block fails as in
  // set_points ("call migrate first"); another count with no migrate in between,
  // SizeMismatch; before any set_points, NotReady.
  void update_points(const Positions& positions);
  // This rank's particle arrays put in the local plan's binned order, out of place, as
  // Plan::permute_to_binned(from, to): to[i][k] = from[i][order[k]] for the num_points()
  // particles of the last set_points or update_points. Binned particles make the spread,
  // the interp and the next binning faster; set_points on the permuted positions follows
  // (the plan's binning refers to the old order: until then, NotReady). Not collective. Before any set_points,
  // or after a migrate that changed this rank's particles (their binning is gone), NotReady.
  void permute_to_binned(Span<View<const T>> from, Span<View<T>> to);
  // P2M: meshes[i] is this rank's block (block_size() values) of property i's spread.
  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode = Accumulate::Overwrite);
  // The adjoint of interp_gradient, as Plan::spread_gradient: vectors[D*i + d] onto the
  // blocks meshes[i] (not in deterministic mode).
  void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode = Accumulate::Overwrite);
  // M2P: values[i][p] for this rank's particles from the blocks meshes[i] of all ranks.
  void interp(Span<View<const T>> meshes, Span<View<T>> values);
  // M2P of the gradient, as Plan::interp_gradient: gradients[D*i + d] for meshes[i].
  void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients);

  const Grid<D>& grid() const;
  const Kernel& kernel() const;
  const Options& options() const;
  const Block<D>& block() const;
  std::array<std::int64_t, D> block_shape() const { return block().shape; }
  std::int64_t block_size() const;
  std::size_t num_points() const;
  int rank() const;
  int size() const;
  // The owner of a position rounded to T: the rank migrate sends a particle there to
  // (wrapped as migrate wraps it) and whose block set_points takes it in once wrapped;
  // -1 for one that is not finite, lies outside a bounded dimension or is too far to wrap.
  int owner(const std::array<double, D>& position) const;
  DistributedTimings last_timings() const;
  // The overlap of the exchanges with the interior work (Overlap; Auto by default) for
  // later calls. Not collective: a rank's choice changes its own order of work, not the
  // messages.
  void set_overlap(Overlap overlap);
  Overlap overlap() const;
  // Waits for this rank's work (on CUDA ranks, options.stream) and throws, on every rank,
  // an error the device found in an earlier call (a position the local plan rejected).
  // Collective.
  void synchronize();
  // The transport a CUDA rank's messages take (Auto resolved: HostMpi where ranks share a
  // GPU); HostMpi on CPU ranks.
  Transport transport() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pmkit
