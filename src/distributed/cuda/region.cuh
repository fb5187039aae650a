#pragma once
// The owned nodes of a CUDA rank's local meshes: the block's place in them and the one
// kernel that walks them, moving each node between a caller's block and a local mesh
// (CopyNode here, the deterministic spread's rounding in exact_spread.cu).
#include <algorithm>
#include <cstdint>

#include "distributed/cuda/launch.cuh"
#include "distributed/region.hpp"
#include "cuda/runtime.hpp"

namespace pmkit::distributed {

template <int D>
struct DeviceRegion {
  std::int64_t start[D], shape[D], local[D];
  std::int64_t size;
  std::int64_t rows;  // rows along x: the product of shape[1..D)
};

enum class Copy { BlockToLocal, LocalToBlock, AddToBlock };

// One owned node between a caller's block (index k) and a local mesh (index l).
template <class T>
struct CopyNode {
  T* block;
  T* local;
  Copy copy;
  __device__ void operator()(std::int64_t k, std::int64_t l) const {
    if (copy == Copy::BlockToLocal) local[l] = block[k];
    else if (copy == Copy::LocalToBlock) block[k] = local[l];
    else block[k] += local[l];
  }
};

// Rows of the launch grid's y dimension at most (CUDA's limit); more rows loop.
constexpr unsigned kMaxGridRows = 65535;

// Threads along a row (x), rows over the grid's y: one division per row and thread, in
// 32 bits (a row index fits them), rather than 64-bit ones per node. node(k, l) moves
// block node k and local node l.
template <class Node, int D>
__global__ void region_kernel(DeviceRegion<D> r, Node node) {
  const std::int64_t x = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (x >= r.shape[0]) return;
  for (std::int64_t row = blockIdx.y; row < r.rows; row += gridDim.y) {
    std::int64_t l = r.start[0] + x;
    if constexpr (D == 2) {
      l += (r.start[1] + row) * r.local[0];
    } else {
      const unsigned y = static_cast<unsigned>(row) % static_cast<unsigned>(r.shape[1]);
      const unsigned z = static_cast<unsigned>(row) / static_cast<unsigned>(r.shape[1]);
      l += ((r.start[2] + z) * r.local[1] + r.start[1] + y) * r.local[0];
    }
    node(row * r.shape[0] + x, l);
  }
}

template <int D>
DeviceRegion<D> device_region(const Region<D>& region) {
  DeviceRegion<D> r{};
  r.size = 1;
  r.rows = 1;
  for (int d = 0; d < D; ++d) {
    r.start[d] = region.start[d];
    r.shape[d] = region.shape[d];
    r.local[d] = region.local[d];
    r.size *= region.shape[d];
    if (d > 0) r.rows *= region.shape[d];
  }
  return r;
}

// The owned nodes of mesh j, for j < count, each by node(j) (CopyNode, RoundNode): one
// mesh a launch.
template <int D, class MakeNode>
void for_region(const DeviceContext& context, const DeviceRegion<D>& region, int count, MakeNode&& node) {
  cuda::DeviceScope scope(context.device);
  if (region.size == 0) return;
  const dim3 grid(blocks_for(region.shape[0]),
                  static_cast<unsigned>(std::min<std::int64_t>(region.rows, kMaxGridRows)));
  for (int j = 0; j < count; ++j) region_kernel<<<grid, kThreads, 0, context.stream>>>(region, node(j));
  cuda::check_launch("pmkit::DistributedPlan::region_kernel");
}

}  // namespace pmkit::distributed
