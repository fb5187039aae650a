// Binning of the CUDA pair backend, on the plan's stream and without a host wait: validate
// and wrap the positions, sort them by cell (CUB radix sort of the cell index, stable, on
// just the bits the cell count needs, plus the particle's quantised x inside its cell when
// cells are dense), gather the packed positions into that order (recording a rejected
// position for the host), find where each cell starts, and build the corner lists where
// cells are dense. Every size is the host's (n and the cell count), so the calls capture
// into a CUDA graph.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <limits>

#include "core/checks.hpp"
#include "cuda/pairs/cells.hpp"

namespace pmkit::detail {
namespace {

template <class T, int D>
struct DevicePositions {
  const T* data[D];
  std::ptrdiff_t stride[D];
};

// One thread per particle: the wrapped position and the cell; a rejected particle (not
// finite, or outside a bounded axis) records its index in *bad (the smallest one wins)
// and is binned at the origin, so that the sort and the cell starts stay in bounds.
template <class T, int D>
__global__ void cell_keys_kernel(const PairGeometry<T, D> g, const DevicePositions<T, D> x, std::uint32_t n,
                                 std::uint32_t* keys, std::uint32_t* index, PackedPosition<T, D>* wrapped,
                                 unsigned long long* bad, bool from_mesh) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  PackedPosition<T, D> p{};
  std::uint32_t cell = 0, x_step = 0;
  bool rejected = false;
  for (int d = D - 1; d >= 0; --d) {
    const T value = x.data[d][static_cast<std::ptrdiff_t>(i) * x.stride[d]];
    T u = value - g.origin[d];
    if (!isfinite(value)) {
      rejected = true;
      break;
    }
    if (g.periodic[d]) {
      u -= g.length[d] * floor(u / g.length[d]);
      if (!(u < g.length[d]) || u < 0) u = 0;  // rounding at the seam
    } else if (from_mesh) {  // a mesh plan's offset: inside, up to the rounding to T
      u = u < 0 ? T(0) : u > g.length[d] ? g.length[d] : u;
    } else if (u < 0 || u > g.length[d]) {
      rejected = true;
      break;
    }
    component(p, d) = u;
    const int k = pair_cell_coordinate(g, d, u);
    cell = cell * g.ncell[d] + k;
    if (d == 0 && g.x_bits > 0) x_step = pair_x_step(g, u, k);
  }
  if (rejected) {
    atomicMin(bad, i);
    p = PackedPosition<T, D>{};
    cell = x_step = 0;
  }
  keys[i] = (cell << g.x_bits) | x_step;
  index[i] = i;
  wrapped[i] = p;
}

// Sorted slot s takes its wrapped position; with `order` (points from a mesh plan,
// whose binned slots the sort ran over) its permutation entry becomes the caller's index.
// Thread 0 also records the binning's first rejected position, if any, where no earlier
// one waits to be reported, and resets *bad for the next binning.
template <class T, int D>
__global__ void gather_kernel(const PackedPosition<T, D>* __restrict__ wrapped, std::uint32_t* __restrict__ perm,
                              const std::uint32_t* __restrict__ order, std::uint32_t n,
                              PackedPosition<T, D>* __restrict__ sorted, const DevicePositions<T, D> x,
                              unsigned long long* bad, PairRejection<D>* rejection) {
  const std::uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s == 0) {
    const unsigned long long i = *bad;
    if (i != PairRejection<D>::kNone) {
      if (static_cast<volatile PairRejection<D>*>(rejection)->index == PairRejection<D>::kNone) {
        for (int d = 0; d < D; ++d) rejection->x[d] = double(x.data[d][static_cast<std::ptrdiff_t>(i) * x.stride[d]]);
        rejection->from_mesh = order != nullptr;
        __threadfence_system();  // the coordinates reach the host before the index
        static_cast<volatile PairRejection<D>*>(rejection)->index = i;
      }
      *bad = PairRejection<D>::kNone;
    }
  }
  if (s >= n) return;
  const std::uint32_t i = perm[s];
  sorted[s] = wrapped[i];
  if (order) perm[s] = order[i];
}

// start[c] = first slot of cell c: each slot where the sorted key changes fills the
// starts of the cells from the previous key (exclusive) to its own (inclusive).
__global__ void cell_starts_kernel(const std::uint32_t* __restrict__ keys, int x_bits, std::uint32_t n,
                                   std::uint32_t cells, std::uint32_t* __restrict__ start) {
  const std::uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const std::uint32_t key = keys[s] >> x_bits;
  const std::uint32_t from = s == 0 ? 0 : (keys[s - 1] >> x_bits) + 1;
  for (std::uint32_t c = from; c <= key; ++c) start[c] = s;
  if (s == n - 1)
    for (std::uint32_t c = key + 1; c <= cells; ++c) start[c] = n;
}

// The corner lists, one warp a cell in two passes: count each cell's kept sources for
// each list (the last entry of each list's counts 0), then, from the exclusive scan of all
// the counts (one array: the four lists end to end in one index array), write each kept
// slot at its rank among the cell's kept ones, in sorted order. The cell's row (sy, sz)
// comes from its index, as the binning placed the particle.
template <class T, int D, bool kWrite>
__global__ void corner_lists_kernel(const PairGeometry<T, D> g, const PackedPosition<T, D>* __restrict__ pos,
                                    const std::uint32_t* __restrict__ start, std::uint32_t cells,
                                    std::uint32_t* __restrict__ counts_or_starts, std::uint32_t* __restrict__ index) {
  const std::uint32_t c = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (c > cells) return;  // the same in the whole warp
  if (c == cells) {
    if (!kWrite && lane < 4) counts_or_starts[lane * (cells + 1) + cells] = 0;
    return;
  }
  const int row = static_cast<int>(c) / g.ncell[0];
  const int sy = row % g.ncell[1], sz = row / g.ncell[1];
  std::uint32_t at[4];
  for (int q = 0; q < 4; ++q) at[q] = kWrite ? counts_or_starts[q * (cells + 1) + c] : 0;
  const std::uint32_t first = start[c], end = start[c + 1];
  for (std::uint32_t chunk = first; chunk < end; chunk += 32) {
    const std::uint32_t s = chunk + lane;
    PackedPosition<T, D> p{};
    if (s < end) p = pos[s];
    for (int q = 0; q < 4; ++q) {
      const bool keep = s < end && corner_source_live(g, q, sy, sz, p);
      const unsigned kept = __ballot_sync(0xffffffffu, keep);
      if (kWrite && keep) index[at[q] + __popc(kept & ((1u << lane) - 1))] = s;
      at[q] += __popc(kept);
    }
  }
  if (!kWrite && lane < 4) counts_or_starts[lane * (cells + 1) + c] = at[lane];
}

unsigned blocks_for(std::size_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

// Mean particles a cell from which each cell is sorted by x as well, in about
// kXStepsPerParticle steps a particle and at most 2^kMaxXBits: a longer sort key against
// the x-windows it lets the pencil methods cut (docs/tuning.md#kxsortfrom).
constexpr double kXSortFrom = 4;
constexpr double kXStepsPerParticle = 4;
constexpr int kMaxXBits = 10;

// Mean particles a cell (3D) from which set_points builds the corner lists: two more
// passes of binning against a fifth of each corner row never staged or tested
// (docs/tuning.md#kcornerlistsfrom).
constexpr double kCornerListsFrom = 32;

template <class T, int D>
void device_pair_bin(DevicePairCells<T, D>& cells, const std::array<View<const T>, D>& positions,
                     const std::uint32_t* order) {
  using cuda::check;
  const std::size_t n = positions[0].size;
  const cuda::DeviceScope on_device(cells.device);
  cudaStream_t stream = cells.stream;
  DevicePositions<T, D> x;
  for (int d = 0; d < D; ++d) {
    cells.device_pointers.require(positions[d].data, "positions", d);
    x.data[d] = positions[d].data;
    x.stride[d] = positions[d].stride;
  }
  const std::size_t ncells = cells.cells;
  const auto n32 = static_cast<std::uint32_t>(n);
  const auto cells32 = static_cast<std::uint32_t>(ncells);

  int bits = 1;
  while ((std::size_t(1) << bits) < ncells) ++bits;
  // Dense cells are sorted by x too: the pencil traversal then narrows each row to the
  // x-window of a warp.
  const double per_cell = ncells ? double(n) / double(ncells) : 0.0;
  int x_bits = 0;
  if (per_cell >= kXSortFrom) {
    while (x_bits < kMaxXBits && double(1 << x_bits) < kXStepsPerParticle * per_cell) ++x_bits;
    x_bits = std::min(x_bits, 32 - bits);
  }
  PairGeometry<T, D> g = cells.geometry;
  g.x_bits = x_bits;
  g.x_slack = T(2.0 / (double(g.inv_width[0]) * double(1 << x_bits)));
  bits += x_bits;
  // Dense 3D cells: the corner lists. (Their entries are 32-bit: four lists of up to n each.)
  const bool corner_lists =
      D == 3 && n > 0 && 4 * n < (std::size_t(1) << 32) && x_bits > 0 && per_cell >= kCornerListsFrom;
  const std::size_t entries = 4 * (ncells + 1);

  // Every allocation before the first launch, so that nothing is queued unless all of
  // them succeed; the cell list is then rebuilt in place. A call refused here (out of
  // memory) may have freed the previous points' buffers: the plan then has no points.
  std::size_t sort_bytes = 0, scan_bytes = 0;
  try {
    cells.pos.reserve(n, "PairPlan::set_points: sorted positions");
    cells.perm.reserve(n, "PairPlan::set_points: permutation");
    cells.start.reserve(ncells + 1, "PairPlan::set_points: cell starts");
    cells.keys.reserve(n, "PairPlan::set_points: cell keys");
    cells.keys_sorted.reserve(n, "PairPlan::set_points: cell keys");
    cells.index.reserve(n, "PairPlan::set_points: indices");
    cells.unsorted.reserve(n, "PairPlan::set_points: wrapped positions");
    if (n > 0)
      check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, cells.keys.get(), cells.keys_sorted.get(),
                                            cells.index.get(), cells.perm.get(), n32, 0, bits, stream),
            "cub::DeviceRadixSort");
    if (corner_lists) {
      cells.corner_index.reserve(4 * n, "PairPlan::set_points: corner lists");
      cells.corner_start.reserve(entries, "PairPlan::set_points: corner list starts");
      cells.corner_counts.reserve(entries, "PairPlan::set_points: corner list counts");
      check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, cells.corner_counts.get(), cells.corner_start.get(),
                                          entries, stream),
            "cub::DeviceScan");
    }
    cells.temp.reserve(std::max(sort_bytes, scan_bytes), "PairPlan::set_points: sort storage");
  } catch (...) {
    cells.ready = false;
    cells.n = 0;
    throw;
  }
  if (cells.status.size() == 0) {
    cells.status.reserve(1, "PairPlan::set_points: status");
    check(cudaMemsetAsync(cells.status.get(), 0xff, sizeof(unsigned long long), stream), "cudaMemset");  // kNone
  }

  // Points from a mesh plan are offsets from the box origin already (the origins match).
  PairGeometry<T, D> key_geometry = g;
  if (order)
    for (int d = 0; d < D; ++d) key_geometry.origin[d] = T(0);
  if (n > 0) {
    cell_keys_kernel<T, D><<<blocks_for(n, 256), 256, 0, stream>>>(key_geometry, x, n32, cells.keys.get(),
                                                                   cells.index.get(), cells.unsorted.get(),
                                                                   cells.status.get(), order != nullptr);
    cuda::check_launch("pmkit PairPlan::set_points: cell keys");
    check(cub::DeviceRadixSort::SortPairs(cells.temp.get(), sort_bytes, cells.keys.get(), cells.keys_sorted.get(),
                                          cells.index.get(), cells.perm.get(), n32, 0, bits, stream),
          "cub::DeviceRadixSort");
    gather_kernel<T, D><<<blocks_for(n, 256), 256, 0, stream>>>(cells.unsorted.get(), cells.perm.get(), order, n32,
                                                                cells.pos.get(), x, cells.status.get(),
                                                                cells.rejection.device());
    cuda::check_launch("pmkit PairPlan::set_points: gather");
    cell_starts_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(cells.keys_sorted.get(), x_bits, n32, cells32,
                                                               cells.start.get());
    cuda::check_launch("pmkit PairPlan::set_points: cell starts");
  } else {
    check(cudaMemsetAsync(cells.start.get(), 0, (ncells + 1) * sizeof(std::uint32_t), stream), "cudaMemset");
  }
  if (corner_lists) {
    const unsigned warps_blocks = blocks_for(32 * (ncells + 1), 256);
    corner_lists_kernel<T, D, false><<<warps_blocks, 256, 0, stream>>>(g, cells.pos.get(), cells.start.get(), cells32,
                                                                       cells.corner_counts.get(), nullptr);
    cuda::check_launch("pmkit PairPlan::set_points: corner list counts");
    check(cub::DeviceScan::ExclusiveSum(cells.temp.get(), scan_bytes, cells.corner_counts.get(),
                                        cells.corner_start.get(), entries, stream),
          "cub::DeviceScan");
    corner_lists_kernel<T, D, true><<<warps_blocks, 256, 0, stream>>>(g, cells.pos.get(), cells.start.get(), cells32,
                                                                      cells.corner_start.get(),
                                                                      cells.corner_index.get());
    cuda::check_launch("pmkit PairPlan::set_points: corner lists");
  }
  cells.geometry = g;
  cells.corner_lists = corner_lists;
  cells.n = n;
  cells.ready = true;
}

template <class T, int D>
void report_pair_rejection(DevicePairCells<T, D>& cells, bool wait) {
  if (wait) {
    const cuda::DeviceScope on_device(cells.device);
    cuda::check(cudaStreamSynchronize(cells.stream), "PairPlan::synchronize");
  }
  PairRejection<D> found;
  if (!cells.rejection.found(found)) return;
  cells.rejection.clear();
  cells.ready = false;  // the rejected binning replaced the previous points
  cells.n = 0;
  const std::size_t i = static_cast<std::size_t>(found.index);
  // Offsets from a mesh plan were validated there and are rebuilt inside the box.
  if (found.from_mesh)
    fail(ErrorCode::Device, "PairPlan::set_points(mesh plan): binned particle ", i,
         " of the mesh plan fell outside the pair plan's box");
  double lo[D], hi[D];
  const PairGeometry<T, D>& geometry = cells.geometry;
  for (int d = 0; d < D; ++d) {
    lo[d] = geometry.origin[d];
    hi[d] = double(geometry.origin[d]) + geometry.length[d];
  }
  reject_position<D>(found.x, i, "box", lo, hi, [&](int d, double v) {
    const double u = v - geometry.origin[d];
    return geometry.periodic[d] || (u >= 0 && u <= geometry.length[d]);
  });
}

template void device_pair_bin<float, 2>(DevicePairCells<float, 2>&, const std::array<View<const float>, 2>&,
                                             const std::uint32_t*);
template void device_pair_bin<float, 3>(DevicePairCells<float, 3>&, const std::array<View<const float>, 3>&,
                                             const std::uint32_t*);
template void device_pair_bin<double, 2>(DevicePairCells<double, 2>&, const std::array<View<const double>, 2>&,
                                             const std::uint32_t*);
template void device_pair_bin<double, 3>(DevicePairCells<double, 3>&, const std::array<View<const double>, 3>&,
                                             const std::uint32_t*);

template void report_pair_rejection<float, 2>(DevicePairCells<float, 2>&, bool);
template void report_pair_rejection<float, 3>(DevicePairCells<float, 3>&, bool);
template void report_pair_rejection<double, 2>(DevicePairCells<double, 2>&, bool);
template void report_pair_rejection<double, 3>(DevicePairCells<double, 3>&, bool);

}  // namespace pmkit::detail
