#pragma once
// update_points' away particles where a stencil has many nodes (tuning::away_by_warps):
// one warp a particle, its S^D nodes shared among the lanes in for_each_node's order (x
// fastest). A warp instruction then covers a few whole consecutive rows of one particle,
// so its atomics (spread) and loads (interp, interp_gradient) fall on a few sectors, and
// all of a particle's nodes are in flight at once instead of one thread's S^D in turn.
// The gathers' lane sums meet in a warp reduction; lane 0 stores them.
#include <cstdint>

#include "core/stencil.hpp"
#include "cuda/kernels/gradient.cuh"
#include "cuda/kernels/interp.cuh"

namespace pmkit::cuda {

// The head of the one-warp-per-particle kernels: warp w of the grid takes record w of
// the away list and calls f(w, base, s, lane). Whole warps return together (blocks of
// whole warps), so f may reduce across the warp.
template <class K, int D, class T, class F>
__device__ __forceinline__ void with_warp_record(const BinGeometry<D>& geo, const Packed<T>* particles, std::size_t n,
                                                 F&& f) {
  const std::size_t w = (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) / 32;
  if (w >= n) return;
  int base[D];
  T s[D];
  record_stencil<K, D>(geo, particles[w], base, s);
  f(w, base, s, static_cast<int>(threadIdx.x % 32));
}

// Calls f(node_index, k) for each of lane `lane`'s nodes of the stencil `rows` (nodes
// lane, lane + 32, ... in for_each_node's order), k[d] the node's offset along axis d.
template <class K, int D, class T, class F>
__device__ __forceinline__ void for_each_lane_node(const detail::StencilRows<K, D, T>& rows, int lane, F&& f) {
  constexpr int S = K::support;
  constexpr int kNodes = detail::StencilRows<K, D, T>::kRows * S;
  PMKIT_UNROLL
  for (int first = 0; first < kNodes; first += 32) {
    const int m = first + lane;
    if (m < kNodes) {
      int k[D];
      k[0] = m % S;
      k[1] = (m / S) % S;
      if constexpr (D == 3) k[2] = m / (S * S);
      std::int64_t index = 0;
      PMKIT_UNROLL
      for (int d = 0; d < D; ++d) index += pick(rows.nodes[d], k[d]);
      f(index, k);
    }
  }
}

// The row's weight (y, or z times y) of the node at offsets k, as StencilRows::row_weight.
template <class K, int D, class T>
__device__ __forceinline__ T lane_row_weight(const detail::StencilRows<K, D, T>& rows, const int (&k)[D]) {
  if constexpr (D == 2) return pick(rows.weights[1], k[1]);
  else return pick(rows.weights[2], k[2]) * pick(rows.weights[1], k[1]);
}

// One warp an away particle, global atomics: spread_atomics_kernel's sums, a lane's
// nodes each.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    spread_away_warps_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                             const std::uint32_t* slots, const std::uint32_t* perm, std::size_t n, PropPass<T> pass) {
  with_warp_record<K, D>(geo, particles, n, [&](std::size_t i, const int (&base)[D], const T (&s)[D], int lane) {
    const std::uint32_t p = perm[slots[i]];
    T q[tuning::kPropsPerPass];
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j) q[j] = j < pass.count ? load_prop(pass, j, p) : T(0);
    const detail::StencilRows<K, D, T> rows(layout, base, s);
    for_each_lane_node<K, D>(rows, lane, [&](std::int64_t node, const int (&k)[D]) {
      const T w = lane_row_weight(rows, k) * pick(rows.weights[0], k[0]);
#pragma unroll
      for (int j = 0; j < tuning::kPropsPerPass; ++j)
        if (j < pass.count) atomicAdd(pass.meshes[j] + node, q[j] * w);
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
                             const std::uint32_t* slots, std::size_t n, PropPass<T> pass, InterpOutput<T> out) {
  with_warp_record<K, D>(geo, particles, n, [&](std::size_t i, const int (&base)[D], const T (&s)[D], int lane) {
    T acc[tuning::kPropsPerPass] = {};
    const detail::StencilRows<K, D, T> rows(layout, base, s);
    for_each_lane_node<K, D>(rows, lane, [&](std::int64_t node, const int (&k)[D]) {
      const T w = lane_row_weight(rows, k) * pick(rows.weights[0], k[0]);
#pragma unroll
      for (int j = 0; j < tuning::kPropsPerPass; ++j)
        if (j < pass.count) acc[j] += w * __ldg(pass.meshes[j] + node);
    });
    warp_sum(acc);
    if (lane == 0) out.store(pass, pass.count, slots[i], acc);
  });
}

// One warp an away particle: interp_gradient_kernel's gradient, each node's weight
// derivatives formed as for_each_node_gradient forms them.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    interp_gradient_away_warps_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                                      const std::uint32_t* slots, std::size_t n, PropPass<T> pass,
                                      GradientOutput<T, D> out, InverseSpacing<T, D> inverse) {
  constexpr int S = K::support;
  with_warp_record<K, D>(geo, particles, n, [&](std::size_t i, const int (&base)[D], const T (&s)[D], int lane) {
    const detail::StencilRows<K, D, T> rows(layout, base, s);
    T dw1d[D][S];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) kernels::weight_derivatives_1d<K>(s[d], dw1d[d]);
    T acc[D] = {};
    for_each_lane_node<K, D>(rows, lane, [&](std::int64_t node, const int (&k)[D]) {
      const T wx = pick(rows.weights[0], k[0]);
      T dw[D];
      dw[0] = lane_row_weight(rows, k) * pick(dw1d[0], k[0]);
      if constexpr (D == 2) {
        dw[1] = pick(dw1d[1], k[1]) * wx;
      } else {
        dw[1] = pick(rows.weights[2], k[2]) * pick(dw1d[1], k[1]) * wx;
        dw[2] = pick(dw1d[2], k[2]) * pick(rows.weights[1], k[1]) * wx;
      }
      const T f = __ldg(pass.meshes[0] + node);
      PMKIT_UNROLL
      for (int e = 0; e < D; ++e) acc[e] += dw[e] * f;
    });
    warp_sum(acc);
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) acc[e] *= inverse.t[e];
    if (lane == 0) out.store(pass, slots[i], acc);
  });
}

}  // namespace pmkit::cuda
