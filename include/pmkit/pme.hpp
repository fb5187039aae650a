#pragma once
// PmePlan<T>: the Coulomb energy, forces and potentials of point charges in a periodic
// orthorhombic box by smooth particle-mesh Ewald (Essmann et al., J. Chem. Phys. 103,
// 8577, 1995), on the CPU (OpenMP, FFTW) or a CUDA device (cuFFT).
//
//   const auto params = pmkit::PmeParameters::choose(box, 1.0, 5e-4);  // as OpenMM does
//   pmkit::PmePlan<float> pme(box, params, options);
//   pme.set_points({x, y, z});                       // bins the charges' positions
//   pme.update_points({x, y, z});                    // or, after a step's small move, keeps the binning
//   pme.compute(q, {fx, fy, fz}, energy);            // energy: one double
//
// The energy is split as Ewald's: E = E_real + E_rec + E_self + E_background with
//   E_real = 1/2 sum_{i != j} q_i q_j erfc(alpha r_ij) / r_ij   (pairs closer than the cutoff,
//            minimum image; pair_kernels::EwaldRealSpace on a PairPlan),
//   E_rec  = 1/(2 pi V) sum_{m != 0} exp(-pi^2 m^2 / alpha^2) / m^2 |S(m)|^2, S approximated
//            on the mesh: B-spline spread (Plan), real-to-complex FFT, the influence
//            function with the B-spline factors |b(m)|^2, the inverse FFT, the forces by
//            the B-splines' analytic gradient (Plan::interp_gradient),
//   E_self = -alpha / sqrt(pi) sum_i q_i^2,
//   E_background = -pi Q^2 / (2 V alpha^2) for a net charge Q = sum_i q_i: the energy of
//            the charges in a uniform background that neutralises them (the usual
//            correction; its forces are zero). A neutral system gets zero.
// Units: Gaussian (E = q_i q_j / r) times PmeOptions::coulomb_constant (138.935458
// kJ mol^-1 nm e^-2 in the units of OpenMM and GROMACS). Pairs that a force field excludes
// or scales (bonded neighbours) are the caller's: subtract q_i q_j erf(alpha r) / r for each.
// docs/pme.md derives the B-spline factors and gives the accuracy measured.
//
// Memory: CPU, host arrays; CUDA, device arrays (positions, charges, forces, potential,
// and the energy's one double), every kernel, FFT and copy on PmeOptions::stream.
//
// Waits and graphs (CUDA): set_points, update_points, compute and compute_reciprocal
// queue their work on PmeOptions::stream and return without waiting for the device, as
// the Plan's and the PairPlan's calls do; a rejected position is thrown by a later call or
// by synchronize(). After one eager step of the same sizes, a step (update_points and
// compute_reciprocal, or update_points and compute) captures into a CUDA graph
// (cudaStreamBeginCapture on PmeOptions::stream) that replays it on the positions, charges
// and outputs it was captured with, read and written in place: docs/pme.md shows how.
#include <array>
#include <cstdint>
#include <memory>

#include "pmkit/backend.hpp"
#include "pmkit/error.hpp"
#include "pmkit/view.hpp"

namespace pmkit {

// The method's parameters: the Ewald splitting, the mesh, the B-spline order and the
// real-space cutoff.
struct PmeParameters {
  double alpha = 0;                    // splitting parameter, 1 / length (> 0)
  std::array<std::int64_t, 3> mesh{};  // mesh nodes per axis (each at least the order)
  int order = 5;                       // B-spline order, 4 to 8
  double cutoff = 0;                   // real-space cutoff (> 0, at most half of each box length)

  // As OpenMM's ewaldErrorTolerance: alpha = sqrt(-ln(2 tolerance)) / cutoff, so that
  // erfc(alpha cutoff) ~ 2 tolerance; the mesh nodes along an axis of length L at least
  // 2 alpha L / (3 tolerance^(1/5)), rounded up to a size with no prime factor above 7
  // (fast for FFTW and cuFFT). The estimate is empirical: relative RMS force errors near
  // the tolerance for order 5 (docs/pme.md measures it).
  static PmeParameters choose(const std::array<double, 3>& box, double cutoff, double tolerance, int order = 5);
};

struct PmeOptions : ExecutionOptions {
  double coulomb_constant = 1.0;  // energies q_i q_j / r times this
  bool deterministic = false;     // CUDA: bit-for-bit repeatable spread (Options::deterministic)
  // CUDA update_points: re-bin in full once more than this fraction of the charges has left
  // its tile (Options::max_away_fraction). A PME step spreads and gathers once a binning,
  // and a full binning costs far more than a few percent of away charges in both
  // (docs/tuning.md#pme_max_away_fraction).
  double max_away_fraction = 0.02;
};

namespace detail {
template <class T>
class PmeState;
}

template <class T>
class PmePlan {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value, "pmkit PME plans are float or double");

 public:
  using Positions = std::array<View<const T>, 3>;
  using Forces = std::array<View<T>, 3>;

  // box: the periodic box's lengths, origin at 0 (positions are wrapped into it). Throws
  // pmkit::Error for bad parameters (alpha <= 0, an order outside 4..8, a mesh smaller than
  // the order, a cutoff above half a box length) or options.
  PmePlan(const std::array<double, 3>& box, const PmeParameters& params, PmeOptions options = {});
  ~PmePlan();
  PmePlan(PmePlan&&) noexcept;
  PmePlan& operator=(PmePlan&&) noexcept;
  PmePlan(const PmePlan&) = delete;
  PmePlan& operator=(const PmePlan&) = delete;

  // Validates (finite) and bins the positions, for the mesh and the cell list.
  void set_points(const Positions& positions);
  // The same charges (same count and order) after a small move, a step of molecular
  // dynamics: the results are those of set_points, but the CUDA backend keeps the mesh
  // binning while few charges have left their tile (Plan::update_points,
  // PmeOptions::max_away_fraction). The cell list is sorted again at the next compute.
  void update_points(const Positions& positions);

  // The full Coulomb interaction: forces[d][i] (overwritten) is component d of the force
  // on charge i; energy, if given (one value), receives the total energy; potential, if
  // given, receives dE/dq_i (the electrostatic potential at charge i, its own charge's
  // self term and the background included); virial, if given (six values),
  // receives the virial W = -dE/de, the energy's derivative under a homogeneous strain e
  // of the box and the positions with it, in Voigt order xx, yy, zz, yz, xz, xy: for pair
  // forces, W_ab = sum over pairs of r_a F_b (r = x_i - x_j, F the force on i), so that
  // the pressure is (2 K + trace W) / (3 V) and the stress sigma_ab = -W_ab / V; the
  // derivative with respect to box length L_a at fixed positions is
  // dE/dL_a = -(W_aa - sum_i x_ia F_ia) / L_a. Nothing is written if a check fails.
  void compute(View<const T> charges, const Forces& forces, View<double> energy = {}, View<T> potential = {},
               View<double> virial = {});

  // The reciprocal part alone (E_rec, its forces, potentials and virial), for codes that
  // compute the real-space pairs, the self term and the background themselves.
  void compute_reciprocal(View<const T> charges, const Forces& forces, View<double> energy = {},
                          View<T> potential = {}, View<double> virial = {});

  // The gradient in the charges of a weighted sum of the forces, out[i] = d/dq_i sum_j
  // weights[.][j] . F_j, for the forces compute (or compute_reciprocal, with
  // `reciprocal_only`) gives: a loss on forces backpropagated to the charges that a model
  // predicts. F_j = q_j E_j is quadratic in the charges, so out_i = w_i . E_i - psi_i, with
  // E_i the field at charge i and psi_i the potential at i of the dipoles q_j w_j (their
  // reciprocal part by spread_gradient on the mesh), both of the method as compute runs it:
  // the exact derivative of its forces. Costs about two computes.
  void charge_gradient_of_forces(View<const T> charges, const Positions& weights, View<T> out,
                                 bool reciprocal_only = false);

  // CUDA: waits for the work queued on PmeOptions::stream, then throws the error of a
  // position the device rejected (as set_points throws it on the CPU backend). CPU:
  // returns (every call is synchronous).
  void synchronize();

  // CUDA: later calls run on `stream` (options().stream becomes it), in order after the
  // work queued so far on the previous stream, with no host wait (as Plan::set_stream).
  // The CPU backend keeps the handle.
  void set_stream(StreamHandle stream);

  const PmeParameters& parameters() const { return params_; }
  const std::array<double, 3>& box() const { return box_; }
  const PmeOptions& options() const { return options_; }
  std::size_t num_points() const;
  bool has_points() const;

 private:
  void run(bool real_space, View<const T> charges, const Forces& forces, View<double> energy, View<T> potential,
           View<double> virial);

  std::array<double, 3> box_;
  PmeParameters params_;
  PmeOptions options_;
  std::unique_ptr<detail::PmeState<T>> state_;
};

}  // namespace pmkit
