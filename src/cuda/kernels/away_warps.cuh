#pragma once
// update_points' away particles where a stencil has many nodes (tuning::away_by_warps):
// one warp a particle, its S^(D-1) x-rows shared among the lanes. A lane adds or reads
// its row as the one-thread kernels do (spread: add_row's vector atomics, the same
// atomics a particle as spread_atomics_kernel), so all of a particle's rows are in
// flight at once instead of one thread's rows in turn, and the index and weight
// arithmetic is a row's a lane. The gathers' row sums meet in a warp reduction; lane 0
// stores them.
#include <cstdint>

#include "pmkit/detail/stencil.hpp"
#include "cuda/kernels/gradient.cuh"
#include "cuda/kernels/interp.cuh"
#include "cuda/kernels/mesh_rows.cuh"

namespace pmkit::cuda {

// The head of the one-warp-per-particle kernels: warp w of the grid takes records w, w +
// the grid's warps, ... of the away list below items.value() and calls f(k, base, s,
// lane) for each. A warp's lanes take the same record, so f may reduce across the warp.
template <class K, int D, class T, class F>
__device__ __forceinline__ void with_warp_record(const BinGeometry<D>& geo, const Packed<T>* particles,
                                                 ItemCount items, F&& f) {
  const std::size_t n = items.value();
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x / 32;
  for (std::size_t w = (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) / 32; w < n; w += step) {
    int base[D];
    T s[D];
    record_stencil<K, D>(geo, particles[w], base, s);
    f(w, base, s, static_cast<int>(threadIdx.x % 32));
  }
}

// Calls f(row_index, y, z) for each of lane `lane`'s x-rows of the stencil `rows` (rows
// lane, lane + 32, ...; row r is y-node r % S and z-node r / S, as StencilRows'). The
// row depends on the lane, so its nodes and weights are taken with pick (kept in
// registers) rather than StencilRows::row_index and row_weight, whose indexing by a
// value known only at run time would put the arrays in local memory.
template <class K, int D, class T, class F>
__device__ __forceinline__ void for_each_lane_row(const detail::StencilRows<K, D, T>& rows, int lane, F&& f) {
  constexpr int S = K::support;
  constexpr int kRows = detail::StencilRows<K, D, T>::kRows;
  PMKIT_UNROLL
  for (int first = 0; first < kRows; first += 32) {
    const int r = first + lane;
    if (r < kRows) {
      const int y = r % S, z = r / S;  // z = 0 in 2D
      std::int64_t index = pick(rows.nodes[1], y);
      if constexpr (D == 3) index += pick(rows.nodes[2], z);
      f(index, y, z);
    }
  }
}

// The weight of row (y, z), as StencilRows::row_weight.
template <class K, int D, class T>
__device__ __forceinline__ T lane_row_weight(const detail::StencilRows<K, D, T>& rows, int y, int z) {
  if constexpr (D == 2) return pick(rows.weights[1], y);
  else return pick(rows.weights[2], z) * pick(rows.weights[1], y);
}

// for_each_lane_row for a pass of `count` properties: f(row_index, row_weight, j) for each
// of the lane's rows and each property j < count.
template <class K, int D, class T, class F>
__device__ __forceinline__ void for_each_lane_prop_row(const detail::StencilRows<K, D, T>& rows, int lane, int count,
                                                       F&& f) {
  for_each_lane_row<K, D>(rows, lane, [&](std::int64_t row, int y, int z) {
    const T w_row = lane_row_weight(rows, y, z);
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < count) f(row, w_row, j);
  });
}

// One warp an away particle, global atomics: spread_atomics_kernel's rows, a lane's
// rows each.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    spread_away_warps_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                             const std::uint32_t* slots, const std::uint32_t* perm, ItemCount items, PropPass<T> pass) {
  with_warp_record<K, D>(geo, particles, items, [&](std::size_t i, const int (&base)[D], const T (&s)[D], int lane) {
    const std::uint32_t p = perm[slots[i]];
    T q[tuning::kPropsPerPass];
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j) q[j] = j < pass.count ? load_prop(pass, j, p) : T(0);
    constexpr int S = K::support;
    const detail::StencilRows<K, D, T> rows(layout, base, s);
    for_each_lane_prop_row<K, D>(rows, lane, pass.count, [&](std::int64_t row, T w_row, int j) {
      T v[S];
#pragma unroll
      for (int a = 0; a < S; ++a) v[a] = q[j] * (w_row * rows.weights[0][a]);
      add_row(pass.meshes[j], row, rows.nodes[0], v);
    });
  });
}

// The sum of acc over the warp's lanes, in every lane.
template <class T, int N>
__device__ __forceinline__ void warp_sum(T (&acc)[N]) {
  PMKIT_UNROLL
  for (int offset = 16; offset > 0; offset /= 2)
    PMKIT_UNROLL
    for (int j = 0; j < N; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], offset);
}

// One warp an away particle: interp_kernel's values.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    interp_away_warps_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                             const std::uint32_t* slots, ItemCount items, PropPass<T> pass, InterpOutput<T> out) {
  with_warp_record<K, D>(geo, particles, items, [&](std::size_t i, const int (&base)[D], const T (&s)[D], int lane) {
    T acc[tuning::kPropsPerPass] = {};
    const detail::StencilRows<K, D, T> rows(layout, base, s);
    for_each_lane_prop_row<K, D>(rows, lane, pass.count, [&](std::int64_t row, T w_row, int j) {
      T sum = 0;
      PMKIT_UNROLL
      for (int a = 0; a < K::support; ++a) sum += rows.weights[0][a] * __ldg(pass.meshes[j] + row + rows.nodes[0][a]);
      acc[j] += w_row * sum;
    });
    warp_sum(acc);
    if (lane == 0) out.store(pass, pass.count, slots[i], acc);
  });
}

// One warp an away particle: interp_gradient_kernel's gradient.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    interp_gradient_away_warps_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                                      const std::uint32_t* slots, ItemCount items, PropPass<T> pass,
                                      GradientOutput<T, D> out, InverseSpacing<T, D> inverse) {
  constexpr int S = K::support;
  with_warp_record<K, D>(geo, particles, items, [&](std::size_t i, const int (&base)[D], const T (&s)[D], int lane) {
    const detail::StencilRows<K, D, T> rows(layout, base, s);
    T dw1d[D][S];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) kernels::weight_derivatives_1d<K>(s[d], dw1d[d]);
    T acc[D] = {};
    // Per row the sums of w_x f and of w_x' f; then, as GradientGather, x takes the row's
    // weight, y and z its derivatives along them.
    for_each_lane_row<K, D>(rows, lane, [&](std::int64_t row, int y, int z) {
      T sum = 0, dsum = 0;
      PMKIT_UNROLL
      for (int a = 0; a < S; ++a) {
        const T f = __ldg(pass.meshes[0] + row + rows.nodes[0][a]);
        sum += rows.weights[0][a] * f;
        dsum += dw1d[0][a] * f;
      }
      acc[0] += lane_row_weight(rows, y, z) * dsum;
      if constexpr (D == 2) {
        acc[1] += pick(dw1d[1], y) * sum;
      } else {
        acc[1] += pick(rows.weights[2], z) * pick(dw1d[1], y) * sum;
        acc[2] += pick(dw1d[2], z) * pick(rows.weights[1], y) * sum;
      }
    });
    warp_sum(acc);
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) acc[e] *= inverse.t[e];
    if (lane == 0) out.store(pass, slots[i], acc);
  });
}

}  // namespace pmkit::cuda
