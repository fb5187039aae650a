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
struct Particles {
  T* x[D];
  T* v[D];
  T* w;
  T* a[D];
  std::size_t n;
};

// Leapfrog: v += kick * a, then (with drift != 0) x += drift * v, wrapped into [0, box).
// The initial half kick back (v_0 -> v_{-1/2}) is kick = -dt/2 with drift 0.
template <class T, int D>
struct LeapfrogPush {
  T kick, drift;
  T box[D];

  PMKIT_HD void operator()(const Particles<T, D>& p, std::size_t i) const {
    for (int d = 0; d < D; ++d) {
      const T v = p.v[d][i] + kick * p.a[d][i];
      p.v[d][i] = v;
      if (drift != T(0)) {
        T x = p.x[d][i] + drift * v;
        x -= box[d] * std::floor(x / box[d]);
        // Rounding can land a particle just below 0 on exactly box: keep [0, box).
        p.x[d][i] = x < box[d] ? x : T(0);
      }
    }
  }
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
  Particles<T, D> p;

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
