#pragma once
// What the particle step's one pass over the particles needs besides the caller's
// update, on the host and the device alike (pmkit/particle_step.hpp): the fields
// interpolated at a particle from its position, and the check and wrap of its new
// position.
#include <cstdint>

#include "pmkit/config.hpp"
#include "pmkit/detail/affine_stencil.hpp"
#include "pmkit/detail/layout.hpp"
#include "pmkit/detail/stencil.hpp"
#include "pmkit/grid.hpp"

namespace pmkit::detail {

// One axis of the domain as the step's position check sees it.
struct StepAxis {
  double origin = 0;
  double extent = 0;
  bool periodic = true;
};
template <int D>
struct StepAxes {
  StepAxis axis[D];
  PMKIT_HD const StepAxis& operator[](int d) const { return axis[d]; }
};
template <int D>
StepAxes<D> step_axes(const Grid<D>& grid) {
  StepAxes<D> axes;
  for (int d = 0; d < D; ++d)
    axes.axis[d] = {grid.origin[d], grid.spacing[d] * static_cast<double>(grid.cells[d]),
                    grid.boundary[d] == Boundary::Periodic};
  return axes;
}

// A new position on one axis: false where it is not finite or outside a bounded axis
// (x left as it is); on a periodic axis wrapped into [origin, origin + extent) (left as
// it is where it lies there already).
template <class T>
PMKIT_HD inline bool wrap_position(T& x, const StepAxis& axis) {
  const double offset = static_cast<double>(x) - axis.origin;
  double u = offset;
  if (!wrap_coordinate(u, axis.extent, axis.periodic)) return false;
  if (u == offset) return true;
  T wrapped = static_cast<T>(axis.origin + u);
  if (!(static_cast<double>(wrapped) - axis.origin < axis.extent)) wrapped = static_cast<T>(axis.origin);
  x = wrapped;
  return true;
}

// The most meshes of values, of gradients and of deposits a step takes.
constexpr int kMaxStepMeshes = 8;

// The step's interpolation in the update's pass, and its position check: the plan's
// layout (kernel of type K, chosen where the pass is launched), the meshes (each the
// plan's mesh_size() contiguous values), the domain.
template <class T, int D>
struct StepGather {
  Layout<D> layout;
  StepAxes<D> axes;
  T spacing[D];  // the gradients' divisors, as the plan's interp_gradient divides
  const T* values[kMaxStepMeshes] = {};
  const T* gradients[kMaxStepMeshes] = {};
  AffineMeshes<const T> affine;
  // Whether the pass interpolates (else the fields come from the plan's interp calls,
  // in StepArrays::fields).
  bool fused = false;
  // Whether the pass deposits (a CUDA plan's fast mode; else the deposits go through
  // StepArrays::deposits to the library's passes): onto these meshes, the plain
  // deposits with the plan's kernel, the affine ones on the quadratic B-spline.
  bool fused_deposits = false;
  T* deposits[kMaxStepMeshes] = {};
  AffineMeshes<T> affine_deposits;
};

// The stencil of kernel K at position x (inside the domain) as the plan's binning
// finds it: the first node and the local coordinate along each axis.
template <class K, class T, int D>
PMKIT_HD PMKIT_FORCEINLINE void locate_position(const Layout<D>& layout, const T (&x)[D], int (&base)[D],
                                                T (&s)[D]) {
  double u[D];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) layout.axis[d].coordinate(static_cast<double>(x[d]), u[d]);
  locate_particle<K, D>(u, base, s);
}

// The fields of a step at particle p's position (p.x, inside the domain): its values,
// gradients and affine values with their moments, each the sum that the plan's interp,
// interp_gradient (on the CPU backend: the same operations in the same order) and the
// affine gather form at that position.
template <class K, int V, int G, int AV, class T, int D, class Particle>
PMKIT_HD PMKIT_FORCEINLINE void gather_fields(const StepGather<T, D>& g, Particle& p) {
  if constexpr (V > 0 || G > 0) {
    int base[D];
    T s[D];
    locate_position<K>(g.layout, p.x, base, s);
    if constexpr (V > 0) {
      PMKIT_UNROLL
      for (int j = 0; j < V; ++j) p.value[j] = T(0);
      for_each_node<K, D>(g.layout, base, s, [&](std::int64_t i, T w) {
        PMKIT_UNROLL
        for (int j = 0; j < V; ++j) p.value[j] += w * g.values[j][i];
      });
    }
    if constexpr (G > 0) {
      PMKIT_UNROLL
      for (int j = 0; j < G; ++j) {
        PMKIT_UNROLL
        for (int d = 0; d < D; ++d) p.gradient[j][d] = T(0);
      }
      for_each_node_gradient<K, D>(g.layout, base, s, [&](std::int64_t i, const T (&dw)[D]) {
        PMKIT_UNROLL
        for (int j = 0; j < G; ++j) {
          const T f = g.gradients[j][i];
          PMKIT_UNROLL
          for (int d = 0; d < D; ++d) p.gradient[j][d] += dw[d] * f;
        }
      });
      PMKIT_UNROLL
      for (int j = 0; j < G; ++j) {
        PMKIT_UNROLL
        for (int d = 0; d < D; ++d) p.gradient[j][d] = p.gradient[j][d] / g.spacing[d];
      }
    }
  }
  if constexpr (AV > 0) {
    const AffineStencil<D, T> stencil(g.layout, p.x);
    PMKIT_UNROLL
    for (int m = 0; m < AV; ++m) affine_gather_mesh(stencil, g.affine.mesh[m], p.affine_value[m], p.affine_moment[m]);
  }
}

}  // namespace pmkit::detail
