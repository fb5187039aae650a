#pragma once
// Internal: a block's deposits onto meshes through a box of nodes in shared memory, for
// the particle step's passes (pmkit/cuda/particle_step.cuh, the library's affine
// deposit). Installed because that public header includes it; not an API of its own.
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "pmkit/detail/cuda/one_word_scale.cuh"
#include "pmkit/detail/layout.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::detail {

// Shared memory a block's box of nodes may take. A binned block's box (a tile of 8^3
// cells and the stencil's reach, or two tiles' across a tile edge) takes a few KB a
// mesh; 24 KB leaves eight blocks of 256 threads on an SM (full occupancy), where the
// 48 KB a block gets without opting in would leave four (docs/tuning.md).
constexpr std::size_t kDepositBoxBytes = 24 * 1024;

// The most one node takes from one particle under kernel K in D dimensions, per unit
// of the particle's value: the peak 1D weight to the power D.
template <class K, int D>
__device__ __forceinline__ double node_peak_weight() {
  const double peak = kernels::peak_weight_1d<K>();
  double weight = 1;
#pragma unroll
  for (int d = 0; d < D; ++d) weight *= peak;
  return weight;
}

// The largest |value + slope . offset| of an affine deposit over the nodes of its
// quadratic B-spline stencil, whose offsets reach at most 1.5 cells along each axis:
// a bound on the deposit's contribution to one node before the weight.
template <int D, class T>
__host__ __device__ __forceinline__ double affine_reach(const Layout<D>& layout, T value, const T (&slope)[D]) {
  double reach = fabs(static_cast<double>(value));
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) reach += fabs(static_cast<double>(slope[d])) * 1.5 * layout.axis[d].spacing;
  return reach;
}

// The most meshes a block's box of nodes takes.
constexpr int kMaxBoxMeshes = 8;

// The deposits of a block's particles (binned neighbours, so that their nodes lie close),
// P a thread, onto `count` (at most kMaxBoxMeshes) meshes of `layout`, each particle
// reaching the `support` nodes from its base along each axis: where the box of the
// block's nodes fits in `box_bytes` of `box` (shared memory), summed there, then added to
// the meshes, one global atomic a node touched (a block's particles share most of their
// nodes, so that more particles a block means fewer global atomics a particle); else
// (particles far apart) each particle's nodes added to the meshes directly.
//
// A float box holds one 32-bit fixed-point word a node: each contribution is scaled by
// one_word_scale of the block's bound on any node's sum of that mesh, rounded and added
// with the native shared integer add, where a float add would be a compare-and-swap loop
// that the block's neighbouring particles, adding to the same nodes at once, keep
// retrying. bound(i, most) sets most[m], m < count, to the most that the thread's
// active particle i adds to one node of mesh m (its largest weight times the magnitude
// of its largest contribution before the weight). A non-finite bound makes the box's
// every node NaN, as the plan's spread does. A double box sums in doubles (a double's
// bits do not fit one word).
//
// deposit(where, i, add) adds the thread's particle i's contributions, add(m, index,
// value), with the node indices of `where`: the box's layout (a Keep axis from the box's
// first node, the box's strides) or the meshes' own. Every thread of the block calls it
// (active[i]: whether the thread's particle i deposits); `first` and `last`: D ints of
// shared memory each. Where `unwrap` is set, base is taken on each periodic axis within
// half the axis of the block's first thread's first base (so that a block whose particles
// straddle the periodic seam keeps a small box) and deposit must use base as this leaves
// it; else base is left as it is (the box then spans the seam's axis).
template <int D, int P, class T, class Bound, class Deposit>
__device__ __forceinline__ void block_deposit(const Layout<D>& layout, T* const* meshes, int count, int support,
                                              const bool (&active)[P], int (&base)[P][D], bool unwrap, void* box,
                                              std::size_t box_bytes, int* first, int* last, Bound&& bound,
                                              Deposit&& deposit) {
  constexpr bool kFixedPoint = std::is_same<T, float>::value;
  __shared__ int reference[D];
  __shared__ double block_bound[kMaxBoxMeshes];
  __shared__ float scale[kMaxBoxMeshes];
  __shared__ double unscale[kMaxBoxMeshes];
  if (threadIdx.x < D) {
    first[threadIdx.x] = INT_MAX;
    last[threadIdx.x] = INT_MIN;
  }
  if (kFixedPoint && threadIdx.x < count) block_bound[threadIdx.x] = 0;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int d = 0; d < D; ++d) reference[d] = base[0][d];
  }
  __syncthreads();
  int low[D], high[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    low[d] = INT_MAX;
    high[d] = INT_MIN;
  }
  bool any_active = false;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (!active[i]) continue;
    any_active = true;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const Axis& axis = layout.axis[d];
      if (unwrap && axis.kind == AxisKind::Periodic) {
        const int offset = base[i][d] - reference[d];
        if (2 * offset > axis.cells) base[i][d] -= axis.cells;
        else if (2 * offset < -axis.cells) base[i][d] += axis.cells;
      }
      low[d] = min(low[d], base[i][d]);
      high[d] = max(high[d], base[i][d]);
    }
  }
  if (any_active) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      atomicMin(&first[d], low[d]);
      atomicMax(&last[d], high[d]);
    }
  }
  if constexpr (kFixedPoint) {
    // Each mesh's bound summed over the block: a warp's in registers, then one shared add
    // a warp (whose rounding the scale's 2^-20 margin covers).
    double sum[kMaxBoxMeshes] = {};
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (!active[i]) continue;
      double most[kMaxBoxMeshes] = {};
      bound(i, most);
#pragma unroll
      for (int m = 0; m < kMaxBoxMeshes; ++m) sum[m] += most[m];
    }
#pragma unroll
    for (int m = 0; m < kMaxBoxMeshes; ++m) {
      if (m >= count) break;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum[m] += __shfl_down_sync(0xffffffffu, sum[m], offset);
      if (threadIdx.x % 32 == 0 && sum[m] != 0) atomicAdd(&block_bound[m], sum[m]);
    }
  }
  __syncthreads();
  Layout<D> box_layout = layout;
  int extent[D];
  std::int64_t nodes = 1;
  bool any = true;
#pragma unroll
  for (int d = 0; d < D; ++d) {
    any = any && first[d] <= last[d];
    extent[d] = last[d] - first[d] + support;
    box_layout.axis[d].kind = AxisKind::Keep;
    box_layout.axis[d].ghost = -first[d];
    box_layout.stride[d] = nodes;
    nodes *= extent[d];
  }
  if (!any) return;  // no particle in the block deposits (the same for every thread)
  if (nodes * count * static_cast<std::int64_t>(sizeof(T)) > static_cast<std::int64_t>(box_bytes)) {
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (active[i]) deposit(layout, i, [&](int m, std::int64_t j, T value) { atomicAdd(meshes[m] + j, value); });
    return;
  }
  // The box fits in shared memory, so its indices fit an int.
  const int box_nodes = static_cast<int>(nodes);
  const int values = box_nodes * count;
  using Word = typename std::conditional<kFixedPoint, int, T>::type;
  Word* words = static_cast<Word*>(box);
  for (int j = threadIdx.x; j < values; j += blockDim.x) words[j] = Word(0);
  if (kFixedPoint && threadIdx.x < count) {
    const double s = one_word_scale(block_bound[threadIdx.x]);
    scale[threadIdx.x] = static_cast<float>(s);
    unscale[threadIdx.x] = 1.0 / s;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < P; ++i)
    if (active[i])
      deposit(box_layout, i, [&](int m, std::int64_t j, T value) {
        if constexpr (kFixedPoint) atomicAdd(words + m * nodes + j, __float2int_rn(value * scale[m]));
        else atomicAdd(words + m * nodes + j, value);
      });
  __syncthreads();
  for (int j = threadIdx.x; j < values; j += blockDim.x) {
    const int m = j / box_nodes;
    T value;
    if constexpr (kFixedPoint) value = static_cast<T>(words[j] * unscale[m]);
    else value = words[j];
    if (value == T(0)) continue;  // NaN is never skipped
    int rest = j - m * box_nodes;
    std::int64_t index = 0;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int along = rest % extent[d];
      rest /= extent[d];
      index += layout.axis[d].node(first[d] + along) * layout.stride[d];
    }
    atomicAdd(meshes[m] + index, value);
  }
}

}  // namespace pmkit::detail
