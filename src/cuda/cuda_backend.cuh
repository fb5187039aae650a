#pragma once
// The CUDA backend behind pmkit::Plan: memory, launches and the method choice. The
// kernels are in binning.cuh, tiles.cuh, spread.cuh and interp.cuh (kernels.cuh includes
// them all); this file decides what runs and owns every buffer.
//
// set_points: the scatter into tile order, by partition (count, then block-sorted
// passes into groups of tiles and inside each group, every big store coalesced) for
// unsorted input, or in one pass (classify: validate, tile, rank -> scan -> scatter) for
// input already in binned order and for small inputs; then chunks -> the bank-
// interleaved order of each chunk, all on the device; only the index of a rejected
// particle and the chunk count (asynchronously, with the one wait at the end) and the
// probe's count of same-tile pairs come back.
// spread: SharedTiles (fixed-point accumulation in shared memory, one flush per block)
// or GlobalAtomics (sorted particles, global atomicAdd); interp: the tile's window of
// the mesh staged in shared memory, or a per-particle gather where tiles are sparse.
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <cmath>

#include "core/backend.hpp"
#include "pmkit/reference.hpp"
#include "core/checks.hpp"
#include "pmkit/cuda/runtime.hpp"
#include "cuda/kernels.cuh"

namespace pmkit::cuda {

using detail::fail;

// Words of fixed point per accumulator node: float keeps 30 bits per block (per-block
// scale) or 41 (global scale); double needs 62 either way.
template <class T>
constexpr int kFastWords = sizeof(T) == 4 ? 1 : 3;
template <class T>
constexpr int kDeterministicWords = sizeof(T) == 4 ? 2 : 3;

inline unsigned blocks_for(std::size_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Copies a strided array between host and device (spitch/dpitch in bytes).
template <class T>
void copy_strided(T* dst, std::ptrdiff_t dst_stride, const T* src, std::ptrdiff_t src_stride,
                  std::size_t n, cudaMemcpyKind kind, const char* what) {
  if (n == 0) return;
  if (dst_stride == 1 && src_stride == 1)
    check(cudaMemcpy(dst, src, n * sizeof(T), kind), what);
  else
    check(cudaMemcpy2D(dst, dst_stride * sizeof(T), src, src_stride * sizeof(T), sizeof(T), n, kind), what);
}

template <class T, int D>
class CudaBackend final : public detail::Backend<T, D> {
 public:
  CudaBackend(const Grid<D>& grid, const Kernel& kernel, const Options& options)
      : layout_(detail::make_layout(grid, kernel.ghost_width())), kernel_(kernel), options_(options) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      fail(ErrorCode::Unsupported, "options.backend = Cuda: no CUDA device is available");
    }
    if (options.device < 0 || options.device >= devices)
      fail(ErrorCode::InvalidArgument, "options.device = ", options.device, ": there are ", devices,
           " CUDA devices");
    const DeviceScope on_device(options.device);  // its buffers and events live there
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, options.device), "cudaGetDeviceProperties");
    shared_optin_ = static_cast<int>(prop.sharedMemPerBlockOptin);
    l2_bytes_ = static_cast<double>(prop.l2CacheSize);

    // Binning geometry.
    std::uint64_t keys = 1, tiles = 1;
    for (int d = 0; d < D; ++d) {
      const detail::Axis& a = layout_.axis[d];
      geo_.keys[d] = a.kind == detail::AxisKind::Periodic ? a.cells : a.cells + 1;
      geo_.tiles[d] = (geo_.keys[d] + BinGeometry<D>::kEdge - 1) / BinGeometry<D>::kEdge;
      keys *= geo_.keys[d];
      tiles *= geo_.tiles[d];
    }
    geo_.choose_cell_encoding();
    geo_.support = kernel.support();
    geo_.num_tiles = static_cast<std::uint32_t>(tiles);
    geo_.peak_weight = std::pow(reference::weight(kernel, 0.0), D);  // symmetric kernels peak at 0
    if (keys >= (std::uint64_t(1) << 32))
      fail(ErrorCode::Unsupported, "grid of ", keys,
           " cells: the CUDA backend indexes cells with 32 bits (at most 2^32 - 1 cells)");

    std::size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const double mesh_bytes = static_cast<double>(layout_.size) * sizeof(T);
    if (mesh_bytes > static_cast<double>(total_bytes))
      fail(ErrorCode::OutOfMemory, "grid of ", layout_.size, " nodes needs ", mesh_bytes,
           " bytes per mesh, more than the ", total_bytes, " bytes of CUDA device ", options.device);

    // Properties per pass of the tile kernel, as many as shared memory holds (at most
    // tuning::kPropsPerPass).
    const int words = options.deterministic ? kDeterministicWords<T> : kFastWords<T>;
    const int window_nodes = kernels::dispatch(kernel, [](auto k) { return TileWindow<decltype(k), D>::kNodes; });
    const std::size_t per_prop = static_cast<std::size_t>(window_nodes) * words * sizeof(int);
    stencil_per_window_node_ = std::pow(double(kernel.support()), D) / window_nodes;
    groups_ = partition_groups();
    tile_props_per_pass_ = static_cast<int>(std::min<std::size_t>(tuning::kPropsPerPass, shared_optin_ / per_prop));

    // Cell moments, only where asked for (Auto never takes them): kernels of up to
    // tuning::kCellMaxNodes nodes, fast mode, as many properties a pass as the block's
    // shared memory holds.
    if (options.spread_method == SpreadMethod::CudaCellMoments && tuning::cell_moments_fit(kernel.support(), D) &&
        !options.deterministic)
      kernels::dispatch(kernel, [&](auto k) {
        using K = decltype(k);
        if constexpr (tuning::cell_moments_fit(K::support, D)) {
          // The block's static shared memory (cell counters, scan storage) is the same for every NP.
          cudaFuncAttributes attr{};
          check(cudaFuncGetAttributes(&attr, spread_cells_kernel<K, D, T, kFastWords<T>, 1>), "cudaFuncGetAttributes");
          const std::size_t fixed = CellShared<K, D, T, kFastWords<T>, 1>::kBytes + attr.sharedSizeBytes;
          const std::size_t per_prop = static_cast<std::size_t>(TileWindow<K, D>::kNodes) * kFastWords<T> * sizeof(int);
          while (cell_props_per_pass_ < tuning::kPropsPerPass &&
                 fixed + cell_props_per_pass_ * per_prop <= static_cast<std::size_t>(shared_optin_))
            ++cell_props_per_pass_;
          // The blocks' dynamic shared memory opted into once, not in every spread.
          for (int np = 1; np <= cell_props_per_pass_; ++np)
            with_prop_count(np, [&](auto props) {
              constexpr int NP = decltype(props)::value;
              opt_in_shared(spread_cells_kernel<K, D, T, kFastWords<T>, NP>,
                            CellShared<K, D, T, kFastWords<T>, NP>::kBytes);
            });
        }
      });

    switch (options.spread_method) {
      case SpreadMethod::Auto: break;
      case SpreadMethod::CudaCellMoments:
        if (!tuning::cell_moments_fit(kernel.support(), D))
          fail(ErrorCode::Unsupported, "options.spread_method = CudaCellMoments: kernel ", kernel.name(), " has ",
               std::pow(double(kernel.support()), D), " nodes a particle in ", D, "D, cell moments take at most ",
               tuning::kCellMaxNodes);
        if (options.deterministic)
          fail(ErrorCode::Unsupported,
               "options.spread_method = CudaCellMoments cannot be deterministic (a cell's sum follows the order "
               "of shared atomics); use Auto or CudaSharedTiles");
        if (cell_props_per_pass_ == 0)
          fail(ErrorCode::Unsupported, "options.spread_method = CudaCellMoments: a block needs more shared memory "
               "than the device's ", shared_optin_, " bytes");
        break;
      case SpreadMethod::CudaSharedTiles:
        if (tile_props_per_pass_ == 0)
          fail(ErrorCode::Unsupported, "options.spread_method = CudaSharedTiles: a tile needs ", per_prop,
               " bytes of shared memory, the device offers ", shared_optin_);
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
    if (options.deterministic) {
      if (tile_props_per_pass_ == 0)
        fail(ErrorCode::Unsupported, "options.deterministic: the kernel's tile does not fit in shared memory");
      exact_.reserve(static_cast<std::size_t>(layout_.size) * tile_props_per_pass_, "deterministic integer meshes");
      check(cudaMemset(exact_.get(), 0, exact_.size() * sizeof(unsigned long long)), "cudaMemset");
      max_abs_.reserve(tuning::kPropsPerPass, "max |q| per property");
    }
    if (options.host_arrays)
      staging_meshes_.reserve(static_cast<std::size_t>(layout_.size) * tuning::kPropsPerPass, "mesh staging");
    check(cudaEventCreate(&events_[0]), "cudaEventCreate");
    check(cudaEventCreate(&events_[1]), "cudaEventCreate");
    HostStatus* status = nullptr;
    check(cudaMallocHost(&status, sizeof(HostStatus)), "cudaMallocHost (status read back from the device)");
    host_.reset(status);
    // Once, not in every set_points (the partition's blocks use more than 48 KB).
    if (kPlaceShared <= static_cast<std::size_t>(shared_optin_)) {
      opt_in_shared(partition_kernel<T, D>, kPartitionShared);
      opt_in_shared(place_kernel<T, D>, kPlaceShared);
    }
  }

  ~CudaBackend() override {
    cudaEventDestroy(events_[0]);
    cudaEventDestroy(events_[1]);
  }

  void set_points(std::size_t n, const std::array<View<const T>, D>& positions) override {
    const DeviceScope on_device(options_.device);
    timings_ = {};
    const std::size_t tiles = geo_.num_tiles;
    const Groups groups = groups_;
    const bool may_partition = partition_fits(n, groups);
    const std::size_t max_chunks = tiles + n / tuning::kChunkParticles + 1;
    const std::size_t max_pieces = n / PartitionBlock<T>::kItems + groups.count + 1;
    const std::size_t block_counts = may_partition ? partition_counts(n, groups) : 0;
    // Every allocation first: nothing of the current binning changes until all succeed.
    if (options_.host_arrays) {
      staging_positions_.reserve(n * D, "position staging");
      staging_particles_.reserve(n * tuning::kPropsPerPass, "particle staging");
    }
    spare_.tile_of.reserve(n, "binned particles");
    rank_.reserve(n, "binning scratch");
    Buckets buckets{0};
    while (buckets.sub_bits < tuning::kMaxSubBucketBits && (tiles << (buckets.sub_bits + 1)) <= tuning::kMaxWriteFronts)
      ++buckets.sub_bits;
    const std::size_t num_buckets = tiles << buckets.sub_bits;
    bucket_count_.reserve(num_buckets + 1, "binning scratch");
    bucket_start_.reserve(num_buckets + 1, "binning scratch");
    chunk_count_.reserve(tiles + 1, "binning scratch");
    chunk_start_.reserve(tiles + 1, "binning scratch");
    bad_.reserve(1, "binning scratch");
    if (may_partition) {
      same_pairs_.reserve(1, "binning scratch");
      block_count_.reserve(block_counts + 1, "binning scratch");
      block_start_.reserve(block_counts + 1, "binning scratch");
      group_start_.reserve(groups.count + 1, "binning scratch");
      spare_.sorted_block.reserve(n, "binned particles");
      if (groups.bits > 0) {
        spare_.place.reserve(n, "binned particles");
        spare_.binned_of_place.reserve(n, "binned particles");
        spare_.sorted_piece.reserve(n, "binned particles");
        spare_.pieces.reserve(max_pieces, "binned particles");
        parted_.reserve(n, "binning scratch");
        part_key_.reserve(n, "binning scratch");
        piece_count_.reserve(groups.count + 1, "binning scratch");
        piece_start_.reserve(groups.count + 1, "binning scratch");
        piece_count_tiles_.reserve(max_pieces << groups.bits, "binning scratch");
        if (interleaved_) window_banks_.reserve(n, "binning scratch");
      }
    }
    spare_.particles.reserve(n, "binned particles");
    spare_.perm.reserve(n, "binned particles");
    spare_.slot.reserve(n, "binned particles");
    if (interleaved_) spare_.order.reserve(n, "binned particles");
    spare_.chunks.reserve(max_chunks, "binned particles");
    if (cells_wanted()) spare_.spans.reserve(tiles + n / tuning::kCellSpanParticles + 1, "binned particles");
    std::size_t scan_bytes = 0;
    for (std::size_t items : {num_buckets + 1, tiles + 1, std::size_t(groups.count) + 1, block_counts + 1}) {
      std::size_t bytes = 0;
      check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, bucket_count_.get(), bucket_start_.get(),
                                          static_cast<int>(items)),
            "cub::DeviceScan");
      scan_bytes = std::max(scan_bytes, bytes);
    }
    scan_temp_.reserve(scan_bytes, "binning scratch");

    const PositionArrays<T, D> pos = device_positions(n, positions);

    start_timer();
    check(cudaMemset(chunk_count_.get(), 0, (tiles + 1) * sizeof(std::uint32_t)), "cudaMemset");
    check(cudaMemset(bad_.get(), 0xff, sizeof(unsigned long long)), "cudaMemset");
    // Where each tile's binned particles start (tiles + 1 entries, with tile_buckets).
    const std::uint32_t* tile_start = bucket_start_.get();
    Buckets tile_buckets{0};
    const bool caller_order_binned = may_partition && in_binned_order(n, pos);
    int partition_levels = 0;
    if (may_partition && !caller_order_binned) {
      tile_start = partition_scatter(n, pos, groups, max_pieces);
      partition_levels = groups.bits > 0 ? 2 : 1;
    } else {
      one_pass_scatter(n, pos, buckets);
      tile_buckets = buckets;
    }
    // Each tile cut into pieces of at most `cap` particles (`even`: all of one size), into
    // `out`; their count goes to *total, copied back without waiting (it lands with the
    // final wait below). The counters' last entry stays 0 (memset above) for the scan's
    // total, which stays in chunk_start_[tiles] until the next cut.
    auto cut_tiles = [&](std::uint32_t cap, bool even, Chunk* out, std::uint32_t* total) {
      chunk_count_kernel<<<blocks_for(tiles, 256), 256>>>(geo_.num_tiles, tile_buckets, tile_start, cap,
                                                          chunk_count_.get());
      check_launch("pmkit::cuda::set_points::chunk_count");
      scan(chunk_count_.get(), chunk_start_.get(), tiles + 1);
      chunk_fill_kernel<<<blocks_for(tiles, 256), 256>>>(geo_.num_tiles, tile_buckets, tile_start,
                                                         chunk_start_.get(), cap, even, out);
      check_launch("pmkit::cuda::set_points::chunk_fill");
      check(cudaMemcpyAsync(total, chunk_start_.get() + tiles, sizeof(*total), cudaMemcpyDeviceToHost),
            "set_points: binning");
    };
    cut_tiles(tuning::kChunkParticles, false, spare_.chunks.get(), &host_->chunks);
    if (n > 0 && interleaved_) {
      // As many blocks as there can be chunks; those past the count return at once. Banks
      // from place_kernel where pass 2 ran, else from the records.
      const unsigned blocks = static_cast<unsigned>(max_chunks);
      const std::uint32_t* num_chunks = chunk_start_.get() + tiles;
      kernels::dispatch(kernel_, [&](auto k) {
        using K = decltype(k);
        if (partition_levels == 2) {
          constexpr int kThreads = tuning::interleave_threads(true);
          interleave_kernel<K, D, T, kThreads, true><<<blocks, kThreads>>>(
              geo_, spare_.chunks.get(), num_chunks, spare_.particles.get(), window_banks_.get(), spare_.order.get());
        } else {
          constexpr int kThreads = tuning::interleave_threads(false);
          interleave_kernel<K, D, T, kThreads, false><<<blocks, kThreads>>>(
              geo_, spare_.chunks.get(), num_chunks, spare_.particles.get(), nullptr, spare_.order.get());
        }
      });
      check_launch("pmkit::cuda::set_points::interleave");
    }
    host_->spans = 0;
    if (cells_wanted()) cut_tiles(tuning::kCellSpanParticles, true, spare_.spans.get(), &host_->spans);
    check(cudaMemcpyAsync(&host_->first_bad, bad_.get(), sizeof(host_->first_bad), cudaMemcpyDeviceToHost),
          "set_points: position check");
    timings_.compute_s += stop_timer();  // the call's one wait (two where the probe ran)
    // A rejected particle: the error, with the binning in use left as it was (every kernel
    // above wrote only to spare_ and scratch, and left the rejected particles out).
    reject_if_bad(pos, host_->first_bad);
    spare_.n = n;
    spare_.num_chunks = host_->chunks;
    spare_.num_spans = host_->spans;
    spare_.num_away = 0;
    spare_.caller_order_binned = caller_order_binned;
    spare_.partition_levels = partition_levels;
    spare_.num_pieces = partition_levels == 2 ? host_->pieces : 0;
    std::swap(current_, spare_);
    resolve_method();
  }

  // Keeps the binning: every particle still in its tile gets its new record in place;
  // the others go to the away list, which spread and interp handle with one thread per
  // particle. A full binning instead when too many are away, and in deterministic mode
  // (the away particles' spread would take float atomics).
  void update_points(std::size_t n, const std::array<View<const T>, D>& positions) override {
    const DeviceScope on_device(options_.device);
    if (options_.deterministic || n == 0) return set_points(n, positions);
    timings_ = {};
    Binned& b = current_;
    if (options_.host_arrays) staging_positions_.reserve(n * D, "position staging");
    bad_.reserve(1, "binning scratch");
    bucket_count_.reserve(1, "binning scratch");
    const PositionArrays<T, D> pos = device_positions(n, positions);

    start_timer();
    std::uint32_t* away_count = bucket_count_.get();
    auto run_update = [&](bool apply) {
      check(cudaMemset(bad_.get(), 0xff, sizeof(unsigned long long)), "cudaMemset");
      check(cudaMemset(away_count, 0, sizeof(std::uint32_t)), "cudaMemset");
      update_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, pos, n, b.tile_of.get(), b.slot.get(), apply, bad_.get(), away_count, b.particles.get(),
          b.away_slot.get(), b.away_particles.get());
      check_launch("pmkit::cuda::update_points");
    };
    run_update(false);
    check(cudaMemcpyAsync(&host_->first_bad, bad_.get(), sizeof(host_->first_bad), cudaMemcpyDeviceToHost),
          "update_points: position check");
    check(cudaMemcpyAsync(&host_->away, away_count, sizeof(host_->away), cudaMemcpyDeviceToHost), "update_points");
    check(cudaStreamSynchronize(0), "update_points");
    reject_if_bad(pos, host_->first_bad);
    const std::uint32_t away = host_->away;
    if (away > options_.max_away_fraction * static_cast<double>(n)) {
      timings_.compute_s += stop_timer();
      const Timings update = timings_;
      set_points(n, positions);
      timings_.compute_s += update.compute_s;
      timings_.transfer_s += update.transfer_s;
      return;
    }
    b.away_slot.reserve(away, "update_points away list");
    b.away_particles.reserve(away, "update_points away list");
    run_update(true);
    b.num_away = away;
    timings_.compute_s += stop_timer();
  }

  std::size_t num_away() const override { return current_.num_away; }

  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) override {
    const DeviceScope on_device(options_.device);
    timings_ = {};
    kernels::dispatch(kernel_, [&](auto k) { spread_all<decltype(k)>(props, meshes, mode); });
  }

  void interp(Span<View<const T>> meshes, Span<View<T>> values) override {
    const DeviceScope on_device(options_.device);
    timings_ = {};
    kernels::dispatch(kernel_, [&](auto k) { interp_all<decltype(k)>(meshes, values); });
  }

  void binned_order(View<std::uint32_t> order) const override {
    const DeviceScope on_device(options_.device);
    if (!options_.host_arrays) require_device(order.data, "order", 0);
    copy_strided(order.data, order.stride, current_.perm.get(), 1, current_.n,
                 options_.host_arrays ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice, "binned_order");
  }

  void binned_positions(const std::array<View<T>, D>& offsets) const override {
    const DeviceScope on_device(options_.device);
    const std::size_t n = current_.n;
    if (n == 0) return;
    // host_arrays: written on the device, then copied (a rare call: scratch of its own).
    DeviceBuffer<T> staged;
    OffsetArrays<T, D> out;
    if (options_.host_arrays) staged.reserve(D * n, "binned_positions staging");
    for (int d = 0; d < D; ++d) {
      if (!options_.host_arrays) require_device(offsets[d].data, "positions", d);
      out.data[d] = options_.host_arrays ? staged.get() + d * n : offsets[d].data;
      out.stride[d] = options_.host_arrays ? 1 : offsets[d].stride;
    }
    binned_offsets_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads>>>(
        layout_, geo_, current_.particles.get(), nullptr, n, out);
    check_launch("pmkit::cuda::binned_positions");
    if (const std::size_t away = current_.num_away) {
      binned_offsets_kernel<T, D><<<blocks_for(away, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, current_.away_particles.get(), current_.away_slot.get(), away, out);
      check_launch("pmkit::cuda::binned_positions::away");
    }
    if (options_.host_arrays)
      for (int d = 0; d < D; ++d)
        copy_strided(offsets[d].data, offsets[d].stride, staged.get() + d * n, 1, n, cudaMemcpyDeviceToHost,
                     "binned_positions");
  }

  std::string spread_method_name() const override {
    if (method_ == SpreadMethod::CudaGlobalAtomics) return "cuda-global-atomics";
    if (method_ == SpreadMethod::CudaCellMoments)
      return "cuda-cell-moments (" + std::to_string(kFastWords<T>) + "x32-bit fixed point)";
    const int words = options_.deterministic ? kDeterministicWords<T> : kFastWords<T>;
    return std::string(options_.deterministic ? "cuda-shared-tiles-deterministic" : "cuda-shared-tiles") +
           " (" + std::to_string(words) + "x32-bit fixed point)";
  }

  Timings last_timings() const override { return timings_; }

 private:
  struct Binned {
    std::size_t n = 0;
    std::uint32_t num_chunks = 0;
    DeviceBuffer<Packed<T>> particles;
    DeviceBuffer<std::uint32_t> perm;  // binned slot -> caller's index
    DeviceBuffer<std::uint32_t> slot;  // caller's index -> binned slot
    DeviceBuffer<std::uint16_t> order;  // per chunk: the tile kernels' order (interleave_kernel)
    DeviceBuffer<Chunk> chunks;
    // Cell moments: tiles cut into spans of up to tuning::kCellSpanParticles (only where
    // cells_wanted()).
    DeviceBuffer<Chunk> spans;
    std::uint32_t num_spans = 0;
    DeviceBuffer<std::uint32_t> tile_of;  // caller's index -> tile at the full binning
    // update_points: the particles away from their tile, with their binned slots.
    DeviceBuffer<std::uint32_t> away_slot;
    DeviceBuffer<Packed<T>> away_particles;
    std::size_t num_away = 0;
    // The probe found the caller's particles in binned order: perm keeps a slot's caller
    // index near the slot, so stores through it fall on few lines (launch_interp).
    bool caller_order_binned = false;
    // The partition's moves, kept for the spread's properties (props_to_slots): 0 levels
    // (the one-pass scatter: none), 1 (slot is each particle's only move), or 2 (place:
    // caller's index -> pass-1 place; binned_of_place: place -> binned slot; pass 2's
    // pieces and each piece's sorted order). sorted_block: pass 1's block-local index
    // of each sorted place, block by block.
    int partition_levels = 0;
    DeviceBuffer<std::uint16_t> sorted_block, sorted_piece;
    DeviceBuffer<std::uint32_t> place, binned_of_place;
    DeviceBuffer<Chunk> pieces;
    std::uint32_t num_pieces = 0;
  };

  // Exclusive sum of `items` counters (scan_temp_ holds the largest scan of set_points).
  void scan(const std::uint32_t* count, std::uint32_t* start, std::size_t items) {
    std::size_t bytes = scan_temp_.size();
    check(cub::DeviceScan::ExclusiveSum(scan_temp_.get(), bytes, count, start, static_cast<int>(items)),
          "cub::DeviceScan");
  }

  // Pass 1's groups (fixed by the geometry; the constructor keeps them in groups_): the
  // fewest tiles a group (a power of two) that keep them within tuning::kPartitionGroups;
  // one a group where tiles are few.
  Groups partition_groups() const {
    Groups g{0, geo_.num_tiles, 0};
    while (g.count > tuning::kPartitionGroups) {
      ++g.bits;
      g.count = static_cast<std::uint32_t>((std::uint64_t(geo_.num_tiles) + (1u << g.bits) - 1) >> g.bits);
    }
    while ((g.count >> g.key_bits) != 0) ++g.key_bits;  // room for the key `count` (unused items)
    return g;
  }

  // Shared memory of the partition's blocks: pass 1, and pass 2 (its caller indices too).
  static constexpr std::size_t kPartitionShared = sizeof(typename PartitionBlock<T>::Shared);
  static constexpr std::size_t kPlaceShared =
      kPartitionShared + (PartitionBlock<T>::kItems + PartitionBlock<T>::kMaxKeys) * sizeof(std::uint32_t);

  // Entries of the partition's count matrix: one per (group, pass-1 block).
  static std::size_t partition_counts(std::size_t n, Groups groups) {
    return std::size_t(groups.count) * blocks_for(n, PartitionBlock<T>::kItems);
  }

  // Whether set_points may partition: enough particles (tuning::kPartitionMinParticles),
  // groups within bounds, and the blocks' shared memory available on this device.
  bool partition_fits(std::size_t n, Groups groups) const {
    static_assert(tuning::kPartitionGroups <= tuning::kMaxPartitionKeys, "partition_groups() keeps count within");
    return n >= std::max<std::size_t>(PartitionBlock<T>::kItems, tuning::kPartitionMinParticles) &&
           groups.bits <= tuning::kMaxGroupBits &&
           kPlaceShared <= static_cast<std::size_t>(shared_optin_);
  }

  // Whether the caller's particles are (mostly) in binned order: most sampled neighbour
  // pairs share a tile (tuning::kBinnedPairFraction). One pair a thread, a 4-byte copy back.
  bool in_binned_order(std::size_t n, const PositionArrays<T, D>& pos) {
    const std::uint32_t pairs = tuning::kBinnedProbePairs;
    check(cudaMemset(same_pairs_.get(), 0, sizeof(std::uint32_t)), "cudaMemset");
    same_tile_pairs_kernel<T, D><<<blocks_for(pairs, 256), 256>>>(layout_, geo_, pos, n, pairs, same_pairs_.get());
    check_launch("pmkit::cuda::set_points::probe");
    std::uint32_t same = 0;
    check(cudaMemcpy(&same, same_pairs_.get(), sizeof(same), cudaMemcpyDeviceToHost), "set_points: probe");
    return same >= tuning::kBinnedPairFraction * pairs;
  }

  // The one-pass scatter: classify (validate, tile, rank in its sub-bucket) -> scan ->
  // every record straight to its slot. Its stores are consecutive where the input is in
  // binned order; bucket_start_ then holds each bucket's first slot.
  void one_pass_scatter(std::size_t n, const PositionArrays<T, D>& pos, Buckets buckets) {
    const std::size_t num_buckets = std::size_t(geo_.num_tiles) << buckets.sub_bits;
    check(cudaMemset(bucket_count_.get(), 0, (num_buckets + 1) * sizeof(std::uint32_t)), "cudaMemset");
    if (n > 0) {
      classify_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, pos, n, buckets, spare_.tile_of.get(), rank_.get(), bucket_count_.get(), bad_.get());
      check_launch("pmkit::cuda::set_points::classify");
    }
    scan(bucket_count_.get(), bucket_start_.get(), num_buckets + 1);
    if (n > 0) {
      scatter_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, pos, n, buckets, spare_.tile_of.get(), rank_.get(), bucket_start_.get(),
          spare_.particles.get(), spare_.perm.get(), spare_.slot.get());
      check_launch("pmkit::cuda::set_points::scatter");
    }
  }

  // The scatter by partition (binning.cuh, "Partition"; n > 0): count, pass 1 into
  // groups of tiles, then, where groups hold several tiles, pass 2 inside each group's
  // pieces and the composed slot. Returns each tile's first slot (tiles + 1 entries).
  const std::uint32_t* partition_scatter(std::size_t n, const PositionArrays<T, D>& pos, Groups groups,
                                         std::size_t max_pieces) {
    using B = PartitionBlock<T>;
    const std::size_t tiles = geo_.num_tiles;
    const bool two_levels = groups.bits > 0;
    const unsigned pass1_blocks = blocks_for(n, B::kItems);
    const std::size_t counts = partition_counts(n, groups);
    // Counts a row a block (in block_start_), transposed to a row a group (block_count_).
    count_groups_kernel<T, D><<<pass1_blocks, B::kThreads>>>(layout_, geo_, pos, n, groups, block_start_.get(),
                                                             bad_.get());
    check_launch("pmkit::cuda::set_points::count_groups");
    transpose_counts_kernel<<<dim3((groups.count + 31) / 32, (pass1_blocks + 31) / 32), dim3(32, 8)>>>(
        block_start_.get(), pass1_blocks, groups.count, block_count_.get());
    check_launch("pmkit::cuda::set_points::transpose_counts");
    check(cudaMemset(block_count_.get() + counts, 0, sizeof(std::uint32_t)), "cudaMemset");  // the scan's total
    scan(block_count_.get(), block_start_.get(), counts + 1);
    // Each group starts where its first block's run does (the last entry: the total).
    check(cudaMemcpy2DAsync(group_start_.get(), sizeof(std::uint32_t), block_start_.get(),
                            pass1_blocks * sizeof(std::uint32_t), sizeof(std::uint32_t), groups.count + 1,
                            cudaMemcpyDeviceToDevice),
          "set_points: group starts");
    const PartitionOut<T> out = two_levels
                                    ? PartitionOut<T>{parted_.get(), spare_.binned_of_place.get(), part_key_.get(),
                                                      spare_.place.get(), spare_.sorted_block.get()}
                                    : PartitionOut<T>{spare_.particles.get(), spare_.perm.get(), nullptr,
                                                      spare_.slot.get(), spare_.sorted_block.get()};
    partition_kernel<T, D><<<pass1_blocks, B::kThreads, kPartitionShared>>>(
        layout_, geo_, pos, n, groups, block_start_.get(), spare_.tile_of.get(), out);
    check_launch("pmkit::cuda::set_points::partition");
    if (!two_levels) return group_start_.get();  // the groups are the tiles

    // Pass 2: the pieces of each group (Chunks whose `tile` is the group).
    check(cudaMemset(piece_count_.get(), 0, (groups.count + 1) * sizeof(std::uint32_t)), "cudaMemset");
    check(cudaMemset(bucket_count_.get(), 0, (tiles + 1) * sizeof(std::uint32_t)), "cudaMemset");
    const Buckets whole{0};
    chunk_count_kernel<<<blocks_for(groups.count, 256), 256>>>(groups.count, whole, group_start_.get(), B::kItems,
                                                               piece_count_.get());
    check_launch("pmkit::cuda::set_points::piece_count");
    scan(piece_count_.get(), piece_start_.get(), groups.count + 1);
    chunk_fill_kernel<<<blocks_for(groups.count, 256), 256>>>(groups.count, whole, group_start_.get(),
                                                              piece_start_.get(), B::kItems, false,
                                                              spare_.pieces.get());
    check_launch("pmkit::cuda::set_points::piece_fill");
    // max_pieces blocks; those past the real count (piece_start_[groups]) return at once.
    const unsigned piece_blocks = static_cast<unsigned>(max_pieces);
    const std::uint32_t* num_pieces = piece_start_.get() + groups.count;
    count_piece_tiles_kernel<<<piece_blocks, B::kThreads>>>(groups, geo_.num_tiles, spare_.pieces.get(), num_pieces,
                                                             part_key_.get(), bucket_count_.get(),
                                                             piece_count_tiles_.get());
    check_launch("pmkit::cuda::set_points::count_piece_tiles");
    scan(bucket_count_.get(), bucket_start_.get(), tiles + 1);
    // The interleave's banks, in the tile kernels' windows.
    const int window_width = kernels::dispatch(kernel_, [](auto k) { return TileWindow<decltype(k), D>::kWidth; });
    const WindowBanks<D> banks{interleaved_ ? window_banks_.get() : nullptr, geo_, window_width};
    place_kernel<T, D><<<piece_blocks, B::kThreads, kPlaceShared>>>(
        groups, spare_.pieces.get(), num_pieces, piece_start_.get(), part_key_.get(), parted_.get(),
        spare_.binned_of_place.get(), bucket_start_.get(), piece_count_tiles_.get(), spare_.particles.get(),
        spare_.perm.get(), spare_.sorted_piece.get(), banks);
    check_launch("pmkit::cuda::set_points::place");
    compose_slot_kernel<<<blocks_for(n, tuning::kPointThreads * kComposePerThread), tuning::kPointThreads>>>(
        n, spare_.place.get(), spare_.binned_of_place.get(), spare_.slot.get());
    check_launch("pmkit::cuda::set_points::compose_slot");
    // The pieces' count, for the spread's second move (lands with the call's one wait).
    check(cudaMemcpyAsync(&host_->pieces, num_pieces, sizeof(host_->pieces), cudaMemcpyDeviceToHost),
          "set_points: binning");
    return bucket_start_.get();
  }

  // The order the tile kernels take each chunk's particles in; null: arrival order.
  const std::uint16_t* taken_order() const { return interleaved_ ? current_.order.get() : nullptr; }

  // Stencil nodes a block's particles touch per node of its tile's window, in the
  // current binning.
  double window_use() const {
    const double per_block = current_.num_chunks ? double(current_.n) / current_.num_chunks : 0.0;
    return per_block * stencil_per_window_node_;
  }

  // Auto: shared tiles unless blocks touch too few nodes of their window to repay its
  // flush (tuning::kSpreadTileMinNodesPerWindowNode; fewer where the mesh is larger than
  // L2, and every global atomic of the one-thread method may go to DRAM).
  void resolve_method() {
    if (options_.spread_method != SpreadMethod::Auto) {
      method_ = options_.spread_method;
      return;
    }
    const bool tiles_fit = tile_props_per_pass_ > 0;
    const double min_use = mesh_beyond_l2() ? tuning::kSpreadTileMinNodesPerWindowNodeBeyondL2
                                           : tuning::kSpreadTileMinNodesPerWindowNode;
    method_ = (options_.deterministic || (tiles_fit && window_use() >= min_use))
                  ? SpreadMethod::CudaSharedTiles
                  : SpreadMethod::CudaGlobalAtomics;
    // Never cell moments: slower than tiles where measured (tuning.hpp, after kCellSpanParticles).
  }

  // Whether set_points cuts spans for cell moments: only where they are asked for (Auto
  // never takes them; the constructor sized them, or refused the plan).
  bool cells_wanted() const { return cell_props_per_pass_ > 0; }

  template <class P>
  void require_device(const P* ptr, const char* what, std::size_t index) const {
    checked_pointers_.require(ptr, what, index, " (or set options.host_arrays = true to pass host arrays)");
  }

  void start_timer() { check(cudaEventRecord(events_[0]), "cudaEventRecord"); }
  double stop_timer() {
    check(cudaEventRecord(events_[1]), "cudaEventRecord");
    check(cudaEventSynchronize(events_[1]), "kernel execution");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[0], events_[1]), "cudaEventElapsedTime");
    return ms * 1e-3;
  }

  // The positions as device arrays: the caller's, or staged copies of host arrays (the
  // copy's time goes to timings_.transfer_s).
  PositionArrays<T, D> device_positions(std::size_t n, const std::array<View<const T>, D>& positions) {
    PositionArrays<T, D> pos{};
    if (options_.host_arrays) start_timer();
    for (int d = 0; d < D; ++d) {
      if (options_.host_arrays) {
        T* staged = staging_positions_.get() + d * n;
        copy_strided(staged, 1, positions[d].data, positions[d].stride, n, cudaMemcpyHostToDevice,
                     "copy positions to the device");
        pos.data[d] = staged;
        pos.stride[d] = 1;
      } else {
        require_device(positions[d].data, "positions", d);
        pos.data[d] = positions[d].data;
        pos.stride[d] = positions[d].stride;
      }
    }
    if (options_.host_arrays) timings_.transfer_s += stop_timer();
    return pos;
  }

  // Throws the CPU backend's error for the first rejected particle, if a kernel found one.
  // `bad`: the smallest index of a rejected particle, read back from bad_ (all ones: none).
  void reject_if_bad(const PositionArrays<T, D>& pos, unsigned long long bad) {
    if (bad == std::numeric_limits<unsigned long long>::max()) return;
    double x[D];
    for (int d = 0; d < D; ++d) {
      T value;
      check(cudaMemcpy(&value, pos.data[d] + static_cast<std::ptrdiff_t>(bad) * pos.stride[d], sizeof(T),
                       cudaMemcpyDeviceToHost),
            "read rejected particle");
      x[d] = value;
    }
    detail::reject_particle<D>(layout_, x, static_cast<std::size_t>(bad));
  }

  // Fills a pass with up to `width` properties starting at `first`: device pointers as
  // given, or staged copies of host arrays.
  PropPass<T> make_pass(Span<View<const T>> particle_arrays, Span<View<T>> mesh_arrays, std::size_t first,
                        int width, bool copy_particles_in, bool copy_meshes_in) {
    PropPass<T> pass{};
    pass.count = static_cast<int>(std::min<std::size_t>(width, particle_arrays.size() - first));
    const std::size_t n = current_.n;
    for (int j = 0; j < pass.count; ++j) {
      const View<const T>& prop = particle_arrays[first + j];
      const View<T>& mesh = mesh_arrays[first + j];
      if (options_.host_arrays) {
        T* staged_prop = staging_particles_.get() + j * n;
        T* staged_mesh = staging_meshes_.get() + j * layout_.size;
        if (copy_particles_in)
          copy_strided(staged_prop, 1, prop.data, prop.stride, n, cudaMemcpyHostToDevice, "copy to the device");
        if (copy_meshes_in)
          copy_strided(staged_mesh, 1, mesh.data, 1, layout_.size, cudaMemcpyHostToDevice, "copy to the device");
        pass.props[j] = staged_prop;
        pass.prop_stride[j] = 1;
        pass.meshes[j] = staged_mesh;
      } else {
        require_device(prop.data, "particle arrays", first + j);
        require_device(mesh.data, "meshes", first + j);
        pass.props[j] = prop.data;
        pass.prop_stride[j] = prop.stride;
        pass.meshes[j] = mesh.data;
      }
      if (options_.deterministic) pass.exact[j] = exact_.get() + j * layout_.size;
    }
    pass.max_abs_bits = max_abs_.get();
    // float4 atomics along x (TileWindow quads): periodic x of 4k nodes, aligned meshes.
    const detail::Axis& x = layout_.axis[0];
    pass.quad_flush = sizeof(T) == 4 && x.kind == detail::AxisKind::Periodic && x.nodes % 4 == 0;
    for (int j = 0; j < pass.count; ++j)
      pass.quad_flush = pass.quad_flush && reinterpret_cast<std::uintptr_t>(pass.meshes[j]) % 16 == 0;
    return pass;
  }

  template <class K>
  void spread_all(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) {
    const int width = method_ == SpreadMethod::CudaSharedTiles   ? tile_props_per_pass_
                      : method_ == SpreadMethod::CudaCellMoments ? cell_props_per_pass_
                                                                 : tuning::kPropsPerPass;
    // The moves' scratch, before any mesh is touched (the first pass is the widest).
    const int first_pass = static_cast<int>(std::min<std::size_t>(width, props.size()));
    if (method_ == SpreadMethod::CudaSharedTiles && moves_props(K::support, first_pass)) {
      binned_values_.reserve(current_.n * tuning::kPropsPerPass, "properties in binned order");
      if (current_.partition_levels == 2)
        mid_values_.reserve(current_.n * tuning::kPropsPerPass, "properties in binned order");
    }
    for (std::size_t first = 0; first < props.size(); first += width) {
      const bool stage_meshes_in = options_.host_arrays && mode == Accumulate::Add && !options_.deterministic;
      if (options_.host_arrays) start_timer();
      PropPass<T> pass = make_pass(props, meshes, first, width, true,
                                   stage_meshes_in || (options_.deterministic && mode == Accumulate::Add));
      if (options_.host_arrays) timings_.transfer_s += stop_timer();
      if (options_.host_arrays) start_timer();
      launch_spread<K>(pass, mode);
      if (options_.host_arrays) {
        timings_.compute_s += stop_timer();
        start_timer();
        for (int j = 0; j < pass.count; ++j)
          copy_strided(meshes[first + j].data, 1, pass.meshes[j], 1, layout_.size, cudaMemcpyDeviceToHost,
                       "copy the mesh to the host");
        timings_.transfer_s += stop_timer();
      }
    }
  }

  template <class K>
  void launch_spread(const PropPass<T>& pass, Accumulate mode) {
    const std::size_t n = current_.n;
    const std::size_t mesh_bytes = static_cast<std::size_t>(layout_.size) * sizeof(T);
    if (!options_.deterministic && mode == Accumulate::Overwrite)
      for (int j = 0; j < pass.count; ++j) check(cudaMemsetAsync(pass.meshes[j], 0, mesh_bytes), "cudaMemset");
    if (options_.deterministic) {
      constexpr int W = kDeterministicWords<T>;
      check(cudaMemsetAsync(max_abs_.get(), 0, tuning::kPropsPerPass * sizeof(unsigned long long)), "cudaMemset");
      if (n > 0) {
        max_abs_kernel<T><<<std::min(blocks_for(n, 256), 1024u), 256>>>(pass, n, max_abs_.get());
        check_launch("pmkit::cuda::spread::max_abs");
        launch_tiles<K, W, true>(pass);
      }
      finalize_exact_kernel<T, W><<<blocks_for(layout_.size, 256), 256>>>(pass, layout_.size, n, geo_.peak_weight,
                                                                         mode == Accumulate::Add);
      check_launch("pmkit::cuda::spread::finalize_exact");
      return;
    }
    if (n == 0) return;
    if (method_ == SpreadMethod::CudaGlobalAtomics) {
      spread_atomics_kernel<K, D, T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, current_.particles.get(), nullptr, current_.perm.get(), n, pass);
      check_launch("pmkit::cuda::spread::global_atomics");
    } else if (method_ == SpreadMethod::CudaCellMoments) {
      if constexpr (tuning::cell_moments_fit(K::support, D)) launch_cells<K>(pass);
    } else {
      launch_tiles<K, kFastWords<T>, false>(pass);
    }
    if (const std::size_t away = current_.num_away) {  // update_points' away list
      spread_atomics_kernel<K, D, T><<<blocks_for(away, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, current_.away_particles.get(), current_.away_slot.get(), current_.perm.get(), away, pass);
      check_launch("pmkit::cuda::spread::away");
    }
  }

  // Whether the tile spread moves a pass of `props` properties into binned order before
  // its kernel (props_to_slots; tuning::props_by_moves): the partition's moves are kept
  // and the caller's order is not binned already (props_to_slots also wants contiguous
  // arrays; launch_tiles checks). Not in deterministic mode: its kernel hides more of the
  // gather, and 64^3 measured slower with the moves (0.68 -> 0.74 ms; NOTES 67c).
  bool moves_props(int support, int props) const {
    return !current_.caller_order_binned && !options_.deterministic &&
           tuning::props_by_moves(sizeof(T), static_cast<double>(current_.n) * sizeof(T), l2_bytes_,
                                  current_.partition_levels, support, props);
  }

  // The pass's properties in binned order (in binned_values_), moved as set_points'
  // partition moved the records: block by block to the pass-1 places, then (two levels)
  // piece by piece to the slots, each in its sort's order.
  PropPass<T> props_to_slots(const PropPass<T>& pass) {
    const std::size_t n = current_.n;
    const unsigned blocks = blocks_for(n, PartitionBlock<T>::kItems);
    T* binned = binned_values_.get();
    const bool two_levels = current_.partition_levels == 2;
    props_to_places_kernel<T><<<blocks, tuning::kPartitionThreads>>>(
        pass, current_.sorted_block.get(), two_levels ? current_.place.get() : current_.slot.get(), n,
        two_levels ? mid_values_.get() : binned);
    check_launch("pmkit::cuda::spread::props_to_places");
    if (two_levels && current_.num_pieces > 0) {
      props_to_slots_kernel<T><<<current_.num_pieces, tuning::kPartitionThreads>>>(
          mid_values_.get(), current_.pieces.get(), current_.sorted_piece.get(), current_.binned_of_place.get(),
          pass.count, n, binned);
      check_launch("pmkit::cuda::spread::props_to_slots");
    }
    PropPass<T> moved = pass;
    for (int j = 0; j < pass.count; ++j) {
      moved.props[j] = binned + j * n;
      moved.prop_stride[j] = 1;
    }
    return moved;
  }

  template <class K, int W, bool kDeterministic>
  void launch_tiles(const PropPass<T>& caller_pass) {
    if (current_.num_chunks == 0) return;
    bool contiguous = true;
    for (int j = 0; j < caller_pass.count; ++j) contiguous = contiguous && caller_pass.prop_stride[j] == 1;
    const bool moved = contiguous && moves_props(K::support, caller_pass.count);
    const PropPass<T> pass = moved ? props_to_slots(caller_pass) : caller_pass;
    const std::uint32_t* perm = moved ? nullptr : current_.perm.get();  // null: read by slot
    with_prop_count(pass.count, [&](auto np) {
      constexpr int NP = decltype(np)::value;
      const std::size_t shared = static_cast<std::size_t>(TileWindow<K, D>::kNodes) * W * NP * sizeof(int);
      auto kernel = spread_tiles_kernel<K, D, T, W, NP, kDeterministic>;
      opt_in_shared(kernel, shared);
      kernel<<<current_.num_chunks, tuning::kSpreadThreads, shared>>>(layout_, geo_, current_.chunks.get(),
                                                                      current_.particles.get(),
                                                                      taken_order(), perm, current_.n, pass);
      check_launch("pmkit::cuda::spread::shared_tiles");
    });
  }

  // Lets `kernel` take `bytes` of dynamic shared memory past the default 48 KB: once per
  // kernel in the plan's life, not in every launch (the plan's kernels and sizes are fixed
  // by its kernel, precision and property counts). The binning's and the cell moments'
  // kernels from the constructor, where their memory is sized; the tile kernels at their
  // first launch.
  template <class Kernel>
  void opt_in_shared(Kernel* kernel, std::size_t bytes) {
    if (bytes <= 48 * 1024) return;
    const void* key = reinterpret_cast<const void*>(kernel);
    if (std::find(opted_in_.begin(), opted_in_.end(), key) != opted_in_.end()) return;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
          "cudaFuncSetAttribute");
    opted_in_.push_back(key);
  }

  template <class K>
  void launch_cells(const PropPass<T>& pass) {
    if (current_.num_spans == 0) return;
    constexpr int W = kFastWords<T>;
    with_prop_count(pass.count, [&](auto np) {
      constexpr int NP = decltype(np)::value;
      const std::size_t shared = CellShared<K, D, T, W, NP>::kBytes;  // opted into by the constructor
      spread_cells_kernel<K, D, T, W, NP><<<current_.num_spans, tuning::kCellThreads, shared>>>(
          layout_, geo_, current_.spans.get(), current_.particles.get(), current_.perm.get(), pass);
      check_launch("pmkit::cuda::spread::cell_moments");
    });
  }

  // Tiles (the window in shared memory) where blocks hold enough particles to repay
  // loading it, as for spread; else one thread per particle gathering from the mesh.
  // Both write binned order into binned_values_ (then unbin_kernel fills the outputs), or
  // the caller's order directly (InterpOutput).
  template <class K>
  void launch_interp(const PropPass<T>& pass) {
    const std::size_t n = current_.n;
    if (n == 0) return;
    // Outputs written straight to the caller's order where they fit in L2 with the
    // meshes read, or where the caller's order is the binned one (the stores then run
    // along it; tuning::interp_direct_pays), else to binned slots and then unbinned.
    const double outputs_bytes = static_cast<double>(n) * pass.count * sizeof(T);
    const double meshes_bytes = static_cast<double>(layout_.size) * pass.count * sizeof(T);
    const bool direct =
        tuning::interp_direct_pays(outputs_bytes, meshes_bytes, l2_bytes_, current_.caller_order_binned);
    const InterpOutput<T> out{binned_values_.get(), n, direct ? current_.perm.get() : nullptr};
    // Scalar windows (the smallest a tile can take) decide whether tiles fit at all.
    const std::size_t scalar_shared = static_cast<std::size_t>(TileWindow<K, D>::kNodes) * pass.count * sizeof(T);
    if (window_use() >= tuning::kInterpTileMinNodesPerWindowNode &&
        scalar_shared <= static_cast<std::size_t>(shared_optin_)) {
      with_prop_count(pass.count, [&](auto np) {
        constexpr int NP = decltype(np)::value;
        const std::size_t shared = interp_tiles_shared_bytes<K, D, T, NP>();
        auto kernel = direct ? interp_tiles_kernel<K, D, T, NP, true> : interp_tiles_kernel<K, D, T, NP, false>;
        opt_in_shared(kernel, shared);
        kernel<<<current_.num_chunks, tuning::kSpreadThreads, shared>>>(
            layout_, geo_, current_.chunks.get(), current_.particles.get(), taken_order(), n, pass, out);
        check_launch("pmkit::cuda::interp::shared_tiles");
      });
    } else {
      interp_kernel<K, D, T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, current_.particles.get(), nullptr, n, pass, out);
      check_launch("pmkit::cuda::interp::gather");
    }
    if (const std::size_t away = current_.num_away) {
      interp_kernel<K, D, T><<<blocks_for(away, tuning::kPointThreads), tuning::kPointThreads>>>(
          layout_, geo_, current_.away_particles.get(), current_.away_slot.get(), away, pass, out);
      check_launch("pmkit::cuda::interp::away");
    }
    if (direct) return;
    unbin_kernel<T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads>>>(pass, out.binned, n,
                                                                                    current_.slot.get());
    check_launch("pmkit::cuda::interp::unbin");
  }

  template <class K>
  void interp_all(Span<View<const T>> meshes, Span<View<T>> values) {
    const std::size_t n = current_.n;
    binned_values_.reserve(n * tuning::kPropsPerPass, "interp scratch");
    for (std::size_t first = 0; first < meshes.size(); first += tuning::kPropsPerPass) {
      PropPass<T> pass{};
      pass.count = static_cast<int>(std::min<std::size_t>(tuning::kPropsPerPass, meshes.size() - first));
      if (options_.host_arrays) start_timer();
      for (int j = 0; j < pass.count; ++j) {
        const View<const T>& mesh = meshes[first + j];
        const View<T>& out = values[first + j];
        if (options_.host_arrays) {
          T* staged_mesh = staging_meshes_.get() + j * layout_.size;
          copy_strided(staged_mesh, 1, mesh.data, 1, layout_.size, cudaMemcpyHostToDevice, "copy to the device");
          pass.meshes[j] = staged_mesh;
          pass.values[j] = staging_particles_.get() + j * n;
          pass.value_stride[j] = 1;
        } else {
          require_device(mesh.data, "meshes", first + j);
          require_device(out.data, "values", first + j);
          pass.meshes[j] = const_cast<T*>(mesh.data);  // read only in interp
          pass.values[j] = out.data;
          pass.value_stride[j] = out.stride;
        }
      }
      if (options_.host_arrays) {
        timings_.transfer_s += stop_timer();
        start_timer();
      }
      launch_interp<K>(pass);
      if (options_.host_arrays) {
        timings_.compute_s += stop_timer();
        start_timer();
        for (int j = 0; j < pass.count; ++j)
          copy_strided(values[first + j].data, values[first + j].stride, pass.values[j], 1, n,
                       cudaMemcpyDeviceToHost, "copy values to the host");
        timings_.transfer_s += stop_timer();
      }
    }
  }

  detail::Layout<D> layout_;
  Kernel kernel_;
  Options options_;
  // set_points writes a bank-interleaved order for the tile kernels (tiles.cuh).
  bool interleaved_ = tuning::interleave_pays(kernel_.support(), D);
  BinGeometry<D> geo_{};
  int shared_optin_ = 0;
  std::vector<const void*> opted_in_;  // kernels opt_in_shared has raised (each to its one size)
  mutable DevicePointerCheck checked_pointers_;  // the caller's arrays found to be device memory
  double l2_bytes_ = 0;  // the device's L2 cache
  // One property's mesh is larger than the L2 cache (resolve_method).
  bool mesh_beyond_l2() const { return static_cast<double>(layout_.size) * sizeof(T) > l2_bytes_; }
  int tile_props_per_pass_ = 0;
  int cell_props_per_pass_ = 0;  // 0: cell moments not asked for
  double stencil_per_window_node_ = 0;  // S^D / tile window nodes (window_use)
  Groups groups_{};
  SpreadMethod method_ = SpreadMethod::CudaGlobalAtomics;
  Timings timings_;
  cudaEvent_t events_[2] = {};

  Binned current_, spare_;
  // set_points scratch. rank_: the one-pass scatter's ranks. (The partition's two levels
  // write each pass-1 place's caller index, then its binned slot, to the binning's
  // binned_of_place, which it keeps.)
  DeviceBuffer<std::uint32_t> rank_, bucket_count_, bucket_start_, chunk_count_, chunk_start_;
  // the partition (binning.cuh): per group, per piece of pass 2; records and tile keys
  // in pass-1 order
  DeviceBuffer<std::uint32_t> same_pairs_, block_count_, block_start_, group_start_, piece_count_, piece_start_,
      piece_count_tiles_;
  DeviceBuffer<Packed<T>> parted_;
  DeviceBuffer<std::uint16_t> part_key_;
  DeviceBuffer<std::uint8_t> window_banks_;  // by binned slot, for the interleave (two levels; WindowBanks)
  DeviceBuffer<unsigned long long> bad_;
  // What set_points and update_points read back, in pinned memory: the copies are
  // asynchronous and land with the call's one wait for the device.
  struct HostStatus {
    unsigned long long first_bad;
    std::uint32_t chunks, spans, away, pieces;
  };
  struct FreeHost {
    void operator()(HostStatus* p) const { cudaFreeHost(p); }
  };
  std::unique_ptr<HostStatus, FreeHost> host_;
  DeviceBuffer<unsigned char> scan_temp_;
  // deterministic mode
  DeviceBuffer<unsigned long long> exact_, max_abs_;
  // interp: values in binned order, before unbin_kernel; spread: the properties in binned
  // order (props_to_slots), and at their pass-1 places before that (two levels)
  DeviceBuffer<T> binned_values_, mid_values_;
  // host_arrays mode
  DeviceBuffer<T> staging_positions_, staging_particles_, staging_meshes_;
};

}  // namespace pmkit::cuda

#define PMKIT_INSTANTIATE_CUDA_BACKEND(T, D)                                                          \
  namespace pmkit::detail {                                                                           \
  template <>                                                                                         \
  std::unique_ptr<Backend<T, D>> make_cuda_backend<T, D>(const Grid<D>& g, const Kernel& k,           \
                                                         const Options& o) {                          \
    return std::make_unique<cuda::CudaBackend<T, D>>(g, k, o);                                        \
  }                                                                                                   \
  }
