#pragma once
// The per-particle stencil every backend shares: the S^D nodes a particle reaches and
// their tensor-product weights. Backends pass a functor that does the one thing they
// differ in (add to the mesh, read from it, atomically or not).
#include <cstdint>

#include "pmkit/detail/layout.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::detail {

// The 1D weights of kernels::weights_1d: Horner in the compiler's own arithmetic (a
// device compiler fuses its multiplies and adds), the weights every backend's plan uses.
struct HornerWeights {
  template <class K, class T>
  PMKIT_HD PMKIT_FORCEINLINE static void apply(T s, T (&w)[K::support]) {
    kernels::weights_1d<K>(s, w);
  }
};

// Where a particle lands: per dimension the first logical node and the local
// coordinate s in [0, 1). Computed once, in double, at binning time.
template <class K, int D, class R>
PMKIT_HD PMKIT_FORCEINLINE void locate_particle(const double (&u)[D], int (&base)[D], R (&s)[D]) {
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    double sd;
    kernels::locate<K>(u[d], base[d], sd);
    s[d] = static_cast<R>(sd);
  }
}

// A particle's stencil as S^(D-1) x-rows: per row r the y (and z) part of the mesh
// index and the row's weight; per x-node a (weights[0][a], nodes[0][a]) its weight and
// storage index. nodes[0][a] is consecutive in a unless the row crosses a periodic seam
// or a fold. A kernel that adds a row with vector atomics (cuda/kernels/mesh_rows.cuh)
// walks it by rows; for_each_node walks the same nodes with the same weights. Weights:
// how the 1D weights are evaluated (HornerWeights, or a policy that rounds the same on
// host and device).
template <class K, int D, class T, class Weights = HornerWeights>
struct StencilRows {
  static constexpr int S = K::support;
  static constexpr int kRows = D == 2 ? S : S * S;
  T weights[D][S];
  std::int64_t nodes[D][S];  // storage index times the axis' stride

  PMKIT_HD PMKIT_FORCEINLINE StencilRows(const Layout<D>& layout, const int (&base)[D], const T (&s)[D]) {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      Weights::template apply<K>(s[d], weights[d]);
      PMKIT_UNROLL
      for (int k = 0; k < S; ++k) nodes[d][k] = layout.axis[d].node(base[d] + k) * layout.stride[d];
    }
  }
  // Row r: y-node r % S, z-node r / S.
  PMKIT_HD PMKIT_FORCEINLINE std::int64_t row_index(int r) const {
    if constexpr (D == 2) return nodes[1][r];
    else return nodes[2][r / S] + nodes[1][r % S];
  }
  PMKIT_HD PMKIT_FORCEINLINE T row_weight(int r) const {
    if constexpr (D == 2) return weights[1][r];
    else return weights[2][r / S] * weights[1][r % S];
  }
};

// Calls f(row_index, row_weight, x_weights, x_nodes) for each x-row of the stencil.
template <class K, int D, class Weights = HornerWeights, class T, class F>
PMKIT_HD PMKIT_FORCEINLINE void for_each_row(const Layout<D>& layout, const int (&base)[D], const T (&s)[D],
                                             F&& f) {
  const StencilRows<K, D, T, Weights> rows(layout, base, s);
  PMKIT_UNROLL
  for (int r = 0; r < rows.kRows; ++r) f(rows.row_index(r), rows.row_weight(r), rows.weights[0], rows.nodes[0]);
}

// Calls f(mesh_index, weight) for each of the S^D nodes of a particle (weight = the
// row's weight times the x-weight, in that order, on every backend).
template <class K, int D, class Weights = HornerWeights, class T, class F>
PMKIT_HD PMKIT_FORCEINLINE void for_each_node(const Layout<D>& layout, const int (&base)[D],
                                              const T (&s)[D], F&& f) {
  constexpr int S = K::support;
  for_each_row<K, D, Weights>(layout, base, s,
                     [&](std::int64_t row, T w_row, const T (&wx)[S], const std::int64_t (&x)[S]) {
                       PMKIT_UNROLL
                       for (int a = 0; a < S; ++a) f(row + x[a], w_row * wx[a]);
                     });
}

// Calls f(mesh_index, dw) for each of the S^D nodes of a particle, dw[d] the derivative
// of the node's weight with respect to the particle's grid coordinate u_d (divide by the
// spacing for d/dx_d): the product of the 1D weights with axis d's differentiated
// (kernels::weight_derivatives_1d). Nodes in for_each_node's order, the products formed
// row by row: per x-row the row's weight and its derivatives along y (and z), then per
// x-node one product each.
template <class K, int D, class T, class F>
PMKIT_HD PMKIT_FORCEINLINE void for_each_node_gradient(const Layout<D>& layout, const int (&base)[D],
                                                       const T (&s)[D], F&& f) {
  constexpr int S = K::support;
  const StencilRows<K, D, T> rows(layout, base, s);
  T dw1d[D][S];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) kernels::weight_derivatives_1d<K>(s[d], dw1d[d]);
  constexpr int kRows = StencilRows<K, D, T>::kRows;
  PMKIT_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t row = rows.row_index(r);
    // The row's weight and its derivative along each of y (and z); x's comes per node.
    T row_weight, row_derivative[D];
    if constexpr (D == 2) {
      row_weight = rows.weights[1][r];
      row_derivative[1] = dw1d[1][r];
    } else {
      const int y = r % S, z = r / S;
      row_weight = rows.weights[2][z] * rows.weights[1][y];
      row_derivative[1] = rows.weights[2][z] * dw1d[1][y];
      row_derivative[2] = dw1d[2][z] * rows.weights[1][y];
    }
    PMKIT_UNROLL
    for (int a = 0; a < S; ++a) {
      T dw[D];
      dw[0] = row_weight * dw1d[0][a];
      PMKIT_UNROLL
      for (int d = 1; d < D; ++d) dw[d] = row_derivative[d] * rows.weights[0][a];
      f(row + rows.nodes[0][a], dw);
    }
  }
}

}  // namespace pmkit::detail
