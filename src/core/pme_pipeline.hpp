#pragma once
// The steps of a PME compute that PmePlan and DistributedPmePlan share, on any mesh plan
// and FFT of the same calls (Plan and RealFft on one rank, DistributedPlan and
// DistributedRealFft on a rank's block and slabs): the argument checks, and the reciprocal
// pipeline from the charges to the parts of the backend's last step.
#include <cmath>

#include "core/arguments.hpp"
#include "core/pme_backend.hpp"

namespace pmkit::detail {

// A compute's arrays for n charges: fails naming the argument. Returns whether the virial
// is asked.
template <class T>
bool check_pme_arrays(const char* call, std::size_t n, View<const T> charges, const std::array<View<T>, 3>& forces,
                      View<double> energy, View<T> potential, View<double> virial) {
  check_particle_arrays("charges", Span<View<const T>>({charges}), n);
  check_particle_arrays("forces", Span<View<T>>({forces[0], forces[1], forces[2]}), n);
  if (potential.data || potential.size) check_particle_arrays("potential", Span<View<T>>({potential}), n);
  if ((energy.data || energy.size) && (energy.size != 1 || !energy.data))
    fail(ErrorCode::SizeMismatch, call, ": energy has ", energy.size,
         " values; it takes one (or none, an empty view, when the energy is not wanted)");
  const bool with_virial = virial.data || virial.size;
  if (with_virial && (virial.size != 6 || !virial.data))
    fail(ErrorCode::SizeMismatch, call, ": virial has ", virial.size,
         " values; it takes six, xx yy zz yz xz xy (or none, an empty view, when it is not wanted)");
  return with_virial;
}

// The phases of the reciprocal part, and a caller's marks that time nothing.
enum PmePhase { kPmeSpread, kPmeForward, kPmeConvolve, kPmeInverse, kPmeGather };

struct NoMarks {
  void operator()(PmePhase) const {}
};

// The reciprocal part of a compute on the mesh plan's n points: the mesh potential phi =
// IFFT(C FFT(spread(q))) in the backend's mesh (mesh_size values), its gradient (and, with
// a potential asked, its value) at the charges in the backend's particle scratch. Returns
// the parts of the last step without the real space (PmeParts::real null).
// collective: the mesh plan's interp is collective (DistributedPlan), so every rank makes
// the calls whatever its n; otherwise they are skipped for no charges. with_potential:
// the potential is interpolated too (on every rank of a collective plan where any asks).
// mark(phase) follows each phase (PmePhase), for a caller that times them.
template <class T, class MeshPlan, class Fft, class Mark = NoMarks>
PmeParts<T> pme_reciprocal(PmeBackend<T>& backend, MeshPlan& mesh, Fft& fft, bool collective, std::size_t mesh_size,
                           std::size_t n, View<const T> charges, const std::array<View<T>, 3>& forces,
                           View<double> energy, View<T> potential, View<double> virial, double coulomb,
                           bool with_potential, Mark&& mark = {}) {
  const bool with_virial = virial.data != nullptr;
  mesh.spread({charges}, {View<T>(backend.mesh(), mesh_size)});
  mark(kPmeSpread);
  fft.forward(backend.mesh(), backend.spectrum());
  mark(kPmeForward);
  backend.convolve(with_virial);
  mark(kPmeConvolve);
  fft.inverse(backend.spectrum(), backend.mesh());
  mark(kPmeInverse);

  T* scratch = backend.particle_scratch(n, with_virial ? kPmeVirialScratch : kPmeScratch);
  PmeParts<T> parts;
  parts.n = n;
  parts.charges = charges;
  parts.gradient = scratch + 4 * n;
  parts.forces = forces;
  parts.energy = energy;
  parts.potential = potential;
  parts.virial = virial;
  parts.coulomb = coulomb;
  const View<const T> phi(backend.mesh(), mesh_size);
  if (n > 0 || collective) {
    mesh.interp_gradient({phi}, {View<T>(scratch + 4 * n, n), View<T>(scratch + 5 * n, n), View<T>(scratch + 6 * n, n)});
    if (with_potential) {
      mesh.interp({phi}, {View<T>(scratch + 7 * n, n)});
      parts.rec_potential = scratch + 7 * n;
    }
  }
  mark(kPmeGather);
  return parts;
}

// The real-space pairs of `pairs` on `charges` (the pair plan's points: the first parts.n
// the compute's charges, any after them others whose pairs with those count: a
// distributed plan's ghosts), and the last step's parts pointed at them: forces and
// potential into `real` (4 components), with the virial its six components into
// `real_virial`, `stride` values a component (at least the pair plan's points).
template <class T>
void pme_real_space(PmeBackend<T>& backend, PairPlan<T, 3>& pairs, double alpha, View<const T> charges, T* real,
                    T* real_virial, std::size_t stride, PmeParts<T>& parts) {
  View<T> out[4 + 6];
  for (int k = 0; k < 4; ++k) out[k] = View<T>(real + k * stride, charges.size);
  for (int v = 0; v < 6; ++v) out[4 + v] = View<T>(real_virial + v * stride, charges.size);
  const bool with_virial = parts.virial.data != nullptr;
  if (charges.size > 0 && with_virial)
    backend.real_space_virial(pairs, alpha, charges, Span<View<T>>(out, 10));
  else if (charges.size > 0)
    pairs.compute(pair_kernels::EwaldRealSpace<3>{alpha}, {charges}, Span<View<T>>(out, 4));
  parts.real = real;
  parts.real_stride = stride;
  if (with_virial) parts.real_virial = real_virial;
}

// The self term's and the background's coefficients of a full compute (PmeParts).
template <class T>
void pme_self_terms(const std::array<double, 3>& box, double alpha, PmeParts<T>& parts) {
  constexpr double pi = 3.14159265358979323846;
  parts.self = alpha / std::sqrt(pi);
  parts.background = pi / (box[0] * box[1] * box[2] * alpha * alpha);
}

}  // namespace pmkit::detail
