#pragma once
// Internal: a block's deposits onto meshes through a box of nodes in shared memory, for
// the particle step's passes (pmkit/cuda/particle_step.cuh, the library's affine
// deposit). Installed because that public header includes it; not an API of its own.
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

#include "pmkit/detail/layout.hpp"

namespace pmkit::detail {

// Shared memory a block's box of nodes may take. A binned block's box (a tile of 8^3
// cells and the stencil's reach, or two tiles' across a tile edge) takes a few KB a
// mesh; 24 KB leaves eight blocks of 256 threads on an SM (full occupancy), where the
// 48 KB a block gets without opting in would leave four (docs/tuning.md).
constexpr std::size_t kDepositBoxBytes = 24 * 1024;

// The deposits of a block's particles (binned neighbours, so that their nodes lie close),
// P a thread, onto `count` meshes of `layout`, each particle reaching the `support` nodes
// from its base along each axis: where the box of the block's nodes fits in `box_bytes`
// of `box` (shared memory), summed there with shared atomics, then added to the meshes,
// one global atomic a node touched (a block's particles share most of their nodes, so
// that more particles a block means fewer global atomics a particle); else (particles far
// apart) each particle's nodes added to the meshes directly. deposit(where, i, add) adds
// the thread's particle i's contributions, add(m, index, value), with the node indices of
// `where`: the box's layout (a Keep axis from the box's first node, the box's strides) or
// the meshes' own. Every thread of the block calls it (active[i]: whether the thread's
// particle i deposits); `first` and `last`: D ints of shared memory each. Where `unwrap`
// is set, base is taken on each periodic axis within half the axis of the block's first
// thread's first base (so that a block whose particles straddle the periodic seam keeps
// a small box) and deposit must use base as this leaves it; else base is left as it is
// (the box then spans the seam's axis).
template <int D, int P, class T, class Deposit>
__device__ __forceinline__ void block_deposit(const Layout<D>& layout, T* const* meshes, int count, int support,
                                              const bool (&active)[P], int (&base)[P][D], bool unwrap, T* box,
                                              std::size_t box_bytes, int* first, int* last, Deposit&& deposit) {
  __shared__ int reference[D];
  if (threadIdx.x < D) {
    first[threadIdx.x] = INT_MAX;
    last[threadIdx.x] = INT_MIN;
  }
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
  for (int j = threadIdx.x; j < values; j += blockDim.x) box[j] = T(0);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < P; ++i)
    if (active[i])
      deposit(box_layout, i, [&](int m, std::int64_t j, T value) { atomicAdd(box + m * nodes + j, value); });
  __syncthreads();
  for (int j = threadIdx.x; j < values; j += blockDim.x) {
    const T value = box[j];
    if (value == T(0)) continue;
    const int m = j / box_nodes;
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
