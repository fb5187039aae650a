#pragma once
// The backend of PmePlan (src/pme.cpp): its mesh and particle scratch in the backend's
// memory, the convolution with the influence function, and the last step that turns the
// parts into forces, potentials and the energy. The spread, the FFTs, the gradient and the
// real-space pairs run on the library's plans; only these two steps are the backend's.
#include <array>
#include <complex>
#include <cstddef>
#include <memory>
#include <vector>

#include "pmkit/config.hpp"
#include "pmkit/pair_kernels.hpp"
#include "pmkit/pairs.hpp"
#include "pmkit/plan.hpp"
#include "pmkit/pme.hpp"

namespace pmkit::detail {

// Sums over the ranks of a distributed PME plan: the last step adds each of the `count`
// sums (PmeSum) of every rank, in place, once this rank's are complete and before the
// potentials (which need the net charge) and the totals.
class PmeSumReduction {
 public:
  virtual void operator()(double* sums, int count) const = 0;

 protected:
  ~PmeSumReduction() = default;
};

// The parts of a compute, and where its results go. Every particle array is in the
// caller's order.
template <class T>
struct PmeParts {
  std::size_t n = 0;
  View<const T> charges;
  // Real space: forces x, y, z, then potentials, real_stride values each (the first n
  // this plan's particles); null: none.
  const T* real = nullptr;
  std::size_t real_stride = 0;
  const T* gradient = nullptr;       // the reciprocal potential's gradient: n values x, y, z
  const T* rec_potential = nullptr;  // the reciprocal potential at the particles; null unless asked
  // Real space with the virial asked: each particle's half of its pairs' virial, for each
  // Voigt component (kVirialAxes) real_stride values; null: none.
  const T* real_virial = nullptr;
  std::array<View<T>, 3> forces;
  View<double> energy;   // empty: not asked
  View<T> potential;     // empty: not asked
  View<double> virial;   // six values (Voigt order); empty: not asked
  double coulomb = 1;
  // The self term's and the background's coefficients, zero for the reciprocal part alone:
  // E_self = -self sum q^2, E_background = -background Q^2 / 2 (self = alpha / sqrt(pi),
  // background = pi / (V alpha^2)).
  double self = 0;
  double background = 0;
  const PmeSumReduction* reduce = nullptr;  // null: one rank's sums are the totals
};

// The parts of PmePlan::charge_gradient_of_forces: out_i = coulomb (w_i . E_i - psi_i),
// with the field E_i = -gradient_i (+ real_field_i) and the dipoles' potential psi_i =
// rec_dipole_i (+ real_dipole_i). Arrays of n values a component, in the caller's order.
template <class T>
struct ChargeGradientParts {
  std::size_t n = 0;
  std::array<View<const T>, 3> weights;
  const T* gradient = nullptr;     // the reciprocal potential's gradient, x, y, z
  const T* rec_dipole = nullptr;   // the reciprocal potential of the dipoles
  const T* real = nullptr;         // real space: the field x, y, z, then the dipoles' potential; null: none
  View<T> out;
  double coulomb = 1;
};

// out_i of ChargeGradientParts.
template <class T>
PMKIT_HD inline T charge_gradient(const ChargeGradientParts<T>& p, std::size_t i) {
  double g = -double(p.rec_dipole[i]);
  for (int d = 0; d < 3; ++d) g -= double(p.weights[d][i]) * p.gradient[d * p.n + i];
  if (p.real) {
    g -= p.real[3 * p.n + i];
    for (int d = 0; d < 3; ++d) g += double(p.weights[d][i]) * p.real[d * p.n + i];
  }
  return T(p.coulomb * g);
}

// The real-space pair's field and dipole potential, for the charges' gradient of a
// weighted sum of forces. With A = erfc(alpha r) / r, r = x_i - x_j and g = -(dA/dr) / r
// (EwaldRealSpace::pair): the field at i of charge j is q_j g r, and the potential at i of
// dipole mu_j is mu_j . grad_{x_j} A = g mu_j . r. Inputs: the charge and the dipole (3).
// Outputs: the field (3), then the dipoles' potential.
struct EwaldFieldDipole {
  static constexpr int inputs = 4;
  static constexpr int outputs = 4;
  pair_kernels::EwaldRealSpace<3> ewald;

  template <class T>
  PMKIT_HD void operator()(const T* r, T r2, const T* in_i, const T* in_j, T* out_i, T* out_j) const {
    T phi, g;
    ewald.pair(r2, phi, g);
    T mu_i_r = 0, mu_j_r = 0;
    for (int d = 0; d < 3; ++d) {
      out_i[d] += in_j[0] * g * r[d];
      out_j[d] -= in_i[0] * g * r[d];
      mu_i_r += in_i[1 + d] * r[d];
      mu_j_r += in_j[1 + d] * r[d];
    }
    out_i[3] += g * mu_j_r;
    out_j[3] -= g * mu_i_r;
  }
};

template <class T>
class PmeBackend {
 public:
  virtual ~PmeBackend() = default;
  // The real mesh (mesh_size values) and its spectrum (spectrum_size values).
  virtual T* mesh() = 0;
  virtual std::complex<T>* spectrum() = 0;
  // Scratch of `values` values a particle (kPmeScratch or kPmeVirialScratch), kept
  // between calls.
  virtual T* particle_scratch(std::size_t n, int values) = 0;
  // Clears the energy's sums, then multiplies the spectrum by the influence function and
  // adds the reciprocal energy 1/2 sum over the full spectrum of C(m) |Q(m)|^2, and with
  // `virial` the reciprocal virial (reciprocal_virial).
  virtual void convolve(bool virial) = 0;
  // The real-space pairs with their virial (EwaldRealSpaceVirial) on the backend's
  // traversal: inputs the charges, outputs kEwaldVirialOutputs views.
  virtual void real_space_virial(PairPlan<T, 3>& pairs, double alpha, View<const T> charges,
                                 Span<View<T>> outputs) = 0;
  // The real-space pairs' fields and dipole potentials (EwaldFieldDipole): inputs the
  // charges and the dipoles' three components, outputs four views.
  virtual void real_space_field(PairPlan<T, 3>& pairs, double alpha, Span<View<const T>> inputs,
                                Span<View<T>> outputs) = 0;
  // PmePlan::charge_gradient_of_forces' first step, dipoles[d * n + i] = q_i w_d[i], and
  // its last (ChargeGradientParts).
  virtual void dipoles(View<const T> charges, const std::array<View<const T>, 3>& weights, T* dipoles) = 0;
  virtual void finish_charge_gradient(const ChargeGradientParts<T>& parts) = 0;
  virtual void finish(const PmeParts<T>& parts) = 0;
  // The stream of later calls (PmePlan::set_stream; the plans that share the work order
  // the handover). The CPU backend has none.
  virtual void set_stream(StreamHandle) {}
};

// A particle's scratch: the reciprocal gradient 3 and potential 1 after 4 values of real
// space (forces, potential; PmePlan::charge_gradient_of_forces' field); with the virial, 6
// more (the real-space virial where PmePlan computes its real space in the scratch).
constexpr int kPmeScratch = 8;
constexpr int kPmeVirialScratch = kPmeScratch + 6;

// The axes (a, b) of Voigt component v of a symmetric 3 x 3 tensor: xx, yy, zz, yz, xz, xy.
PMKIT_HD inline void virial_axes(int v, int& a, int& b) {
  a = v < 3 ? v : (v == 3 ? 1 : 0);
  b = v < 3 ? v : (v == 5 ? 1 : 2);
}

// The real-space pair of EwaldRealSpace with each pair's virial f r_a r_b (the force on i
// is f r, r = x_i - x_j) shared half and half between its particles. Outputs: forces (3),
// the potential, then the six Voigt components.
struct EwaldRealSpaceVirial {
  static constexpr int inputs = 1;
  static constexpr int outputs = 10;
  pair_kernels::EwaldRealSpace<3> ewald;

  template <class T>
  PMKIT_HD void operator()(const T* r, T r2, const T* q_i, const T* q_j, T* out_i, T* out_j) const {
    T phi, g;
    ewald.pair(r2, phi, g);
    const T f = q_i[0] * q_j[0] * g;
    for (int d = 0; d < 3; ++d) {
      out_i[d] += f * r[d];
      out_j[d] -= f * r[d];
    }
    out_i[3] += q_j[0] * phi;
    out_j[3] += q_i[0] * phi;
    for (int v = 0; v < 6; ++v) {
      int a, b;
      virial_axes(v, a, b);
      const T w = T(0.5) * f * r[a] * r[b];
      out_i[4 + v] += w;
      out_j[4 + v] += w;
    }
  }
};

// The spectrum's geometry: the wave vector of half-spectrum index k (k0 in [0, mesh[0] / 2],
// the others whole) is m_d = k_d / L_d, with k_d signed (above half the mesh: k_d - mesh[d]).
// The backend holds the indices first[a] to first[a] + shape[a] - 1 of each axis a, stored
// with axis order[0] fastest, then order[1], then order[2]: the whole half spectrum x
// fastest on one rank (whole()), a DistributedRealFft's spectrum slab across ranks.
struct PmeSpectrum {
  std::int64_t mesh[3] = {};
  double box[3] = {};
  double pi2_over_alpha2 = 0;  // pi^2 / alpha^2
  std::int64_t first[3] = {};
  std::int64_t shape[3] = {};
  int order[3] = {0, 1, 2};

  // The whole half spectrum of a mesh, x fastest.
  static PmeSpectrum whole(const std::array<double, 3>& box, const std::array<std::int64_t, 3>& mesh, double alpha);
  std::int64_t size() const { return shape[0] * shape[1] * shape[2]; }
};

// The half-spectrum index (k0, k1, k2) of the backend's spectrum point k.
PMKIT_HD inline void spectrum_index(const PmeSpectrum& s, std::int64_t k, std::int64_t index[3]) {
  for (int j = 0; j < 3; ++j) {
    const int a = s.order[j];
    index[a] = s.first[a] + k % s.shape[a];
    k /= s.shape[a];
  }
}

// Adds the share of half-spectrum index `index` in the reciprocal virial to w (six
// values): with its energy e_k (its weight in the full spectrum included), under a strain
// e the wave vector becomes (1 - e) m and the volume (1 + tr e) V, so W_ab = -dE/de_ab =
// e_k (delta_ab - 2 (1 + pi^2 m^2 / alpha^2) m_a m_b / m^2).
PMKIT_HD inline void reciprocal_virial(const PmeSpectrum& s, const std::int64_t index[3], double e_k, double* w) {
  double m[3], m2 = 0;
  for (int d = 0; d < 3; ++d) {
    const std::int64_t signed_k = 2 * index[d] > s.mesh[d] ? index[d] - s.mesh[d] : index[d];
    m[d] = double(signed_k) / s.box[d];
    m2 += m[d] * m[d];
  }
  if (m2 == 0) return;
  const double factor = 2 * (1 + s.pi2_over_alpha2 * m2) / m2;
  for (int v = 0; v < 6; ++v) {
    int a, b;
    virial_axes(v, a, b);
    w[v] += e_k * ((a == b ? 1.0 : 0.0) - factor * m[a] * m[b]);
  }
}

// The influence function C(m) (src/pme.cpp) at the points of `spectrum`, in its order.
template <class T>
std::vector<T> influence_function(const std::array<double, 3>& box, const PmeParameters& p, const PmeSpectrum& spectrum);

// PmePlan's checks of its parameters and options (src/pme.cpp), shared with the
// distributed plan.
void check_pme_parameters(const std::array<double, 3>& box, const PmeParameters& p);
void check_pme_options(const PmeOptions& options);
// The periodic mesh of the box, and the mesh plan's options: the PME plan's execution
// options and its spread settings.
Grid<3> pme_grid(const std::array<double, 3>& box, const PmeParameters& p);
Options pme_mesh_options(const PmeOptions& options);

// A PmePlan backend for `spectrum` (its influence function computed here) and a real
// mesh of mesh_size values, on options.backend.
template <class T>
std::unique_ptr<PmeBackend<T>> make_pme_backend(const std::array<double, 3>& box, const PmeParameters& p,
                                                const PmeSpectrum& spectrum, std::size_t mesh_size,
                                                const PmeOptions& options);

// influence: C(m) at the spectrum's points, in its order.
template <class T>
std::unique_ptr<PmeBackend<T>> make_cpu_pme_backend(const std::vector<T>& influence, std::size_t mesh_size,
                                                    const PmeSpectrum& spectrum, const ExecutionOptions& options);
template <class T>
std::unique_ptr<PmeBackend<T>> make_cuda_pme_backend(const std::vector<T>& influence, std::size_t mesh_size,
                                                     const PmeSpectrum& spectrum, const ExecutionOptions& options);

// The energy share of the backend's spectrum point k with value |Q|^2 = norm: 1/2 C
// |Q|^2 times its weight in the full spectrum; with `virial`, its virial added to w.
PMKIT_HD inline double spectrum_energy(const PmeSpectrum& s, std::int64_t k, double c, double norm, bool virial,
                                       double* w);

// The weight of spectrum point k0 (along x) in a sum over the full spectrum: 1 where it is
// its own conjugate (k0 = 0, and k0 = mesh_x / 2 for an even mesh), 2 elsewhere.
PMKIT_HD inline double hermitian_weight(std::int64_t k0, std::int64_t mesh_x) {
  return (k0 == 0 || 2 * k0 == mesh_x) ? 1.0 : 2.0;
}

PMKIT_HD inline double spectrum_energy(const PmeSpectrum& s, std::int64_t k, double c, double norm, bool virial,
                                       double* w) {
  std::int64_t index[3];
  spectrum_index(s, k, index);
  const double e_k = 0.5 * hermitian_weight(index[0], s.mesh[0]) * c * norm;
  if (virial) reciprocal_virial(s, index, e_k, w);
  return e_k;
}

// The sums a compute's energy and virial need, accumulated in double: the reciprocal
// energy (the convolution's), then over the particles sum q, sum q^2 and sum q phi_real,
// then the reciprocal virial's six components (the convolution's) and the real space's.
enum PmeSum {
  kReciprocalEnergy,
  kChargeSum,
  kChargeSquares,
  kRealSpaceWork,
  kReciprocalVirial,
  kRealVirial = kReciprocalVirial + 6,
  kPmeSums = kRealVirial + 6
};

// Component d of the force on particle i.
template <class T>
PMKIT_HD inline T pme_force(const PmeParts<T>& p, int d, std::size_t i) {
  T f = -p.charges[i] * p.gradient[d * p.n + i];
  if (p.real) f += p.real[d * p.real_stride + i];
  return T(p.coulomb) * f;
}

// The potential at particle i (dE/dq_i), given the net charge.
template <class T>
PMKIT_HD inline T pme_potential(const PmeParts<T>& p, std::size_t i, double net_charge) {
  double phi = double(p.rec_potential[i]) - 2 * p.self * double(p.charges[i]) - p.background * net_charge;
  if (p.real) phi += double(p.real[3 * p.real_stride + i]);
  return T(p.coulomb * phi);
}

// The total energy from the sums.
template <class T>
PMKIT_HD inline double pme_energy(const PmeParts<T>& p, const double* sums) {
  const double q = sums[kChargeSum];
  return p.coulomb * (sums[kReciprocalEnergy] + 0.5 * sums[kRealSpaceWork] - p.self * sums[kChargeSquares] -
                      0.5 * p.background * q * q);
}

// The virial from the sums into p.virial: reciprocal, real space, and the background's
// energy, which is proportional to 1 / V (W_aa = E_background).
template <class T>
PMKIT_HD inline void pme_virial(const PmeParts<T>& p, const double* sums) {
  const double q = sums[kChargeSum];
  for (int v = 0; v < 6; ++v)
    p.virial[v] = p.coulomb * (sums[kReciprocalVirial + v] + sums[kRealVirial + v] -
                               (v < 3 ? 0.5 * p.background * q * q : 0.0));
}

// Both from the sums, where asked.
template <class T>
PMKIT_HD inline void pme_totals(const PmeParts<T>& p, const double* sums) {
  if (p.energy.data) p.energy[0] = pme_energy(p, sums);
  if (p.virial.data) pme_virial(p, sums);
}

}  // namespace pmkit::detail
