#pragma once
#include <cstdint>

#include "cuda/kernels/mesh_rows.cuh"
#include "cuda/kernels/tiles.cuh"

namespace pmkit::cuda {

// ---------------------------------------------------------------------------------
// P2M fallback: one thread per particle in tile order, global atomics. Also spreads the
// away list of update_points (slots: each record's binned slot, for its property).
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    spread_atomics_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                          const std::uint32_t* slots, const std::uint32_t* perm, ItemCount items, PropPass<T> pass) {
  with_own_record<K, D>(geo, particles, items, [&](std::size_t i, const int (&base)[D], const T (&s)[D]) {
    const std::uint32_t p = perm[slots ? slots[i] : i];
    T q[tuning::kPropsPerPass];
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j) q[j] = j < pass.count ? load_prop(pass, j, p) : T(0);
    constexpr int S = K::support;
    detail::for_each_row<K, D>(layout, base, s, [&](std::int64_t row, T w_row, const T (&wx)[S],
                                                    const std::int64_t (&x)[S]) {
#pragma unroll
      for (int j = 0; j < tuning::kPropsPerPass; ++j) {
        if (j >= pass.count) continue;
        T v[S];
#pragma unroll
        for (int a = 0; a < S; ++a) v[a] = q[j] * (w_row * wx[a]);
        add_row(pass.meshes[j], row, x, v);
      }
    });
  });
}

}  // namespace pmkit::cuda
