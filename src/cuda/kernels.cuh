#pragma once
// The CUDA kernels of the backend: binning, P2M (shared tiles with fixed-point
// accumulation; sorted global atomics), M2P, and the deterministic-mode helpers. Each
// kernel is small; the per-particle stencil is the one shared with the CPU backend
// (core/stencil.hpp). Launches and memory live in cuda_backend.cuh.
#include <cstdint>

#include "core/layout.hpp"
#include "core/stencil.hpp"
#include "cuda/fixed_point.cuh"
#include "cuda/tuning.hpp"

namespace pmkit::cuda {

// One binned particle, in tile order: local coordinates and the linear index of its
// home node (floor(u + shift), wrapped) over the key extents. 16 bytes in float.
template <class T>
struct alignas(4 * sizeof(T)) Packed {
  T s[3];
  std::uint32_t cell;
};

// Geometry of binning: key extents per dimension (nodes a home node can be), tiles.
template <int D>
struct BinGeometry {
  int keys[D];   // n (periodic) or n+1 (bounded)
  int edge[D];   // cells per tile edge
  int tiles[D];  // ceil(keys / edge)
  int support;
  std::uint32_t num_tiles;
  double peak_weight;  // largest weight one node gets from one particle (kernel peak ^ D)

  __host__ __device__ void decode(std::uint32_t cell, int (&home)[D]) const {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      home[d] = static_cast<int>(cell % keys[d]);
      cell /= keys[d];
    }
  }
  __host__ __device__ void tile_coords(std::uint32_t tile, int (&t)[D]) const {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      t[d] = static_cast<int>(tile % tiles[d]);
      tile /= tiles[d];
    }
  }
  // Nodes per dimension of a tile's accumulator: the tile plus the kernel's reach.
  __host__ __device__ int window(int d) const { return edge[d] + support - 1; }
  // The accumulator as a mesh of its own: logical local node m stored at m (no wrap
  // inside a tile), so the shared stencil indexes it like the global mesh.
  __host__ __device__ detail::Layout<D> window_layout() const {
    detail::Layout<D> window{};
    std::int64_t stride = 1;
    for (int d = 0; d < D; ++d) {
      window.axis[d] = detail::Axis{detail::AxisKind::Keep, 0, this->window(d), 0, 0.0, 1.0};
      window.stride[d] = stride;
      stride *= this->window(d);
    }
    window.size = stride;
    return window;
  }
  __host__ __device__ int window_nodes() const {
    int w = 1;
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) w *= window(d);
    return w;
  }
};

// A block's share of one tile: at most tuning::kChunkParticles particles.
struct Chunk {
  std::uint32_t tile, begin, count;
};

template <class T, int D>
struct PositionArrays {
  const T* data[D];
  std::ptrdiff_t stride[D];
  __device__ double get(int d, std::size_t i) const {
    return static_cast<double>(data[d][static_cast<std::ptrdiff_t>(i) * stride[d]]);
  }
};

// Up to kPropsPerPass particle arrays and meshes handled by one launch.
template <class T>
struct PropPass {
  const T* props[tuning::kPropsPerPass];
  std::ptrdiff_t prop_stride[tuning::kPropsPerPass];
  T* meshes[tuning::kPropsPerPass];                        // spread targets / interp sources (read only)
  T* values[tuning::kPropsPerPass];                        // interp outputs, caller's order
  std::ptrdiff_t value_stride[tuning::kPropsPerPass];
  unsigned long long* exact[tuning::kPropsPerPass];        // deterministic: integer meshes
  const unsigned long long* max_abs_bits;                  // deterministic: max |q| per prop
  int count;
};

// ---------------------------------------------------------------------------------
// Binning

// Validates every position, assigns its tile and its rank within the tile.
template <class T, int D>
__global__ void classify_kernel(detail::Layout<D> layout, BinGeometry<D> geo,
                                PositionArrays<T, D> pos, std::size_t n, std::uint32_t* tile_of,
                                std::uint32_t* rank, std::uint32_t* tile_count,
                                unsigned long long* first_bad) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  std::uint32_t tile = 0;
  PMKIT_UNROLL
  for (int d = D - 1; d >= 0; --d) {
    double u;
    if (!layout.axis[d].coordinate(pos.get(d, i), u)) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
      return;
    }
    int base;
    double s;
    kernels::locate(geo.support, u, base, s);
    int home = base + (geo.support - 1) / 2;
    if (home >= geo.keys[d]) home -= geo.keys[d];  // periodic: u + 1/2 rounded onto the seam
    tile = tile * geo.tiles[d] + home / geo.edge[d];
  }
  tile_of[i] = tile;
  rank[i] = atomicAdd(&tile_count[tile], 1u);
}

// Chunks per tile (ceil(count / chunk)).
static __global__ void chunk_count_kernel(std::uint32_t num_tiles, const std::uint32_t* tile_count,
                                   std::uint32_t* chunk_count) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < num_tiles)
    chunk_count[t] = (tile_count[t] + tuning::kChunkParticles - 1) / tuning::kChunkParticles;
}

static __global__ void chunk_fill_kernel(std::uint32_t num_tiles, const std::uint32_t* tile_count,
                                  const std::uint32_t* tile_start, const std::uint32_t* chunk_start,
                                  Chunk* chunks) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tiles) return;
  const std::uint32_t count = tile_count[t];
  std::uint32_t c = chunk_start[t];
  for (std::uint32_t done = 0; done < count; done += tuning::kChunkParticles, ++c)
    chunks[c] = Chunk{t, tile_start[t] + done, min(count - done, std::uint32_t(tuning::kChunkParticles))};
}

// Writes each particle, packed, to its slot in tile order.
template <class T, int D>
__global__ void scatter_kernel(detail::Layout<D> layout, BinGeometry<D> geo, PositionArrays<T, D> pos,
                               std::size_t n, const std::uint32_t* tile_of, const std::uint32_t* rank,
                               const std::uint32_t* tile_start, Packed<T>* particles,
                               std::uint32_t* perm) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t dst = tile_start[tile_of[i]] + rank[i];
  Packed<T> p{};
  std::uint32_t cell = 0;
  PMKIT_UNROLL
  for (int d = D - 1; d >= 0; --d) {
    double u;
    layout.axis[d].coordinate(pos.get(d, i), u);
    int base;
    double s;
    kernels::locate(geo.support, u, base, s);
    int home = base + (geo.support - 1) / 2;
    if (home >= geo.keys[d]) home -= geo.keys[d];
    cell = cell * geo.keys[d] + home;
    p.s[d] = static_cast<T>(s);
  }
  p.cell = cell;
  particles[dst] = p;
  perm[dst] = static_cast<std::uint32_t>(i);
}

// ---------------------------------------------------------------------------------
// Per-particle helpers

template <class K, int D, class T>
__device__ __forceinline__ void unpack(const Packed<T>& p, const BinGeometry<D>& geo, int (&base)[D],
                                       T (&s)[D]) {
  geo.decode(p.cell, base);
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    base[d] -= (K::support - 1) / 2;
    s[d] = p.s[d];
  }
}

template <class T>
__device__ __forceinline__ T load_prop(const PropPass<T>& pass, int j, std::uint32_t p) {
  return __ldg(pass.props[j] + static_cast<std::ptrdiff_t>(p) * pass.prop_stride[j]);
}

// ---------------------------------------------------------------------------------
// P2M: shared-memory tiles with fixed-point accumulation.
//
// One block per chunk. The accumulator holds, per property, W words per node of the
// tile's window. Per-block scale (fast mode): from the chunk's sum of |q|, so the
// rounding is relative to what the block holds. Global scale (deterministic mode):
// from max |q| over all particles and N, identical in every block and every run, and
// the block's integer sums go to 64-bit integer meshes.
template <int W>
__device__ __forceinline__ double deterministic_scale(double max_abs, std::size_t n) {
  int log2n = 1;
  while ((std::size_t(1) << log2n) < n) ++log2n;
  const int target = min(FixedPoint<W>::kContributionBits, 62 - log2n);
  return pow2_scale(max_abs, target);
}

// Mesh index of node k of a tile's window; false where the window reaches past any
// node a particle of the tile can touch (the last tiles of bounded axes).
template <class K, int D>
__device__ __forceinline__ bool window_node_index(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                                  const int (&tile)[D], int k, std::int64_t& index) {
  index = 0;
  bool inside = true;
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    const int local = k % geo.window(d);
    k /= geo.window(d);
    const int logical = tile[d] * geo.edge[d] - (K::support - 1) / 2 + local;
    const int node = layout.axis[d].node(logical);
    inside = inside && node >= 0 && node < layout.axis[d].nodes;
    index += static_cast<std::int64_t>(node) * layout.stride[d];
  }
  return inside;
}

template <class K, int D, class T, int W, bool kDeterministic>
__global__ void __launch_bounds__(tuning::kSpreadThreads)
    spread_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                        const Packed<T>* particles, const std::uint32_t* perm, std::size_t n,
                        PropPass<T> pass) {
  extern __shared__ int accumulator[];
  __shared__ double scale[tuning::kPropsPerPass];
  __shared__ double block_abs[tuning::kPropsPerPass];
  const Chunk chunk = chunks[blockIdx.x];
  const int nodes = geo.window_nodes();
  const int nprops = pass.count;
  for (int k = threadIdx.x; k < nodes * W * nprops; k += blockDim.x) accumulator[k] = 0;

  // Each thread owns particles threadIdx.x + r * blockDim.x of the chunk. Their
  // properties are gathered (the caller's order: one random read each) once, into
  // registers, and serve both the scale and the accumulation.
  constexpr int kSlots = tuning::kChunkParticles / tuning::kSpreadThreads;
  static_assert(kSlots * tuning::kSpreadThreads == tuning::kChunkParticles, "chunk = threads * slots");
  T q[kSlots][tuning::kPropsPerPass];
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    const std::uint32_t p = i < chunk.count ? perm[chunk.begin + i] : 0;
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      q[r][j] = (i < chunk.count && j < nprops) ? load_prop(pass, j, p) : T(0);
  }

  if constexpr (kDeterministic) {
    if (threadIdx.x < nprops)
      scale[threadIdx.x] =
          deterministic_scale<W>(__longlong_as_double(pass.max_abs_bits[threadIdx.x]) * geo.peak_weight, n);
  } else {
    if (threadIdx.x < nprops) block_abs[threadIdx.x] = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j) {
      if (j >= nprops) break;
      double v = 0;
#pragma unroll
      for (int r = 0; r < kSlots; ++r) v += fabs(static_cast<double>(q[r][j]));
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      if ((threadIdx.x & 31) == 0) atomicAdd(&block_abs[j], v);  // one per warp
    }
    __syncthreads();
    if (threadIdx.x < nprops)
      scale[threadIdx.x] = pow2_scale(block_abs[threadIdx.x] * geo.peak_weight, FixedPoint<W>::kContributionBits);
  }
  __syncthreads();

  const detail::Layout<D> window = geo.window_layout();
  int tile[D];
  geo.tile_coords(chunk.tile, tile);
  float scale_f[tuning::kPropsPerPass];
#pragma unroll
  for (int j = 0; j < tuning::kPropsPerPass; ++j) scale_f[j] = j < nprops ? static_cast<float>(scale[j]) : 0.f;

#pragma unroll 1  // the stencil is unrolled already; four copies of it only bloat the code
  for (int r = 0; r < kSlots; ++r) {
    const std::uint32_t i = threadIdx.x + r * tuning::kSpreadThreads;
    if (i >= chunk.count) break;
    // Select slot r with constant indices, so q stays in registers.
    T qr[tuning::kPropsPerPass];
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j) {
      qr[j] = q[0][j];
#pragma unroll
      for (int k = 1; k < kSlots; ++k) qr[j] = r == k ? q[k][j] : qr[j];
    }
    const Packed<T> particle = particles[chunk.begin + i];
    int base[D];
    T s[D];
    unpack<K, D>(particle, geo, base, s);
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) base[d] += (K::support - 1) / 2 - tile[d] * geo.edge[d];
    detail::for_each_node<K, D>(window, base, s, [&](std::int64_t node, T w) {
#pragma unroll
      for (int j = 0; j < tuning::kPropsPerPass; ++j) {
        if (j >= nprops) break;
        long long v;
        if constexpr (W == 1) {
          // Float: scaling by a power of two is exact in float as in double, so the
          // integer is the same, without FP64 conversions in the innermost loop
          // (ncu: the double path made this kernel compute-bound).
          v = __float2int_rn(static_cast<float>(qr[j] * w) * scale_f[j]);
        } else {
          v = __double2ll_rn(static_cast<double>(qr[j] * w) * scale[j]);
        }
        FixedPoint<W>::add(accumulator + (j * W) * nodes + node, nodes, v);
      }
    });
  }
  __syncthreads();

  // Flush: one global atomic per non-zero node and property. A NaN scale (non-finite
  // properties in this block) writes NaN to the whole window, as float arithmetic would.
  for (int k = threadIdx.x; k < nodes; k += blockDim.x) {
    std::int64_t index = -1;
    bool inside = true;
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j) {
      if (j >= nprops) break;
      const long long v = FixedPoint<W>::combine(accumulator + (j * W) * nodes + k, nodes);
      if (v == 0 && !(isnan(scale[j]) && !kDeterministic)) continue;
      if (index < 0) inside = window_node_index<K>(layout, geo, tile, k, index);
      if (!inside) continue;
      if constexpr (kDeterministic)
        atomicAdd(pass.exact[j] + index, static_cast<unsigned long long>(v));
      else
        atomicAdd(pass.meshes[j] + index, static_cast<T>(static_cast<double>(v) / scale[j]));
    }
  }
}

// Deterministic mode: max |q| per property (non-negative doubles order like their bits).
template <class T>
__global__ void max_abs_kernel(PropPass<T> pass, std::size_t n, unsigned long long* max_abs_bits) {
  double local[tuning::kPropsPerPass] = {};
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) {
        // NaN would lose every fmax; count it as inf, which finalize turns into NaN.
        const double a = fabs(static_cast<double>(load_prop(pass, j, i)));
        local[j] = isnan(a) ? HUGE_VAL : fmax(local[j], a);
      }
  }
#pragma unroll
  for (int j = 0; j < tuning::kPropsPerPass; ++j) {
    if (j >= pass.count) break;
    double v = local[j];
    for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) atomicMax(max_abs_bits + j, static_cast<unsigned long long>(__double_as_longlong(v)));
  }
}

// Deterministic mode: integer mesh -> caller's mesh; clears the integer mesh for next time.
template <class T, int W>
__global__ void finalize_exact_kernel(PropPass<T> pass, std::int64_t size, std::size_t n, double peak_weight,
                                      bool accumulate) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= size) return;
  for (int j = 0; j < pass.count; ++j) {
    const double max_abs = __longlong_as_double(pass.max_abs_bits[j]);
    const long long v = static_cast<long long>(pass.exact[j][i]);
    pass.exact[j][i] = 0;
    T value = isfinite(max_abs)
                  ? static_cast<T>(static_cast<double>(v) / deterministic_scale<W>(max_abs * peak_weight, n))
                                : static_cast<T>(max_abs - max_abs);  // inf/NaN in props: NaN
    pass.meshes[j][i] = accumulate ? pass.meshes[j][i] + value : value;
  }
}

// ---------------------------------------------------------------------------------
// P2M fallback: one thread per particle in tile order, global atomics.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    spread_atomics_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                          const std::uint32_t* perm, std::size_t n, PropPass<T> pass) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int base[D];
  T s[D];
  unpack<K, D>(particles[i], geo, base, s);
  const std::uint32_t p = perm[i];
  T q[tuning::kPropsPerPass];
#pragma unroll
  for (int j = 0; j < tuning::kPropsPerPass; ++j) q[j] = j < pass.count ? load_prop(pass, j, p) : T(0);
  detail::for_each_node<K, D>(layout, base, s, [&](std::int64_t node, T w) {
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) atomicAdd(pass.meshes[j] + node, q[j] * w);
  });
}

// ---------------------------------------------------------------------------------
// M2P: one thread per particle in tile order (neighbours read neighbouring nodes, so
// the gathers hit in cache), results written to the caller's order.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    interp_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                  const std::uint32_t* perm, std::size_t n, PropPass<T> pass) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int base[D];
  T s[D];
  unpack<K, D>(particles[i], geo, base, s);
  T acc[tuning::kPropsPerPass] = {};
  detail::for_each_node<K, D>(layout, base, s, [&](std::int64_t node, T w) {
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) acc[j] += w * __ldg(pass.meshes[j] + node);
  });
  const std::uint32_t p = perm[i];
#pragma unroll
  for (int j = 0; j < tuning::kPropsPerPass; ++j)
    if (j < pass.count) pass.values[j][static_cast<std::ptrdiff_t>(p) * pass.value_stride[j]] = acc[j];
}

// M2P through shared memory: a block loads its tile's window of each mesh once (with
// the boundary's wrap or fold), then every particle of the chunk reads its S^D nodes
// from shared memory; results go to the caller's order.
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kSpreadThreads)
    interp_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                        const Packed<T>* particles, const std::uint32_t* perm, PropPass<T> pass) {
  extern __shared__ unsigned char interp_shared[];
  T* window_values = reinterpret_cast<T*>(interp_shared);
  const Chunk chunk = chunks[blockIdx.x];
  const int nodes = geo.window_nodes();
  int tile[D];
  geo.tile_coords(chunk.tile, tile);
  for (int k = threadIdx.x; k < nodes; k += blockDim.x) {
    std::int64_t index;
    const bool inside = window_node_index<K>(layout, geo, tile, k, index);
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) window_values[j * nodes + k] = inside ? __ldg(pass.meshes[j] + index) : T(0);
  }
  __syncthreads();

  const detail::Layout<D> window = geo.window_layout();
  for (std::uint32_t i = threadIdx.x; i < chunk.count; i += blockDim.x) {
    int base[D];
    T s[D];
    unpack<K, D>(particles[chunk.begin + i], geo, base, s);
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) base[d] += (K::support - 1) / 2 - tile[d] * geo.edge[d];
    T acc[tuning::kPropsPerPass] = {};
    detail::for_each_node<K, D>(window, base, s, [&](std::int64_t node, T w) {
#pragma unroll
      for (int j = 0; j < tuning::kPropsPerPass; ++j)
        if (j < pass.count) acc[j] += w * window_values[j * nodes + node];
    });
    const std::uint32_t p = perm[chunk.begin + i];
#pragma unroll
    for (int j = 0; j < tuning::kPropsPerPass; ++j)
      if (j < pass.count) pass.values[j][static_cast<std::ptrdiff_t>(p) * pass.value_stride[j]] = acc[j];
  }
}

}  // namespace pmkit::cuda
