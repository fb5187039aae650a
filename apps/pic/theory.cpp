// The dispersion relations of the PIC problems (theory.hpp).
#include "theory.hpp"

#include <array>
#include <algorithm>
#include <cmath>

namespace pmkit::pic {

namespace {

const double kPi = std::acos(-1.0);

// Weideman's series: w(z) = 2 p(Z) / (L - i z)^2 + 1 / (sqrt(pi) (L - i z)) with
// Z = (L + i z) / (L - i z) and p(Z) = sum_{n=1}^{N} a_n Z^(n-1). The a_n are the cosine
// coefficients of f(t) = exp(-t^2) (L^2 + t^2) at t = L tan(theta / 2), sampled at
// theta_k = k pi / M for |k| < M = 2 N (the paper's FFT, summed directly here).
constexpr int kTerms = 32;

struct Series {
  double L = 0;
  std::array<double, kTerms + 1> a{};  // a[1..N]
};

Series weideman_series() {
  Series s;
  const int M = 2 * kTerms;
  s.L = std::sqrt(kTerms / std::sqrt(2.0));
  for (int n = 1; n <= kTerms; ++n) {
    double sum = 0;
    for (int k = -M + 1; k < M; ++k) {
      const double theta = k * kPi / M, t = s.L * std::tan(0.5 * theta);
      sum += std::exp(-t * t) * (s.L * s.L + t * t) * std::cos(n * theta);
    }
    s.a[n] = sum / (2 * M);
  }
  return s;
}

}  // namespace

std::complex<double> faddeeva(std::complex<double> z) {
  if (z.imag() < 0) return 2.0 * std::exp(-z * z) - faddeeva(-z);
  static const Series s = weideman_series();
  const std::complex<double> i(0, 1), below = s.L - i * z, ratio = (s.L + i * z) / below;
  std::complex<double> p = 0;
  for (int n = kTerms; n >= 1; --n) p = p * ratio + s.a[n];
  return 2.0 * p / (below * below) + 1.0 / (std::sqrt(kPi) * below);
}

std::complex<double> plasma_dispersion(std::complex<double> zeta) {
  return std::complex<double>(0, std::sqrt(kPi)) * faddeeva(zeta);
}

namespace {

// Newton on k^2 + 1 + zeta Z(zeta) = 0 from `zeta`, with Z' = -2 (1 + zeta Z).
std::optional<std::complex<double>> newton(double k, std::complex<double> zeta) {
  for (int it = 0; it < 60; ++it) {
    const std::complex<double> Z = plasma_dispersion(zeta), one_plus = 1.0 + zeta * Z;
    const std::complex<double> f = k * k + one_plus, df = Z - 2.0 * zeta * one_plus;
    if (!std::isfinite(std::abs(f)) || std::abs(df) == 0) return std::nullopt;
    const std::complex<double> step = f / df;
    zeta -= step;
    // Converged, or at the series' rounding (which for small k exceeds the damping).
    if (std::abs(step) <= 1e-12 * std::abs(zeta) || std::abs(f) <= 1e-12 * (1 + k * k)) return zeta;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::complex<double>> landau_root(double k) {
  if (!(k > 0) || !std::isfinite(k)) return std::nullopt;
  const double k_start = std::min(k, 0.3), sqrt2 = std::sqrt(2.0);
  const double omega = std::sqrt(1 + 3 * k_start * k_start);
  const double gamma = -std::sqrt(kPi / 8) * std::exp(-0.5 / (k_start * k_start) - 1.5) / std::pow(k_start, 3);
  std::optional<std::complex<double>> zeta = newton(k_start, std::complex<double>(omega, gamma) / (sqrt2 * k_start));
  // Along k: the root at each step starts the next; zeta scales as 1 / k.
  const int steps = static_cast<int>(std::ceil((k - k_start) / 0.05));
  for (int s = 1; s <= steps && zeta; ++s) {
    const double from = k_start + (k - k_start) * (s - 1) / steps, to = k_start + (k - k_start) * s / steps;
    zeta = newton(to, *zeta * (from / to));
  }
  if (!zeta) return std::nullopt;
  // A Maxwellian's modes do not grow: a positive imaginary part is rounding.
  return std::complex<double>(sqrt2 * k * zeta->real(), std::min(0.0, sqrt2 * k * zeta->imag()));
}

double two_stream_growth_rate(double k_v0) {
  const double a2 = k_v0 * k_v0;
  const double w2 = a2 + 0.5 - std::sqrt(2 * a2 + 0.25);
  return w2 < 0 ? std::sqrt(-w2) : 0.0;
}

}  // namespace pmkit::pic
