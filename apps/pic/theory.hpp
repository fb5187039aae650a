#pragma once
// Linear theory of the PIC problems (pic.hpp), in the code's units (plasma frequency 1,
// thermal speed 1, Debye length 1): the plasma dispersion function and the roots of the
// dispersion relations that `pmkit pic` compares its fitted rates with.
#include <complex>
#include <optional>

namespace pmkit::pic {

// The Faddeeva function w(z) = exp(-z^2) erfc(-i z), for any complex z. In the upper
// half-plane by the rational series of J. A. C. Weideman, "Computation of the Complex
// Error Function", SIAM J. Numer. Anal. 31 (1994) 1497-1518, with N = 32 terms (relative
// error near 1e-14 there); in the lower half-plane by w(z) = 2 exp(-z^2) - w(-z), the
// analytic continuation that Landau damping needs.
std::complex<double> faddeeva(std::complex<double> z);

// The plasma dispersion function of Fried and Conte, Z(zeta) = i sqrt(pi) w(zeta).
std::complex<double> plasma_dispersion(std::complex<double> zeta);

// The least damped root omega (real part the frequency, imaginary part the damping) of
// the Vlasov-Poisson dispersion relation of a Maxwellian of thermal speed 1 at
// wavenumber k: 1 + (1 + zeta Z(zeta)) / k^2 = 0 with zeta = omega / (sqrt(2) k). Newton
// from the weak-damping estimate (Bohm-Gross frequency, damping
// -sqrt(pi / 8) exp(-1 / (2 k^2) - 3 / 2) / k^3) at min(k, 0.3), then along k in steps of
// at most 0.05, each root the next start. Nothing where Newton does not converge.
std::optional<std::complex<double>> landau_root(double k);

// Growth rate of the cold symmetric two-beam instability, beams of density 1/2 each at
// +-v0, wavenumber k: 1 = (1/2) [1/(w - k v0)^2 + 1/(w + k v0)^2] gives
// w^2 = k^2 v0^2 + 1/2 - sqrt(2 k^2 v0^2 + 1/4), unstable (gamma = sqrt(-w^2)) for k v0 < 1.
double two_stream_growth_rate(double k_v0);

}  // namespace pmkit::pic
