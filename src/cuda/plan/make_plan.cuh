#pragma once
// The plan's construction: the device and its limits, the binning geometry, how many
// properties a pass each spread method takes on this device, the refusal of a method
// that cannot run, and the buffers every call needs whatever its size.
#include <algorithm>
#include <cmath>

#include "cuda/plan/cuda_backend.cuh"
#include "cuda/plan/peak_weight.hpp"

namespace pmkit::cuda {

template <class T, int D>
CudaBackend<T, D>::CudaBackend(const Grid<D>& grid, const Kernel& kernel, const Options& options)
    : layout_(detail::make_layout(grid, kernel.ghost_width())),
      kernel_(kernel),
      options_(options),
      stream_(to_cuda_stream(options.stream)),
      limits_(query_device(options.device)),
      interleaved_(tuning::interleave_pays(kernel.support(), D)) {
  const DeviceScope on_device(options.device);  // its buffers and events live there

  // Binning geometry (keys in double: a bounded grid of INT_MAX cells an axis has 2^93).
  double keys = 1;
  std::uint64_t tiles = 1;
  for (int d = 0; d < D; ++d) {
    const detail::Axis& a = layout_.axis[d];
    geo_.keys[d] = a.kind == detail::AxisKind::Periodic ? a.cells : a.cells + 1;
    geo_.tiles[d] = (geo_.keys[d] + BinGeometry<D>::kEdge - 1) / BinGeometry<D>::kEdge;
    keys *= geo_.keys[d];
    tiles *= geo_.tiles[d];
  }
  if (!geo_.choose_cell_encoding())
    fail(ErrorCode::Unsupported, "grid of ", keys, " cells (", D,
         "D): the CUDA backend numbers a particle's home cell in 32 + ", D, " bits (at most ",
         detail::CellCode<D>::kMaxNodes, " cells)");
  geo_.support = kernel.support();
  geo_.num_tiles = static_cast<std::uint32_t>(tiles);
  geo_.peak_weight = peak_weight(kernel, D);
  peak_gradient_ = peak_gradient(kernel, D);

  const double mesh_bytes = static_cast<double>(layout_.size) * sizeof(T);
  if (mesh_bytes > static_cast<double>(limits_.total_bytes))
    fail(ErrorCode::OutOfMemory, "grid of ", layout_.size, " nodes needs ", mesh_bytes, " bytes per mesh, more than the ",
         limits_.total_bytes, " bytes of CUDA device ", options.device);

  // Properties per pass of the tile kernel, as many as shared memory holds (at most
  // tuning::kPropsPerPass).
  const int words = options.deterministic ? kDeterministicWords<T> : kFastWords<T>;
  const int window_nodes = kernels::dispatch(kernel, [](auto k) { return TileWindow<decltype(k), D>::kNodes; });
  const std::size_t per_prop = static_cast<std::size_t>(window_nodes) * words * sizeof(int);
  stencil_per_window_node_ = std::pow(double(kernel.support()), D) / window_nodes;
  groups_ = tuning::partition_groups(geo_.num_tiles);
  tile_props_per_pass_ =
      static_cast<int>(std::min<std::size_t>(tuning::kPropsPerPass, limits_.shared_optin / per_prop));
  size_cell_moments();
  check_method();

  if (options.deterministic) {
    buf_.exact.reserve(static_cast<std::size_t>(layout_.size) * tile_props_per_pass_, "deterministic integer meshes");
    check(cudaMemsetAsync(buf_.exact.get(), 0, buf_.exact.size() * sizeof(unsigned long long), stream_),
          "cudaMemset");
    buf_.max_abs.reserve(tuning::kPropsPerPass, "max |q| per property");
  }
  if (options.host_arrays)
    buf_.staging_meshes.reserve(static_cast<std::size_t>(layout_.size) * tuning::kPropsPerPass, "mesh staging");
  status_.clear(stream_);
  current_.counts = status_.counts(0);
  current_.status_row = 0;
  spare_.counts = status_.counts(1);
  spare_.status_row = 1;
  small_binning_fits_ = sizeof(SmallBinning::Shared) <= static_cast<std::size_t>(limits_.shared_optin);
  if (small_binning_fits_) opt_in_shared(small_binning_kernel<T, D>, sizeof(SmallBinning::Shared));
  // Once, not in every set_points (the partition's blocks use more than 48 KB).
  if (kPlaceShared <= static_cast<std::size_t>(limits_.shared_optin)) {
    opt_in_shared(partition_kernel<T, D>, kPartitionShared);
    opt_in_shared(place_kernel<T, D>, kPlaceShared);
  }
}

// Cell moments, only where asked for (Auto never takes them): kernels of up to
// tuning::kCellMaxNodes nodes, fast mode, as many properties a pass as the block's shared
// memory holds; their blocks' dynamic shared memory opted into here, once.
template <class T, int D>
void CudaBackend<T, D>::size_cell_moments() {
  if (options_.spread_method != SpreadMethod::CudaCellMoments || !tuning::cell_moments_fit(kernel_.support(), D) ||
      options_.deterministic)
    return;
  kernels::dispatch(kernel_, [&](auto k) {
    using K = decltype(k);
    if constexpr (tuning::cell_moments_fit(K::support, D)) {
      // The block's static shared memory (cell counters, scan storage) is the same for every NP.
      cudaFuncAttributes attr{};
      check(cudaFuncGetAttributes(&attr, spread_cells_kernel<K, D, T, kFastWords<T>, 1>), "cudaFuncGetAttributes");
      const std::size_t fixed = CellShared<K, D, T, kFastWords<T>, 1>::kBytes + attr.sharedSizeBytes;
      const std::size_t per_prop = static_cast<std::size_t>(TileWindow<K, D>::kNodes) * kFastWords<T> * sizeof(int);
      while (cell_props_per_pass_ < tuning::kPropsPerPass &&
             fixed + cell_props_per_pass_ * per_prop <= static_cast<std::size_t>(limits_.shared_optin))
        ++cell_props_per_pass_;
      for (int np = 1; np <= cell_props_per_pass_; ++np)
        with_prop_count(np, [&](auto props) {
          constexpr int NP = decltype(props)::value;
          opt_in_shared(spread_cells_kernel<K, D, T, kFastWords<T>, NP>,
                        CellShared<K, D, T, kFastWords<T>, NP>::kBytes);
        });
    }
  });
}

// Refuses an explicit method (or the deterministic mode) that cannot run on this case.
template <class T, int D>
void CudaBackend<T, D>::check_method() const {
  const Options& options = options_;
  switch (options.spread_method) {
    case SpreadMethod::Auto: break;
    case SpreadMethod::CudaCellMoments:
      if (!tuning::cell_moments_fit(kernel_.support(), D))
        fail(ErrorCode::Unsupported, "options.spread_method = CudaCellMoments: kernel ", kernel_.name(), " has ",
             std::pow(double(kernel_.support()), D), " nodes a particle in ", D, "D, cell moments take at most ",
             tuning::kCellMaxNodes);
      if (options.deterministic)
        fail(ErrorCode::Unsupported,
             "options.spread_method = CudaCellMoments cannot be deterministic (a cell's sum follows the order "
             "of shared atomics); use Auto or CudaSharedTiles");
      if (cell_props_per_pass_ == 0)
        fail(ErrorCode::Unsupported, "options.spread_method = CudaCellMoments: a block needs more shared memory "
             "than the device's ", limits_.shared_optin, " bytes");
      break;
    case SpreadMethod::CudaSharedTiles:
      if (tile_props_per_pass_ == 0) {
        const int window_nodes = kernels::dispatch(kernel_, [](auto k) { return TileWindow<decltype(k), D>::kNodes; });
        const int words = options.deterministic ? kDeterministicWords<T> : kFastWords<T>;
        fail(ErrorCode::Unsupported, "options.spread_method = CudaSharedTiles: a tile needs ",
             static_cast<std::size_t>(window_nodes) * words * sizeof(int), " bytes of shared memory, the device offers ",
             limits_.shared_optin);
      }
      break;
    case SpreadMethod::CudaGlobalAtomics:
      if (options.deterministic)
        fail(ErrorCode::Unsupported,
             "options.spread_method = CudaGlobalAtomics cannot be deterministic (floating-point "
             "atomics); use Auto or CudaSharedTiles");
      break;
    default:
      fail(ErrorCode::Unsupported, "options.spread_method: not a CUDA method");
  }
  if (options.deterministic && tile_props_per_pass_ == 0)
    fail(ErrorCode::Unsupported, "options.deterministic: the kernel's tile does not fit in shared memory");
}

// Lets `kernel` take `bytes` of dynamic shared memory past the default 48 KB: once per
// kernel in the plan's life, not in every launch (the plan's kernels and sizes are fixed
// by its kernel, precision and property counts). The binning's and the cell moments'
// kernels from the constructor, where their memory is sized; the tile kernels at their
// first launch.
template <class T, int D>
template <class Kernel>
void CudaBackend<T, D>::opt_in_shared(Kernel* kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return;
  const void* key = reinterpret_cast<const void*>(kernel);
  if (std::find(opted_in_.begin(), opted_in_.end(), key) != opted_in_.end()) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute");
  opted_in_.push_back(key);
}

}  // namespace pmkit::cuda
