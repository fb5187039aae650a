#pragma once
// The built-in pair kernels (compiled into the library for both backends) and the
// contract of a pair kernel (see pmkit/pairs.hpp).
#include <cmath>
#include <type_traits>
#include <utility>

#include "pmkit/config.hpp"

namespace pmkit {

namespace detail {
template <class Kernel, class T, class = void>
struct HasFinish : std::false_type {};
template <class Kernel, class T>
struct HasFinish<Kernel, T, std::void_t<decltype(std::declval<const Kernel&>().finish(std::declval<T*>()))>>
    : std::true_type {};

// A particle's summed outputs into its results (the kernel's finish, where it has one).
template <class Kernel, class T>
PMKIT_HD inline void finish_outputs(const Kernel& kernel, T* out) {
  if constexpr (HasFinish<Kernel, T>::value) kernel.finish(out);
}
}  // namespace detail

namespace pair_kernels {

namespace detail {
template <class T>
PMKIT_HD inline T reciprocal(T x) {
#if defined(__CUDA_ARCH__)
  // rcp.approx.ftz: one MUFU.RCP. __fdividef(1, x) adds four instructions that rescue a
  // denormal x (r^2 below 1e-38, where a pair's force overflows anyway) and returns the
  // same value for every normal x.
  if constexpr (std::is_same<T, float>::value) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
#endif
  return T(1) / x;
}

// A math function of T on host and device: CUDA's overloads on the device, where the
// host's std:: functions are not callable.
#if defined(__CUDA_ARCH__)
#define PMKIT_PAIR_MATH(f) ::f
#else
#define PMKIT_PAIR_MATH(f) std::f
#endif
template <class T>
PMKIT_HD inline T rsqrt(T x) {
#if defined(__CUDA_ARCH__)
  // rsqrt.approx.ftz in float: one MUFU.RSQ, the value rsqrtf returns for every normal x,
  // without its four instructions for a denormal one (r^2 below 1e-38).
  if constexpr (std::is_same<T, float>::value) {
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
  return ::rsqrt(x);
#else
  return T(1) / std::sqrt(x);
#endif
}

// erfc(x) and exp(-x^2) for x >= 0. Float on the device: one exponential for both,
// erfc(x) = t P(t) exp(-x^2) with t = 1 / (1 + x / 2) and P of degree 9 fitted to
// erfcx(x) / t on x >= 0 (relative error 3e-8; 3e-7 in float with the roundings of t and
// of the sums, as erfcf's own few ulp), the exponential's argument corrected for the
// rounding of x^2: half the instructions of erfcf and expf apart, in the Ewald kernel's
// body, which is most of a real-space traversal.
template <class T>
PMKIT_HD inline void erfc_and_gaussian(T x, T& erfc_x, T& gaussian) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same<T, float>::value) {
    const float x2 = x * x;
    const float x2_rounding = fmaf(x, x, -x2);  // x^2 = x2 + x2_rounding exactly
    const float e = expf(-x2);
    gaussian = fmaf(-e, x2_rounding, e);
    const float d = fmaf(0.5f, x, 1.0f);
    const float t0 = reciprocal(d);
    const float t = fmaf(t0, fmaf(-d, t0, 1.0f), t0);  // a Newton step: within an ulp, no branch
    float p = 0.006990380119532347f;
    p = fmaf(p, t, -0.09535563737154007f);
    p = fmaf(p, t, 0.3655794858932495f);
    p = fmaf(p, t, -0.5889310240745544f);
    p = fmaf(p, t, 0.356995165348053f);
    p = fmaf(p, t, -0.06571064889431f);
    p = fmaf(p, t, 0.2149941325187683f);
    p = fmaf(p, t, 0.2407357543706894f);
    p = fmaf(p, t, 0.2826272249221802f);
    p = fmaf(p, t, 0.2820751368999481f);
    erfc_x = t * p * gaussian;
    return;
  }
#endif
  erfc_x = PMKIT_PAIR_MATH(erfc)(x);
  gaussian = PMKIT_PAIR_MATH(exp)(-x * x);
}
}  // namespace detail

// Lennard-Jones, truncated at the cutoff and shifted so the energy is continuous there;
// `softening` is added to r^2 so that overlapping particles give finite values.
// Outputs: the force on the particle (D components), then its potential energy (half
// of each pair's energy goes to each particle, so the outputs sum to the total).
// sigma must be positive (the body divides by it once, into constants) and cutoff the
// pair plan's: the plan visits the pairs closer than its own cutoff and checks both.
template <int D>
struct LennardJones {
  static constexpr int inputs = 0;
  static constexpr int outputs = D + 1;
  double epsilon = 1.0;
  double sigma = 1.0;
  double cutoff = 2.5;
  double softening = 0.0;

  template <class T>
  PMKIT_HD T energy(T r2) const {
    const T s2 = T(sigma * sigma) / (r2 + T(softening * softening));
    const T s6 = s2 * s2 * s2;
    return T(4 * epsilon) * (s6 * s6 - s6);
  }
  template <class T>
  PMKIT_HD void operator()(const T* r, T r2, const T*, const T*, T* out_i, T* out_j) const {
    // One reciprocal per pair, of a fused multiply-add: s2 = sigma^2 / (r^2 + soft^2) =
    // 1 / (r^2 / sigma^2 + soft^2 / sigma^2), one instruction shorter than scaling the
    // reciprocal of r^2 + soft^2. In float on the GPU, the hardware reciprocal (2 ulp)
    // rather than the IEEE division, whose slow-path branch is a large part of the pair.
    const double inv_sigma2 = 1 / (sigma * sigma);  // once per thread: the compiler hoists it
    const T s2 = detail::reciprocal(r2 * T(inv_sigma2) + T(softening * softening * inv_sigma2));
    const T s6 = s2 * s2 * s2;
    // With a = s^12 - s^6: U = 4 eps a and F_i = -dU/dr r_hat =
    // 24 eps (2 s^12 - s^6) / (r^2 + soft^2) r = (24 eps / sigma^2) (2 a + s6) s2 r.
    // Written so, the body is two instructions shorter on the GPU, and a = s6 s6 - s6 one
    // fused multiply-add. The force is summed without its constant 24 eps / sigma^2,
    // which finish applies once.
    const T a = s6 * s6 - s6;
    const T f = (T(2) * a + s6) * s2;
    for (int d = 0; d < D; ++d) {
      out_i[d] += f * r[d];
      out_j[d] -= f * r[d];
    }
    // Half of the pair's shifted energy to each particle.
    const T u = T(2 * epsilon) * a - T(0.5) * energy(T(cutoff * cutoff));
    out_i[D] += u;
    out_j[D] += u;
  }
  template <class T>
  PMKIT_HD void finish(T* out) const {
    for (int d = 0; d < D; ++d) out[d] *= T(24 * epsilon / (sigma * sigma));
  }
};

// Each particle's number of neighbours closer than the cutoff, as T (exact up to 2^24 in
// float): neighbour statistics, SPH number densities, a check of a cell list.
struct NeighbourCount {
  static constexpr int inputs = 0;
  static constexpr int outputs = 1;
  template <class T>
  PMKIT_HD void operator()(const T*, T, const T*, const T*, T* out_i, T* out_j) const {
    out_i[0] += T(1);
    out_j[0] += T(1);
  }
};

// The real-space part of the Ewald sum of Coulomb interactions (pmkit/pme.hpp): the pair
// potential q_i q_j erfc(alpha r) / r within the plan's cutoff, unshifted (at the cutoff
// it is erfc(alpha r_c) / r_c, the real-space error the splitting parameter alpha is
// chosen for). Gaussian units: multiply by the Coulomb constant of the caller's units.
// Input: the charge. Outputs: the force on the particle (D components), then the
// real-space potential at the particle, phi_i = sum over neighbours j of q_j erfc(alpha
// r) / r; the real-space energy is 1/2 sum_i q_i phi_i. A particle never pairs with
// itself (the plan calls the kernel for distinct particles), and with a cutoff at most
// half the box each pair meets one periodic image: the Ewald sum's real-space part
// whenever erfc(alpha r_c) is negligible.
template <int D>
struct EwaldRealSpace {
  static constexpr int inputs = 1;
  static constexpr int outputs = D + 1;
  double alpha = 1.0;

  // The pair's potential phi = erfc(alpha r) / r and its force factor g: the force on i is
  // q_i q_j g r with g = -(d phi / dr) / r.
  template <class T>
  PMKIT_HD void pair(T r2, T& phi, T& g) const {
    const T inv_r = detail::rsqrt(r2);
    const T alpha_r = T(alpha) * r2 * inv_r;
    T erfc_ar, gaussian;
    detail::erfc_and_gaussian(alpha_r, erfc_ar, gaussian);
    phi = erfc_ar * inv_r;
    // -(d/dr)(erfc(alpha r) / r) / r = (erfc(alpha r) / r + 2 alpha / sqrt(pi) exp(-alpha^2 r^2)) / r^2.
    const T two_alpha_over_sqrt_pi = T(alpha * 1.1283791670955126);
    g = (phi + two_alpha_over_sqrt_pi * gaussian) * inv_r * inv_r;
  }

  template <class T>
  PMKIT_HD void operator()(const T* r, T r2, const T* q_i, const T* q_j, T* out_i, T* out_j) const {
    T phi, g;
    pair(r2, phi, g);
    const T f = q_i[0] * q_j[0] * g;
    for (int d = 0; d < D; ++d) {
      out_i[d] += f * r[d];
      out_j[d] -= f * r[d];
    }
    out_i[D] += q_j[0] * phi;
    out_j[D] += q_i[0] * phi;
  }
};

}  // namespace pair_kernels

namespace detail {
// The kernels compiled into the library for a D-dimensional plan.
template <class Kernel, int D>
constexpr bool kBuiltinPairKernel =
    std::is_same<Kernel, pair_kernels::LennardJones<D>>::value || std::is_same<Kernel, pair_kernels::NeighbourCount>::value ||
    std::is_same<Kernel, pair_kernels::EwaldRealSpace<D>>::value;
}  // namespace detail

}  // namespace pmkit
