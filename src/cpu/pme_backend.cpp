// The CPU backend of PmePlan: host scratch, the convolution and the last step, in OpenMP.
#include <cmath>

#include "core/pme_backend.hpp"
#include "cpu/openmp.hpp"

namespace pmkit::detail {
namespace {

template <class T>
class CpuPmeBackend final : public PmeBackend<T> {
 public:
  CpuPmeBackend(const std::vector<T>& influence, std::size_t mesh_size, const PmeSpectrum& geometry,
                const ExecutionOptions& options)
      : influence_(influence),
        mesh_(mesh_size),
        spectrum_(influence.size()),
        geometry_(geometry),
        threads_(openmp_threads(options.num_threads)) {}

  T* mesh() override { return mesh_.data(); }
  std::complex<T>* spectrum() override { return spectrum_.data(); }
  T* particle_scratch(std::size_t n, int values) override {
    const std::size_t size = static_cast<std::size_t>(values) * n;
    if (scratch_.size() < size) scratch_.resize(size);
    return scratch_.data();
  }

  void convolve(bool virial) override {
    const std::int64_t size = static_cast<std::int64_t>(spectrum_.size());
    double energy = 0, w[6] = {};
#pragma omp parallel for num_threads(threads_) reduction(+ : energy, w[:6]) schedule(static)
    for (std::int64_t k = 0; k < size; ++k) {
      energy += spectrum_energy(geometry_, k, influence_[k], std::norm(std::complex<double>(spectrum_[k])), virial, w);
      spectrum_[k] *= influence_[k];
    }
    for (double& s : sums_) s = 0;
    sums_[kReciprocalEnergy] = energy;
    for (int v = 0; v < 6; ++v) sums_[kReciprocalVirial + v] = w[v];
  }

  void real_space_virial(PairPlan<T, 3>& pairs, double alpha, View<const T> charges,
                         Span<View<T>> outputs) override {
    pairs.compute(EwaldRealSpaceVirial{pair_kernels::EwaldRealSpace<3>{alpha}}, {charges}, outputs);
  }

  void real_space_field(PairPlan<T, 3>& pairs, double alpha, Span<View<const T>> inputs,
                        Span<View<T>> outputs) override {
    pairs.compute(EwaldFieldDipole{pair_kernels::EwaldRealSpace<3>{alpha}}, inputs, outputs);
  }

  void dipoles(View<const T> charges, const std::array<View<const T>, 3>& weights, T* dipoles) override {
    const std::int64_t n = static_cast<std::int64_t>(charges.size);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) dipoles[d * n + i] = charges[i] * weights[d][i];
  }

  void finish_charge_gradient(const ChargeGradientParts<T>& p) override {
    const std::int64_t n = static_cast<std::int64_t>(p.n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) p.out[i] = charge_gradient(p, i);
  }

  void finish(const PmeParts<T>& p) override {
    const std::int64_t n = static_cast<std::int64_t>(p.n);
    double q = 0, q2 = 0, work = 0, w[6] = {};
#pragma omp parallel for num_threads(threads_) reduction(+ : q, q2, work, w[:6]) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) p.forces[d][i] = pme_force(p, d, i);
      const double qi = p.charges[i];
      q += qi;
      q2 += qi * qi;
      if (p.real) work += qi * double(p.real[3 * p.real_stride + i]);
      if (p.real_virial)
        for (int v = 0; v < 6; ++v) w[v] += p.real_virial[v * p.real_stride + i];
    }
    sums_[kChargeSum] = q;
    sums_[kChargeSquares] = q2;
    sums_[kRealSpaceWork] = work;
    for (int v = 0; v < 6; ++v) sums_[kRealVirial + v] = w[v];
    if (p.reduce) (*p.reduce)(sums_, kPmeSums);
    q = sums_[kChargeSum];
    if (p.potential.data) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t i = 0; i < n; ++i) p.potential[i] = pme_potential(p, i, q);
    }
    pme_totals(p, sums_);
  }

 private:
  std::vector<T> influence_;
  std::vector<T> mesh_;
  std::vector<std::complex<T>> spectrum_;
  std::vector<T> scratch_;
  PmeSpectrum geometry_;
  int threads_;
  double sums_[kPmeSums] = {};
};

}  // namespace

template <class T>
std::unique_ptr<PmeBackend<T>> make_cpu_pme_backend(const std::vector<T>& influence, std::size_t mesh_size,
                                                    const PmeSpectrum& spectrum, const ExecutionOptions& options) {
  return std::make_unique<CpuPmeBackend<T>>(influence, mesh_size, spectrum, options);
}

template std::unique_ptr<PmeBackend<float>> make_cpu_pme_backend<float>(const std::vector<float>&, std::size_t,
                                                                       const PmeSpectrum&, const ExecutionOptions&);
template std::unique_ptr<PmeBackend<double>> make_cpu_pme_backend<double>(const std::vector<double>&, std::size_t,
                                                                         const PmeSpectrum&, const ExecutionOptions&);

}  // namespace pmkit::detail
