#pragma once
// The per-particle and per-wavenumber work of a PIC step, as small functors shared by the
// host loops (host_device.cpp) and the CUDA kernels (cuda_device.cu).
#include <cmath>
#include <complex>
#include <cstddef>

#include "pmkit/config.hpp"

namespace pmkit::pic {

// Structure-of-arrays particles on one device: positions, velocities, charge weights
// (the spread's property) and the acceleration at the particles (the gather's output).
template <class T, int D>
struct ParticleArrays {
  T* x[D];
  T* v[D];
  T* w;
  T* a[D];
  std::size_t n;
};

// Leapfrog on one axis: v += kick * a, then (with drift != 0) x += drift * v. The
// initial half kick back (v_0 -> v_{-1/2}) is kick = -dt/2 with drift 0.
template <class T>
PMKIT_HD PMKIT_FORCEINLINE void kick_drift(T& x, T& v, T a, T kick, T drift) {
  v += kick * a;
  if (drift != T(0)) x += drift * v;
}

// The leapfrog of the separate calls: the acceleration from the gather's arrays, the
// new position wrapped into [0, box).
template <class T, int D>
struct LeapfrogPush {
  T kick, drift;
  T box[D];

  PMKIT_HD void operator()(const ParticleArrays<T, D>& p, std::size_t i) const {
    for (int d = 0; d < D; ++d) {
      T x = p.x[d][i], v = p.v[d][i];
      kick_drift(x, v, p.a[d][i], kick, drift);
      p.v[d][i] = v;
      if (drift != T(0)) {
        x -= box[d] * std::floor(x / box[d]);
        // Rounding can land a particle just below 0 on exactly box: keep [0, box).
        p.x[d][i] = x < box[d] ? x : T(0);
      }
    }
  }
};

// The leapfrog as pmkit's particle step runs it (pmkit/particle_step.hpp): the velocity
// components are the particle's properties, the acceleration is the gradient of the
// potential interpolated at the particle (kMeshField false) or E's components on the
// mesh interpolated at it (kMeshField true: the caller's kick carries the sign of
// -E), and every electron deposits its charge weight at its new position. The step
// wraps the position into the box.
template <class T, int D, bool kMeshField>
struct StepPush {
  static constexpr int properties = D;
  static constexpr int gradients = kMeshField ? 0 : 1;
  static constexpr int values = kMeshField ? D : 0;
  static constexpr int deposits = 1;
  T kick, drift, charge;

  template <class P>
  PMKIT_HD void operator()(P& p) const {
    for (int d = 0; d < D; ++d) {
      T a;
      if constexpr (kMeshField)
        a = p.value[d];
      else
        a = p.gradient[0][d];
      kick_drift(p.x[d], p.prop[d], a, kick, drift);
    }
    p.deposit[0] = charge;
  }
};

// The velocities and charge weights of n electrons, for the diagnostics' sums.
template <class T, int D>
struct Velocities {
  const T* v[D];
  const T* w;
  std::size_t n;
};

// The particle sums of the diagnostics: (1/2) w |v|^2 and w v_d, in double.
template <class T, int D>
struct Moments {
  double kinetic = 0;
  double momentum[D] = {};
};

// One particle's terms of those sums, or a partial sum of them (the momentum's unused
// components stay 0 in 2D).
struct MomentSums {
  double kinetic, momentum[3];

  PMKIT_HD MomentSums operator+(const MomentSums& o) const {
    return {kinetic + o.kinetic, {momentum[0] + o.momentum[0], momentum[1] + o.momentum[1], momentum[2] + o.momentum[2]}};
  }
};

// Particle i's terms, for the host's loop and the device's reduction alike.
template <class T, int D>
struct MomentTerms {
  Velocities<T, D> p;

  PMKIT_HD MomentSums operator()(std::size_t i) const {
    const double w = p.w[i];
    MomentSums t{0, {0, 0, 0}};
    double v2 = 0;
    for (int d = 0; d < D; ++d) {
      const double v = p.v[d][i];
      v2 += v * v;
      t.momentum[d] = w * v;
    }
    t.kinetic = 0.5 * w * v2;
    return t;
  }

  // The sums as the diagnostics report them.
  static Moments<T, D> moments(const MomentSums& s) {
    Moments<T, D> m;
    m.kinetic = s.kinetic;
    for (int d = 0; d < D; ++d) m.momentum[d] = s.momentum[d];
    return m;
  }
};

// out[k] = factor[k] * in[k], or with `rotate`, -i * factor[k] * in[k] (a derivative's
// i k with the minus of E = -grad phi).
template <class T>
struct ScaleSpectrum {
  bool rotate;
  PMKIT_HD void operator()(const T* in, const T* factor, T* out, std::size_t k) const {
    const T re = in[2 * k], im = in[2 * k + 1], f = factor[k];
    if (rotate) {
      out[2 * k] = f * im;
      out[2 * k + 1] = -f * re;
    } else {
      out[2 * k] = f * re;
      out[2 * k + 1] = f * im;
    }
  }
};

}  // namespace pmkit::pic
