#pragma once
// The baselines pmkit is measured against: what a user writes without it. One thread
// per particle straight from the caller's arrays, global atomicAdd for P2M and a plain
// gather for M2P; run on the particles as given ("unsorted") and after a CUB radix
// sort by cell ("sorted", the sort timed apart). Weights come from the same kernel
// definitions as pmkit (include/pmkit/kernels.hpp), so only the method differs.
#include <cub/device/device_radix_sort.cuh>

#include "pmkit/detail/layout.hpp"
#include "pmkit/detail/stencil.hpp"

namespace pmkit::bench {

template <int D, class T>
struct Particles {
  const T* x[D];
  const T* q[4];
  int props;
  int q_stride = 1;  // properties interleaved (x0 y0 z0 x1 ...): q[j] = base + j, stride props
};

template <class K, int D, class T>
__device__ __forceinline__ void naive_locate(const detail::Layout<D>& layout, const Particles<D, T>& p,
                                             std::size_t i, int (&base)[D], T (&s)[D]) {
#pragma unroll
  for (int d = 0; d < D; ++d) {
    // In the caller's precision, as a hand-written kernel would (h = 1, origin 0).
    const T u = (p.x[d][i] - T(layout.axis[d].origin)) / T(layout.axis[d].spacing);
    kernels::locate<K>(u, base[d], s[d]);
  }
}

template <class K, int D, class T>
__global__ void naive_p2m(detail::Layout<D> layout, Particles<D, T> p, std::size_t n, T* const* meshes) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int base[D];
  T s[D];
  naive_locate<K>(layout, p, i, base, s);
  T q[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) q[j] = j < p.props ? p.q[j][i * p.q_stride] : T(0);
  detail::for_each_node<K, D>(layout, base, s, [&](std::int64_t node, T w) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < p.props) atomicAdd(meshes[j] + node, q[j] * w);
  });
}

template <class K, int D, class T>
__global__ void naive_m2p(detail::Layout<D> layout, Particles<D, T> p, std::size_t n, const T* mesh, T* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int base[D];
  T s[D];
  naive_locate<K>(layout, p, i, base, s);
  T acc = 0;
  detail::for_each_node<K, D>(layout, base, s, [&](std::int64_t node, T w) { acc += w * __ldg(mesh + node); });
  out[i] = acc;
}

// Cell key of each particle (x fastest), for the sorted baseline.
template <int D, class T>
__global__ void cell_keys(detail::Layout<D> layout, Particles<D, T> p, std::size_t n, unsigned* keys,
                          unsigned* index) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  unsigned key = 0;
  for (int d = D - 1; d >= 0; --d) {
    int c = static_cast<int>(floor(p.x[d][i]));
    c = min(max(c, 0), layout.axis[d].cells - 1);
    key = key * layout.axis[d].cells + c;
  }
  keys[i] = key;
  index[i] = static_cast<unsigned>(i);
}

// dst[i] = src[index[i]], each with its stride (interleaved properties).
template <class T>
__global__ void gather_by(const unsigned* index, std::size_t n, const T* src, T* dst, int src_stride = 1,
                          int dst_stride = 1) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i * dst_stride] = src[std::size_t(index[i]) * src_stride];
}

}  // namespace pmkit::bench
