// The CPU backend of PmePlan: host scratch, the convolution and the last step, in OpenMP.
#include <cmath>

#include "core/pme_backend.hpp"
#include "cpu/openmp.hpp"

namespace pmkit::detail {
namespace {

template <class T>
class CpuPmeBackend final : public PmeBackend<T> {
 public:
  CpuPmeBackend(const std::vector<T>& influence, std::size_t mesh_size, std::int64_t half_x, std::int64_t mesh_x,
                const ExecutionOptions& options)
      : influence_(influence),
        mesh_(mesh_size),
        spectrum_(influence.size()),
        half_x_(half_x),
        mesh_x_(mesh_x),
        threads_(openmp_threads(options.num_threads)) {}

  T* mesh() override { return mesh_.data(); }
  std::complex<T>* spectrum() override { return spectrum_.data(); }
  T* particle_scratch(std::size_t n) override {
    if (scratch_.size() < 8 * n) scratch_.resize(8 * n);
    return scratch_.data();
  }

  void convolve() override {
    const std::int64_t size = static_cast<std::int64_t>(spectrum_.size());
    double energy = 0;
#pragma omp parallel for num_threads(threads_) reduction(+ : energy) schedule(static)
    for (std::int64_t k = 0; k < size; ++k) {
      const double c = influence_[k];
      energy += hermitian_weight(k % half_x_, mesh_x_) * c * std::norm(std::complex<double>(spectrum_[k]));
      spectrum_[k] *= influence_[k];
    }
    for (double& s : sums_) s = 0;
    sums_[kReciprocalEnergy] = 0.5 * energy;
  }

  void finish(const PmeParts<T>& p) override {
    const std::int64_t n = static_cast<std::int64_t>(p.n);
    double q = 0, q2 = 0, work = 0;
#pragma omp parallel for num_threads(threads_) reduction(+ : q, q2, work) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) p.forces[d][i] = pme_force(p, d, i);
      const double qi = p.charges[i];
      q += qi;
      q2 += qi * qi;
      if (p.real) work += qi * double(p.real[3 * p.n + i]);
    }
    sums_[kChargeSum] = q;
    sums_[kChargeSquares] = q2;
    sums_[kRealSpaceWork] = work;
    if (p.potential.data) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t i = 0; i < n; ++i) p.potential[i] = pme_potential(p, i, q);
    }
    if (p.energy.data) p.energy[0] = pme_energy(p, sums_);
  }

 private:
  std::vector<T> influence_;
  std::vector<T> mesh_;
  std::vector<std::complex<T>> spectrum_;
  std::vector<T> scratch_;
  std::int64_t half_x_, mesh_x_;
  int threads_;
  double sums_[kPmeSums] = {};
};

}  // namespace

template <class T>
std::unique_ptr<PmeBackend<T>> make_cpu_pme_backend(const std::vector<T>& influence, std::size_t mesh_size,
                                                    std::int64_t half_x, std::int64_t mesh_x,
                                                    const ExecutionOptions& options) {
  return std::make_unique<CpuPmeBackend<T>>(influence, mesh_size, half_x, mesh_x, options);
}

template std::unique_ptr<PmeBackend<float>> make_cpu_pme_backend<float>(const std::vector<float>&, std::size_t,
                                                                       std::int64_t, std::int64_t,
                                                                       const ExecutionOptions&);
template std::unique_ptr<PmeBackend<double>> make_cpu_pme_backend<double>(const std::vector<double>&, std::size_t,
                                                                         std::int64_t, std::int64_t,
                                                                         const ExecutionOptions&);

}  // namespace pmkit::detail
