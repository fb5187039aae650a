// The PmePlan front end: the parameter and argument checks, the influence function, and
// the reciprocal pipeline on the library's plans (spread, FFT, convolution, inverse FFT,
// gradient), the real-space pairs, then the backend's last step.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/arguments.hpp"
#include "core/make_backend.hpp"
#include "core/pme_pipeline.hpp"
#include "pmkit/fft.hpp"
#include "pmkit/pairs.hpp"
#include "pmkit/plan.hpp"
#include "pmkit/reference.hpp"

namespace pmkit {

using detail::fail;

namespace {

constexpr double kPi = 3.14159265358979323846;

// The smallest n' >= n with no prime factor above 7.
std::int64_t smooth_size(std::int64_t n) {
  for (;; ++n) {
    std::int64_t m = n;
    for (std::int64_t p : {2, 3, 5, 7})
      while (m % p == 0) m /= p;
    if (m == 1) return n;
  }
}

// The B-spline factor of one axis, D(k) = sum_j W(j) cos(2 pi k j / K) for k = 0..K-1,
// with W pmkit's centred B-spline at the integers (docs/pme.md: |b(k)|^2 = 1 / D(k)^2).
std::vector<double> bspline_factor(const Kernel& kernel, std::int64_t mesh) {
  std::vector<double> factor(static_cast<std::size_t>(mesh));
  const int reach = kernel.support() / 2;
  for (std::int64_t k = 0; k < mesh; ++k) {
    double sum = 0;
    for (int j = -reach; j <= reach; ++j)
      sum += reference::weight(kernel, j) * std::cos(2 * kPi * double(k) * j / double(mesh));
    factor[static_cast<std::size_t>(k)] = sum;
  }
  return factor;
}

}  // namespace

namespace detail {

void check_pme_parameters(const std::array<double, 3>& box, const PmeParameters& p) {
  for (int d = 0; d < 3; ++d)
    if (!(box[d] > 0) || !std::isfinite(box[d]))
      fail(ErrorCode::InvalidArgument, "PME box[", d, "] = ", box[d], ": box lengths must be positive and finite");
  if (!(p.alpha > 0) || !std::isfinite(p.alpha))
    fail(ErrorCode::InvalidArgument, "PME alpha = ", p.alpha, ": the splitting parameter must be positive and finite");
  if (p.order < 4 || p.order > 8)
    fail(ErrorCode::InvalidArgument, "PME order = ", p.order, ": B-spline orders 4 to 8 are supported");
  for (int d = 0; d < 3; ++d) {
    if (p.mesh[d] < p.order)
      fail(ErrorCode::InvalidArgument, "PME mesh[", d, "] = ", p.mesh[d], ": the mesh needs at least order = ",
           p.order, " nodes per axis");
    if (!(p.cutoff > 0) || !(p.cutoff <= 0.5 * box[d]))
      fail(ErrorCode::InvalidArgument, "PME cutoff = ", p.cutoff, ": it must be positive and at most half the box length ",
           box[d], " of axis ", d, " (one periodic image per pair)");
  }
}

void check_pme_options(const PmeOptions& options) {
  if (!std::isfinite(options.coulomb_constant))
    fail(ErrorCode::InvalidArgument, "options.coulomb_constant = ", options.coulomb_constant, ": it must be finite");
  if (!(options.max_away_fraction >= 0.0 && options.max_away_fraction <= 1.0))
    fail(ErrorCode::InvalidArgument, "options.max_away_fraction = ", options.max_away_fraction,
         ": a fraction of the charges, in [0, 1]");
}

PmeSpectrum PmeSpectrum::whole(const std::array<double, 3>& box, const std::array<std::int64_t, 3>& mesh,
                               double alpha) {
  PmeSpectrum s;
  for (int d = 0; d < 3; ++d) {
    s.mesh[d] = s.shape[d] = mesh[d];
    s.box[d] = box[d];
  }
  s.shape[0] = mesh[0] / 2 + 1;
  s.pi2_over_alpha2 = kPi * kPi / (alpha * alpha);
  return s;
}

// C(m) = exp(-pi^2 m^2 / alpha^2) / (pi V m^2) / (D_x D_y D_z)^2 at the spectrum's points,
// C(0) = 0: the inverse FFT of C times the charges' spectrum, both unnormalised, is the
// reciprocal potential on the mesh.
template <class T>
std::vector<T> influence_function(const std::array<double, 3>& box, const PmeParameters& p, const PmeSpectrum& s) {
  const Kernel kernel = Kernel::bspline(p.order);
  std::array<std::vector<double>, 3> factor;
  for (int d = 0; d < 3; ++d) factor[d] = bspline_factor(kernel, p.mesh[d]);
  const double volume = box[0] * box[1] * box[2];
  std::vector<T> c(static_cast<std::size_t>(s.size()));
  for (std::int64_t i = 0; i < s.size(); ++i) {
    std::int64_t k[3];
    spectrum_index(s, i, k);
    double m2 = 0, b = 1;
    for (int d = 0; d < 3; ++d) {
      const std::int64_t signed_k = 2 * k[d] > p.mesh[d] ? k[d] - p.mesh[d] : k[d];
      const double m = double(signed_k) / box[d];
      m2 += m * m;
      const double f = factor[d][static_cast<std::size_t>(k[d])];
      b *= f * f;
    }
    c[static_cast<std::size_t>(i)] =
        m2 == 0 ? T(0) : static_cast<T>(std::exp(-kPi * kPi * m2 / (p.alpha * p.alpha)) / (kPi * volume * m2 * b));
  }
  return c;
}

Grid<3> pme_grid(const std::array<double, 3>& box, const PmeParameters& p) {
  Grid<3> g = Grid<3>::periodic(p.mesh);
  for (int d = 0; d < 3; ++d) g.spacing[d] = box[d] / double(p.mesh[d]);
  return g;
}

Options pme_mesh_options(const PmeOptions& o) {
  Options m{o};
  m.deterministic = o.deterministic;
  m.max_away_fraction = o.max_away_fraction;
  return m;
}

template <class T>
std::unique_ptr<PmeBackend<T>> make_pme_backend(const std::array<double, 3>& box, const PmeParameters& p,
                                                const PmeSpectrum& spectrum, std::size_t mesh_size,
                                                const PmeOptions& o) {
  auto influence = [&] { return influence_function<T>(box, p, spectrum); };
  return make_backend(
      o, "options", [&] { return make_cpu_pme_backend<T>(influence(), mesh_size, spectrum, o); },
      [&] { return make_cuda_pme_backend<T>(influence(), mesh_size, spectrum, o); });
}

template std::unique_ptr<PmeBackend<float>> make_pme_backend<float>(const std::array<double, 3>&,
                                                                   const PmeParameters&, const PmeSpectrum&,
                                                                   std::size_t, const PmeOptions&);
template std::unique_ptr<PmeBackend<double>> make_pme_backend<double>(const std::array<double, 3>&,
                                                                     const PmeParameters&, const PmeSpectrum&,
                                                                     std::size_t, const PmeOptions&);

}  // namespace detail

PmeParameters PmeParameters::choose(const std::array<double, 3>& box, double cutoff, double tolerance, int order) {
  if (!(tolerance > 0) || !(tolerance < 0.5))
    fail(ErrorCode::InvalidArgument, "PME tolerance = ", tolerance, ": it must lie in (0, 0.5)");
  if (!(cutoff > 0) || !std::isfinite(cutoff))
    fail(ErrorCode::InvalidArgument, "PME cutoff = ", cutoff, ": it must be positive and finite");
  PmeParameters p;
  p.order = order;
  p.cutoff = cutoff;
  p.alpha = std::sqrt(-std::log(2 * tolerance)) / cutoff;
  for (int d = 0; d < 3; ++d) {
    if (!(box[d] > 0) || !std::isfinite(box[d]))
      fail(ErrorCode::InvalidArgument, "PME box[", d, "] = ", box[d], ": box lengths must be positive and finite");
    const double nodes = 2 * p.alpha * box[d] / (3 * std::pow(tolerance, 0.2));
    p.mesh[d] = smooth_size(std::max<std::int64_t>(order, static_cast<std::int64_t>(std::ceil(nodes))));
  }
  detail::check_pme_parameters(box, p);
  return p;
}

namespace detail {

// What a PmePlan owns: the mesh plan, the cell list, the FFT and the backend's scratch.
template <class T>
class PmeState {
 public:
  // The backend first: it checks the execution options before any plan is built.
  PmeState(const std::array<double, 3>& box, const PmeParameters& p, const PmeOptions& o)
      : backend(make_pme_backend<T>(box, p, PmeSpectrum::whole(box, p.mesh, p.alpha),
                                    static_cast<std::size_t>(p.mesh[0] * p.mesh[1] * p.mesh[2]), o)),
        mesh(pme_grid(box, p), Kernel::bspline(p.order), pme_mesh_options(o)),
        pairs(Box<3>::periodic(box), p.cutoff, PairOptions{o}),
        fft(p.mesh, FftOptions{o}) {}

  std::unique_ptr<PmeBackend<T>> backend;
  Plan<T, 3> mesh;
  PairPlan<T, 3> pairs;
  RealFft<T, 3> fft;
  bool pairs_binned = false;  // the cell list holds the mesh plan's current points
};

}  // namespace detail

template <class T>
PmePlan<T>::PmePlan(const std::array<double, 3>& box, const PmeParameters& params, PmeOptions options)
    : box_(box), params_(params), options_(options) {
  detail::check_pme_parameters(box, params);
  detail::check_pme_options(options);
  state_ = std::make_unique<detail::PmeState<T>>(box, params, options);
}

template <class T>
PmePlan<T>::~PmePlan() = default;
template <class T>
PmePlan<T>::PmePlan(PmePlan&&) noexcept = default;
template <class T>
PmePlan<T>& PmePlan<T>::operator=(PmePlan&&) noexcept = default;

template <class T>
std::size_t PmePlan<T>::num_points() const {
  return state_->mesh.num_points();
}
template <class T>
bool PmePlan<T>::has_points() const {
  return state_->mesh.has_points();
}

template <class T>
void PmePlan<T>::set_points(const Positions& positions) {
  state_->mesh.set_points(positions);
  state_->pairs_binned = false;  // the first full compute bins the cell list from the mesh plan
}

template <class T>
void PmePlan<T>::update_points(const Positions& positions) {
  if (!state_->mesh.has_points()) fail(ErrorCode::NotReady, "PmePlan::update_points called before set_points");
  state_->mesh.update_points(positions);
  state_->pairs_binned = false;
}

template <class T>
void PmePlan<T>::synchronize() {
  // Both plans share the stream: the mesh plan waits for it and reports its rejection,
  // then the pair plan reports its own.
  state_->mesh.synchronize();
  state_->pairs.synchronize();
}

template <class T>
void PmePlan<T>::set_stream(StreamHandle stream) {
  // Every part orders its own handover after the work queued on the previous stream.
  state_->mesh.set_stream(stream);
  state_->pairs.set_stream(stream);
  state_->fft.set_stream(stream);
  state_->backend->set_stream(stream);
  options_.stream = stream;
}

template <class T>
void PmePlan<T>::compute(View<const T> charges, const Forces& forces, View<double> energy, View<T> potential,
                         View<double> virial) {
  run(true, charges, forces, energy, potential, virial);
}

template <class T>
void PmePlan<T>::compute_reciprocal(View<const T> charges, const Forces& forces, View<double> energy,
                                    View<T> potential, View<double> virial) {
  run(false, charges, forces, energy, potential, virial);
}

template <class T>
void PmePlan<T>::run(bool real_space, View<const T> charges, const Forces& forces, View<double> energy,
                     View<T> potential, View<double> virial) {
  detail::PmeState<T>& s = *state_;
  if (!s.mesh.has_points()) fail(ErrorCode::NotReady, "PmePlan::compute called before set_points");
  const std::size_t n = s.mesh.num_points();
  detail::check_pme_arrays("PmePlan::compute", n, charges, forces, energy, potential, virial);
  detail::PmeParts<T> parts =
      detail::pme_reciprocal(*s.backend, s.mesh, s.fft, false, static_cast<std::size_t>(s.mesh.mesh_size()), n,
                             charges, forces, energy, potential, virial, options_.coulomb_constant,
                             potential.data != nullptr);
  if (real_space) {
    if (!s.pairs_binned) {
      s.pairs.set_points(s.mesh);
      s.pairs_binned = true;
    }
    // In the particle scratch: forces and potential before the reciprocal parts, the virial after.
    T* scratch = s.backend->particle_scratch(n, virial.data ? detail::kPmeVirialScratch : detail::kPmeScratch);
    detail::pme_real_space(*s.backend, s.pairs, params_.alpha, charges, scratch, scratch + detail::kPmeScratch * n, n,
                           parts);
    detail::pme_self_terms(box_, params_.alpha, parts);
  }
  s.backend->finish(parts);
}

template <class T>
void PmePlan<T>::charge_gradient_of_forces(View<const T> charges, const Positions& weights, View<T> out,
                                           bool reciprocal_only) {
  detail::PmeState<T>& s = *state_;
  if (!s.mesh.has_points()) fail(ErrorCode::NotReady, "PmePlan::charge_gradient_of_forces called before set_points");
  const std::size_t n = s.mesh.num_points();
  detail::check_particle_arrays("charges", Span<View<const T>>({charges}), n);
  detail::check_particle_arrays("weights", Span<View<const T>>({weights[0], weights[1], weights[2]}), n);
  detail::check_particle_arrays("out", Span<View<T>>({out}), n);
  if (n == 0) return;
  // Scratch, n values each: real space 4 (the field, the dipoles' potential), the
  // reciprocal gradient 3, the reciprocal dipoles' potential 1, the dipoles 3.
  T* scratch = s.backend->particle_scratch(n, detail::kPmeVirialScratch);
  auto at = [&](int k) { return View<T>(scratch + k * n, n); };
  const View<T> mesh(s.backend->mesh(), static_cast<std::size_t>(s.mesh.mesh_size()));
  auto convolve = [&] {  // the mesh's potential, in place
    s.fft.forward(s.backend->mesh(), s.backend->spectrum());
    s.backend->convolve(false);
    s.fft.inverse(s.backend->spectrum(), s.backend->mesh());
  };
  // The field: the charges' mesh potential and its gradient at the charges.
  s.mesh.spread({charges}, {mesh});
  convolve();
  s.mesh.interp_gradient({View<const T>(mesh)}, {at(4), at(5), at(6)});
  // The dipoles' potential: their spread (spread_gradient), the same convolution, interp.
  s.backend->dipoles(charges, weights, scratch + 8 * n);
  const View<const T> dipoles[3] = {at(8), at(9), at(10)};
  s.mesh.spread_gradient(Span<View<const T>>(dipoles, 3), {mesh});
  convolve();
  s.mesh.interp({View<const T>(mesh)}, {at(7)});

  detail::ChargeGradientParts<T> parts;
  parts.n = n;
  parts.weights = weights;
  parts.gradient = scratch + 4 * n;
  parts.rec_dipole = scratch + 7 * n;
  parts.out = out;
  parts.coulomb = options_.coulomb_constant;
  if (!reciprocal_only) {
    if (!s.pairs_binned) {
      s.pairs.set_points(s.mesh);
      s.pairs_binned = true;
    }
    const View<const T> inputs[4] = {charges, at(8), at(9), at(10)};
    View<T> outputs[4] = {at(0), at(1), at(2), at(3)};
    s.backend->real_space_field(s.pairs, params_.alpha, Span<View<const T>>(inputs, 4), Span<View<T>>(outputs, 4));
    parts.real = scratch;
  }
  s.backend->finish_charge_gradient(parts);
}

template class PmePlan<float>;
template class PmePlan<double>;

}  // namespace pmkit
