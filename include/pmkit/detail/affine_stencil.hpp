#pragma once
// The particle step's affine transfers on the quadratic B-spline (Kernel::bspline(3)),
// one particle at a time, shared by the host and the device: the gather of a mesh with
// its first moment about the particle, and the deposit of a value with a slope along
// the node offset (pmkit/particle_step.hpp, StepParticle).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "pmkit/detail/layout.hpp"
#include "pmkit/detail/stencil.hpp"

namespace pmkit::detail {

// The most affine meshes of one kind a step takes.
constexpr int kMaxAffineMeshes = 8;

template <class V>
struct AffineMeshes {
  V* mesh[kMaxAffineMeshes] = {};
  int count = 0;
};

// A particle's 3^D nodes: per axis the 1D weights, the node offsets x_i - x in units
// of length, and the storage index times the axis' stride.
template <int D, class T>
struct AffineStencil {
  using K = kernels::BSpline<3>;
  T weight[D][3];
  T offset[D][3];
  std::int64_t node[D][3];
  int base[D];  // the first logical node on each axis

  // x: the particle's position (inside the domain, wrapped on periodic axes).
  PMKIT_HD PMKIT_FORCEINLINE AffineStencil(const Layout<D>& layout, const T (&x)[D]) {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      const Axis& axis = layout.axis[d];
      double s;
      kernels::locate<K>(axis.unwrapped_coordinate(static_cast<double>(x[d])), base[d], s);
      const T local = static_cast<T>(s);
      HornerWeights::apply<K>(local, weight[d]);
      PMKIT_UNROLL
      for (int k = 0; k < 3; ++k) {
        // Node base + k lies at grid coordinate base + k; the particle at base + 1 + s - 1/2.
        offset[d][k] = (T(k) - T(0.5) - local) * static_cast<T>(axis.spacing);
        node[d][k] = axis.node(base[d] + k) * layout.stride[d];
      }
    }
  }

  // f(mesh_index, weight, offset[D]) for each node, x fastest.
  template <class F>
  PMKIT_HD PMKIT_FORCEINLINE void for_each(F&& f) const {
    PMKIT_UNROLL
    for (int r = 0; r < (D == 2 ? 3 : 9); ++r) {
      const int y = r % 3, z = r / 3;
      const T row_weight = D == 2 ? weight[1][y] : weight[D - 1][z] * weight[1][y];
      const std::int64_t row = D == 2 ? node[1][y] : node[D - 1][z] + node[1][y];
      PMKIT_UNROLL
      for (int a = 0; a < 3; ++a) {
        T off[D];
        off[0] = offset[0][a];
        off[1] = offset[1][y];
        if constexpr (D == 3) off[2] = offset[2][z];
        f(row + node[0][a], row_weight * weight[0][a], off);
      }
    }
  }
};

// One mesh f at a particle's stencil: value = sum_i w_i f_i and moment[d] = sum_i w_i
// f_i (x_i - x)_d.
template <int D, class T>
PMKIT_HD PMKIT_FORCEINLINE void affine_gather_mesh(const AffineStencil<D, T>& stencil, const T* f, T& value,
                                                   T (&moment)[D]) {
  value = T(0);
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) moment[d] = T(0);
  stencil.for_each([&](std::int64_t i, T w, const T (&off)[D]) {
    const T wf = w * f[i];
    value += wf;
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) moment[d] += wf * off[d];
  });
}

// The particle at slot k of n (positions x: D arrays): out[m n + k] = sum_i w_i f_i and
// out[(count + D m + d) n + k] = sum_i w_i f_i (x_i - x)_d for f = meshes.mesh[m].
template <int D, class T>
PMKIT_HD PMKIT_FORCEINLINE void affine_gather_particle(const Layout<D>& layout, const T* x,
                                                       const AffineMeshes<const T>& meshes, T* out, std::size_t n,
                                                       std::size_t k) {
  T position[D];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) position[d] = x[d * n + k];
  const AffineStencil<D, T> stencil(layout, position);
  for (int m = 0; m < meshes.count; ++m) {
    T value, moment[D];
    affine_gather_mesh(stencil, meshes.mesh[m], value, moment);
    out[m * n + k] = value;
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) out[(meshes.count + D * m + d) * n + k] = moment[d];
  }
}

// A particle's deposit onto mesh m, its stencil given: add(m, node, w_i (value + sum_d
// slope_d (x_i - x)_d)) for each node.
template <int D, class T, class Add>
PMKIT_HD PMKIT_FORCEINLINE void affine_deposit_mesh(const AffineStencil<D, T>& stencil, int m, T value,
                                                    const T (&slope)[D], Add&& add) {
  stencil.for_each([&](std::int64_t i, T w, const T (&off)[D]) {
    T affine = value;
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) affine += slope[d] * off[d];
    add(m, i, w * affine);
  });
}

// The slope of the affine deposit of the particle at slot k of n onto mesh m of `count`:
// slope_m,d = q[(count + D m + d) n + k] (its value is q[m n + k]).
template <int D, class T>
PMKIT_HD PMKIT_FORCEINLINE void read_affine_slope(const T* q, int count, std::size_t n, std::size_t k, int m,
                                                  T (&slope)[D]) {
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) slope[d] = q[(count + D * m + d) * n + k];
}

// The particle at slot k of n, its stencil given: affine_deposit_mesh of q_m = q[m n +
// k] with slope_m (read_affine_slope) onto each mesh m.
template <int D, class T, class Add>
PMKIT_HD PMKIT_FORCEINLINE void affine_spread_stencil(const AffineStencil<D, T>& stencil, const T* q, int count,
                                                      std::size_t n, std::size_t k, Add&& add) {
  for (int m = 0; m < count; ++m) {
    T slope[D];
    read_affine_slope(q, count, n, k, m, slope);
    affine_deposit_mesh(stencil, m, q[m * n + k], slope, add);
  }
}

// The same at the particle's position in x (D arrays), the nodes' storage indices.
template <int D, class T, class Add>
PMKIT_HD PMKIT_FORCEINLINE void affine_spread_particle(const Layout<D>& layout, const T* x, const T* q, int count,
                                                       std::size_t n, std::size_t k, Add&& add) {
  T position[D];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) position[d] = x[d * n + k];
  affine_spread_stencil(AffineStencil<D, T>(layout, position), q, count, n, k, add);
}

}  // namespace pmkit::detail
