// A pair kernel of the consumer's own on the CPU backend, from a file compiled without
// OpenMP: the potential of screened charges (Yukawa) at each particle, checked against
// the direct sum over all pairs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <pmkit/pmkit.hpp>

struct Yukawa {
  static constexpr int inputs = 1;   // charge
  static constexpr int outputs = 1;  // potential
  double screening = 2.0;
  template <class T>
  PMKIT_HD void operator()(const T*, T r2, const T* q_i, const T* q_j, T* out_i, T* out_j) const {
    const T s = std::sqrt(r2);
    const T g = std::exp(-T(screening) * s) / s;
    out_i[0] += q_j[0] * g;
    out_j[0] += q_i[0] * g;
  }
};

int main() {
  const double length = 4.0, cutoff = 1.0;
  const std::size_t n = 500;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> x(n), y(n), z(n), q(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = length * unit(rng);
    y[i] = length * unit(rng);
    z[i] = length * unit(rng);
    q[i] = unit(rng) - 0.5;
  }

  pmkit::PairOptions options;
  options.num_threads = 2;  // the library's threads walk the cells
  pmkit::PairPlan<double, 3> pairs(pmkit::Box<3>::periodic({length, length, length}), cutoff, options);
  pairs.set_points({x, y, z});
  std::vector<double> phi(n);
  const Yukawa kernel;
  pairs.compute(kernel, {q}, {phi});

  // The direct sum over all pairs within the cutoff (minimum image).
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double expected = 0;
    for (std::size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      double r[3] = {x[i] - x[j], y[i] - y[j], z[i] - z[j]};
      double r2 = 0;
      for (double& v : r) {
        v -= length * std::round(v / length);
        r2 += v * v;
      }
      if (r2 < cutoff * cutoff) expected += q[j] * std::exp(-kernel.screening * std::sqrt(r2)) / std::sqrt(r2);
    }
    worst = std::max(worst, std::abs(phi[i] - expected));
  }
  std::printf("Yukawa potentials of %zu particles: largest difference from the direct sum %.3g\n", n, worst);
  return worst < 1e-10 ? 0 : 1;
}
