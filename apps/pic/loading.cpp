// Initial conditions (loading.hpp).
#include "loading.hpp"

#include <algorithm>
#include <cmath>

#include "cpu/openmp.hpp"

namespace pmkit::pic {

double radical_inverse(unsigned base, std::uint64_t i) {
  double inv = 1.0 / base, f = inv, r = 0;
  for (; i > 0; i /= base, f *= inv) r += f * static_cast<double>(i % base);
  return r;
}

double normal_quantile(double u) {
  // Abramowitz and Stegun 26.2.22 (error below 3e-3) as the first guess, then Newton on
  // Phi(z) = erfc(-z / sqrt 2) / 2, which from there reaches double rounding in four steps.
  const double tail = std::min(u, 1 - u);
  const double t = std::sqrt(-2 * std::log(tail));
  double z = t - (2.30753 + 0.27061 * t) / (1 + 0.99229 * t + 0.04481 * t * t);
  if (u < 0.5) z = -z;
  const double sqrt2 = std::sqrt(2.0), inv_sqrt_2pi = 0.3989422804014327;
  for (int it = 0; it < 4; ++it) {
    const double phi = 0.5 * std::erfc(-z / sqrt2);
    const double pdf = inv_sqrt_2pi * std::exp(-0.5 * z * z);
    z -= (phi - u) / pdf;
  }
  return z;
}

namespace {

// A uniform number in (0, 1) from (seed, particle, coordinate): splitmix64 of the three,
// so that every particle is drawn independently (in parallel, the same for any threads).
double uniform(std::uint64_t seed, std::uint64_t i, unsigned coordinate) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + coordinate * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<double>(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// x in [0, L) with int_0^x (1 + a cos(k s)) ds = u L (the perturbed density's quantile).
double perturbed_quantile(double u, double L, double k, double a) {
  const double target = u * L;
  double x = target;
  for (int it = 0; it < 8; ++it) x -= (x + (a / k) * std::sin(k * x) - target) / (1 + a * std::cos(k * x));
  return x;
}

}  // namespace

template <class T, int D>
Loaded<T, D> load_particles(const Config& c, const std::array<double, 3>& box, std::int64_t first,
                            std::int64_t count) {
  const auto n = static_cast<std::int64_t>(c.particles);
  Loaded<T, D> out;
  for (int d = 0; d < D; ++d) {
    out.x[d].resize(count);
    out.v[d].resize(count);
  }
  const bool quiet = c.quiet && c.problem != Problem::Thermal;
  const bool perturbed = c.problem != Problem::Thermal;
  // Radical-inverse bases of y and z.
  const unsigned position_base[3] = {0, 3, 5};
#pragma omp parallel for num_threads(detail::openmp_threads(c.num_threads)) schedule(static)
  for (std::int64_t i = first; i < first + count; ++i) {
    const auto id = static_cast<std::uint64_t>(i);
    for (int d = 0; d < D; ++d) {
      double u = quiet ? (d == 0 ? (i + 0.5) / n : radical_inverse(position_base[d], id + 1)) : uniform(c.seed, id, d);
      double x = (d == 0 && perturbed) ? perturbed_quantile(u, box[0], c.k, c.amplitude) : u * box[d];
      out.x[d][i - first] = static_cast<T>(x < box[d] ? x : 0.0);
      double v = 0;
      if (c.problem == Problem::TwoStream) {
        v = d == 0 ? (i % 2 == 0 ? c.beam_speed : -c.beam_speed) : 0.0;
      } else if (quiet && d == 0) {  // (x, vx) a Hammersley set
        v = normal_quantile(radical_inverse(2, id + 1));
      } else if (quiet) {  // the transverse velocities are zero (loading.hpp)
        v = 0.0;
      } else {  // Box-Muller
        const double two_pi = 6.283185307179586;
        v = std::sqrt(-2 * std::log(uniform(c.seed, id, 3 + d))) * std::cos(two_pi * uniform(c.seed, id, 6 + d));
      }
      out.v[d][i - first] = static_cast<T>(v);
    }
  }
  return out;
}

template Loaded<float, 2> load_particles<float, 2>(const Config&, const std::array<double, 3>&, std::int64_t,
                                                    std::int64_t);
template Loaded<float, 3> load_particles<float, 3>(const Config&, const std::array<double, 3>&, std::int64_t,
                                                    std::int64_t);
template Loaded<double, 2> load_particles<double, 2>(const Config&, const std::array<double, 3>&, std::int64_t,
                                                    std::int64_t);
template Loaded<double, 3> load_particles<double, 3>(const Config&, const std::array<double, 3>&, std::int64_t,
                                                    std::int64_t);

}  // namespace pmkit::pic
