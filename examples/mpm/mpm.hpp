#pragma once
// MLS-MPM (APIC transfers, quadratic B-splines) on pmkit's particle step, in 2D and 3D,
// for an elastic (neo-Hookean) and a weakly compressible fluid material.
//
// One step of the scheme (the mpm88 / mpm3d form, h the grid spacing, D_p^-1 = 4 / h^2):
//   G2P:  v_p = sum_i w_ip v_i,  C_p = 4/h^2 sum_i w_ip v_i (x_i - x_p)^T
//   move: x_p += dt v_p;  elastic: F_p = (I + dt C_p) F_p;  fluid: J_p *= 1 + dt tr C_p
//   P2G:  m_i = sum_p w_ip m_p,
//         (mv)_i = sum_p w_ip (m_p v_p + A_p (x_i - x_p)),  A_p = m_p C_p - dt V_p 4/h^2 tau_p
//   grid: v_i = (mv)_i / m_i + dt g, the walls' normal component removed (GridUpdate)
// with the Kirchhoff stress tau = mu (F F^T - I) + lambda ln(J) I (elastic) or
// tau = E (J - 1) I (fluid). pmkit::step runs G2P, the move and P2G as one pass (the
// affine gather of the grid velocity, the functor, the affine deposit of mass and
// momentum); GridUpdate runs between steps. The first step deposits without moving.
// docs/mpm.md describes the example; tests/mpm_reference.py is the same scheme in NumPy.
#include <cmath>
#include <cstdint>

#include "pmkit/particle_step.hpp"

namespace mpm {

enum class Material { Elastic, Fluid };

// The scheme's parameters, the same for every particle.
template <class T>
struct Parameters {
  T dt = T(1e-4);
  T h = T(1);          // the grid spacing
  T mass = T(1);       // per particle
  T volume = T(1);     // per particle, at rest
  T mu = T(0), lambda = T(0);  // elastic: the Lame parameters
  T stiffness = T(0);          // fluid: E of tau = E (J - 1) I
  T gravity[3] = {T(0), T(0), T(0)};
  int bound = 3;       // nodes within `bound` of a wall hold no velocity into it
};

// The particle's properties: v (D), C (D x D, row-major), then F (D x D) for the elastic
// material or J (1) for the fluid.
template <int D, Material M>
constexpr int properties() {
  return D + D * D + (M == Material::Elastic ? D * D : 1);
}

// tau for the particle's deformation (F row-major, or J in f[0] for the fluid).
template <class T, int D, Material M>
PMKIT_HD void kirchhoff_stress(const Parameters<T>& par, const T* f, T (&tau)[D][D]) {
  if constexpr (M == Material::Fluid) {
    for (int a = 0; a < D; ++a)
      for (int b = 0; b < D; ++b) tau[a][b] = a == b ? par.stiffness * (f[0] - T(1)) : T(0);
  } else {
    T J;
    if constexpr (D == 2) {
      J = f[0] * f[3] - f[1] * f[2];
    } else {
      J = f[0] * (f[4] * f[8] - f[5] * f[7]) - f[1] * (f[3] * f[8] - f[5] * f[6]) + f[2] * (f[3] * f[7] - f[4] * f[6]);
    }
    const T log_j = log(J);
    for (int a = 0; a < D; ++a)
      for (int b = 0; b < D; ++b) {
        T ffT = T(0);
        for (int c = 0; c < D; ++c) ffT += f[a * D + c] * f[b * D + c];
        tau[a][b] = par.mu * (ffT - (a == b ? T(1) : T(0))) + (a == b ? par.lambda * log_j : T(0));
      }
  }
}

// The step's update functor: G2P, the move and the P2G quantities of one particle.
template <class T, int D, Material M>
struct Update {
  static constexpr int properties = mpm::properties<D, M>();
  static constexpr int affine_values = D;        // the grid velocity's components
  static constexpr int affine_deposits = 1 + D;  // mass, then momentum's components
  Parameters<T> par;
  bool deposit_only = false;  // the first step: P2G of the particles as they are

  template <class Particle>
  PMKIT_HD void operator()(Particle& p) const {
    T* v = p.prop;
    T* C = p.prop + D;
    T* f = p.prop + D + D * D;
    const T scale = T(4) / (par.h * par.h);
    if (!deposit_only) {
      for (int a = 0; a < D; ++a) {
        v[a] = p.affine_value[a];
        for (int b = 0; b < D; ++b) C[a * D + b] = scale * p.affine_moment[a][b];
      }
      for (int a = 0; a < D; ++a) p.x[a] += par.dt * v[a];
      if constexpr (M == Material::Fluid) {
        T trace = T(0);
        for (int a = 0; a < D; ++a) trace += C[a * D + a];
        f[0] *= T(1) + par.dt * trace;
      } else {
        T next[D * D];
        for (int a = 0; a < D; ++a)
          for (int b = 0; b < D; ++b) {
            T sum = f[a * D + b];
            for (int c = 0; c < D; ++c) sum += par.dt * C[a * D + c] * f[c * D + b];
            next[a * D + b] = sum;
          }
        for (int i = 0; i < D * D; ++i) f[i] = next[i];
      }
    }
    T tau[D][D];
    kirchhoff_stress<T, D, M>(par, f, tau);
    const T stress_scale = par.dt * par.volume * scale;
    p.affine_deposit[0] = par.mass;
    for (int a = 0; a < D; ++a) {
      p.affine_deposit[1 + a] = par.mass * v[a];
      for (int b = 0; b < D; ++b) p.affine_slope[1 + a][b] = par.mass * C[a * D + b] - stress_scale * tau[a][b];
    }
  }
};

// The grid update between steps, by value into a kernel: over the box of nodes that
// the particles' stencils reach (the last deposit's nodes, which the next gather reads),
// each node's velocity from its mass and momentum, with gravity and the walls, and the
// mass and momentum cleared for the next deposit (which adds: Accumulate::Add). Nodes
// outside the box hold no mass and are not read.
template <class T, int D>
struct GridUpdate {
  Parameters<T> par;
  std::int64_t shape[D];  // stored nodes per axis
  bool walls;             // bounded axes (folded ghosts), else periodic
  T* mass;
  T* momentum[D];
  T* velocity[D];
  const T* x[D];          // the particles' positions (origin 0)
  std::size_t particles;

  double spacing;          // the grid's, in double as the plan holds it

  // The first stencil node of particle k on axis d (quadratic B-spline: pmkit's node
  // within a rounding, which finish_box's margin covers).
  PMKIT_HD int first_node(std::size_t k, int d) const {
    return static_cast<int>(floor(static_cast<double>(x[d][k]) / spacing + 0.5)) - 1;
  }
  // The box of stored nodes from the first nodes' extremes lo[d], hi[d]: the stencils'
  // reach and a node more either side, clamped (folded ghosts land inside) or, where
  // it crosses a periodic seam, the whole axis.
  PMKIT_HD void finish_box(int (&lo)[D], int (&hi)[D]) const {
    for (int d = 0; d < D; ++d) {
      lo[d] -= 1;
      hi[d] += 3;
      const int top = static_cast<int>(shape[d]) - 1;
      if (walls) {
        lo[d] = lo[d] < 0 ? 0 : lo[d];
        hi[d] = hi[d] > top ? top : hi[d];
      } else if (lo[d] < 0 || hi[d] > top) {
        lo[d] = 0;
        hi[d] = top;
      }
    }
  }
  PMKIT_HD static std::int64_t box_size(const int (&lo)[D], const int (&hi)[D]) {
    std::int64_t n = 1;
    for (int d = 0; d < D; ++d) n *= hi[d] >= lo[d] ? hi[d] - lo[d] + 1 : 0;
    return n;
  }
  // The j-th node of the box, x fastest.
  PMKIT_HD void update(const int (&lo)[D], const int (&hi)[D], std::int64_t j) const {
    std::int64_t node = 0, stride = 1;
    int index[D];
    for (int d = 0; d < D; ++d) {
      const std::int64_t along = hi[d] - lo[d] + 1;
      index[d] = lo[d] + static_cast<int>(j % along);
      j /= along;
      node += index[d] * stride;
      stride *= shape[d];
    }
    const T m = mass[node];
    for (int d = 0; d < D; ++d) {
      T v = m > T(0) ? momentum[d][node] / m + par.dt * par.gravity[d] : T(0);
      if (walls && ((index[d] < par.bound && v < T(0)) || (index[d] > shape[d] - 1 - par.bound && v > T(0)))) v = T(0);
      velocity[d][node] = v;
      momentum[d][node] = T(0);
    }
    mass[node] = T(0);
  }
};

}  // namespace mpm
