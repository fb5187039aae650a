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
#include "pmkit/pme.hpp"

namespace pmkit::detail {

// The parts of a compute, and where its results go. Every particle array is in the
// caller's order.
template <class T>
struct PmeParts {
  std::size_t n = 0;
  View<const T> charges;
  const T* real = nullptr;           // real space: n forces x, y, z, then n potentials; null: none
  const T* gradient = nullptr;       // the reciprocal potential's gradient: n values x, y, z
  const T* rec_potential = nullptr;  // the reciprocal potential at the particles; null unless asked
  std::array<View<T>, 3> forces;
  View<double> energy;  // empty: not asked
  View<T> potential;    // empty: not asked
  double coulomb = 1;
  // The self term's and the background's coefficients, zero for the reciprocal part alone:
  // E_self = -self sum q^2, E_background = -background Q^2 / 2 (self = alpha / sqrt(pi),
  // background = pi / (V alpha^2)).
  double self = 0;
  double background = 0;
};

template <class T>
class PmeBackend {
 public:
  virtual ~PmeBackend() = default;
  // The real mesh (mesh_size values) and its spectrum (spectrum_size values).
  virtual T* mesh() = 0;
  virtual std::complex<T>* spectrum() = 0;
  // Scratch of 8 values a particle (real space 4, gradient 3, potential 1), kept between calls.
  virtual T* particle_scratch(std::size_t n) = 0;
  // Clears the energy's sums, then multiplies the spectrum by the influence function and
  // adds the reciprocal energy 1/2 sum over the full spectrum of C(m) |Q(m)|^2.
  virtual void convolve() = 0;
  virtual void finish(const PmeParts<T>& parts) = 0;
};

// influence: C(m) over the Hermitian half spectrum (spectrum_size values, x fastest);
// half_x: the spectrum's points along x (mesh x / 2 + 1), for the Hermitian weights.
template <class T>
std::unique_ptr<PmeBackend<T>> make_cpu_pme_backend(const std::vector<T>& influence, std::size_t mesh_size,
                                                    std::int64_t half_x, std::int64_t mesh_x,
                                                    const ExecutionOptions& options);
template <class T>
std::unique_ptr<PmeBackend<T>> make_cuda_pme_backend(const std::vector<T>& influence, std::size_t mesh_size,
                                                     std::int64_t half_x, std::int64_t mesh_x,
                                                     const ExecutionOptions& options);

// The weight of spectrum point k0 (along x) in a sum over the full spectrum: 1 where it is
// its own conjugate (k0 = 0, and k0 = mesh_x / 2 for an even mesh), 2 elsewhere.
PMKIT_HD inline double hermitian_weight(std::int64_t k0, std::int64_t mesh_x) {
  return (k0 == 0 || 2 * k0 == mesh_x) ? 1.0 : 2.0;
}

// The sums a compute's energy needs, accumulated in double: the reciprocal energy (the
// convolution's), then over the particles sum q, sum q^2 and sum q phi_real.
enum PmeSum { kReciprocalEnergy, kChargeSum, kChargeSquares, kRealSpaceWork, kPmeSums };

// Component d of the force on particle i.
template <class T>
PMKIT_HD inline T pme_force(const PmeParts<T>& p, int d, std::size_t i) {
  T f = -p.charges[i] * p.gradient[d * p.n + i];
  if (p.real) f += p.real[d * p.n + i];
  return T(p.coulomb) * f;
}

// The potential at particle i (dE/dq_i), given the net charge.
template <class T>
PMKIT_HD inline T pme_potential(const PmeParts<T>& p, std::size_t i, double net_charge) {
  double phi = double(p.rec_potential[i]) - 2 * p.self * double(p.charges[i]) - p.background * net_charge;
  if (p.real) phi += double(p.real[3 * p.n + i]);
  return T(p.coulomb * phi);
}

// The total energy from the sums.
template <class T>
PMKIT_HD inline double pme_energy(const PmeParts<T>& p, const double* sums) {
  const double q = sums[kChargeSum];
  return p.coulomb * (sums[kReciprocalEnergy] + 0.5 * sums[kRealSpaceWork] - p.self * sums[kChargeSquares] -
                      0.5 * p.background * q * q);
}

}  // namespace pmkit::detail
