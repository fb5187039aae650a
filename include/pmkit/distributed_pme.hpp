#pragma once
// DistributedPmePlan<T>: PmePlan's smooth particle-mesh Ewald over the ranks of an MPI
// communicator, each rank owning the charges inside its block of the box. Library
// pmkit_mpi (CMake pmkit::distributed).
//
//   pmkit::DistributedPmePlan<double> pme(MPI_COMM_WORLD, box, params, options);
//   n = pme.migrate({x, y, z}, {q, vx, vy, vz}, n);  // charges to the ranks that own them
//   pme.set_points({x, y, z});                        // this rank's n charges
//   pme.compute(q, {fx, fy, fz}, energy);             // energy: the global total, every rank
//   ... move the charges a little ...
//   n = pme.migrate(...); pme.update_points({x, y, z});
//
// Decomposition. The mesh's z planes are split into slabs as DistributedRealFft splits
// them (ceil(mesh z / P) planes a rank, the last the rest; every rank needs a plane): a
// rank owns the charges whose z lies in its slab of the box, block() says which. The
// reciprocal part runs on a DistributedPlan of the FFT's rank_grid(): the B-spline spread
// of each rank's charges into its slab (ghost layers summed across ranks), the distributed
// forward FFT, the influence function on the rank's spectrum slab (PmePlan's function and
// convolution, with their energy and virial sums), the inverse FFT and the potential's
// gradient at the charges. The real space runs each rank's PairPlan on its charges and
// ghosts: the charges of other ranks within the cutoff of its slab (periodic images
// included), exchanged at every compute with their positions and charges. A pair's force
// is applied to the rank's own charges only, so each pair counts once on each side. The
// energy's and the virial's sums (reciprocal, real space, self and background) are added
// over the ranks, so every rank receives the totals.
//
// Results. The energy, the virial and this rank's forces and potentials equal the
// single-rank PmePlan's on the same charges to rounding (sums in another order); with
// options.deterministic the spread is the same bit for bit at any rank count.
//
// Collective calls. Every call but the accessors is collective: every rank makes it, in
// the same order; each rank chooses its outputs (energy, potential, virial) for itself.
// The constructor agrees the box, the parameters and the options over the ranks
// before any work; a call whose arguments fail on any rank throws pmkit::Error on every
// rank (the failing rank's own error, on the others one that names it) before any message
// of the work, and writes nothing. On CUDA ranks every array is device memory on
// options.device and the work runs on options.stream. On more than one rank a compute
// waits for the stream for the sums it adds over the ranks and for the charges near the
// slab's faces (found on the device; only they cross to the host for the ghosts'
// messages), and set_points and update_points wait as DistributedPlan's do, so a step is
// not captured into a CUDA graph; on one rank a compute waits for nothing.
#include <array>
#include <cstddef>
#include <memory>

#include <mpi.h>

#include "pmkit/distributed.hpp"
#include "pmkit/pme.hpp"

namespace pmkit {

// Seconds of each rank's phases of the last compute (and of the last migrate), measured
// where profiling is on (DistributedPmePlan::set_profiling: CUDA ranks then wait for their
// stream after each phase); zero elsewhere, but migrate's.
struct DistributedPmeTimings {
  double migrate_s = 0;       // migrate: owners, counts, messages, compaction
  double spread_s = 0;        // the charges' spread, its ghost layers summed across ranks
  double fft_s = 0;           // the forward and inverse transforms, their exchanges included
  double fft_exchange_s = 0;  // the transforms' slab exchanges (CUDA ranks; 0 on CPU ranks)
  double convolve_s = 0;      // the influence function on the spectrum slab, its sums
  double gather_s = 0;        // the potential's gradient (and value) at the charges
  double ghosts_s = 0;        // the ghost charges' choice and exchange
  double real_space_s = 0;    // the pair plan: binning and pairs
  double finish_s = 0;        // forces, potentials, the sums added over the ranks
};

namespace detail {
template <class T>
class DistributedPmeState;
}

template <class T>
class DistributedPmePlan {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "pmkit PME plans are float or double");

 public:
  using Positions = std::array<View<const T>, 3>;
  using MutablePositions = std::array<View<T>, 3>;
  using Forces = std::array<View<T>, 3>;

  // comm: the ranks that share the box (the plan keeps its own communicators). box, params
  // and options: as PmePlan's, the same on every rank. transport: how CUDA ranks exchange
  // ghost layers and slabs (DistributedPlan's). Throws on every rank for bad or differing
  // parameters or options, or a rank count that leaves a rank without a z plane.
  DistributedPmePlan(MPI_Comm comm, const std::array<double, 3>& box, const PmeParameters& params,
                     PmeOptions options = {}, Transport transport = Transport::Auto);
  ~DistributedPmePlan();
  DistributedPmePlan(DistributedPmePlan&&) noexcept;
  DistributedPmePlan& operator=(DistributedPmePlan&&) noexcept;
  DistributedPmePlan(const DistributedPmePlan&) = delete;
  DistributedPmePlan& operator=(const DistributedPmePlan&) = delete;

  // Moves every charge to the rank that owns its position, with its properties (its
  // charge, velocities, ids...): DistributedPlan::migrate, whose rules it keeps (each array
  // `capacity` slots, the first `count` in use; positions wrapped into [0, L)). Returns
  // this rank's new count.
  std::size_t migrate(const MutablePositions& positions, Span<View<T>> props, std::size_t count);

  // This rank's charges (any count, 0 included), each in its block (migrate puts it there).
  void set_points(const Positions& positions);
  // The same charges after a small move (DistributedPlan::update_points: the count and
  // order of the last set_points or update_points, or those a migrate returned).
  void update_points(const Positions& positions);

  // PmePlan::compute for this rank's charges: forces[d][i] of its charge i, potential[i]
  // (if given) dE/dq_i, energy (one value, if given) the total energy of all ranks'
  // charges, virial (six values, if given) the total virial. A rank without charges may
  // pass empty views for its forces and potential.
  void compute(View<const T> charges, const Forces& forces, View<double> energy = {}, View<T> potential = {},
               View<double> virial = {});
  // The reciprocal part alone (PmePlan::compute_reciprocal), with no ghost exchange.
  void compute_reciprocal(View<const T> charges, const Forces& forces, View<double> energy = {},
                          View<T> potential = {}, View<double> virial = {});

  // Waits for this rank's work and throws, on every rank, an error the device found in
  // an earlier call. Collective.
  void synchronize();

  // Whether computes time their phases (last_timings), off at first: on CUDA ranks each
  // phase then ends with a wait for the stream, which a step otherwise avoids.
  void set_profiling(bool on);
  DistributedPmeTimings last_timings() const;

  const PmeParameters& parameters() const { return params_; }
  const std::array<double, 3>& box() const { return box_; }
  const PmeOptions& options() const { return options_; }
  // This rank's block of the mesh (its z slab) and the charges it owns: those with
  // z in [first_cell[2] h, (first_cell[2] + cells[2]) h), h = box[2] / mesh[2].
  const Block<3>& block() const;
  // The rank migrate sends a charge at `position` to (DistributedPlan::owner).
  int owner(const std::array<double, 3>& position) const;
  std::size_t num_points() const;
  bool has_points() const;
  int rank() const;
  int size() const;
  // The transport of CUDA ranks (Auto resolved); HostMpi on CPU ranks.
  Transport transport() const;
  // The number of ghost charges of the last compute (other ranks' charges within the
  // cutoff of this rank's slab).
  std::size_t num_ghosts() const;

 private:
  void run(bool real_space, View<const T> charges, const Forces& forces, View<double> energy, View<T> potential,
           View<double> virial);

  std::array<double, 3> box_;
  PmeParameters params_;
  PmeOptions options_;
  std::unique_ptr<detail::DistributedPmeState<T>> state_;
};

}  // namespace pmkit
