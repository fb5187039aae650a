#pragma once
// set_points and update_points: the binning of the caller's positions into tile order,
// all on the plan's stream, with a wait at the end for the values read back (and, in
// set_points, one for the probe and one for the one-pass scatter's number of runs).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <limits>
#include <utility>

#include "cuda/plan/cuda_backend.cuh"

namespace pmkit::cuda {

// How many pass-2 pieces and chunks a binning of n particles can have at most.
template <class T>
std::size_t max_pieces(std::size_t n, Groups groups) {
  return n / PartitionBlock<T>::kItems + groups.count + 1;
}
inline std::size_t max_chunks(std::size_t n, std::size_t tiles) { return tiles + n / tuning::kChunkParticles + 1; }
// A heavy tile holds more than kHeavyTileChunks full chunks.
inline std::size_t max_heavy_tiles(std::size_t n, std::size_t tiles) {
  return std::min(tiles, n / (std::size_t(tuning::kHeavyTileChunks) * tuning::kChunkParticles) + 1);
}
// Entries of the partition's count matrix: one per (group, pass-1 block).
template <class T>
std::size_t partition_counts(std::size_t n, Groups groups) {
  return std::size_t(groups.count) * blocks_for(n, PartitionBlock<T>::kItems);
}

// Bins the positions into spare_ (the partition, or the one-pass scatter where the
// partition does not fit or the probe finds the input in binned order; both are stable
// sorts by tile), cuts the tiles into chunks (and spans), orders the chunks for the tile
// kernels, then waits and swaps spare_ in: a rejected position throws with the binning in use left as it was.
template <class T, int D>
void CudaBackend<T, D>::set_points(std::size_t n, const std::array<View<const T>, D>& positions) {
  const DeviceScope on_device(options_.device);
  timings_ = {};
  const std::size_t tiles = geo_.num_tiles;
  const Groups groups = groups_;
  // Never on a wide grid (the partition's kernels bin in 32 bits; partition_fits keeps
  // it to far fewer tiles anyway).
  const bool may_partition = !geo_.wide && tuning::partition_fits(n, PartitionBlock<T>::kItems, groups, kPlaceShared,
                                                                  static_cast<std::size_t>(limits_.shared_optin));
  reserve_binning(n, may_partition);
  const PositionArrays<T, D> pos = device_positions(n, positions);

  start_timer();
  // The cut's counters, and after them the chunks' and heavy tiles' counts (find_heavy_tiles).
  check(cudaMemsetAsync(buf_.chunk_count.get(), 0, (tiles + 3) * sizeof(std::uint32_t), stream_), "cudaMemset");
  check(cudaMemsetAsync(buf_.bad.get(), 0xff, sizeof(unsigned long long), stream_), "cudaMemset");
  // Where each tile's binned particles start (tiles + 1 entries).
  const std::uint32_t* tile_start = buf_.tile_start.get();
  const bool caller_order_binned = may_partition && in_binned_order(n, pos);
  int partition_levels = 0;
  if (may_partition && !caller_order_binned) {
    tile_start = partition_scatter(n, pos, groups, max_pieces<T>(n, groups));
    partition_levels = groups.bits > 0 ? 2 : 1;
  } else {
    one_pass_scatter(n, pos);
  }
  // The chunks' count comes back with the heavy tiles' where set_points finds them (one copy).
  const bool heavy = heavy_tiles_wanted();
  cut_tiles(tile_start, tuning::kChunkParticles, false, spare_.chunks.get(),
            heavy ? nullptr : &host_->chunks);
  host_->heavy = 0;
  if (heavy) find_heavy_tiles();  // from the chunk counts, before the spans' cut
  if (n > 0 && interleaved_) interleave(max_chunks(n, tiles), partition_levels);
  host_->spans = 0;
  if (cells_wanted())
    cut_tiles(tile_start, tuning::kCellSpanParticles, true, spare_.spans.get(), &host_->spans);
  check(cudaMemcpyAsync(&host_->first_bad, buf_.bad.get(), sizeof(host_->first_bad), cudaMemcpyDeviceToHost, stream_),
        "set_points: position check");
  timings_.compute_s += stop_timer();  // the call's last wait (the probe and the one-pass scatter wait once each before it)
  // A rejected particle: the error, with the binning in use left as it was (every kernel
  // above wrote only to spare_ and scratch, and left the rejected particles out).
  reject_if_bad(pos, host_->first_bad);
  reserve_heavy_windows(host_->heavy);
  spare_.num_heavy = host_->heavy;
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

// Every allocation of set_points, before any kernel: nothing of the current binning
// changes until all succeed.
template <class T, int D>
void CudaBackend<T, D>::reserve_binning(std::size_t n, bool may_partition) {
  const std::size_t tiles = geo_.num_tiles;
  const Groups groups = groups_;
  const std::size_t pieces = max_pieces<T>(n, groups);
  const std::size_t block_counts = may_partition ? partition_counts<T>(n, groups) : 0;
  const std::size_t warps = blocks_for(n, tuning::kPointThreads) * std::size_t(tuning::kPointThreads / 32);
  if (options_.host_arrays) {
    buf_.staging_positions.reserve(n * D, "position staging");
    buf_.staging_particles.reserve(n * tuning::kPropsPerPass, "particle staging");
  }
  spare_.tile_of.reserve(n, "binned particles");
  buf_.warp_runs.reserve(warps + 1, "binning scratch");
  buf_.warp_run_start.reserve(warps + 1, "binning scratch");
  buf_.tile_count.reserve(tiles + 1, "binning scratch");
  buf_.tile_start.reserve(tiles + 1, "binning scratch");
  buf_.chunk_count.reserve(tiles + 3, "binning scratch");
  buf_.chunk_start.reserve(tiles + 1, "binning scratch");
  buf_.bad.reserve(1, "binning scratch");
  if (may_partition) {
    buf_.same_pairs.reserve(1, "binning scratch");
    buf_.block_count.reserve(block_counts + 1, "binning scratch");
    buf_.block_start.reserve(block_counts + 1, "binning scratch");
    buf_.group_start.reserve(groups.count + 1, "binning scratch");
    spare_.sorted_block.reserve(n, "binned particles");
    if (groups.bits > 0) {
      spare_.place.reserve(n, "binned particles");
      spare_.binned_of_place.reserve(n, "binned particles");
      spare_.sorted_piece.reserve(n, "binned particles");
      spare_.pieces.reserve(pieces, "binned particles");
      buf_.parted.reserve(n, "binning scratch");
      buf_.part_key.reserve(n, "binning scratch");
      buf_.piece_count.reserve(groups.count + 1, "binning scratch");
      buf_.piece_start.reserve(groups.count + 1, "binning scratch");
      buf_.piece_count_tiles.reserve(pieces << groups.bits, "binning scratch");
      if (interleaved_) buf_.window_banks.reserve(n, "binning scratch");
    }
  }
  spare_.particles.reserve(n, "binned particles");
  spare_.perm.reserve(n, "binned particles");
  spare_.slot.reserve(n, "binned particles");
  if (interleaved_) spare_.order.reserve(n, "binned particles");
  spare_.chunks.reserve(max_chunks(n, tiles), "binned particles");
  if (heavy_tiles_wanted()) {
    spare_.heavy_slot.reserve(tiles, "binned particles");
    spare_.heavy_tiles.reserve(max_heavy_tiles(n, tiles), "binned particles");
  }
  if (cells_wanted()) spare_.spans.reserve(tiles + n / tuning::kCellSpanParticles + 1, "binned particles");
  std::size_t scan_bytes = 0;
  for (std::size_t items : {warps + 1, tiles + 1, std::size_t(groups.count) + 1, block_counts + 1}) {
    std::size_t bytes = 0;
    check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, buf_.tile_count.get(), buf_.tile_start.get(),
                                        static_cast<int>(items), stream_),
          "cub::DeviceScan");
    scan_bytes = std::max(scan_bytes, bytes);
  }
  buf_.scan_temp.reserve(scan_bytes, "binning scratch");
}

// Each tile (where it starts: tile_start) cut into pieces of at most
// `cap` particles (`even`: all of one size), into `out`; their count goes to *total (null:
// the caller copies it), copied back without waiting (it lands with set_points' final wait). The counters' last
// entry stays 0 (set_points' memset) for the scan's total, which stays in
// buf_.chunk_start[tiles] until the next cut.
template <class T, int D>
void CudaBackend<T, D>::cut_tiles(const std::uint32_t* tile_start, std::uint32_t cap, bool even,
                                  Chunk* out, std::uint32_t* total) {
  const std::size_t tiles = geo_.num_tiles;
  chunk_count_kernel<<<blocks_for(tiles, 256), 256, 0, stream_>>>(geo_.num_tiles, tile_start, cap,
                                                                  buf_.chunk_count.get());
  check_launch("pmkit::cuda::set_points::chunk_count");
  scan(buf_.chunk_count.get(), buf_.chunk_start.get(), tiles + 1);
  chunk_fill_kernel<<<blocks_for(tiles, 256), 256, 0, stream_>>>(geo_.num_tiles, tile_start,
                                                                 buf_.chunk_start.get(), cap, even, out);
  check_launch("pmkit::cuda::set_points::chunk_fill");
  if (total)
    check(cudaMemcpyAsync(total, buf_.chunk_start.get() + tiles, sizeof(*total), cudaMemcpyDeviceToHost, stream_),
          "set_points: binning");
}

// The heavy tiles of the chunks just cut (buf_.chunk_count: each tile's chunks, then the
// scan's 0 and two zeros for the counts): each tile's window among them
// (spare_.heavy_slot), the heavy tiles by window, and the chunks' and heavy tiles' counts,
// copied back in one copy without waiting (it lands with set_points' final wait).
template <class T, int D>
void CudaBackend<T, D>::find_heavy_tiles() {
  const std::size_t tiles = geo_.num_tiles;
  std::uint32_t* counts = buf_.chunk_count.get() + tiles + 1;  // {chunks, heavy tiles}
  heavy_tiles_kernel<<<blocks_for(tiles, 256), 256, 0, stream_>>>(geo_.num_tiles, buf_.chunk_count.get(),
                                                                  buf_.chunk_start.get(), tuning::kHeavyTileChunks,
                                                                  counts, spare_.heavy_slot.get(),
                                                                  spare_.heavy_tiles.get());
  check_launch("pmkit::cuda::set_points::heavy_tiles");
  static_assert(offsetof(HostStatus, heavy) == offsetof(HostStatus, chunks) + sizeof(std::uint32_t),
                "the two counts are copied back together");
  check(cudaMemcpyAsync(&host_->chunks, counts, 2 * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, stream_),
        "set_points: binning");
}

// Room for the double windows of `heavy_tiles` heavy tiles. Every window is zero between
// spreads: a new buffer is cleared once, and finish_heavy_kernel clears what it adds. A
// larger buffer is allocated before the old one goes, so that a failed allocation leaves
// the binning in use with its windows.
template <class T, int D>
void CudaBackend<T, D>::reserve_heavy_windows(std::uint32_t heavy_tiles) {
  const int window_nodes = kernels::dispatch(kernel_, [](auto k) { return TileWindow<decltype(k), D>::kNodes; });
  const std::size_t values = std::size_t(heavy_tiles) * tuning::kPropsPerPass * window_nodes;
  if (values <= buf_.heavy_windows.size()) return;
  DeviceBuffer<double> windows(values, "heavy tiles' windows");
  check(cudaMemsetAsync(windows.get(), 0, values * sizeof(double), stream_), "cudaMemset");
  buf_.heavy_windows = std::move(windows);
}

// The order the tile kernels take each chunk's particles in (kernels/tiles.cuh). As many
// blocks as there can be chunks; those past the count return at once. Banks from
// place_kernel where pass 2 ran, else from the records.
template <class T, int D>
void CudaBackend<T, D>::interleave(std::size_t max_chunks, int partition_levels) {
  const unsigned blocks = static_cast<unsigned>(max_chunks);
  const std::uint32_t* num_chunks = buf_.chunk_start.get() + geo_.num_tiles;
  kernels::dispatch(kernel_, [&](auto k) {
    using K = decltype(k);
    if (partition_levels == 2) {
      constexpr int kThreads = tuning::interleave_threads(true);
      interleave_kernel<K, D, T, kThreads, true><<<blocks, kThreads, 0, stream_>>>(
          geo_, spare_.chunks.get(), num_chunks, spare_.particles.get(), buf_.window_banks.get(), spare_.order.get());
    } else {
      constexpr int kThreads = tuning::interleave_threads(false);
      interleave_kernel<K, D, T, kThreads, false><<<blocks, kThreads, 0, stream_>>>(
          geo_, spare_.chunks.get(), num_chunks, spare_.particles.get(), nullptr, spare_.order.get());
    }
  });
  check_launch("pmkit::cuda::set_points::interleave");
}

// The spread method for the new binning (tuning::spread_method).
template <class T, int D>
void CudaBackend<T, D>::resolve_method() {
  method_ = tuning::spread_method(options_.spread_method, options_.deterministic, tile_props_per_pass_ > 0,
                                  window_use(), static_cast<double>(layout_.size) * sizeof(T), limits_.l2_bytes);
}

// Keeps the binning: every particle still in its tile gets its new record; the others
// go to the away list, which spread and interp handle apart (one thread or one warp a
// particle). One pass writes the new records and the list into buffers of their own,
// then the call waits once for the count and swaps them in; a full binning instead
// when more than max_away_fraction of the particles are away (after which the next
// update counts before it writes), and in deterministic mode (the away particles'
// spread would take float atomics). A rejected position throws with the binning in use
// left as it was.
template <class T, int D>
void CudaBackend<T, D>::update_points(std::size_t n, const std::array<View<const T>, D>& positions) {
  const DeviceScope on_device(options_.device);
  if (options_.deterministic || n == 0) return set_points(n, positions);
  timings_ = {};
  // The away particles an update keeps at most: away > max_away_fraction * n <=> away > capacity.
  const auto capacity = static_cast<std::uint32_t>(options_.max_away_fraction * static_cast<double>(n));
  if (options_.host_arrays) buf_.staging_positions.reserve(n * D, "position staging");
  buf_.bad.reserve(1, "binning scratch");
  buf_.tile_count.reserve(1, "binning scratch");
  buf_.updated.particles.reserve(n, "update_points records");
  buf_.updated.away_slot.reserve(capacity, "update_points away list");
  buf_.updated.away_particles.reserve(capacity, "update_points away list");
  const PositionArrays<T, D> pos = device_positions(n, positions);

  start_timer();
  std::uint32_t* away_count = buf_.tile_count.get();  // set_points' scratch, free between calls
  Binned<T>& b = current_;
  // One pass: the count alone (write = false), or the count with the new records and the
  // away list.
  auto run_update = [&](bool write) {
    check(cudaMemsetAsync(away_count, 0, sizeof(std::uint32_t), stream_), "cudaMemset");
    update_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
        layout_, geo_, pos, n, b.tile_of.get(), b.slot.get(), buf_.bad.get(), away_count, capacity,
        write ? buf_.updated.particles.get() : nullptr, buf_.updated.away_slot.get(),
        buf_.updated.away_particles.get());
    check_launch("pmkit::cuda::update_points");
  };
  // A pass validates every position, so `bad` is cleared once.
  check(cudaMemsetAsync(buf_.bad.get(), 0xff, sizeof(unsigned long long), stream_), "cudaMemset");
  // After an update that ended in a full binning the particles likely still move that far:
  // count first, with a pass that only reads, and write only where the count allows.
  const bool count_first = update_rebinned_;
  run_update(!count_first);
  check(cudaMemcpyAsync(&host_->first_bad, buf_.bad.get(), sizeof(host_->first_bad), cudaMemcpyDeviceToHost, stream_),
        "update_points: position check");
  check(cudaMemcpyAsync(&host_->away, away_count, sizeof(host_->away), cudaMemcpyDeviceToHost, stream_), "update_points");
  timings_.compute_s += stop_timer();  // the call's one wait (two where it counted first)
  reject_if_bad(pos, host_->first_bad);
  const std::uint32_t away = host_->away;
  update_rebinned_ = away > capacity;
  if (update_rebinned_) {
    const Timings update = timings_;
    set_points(n, positions);
    timings_.compute_s += update.compute_s;
    timings_.transfer_s += update.transfer_s;
    return;
  }
  if (count_first) {
    start_timer();
    run_update(true);
    timings_.compute_s += stop_timer();
  }
  std::swap(b.particles, buf_.updated.particles);
  std::swap(b.away_slot, buf_.updated.away_slot);
  std::swap(b.away_particles, buf_.updated.away_particles);
  b.num_away = away;
}

// Exclusive sum of `items` counters (buf_.scan_temp holds the largest scan of set_points).
template <class T, int D>
void CudaBackend<T, D>::scan(const std::uint32_t* count, std::uint32_t* start, std::size_t items) {
  std::size_t bytes = buf_.scan_temp.size();
  check(cub::DeviceScan::ExclusiveSum(buf_.scan_temp.get(), bytes, count, start, static_cast<int>(items), stream_),
        "cub::DeviceScan");
}

// Whether the caller's particles are (mostly) in binned order: most sampled neighbour
// pairs share a tile (tuning::caller_order_binned). One pair a thread, a 4-byte copy
// back, for which set_points waits (the scatter it chooses follows on the host).
template <class T, int D>
bool CudaBackend<T, D>::in_binned_order(std::size_t n, const PositionArrays<T, D>& pos) {
  const std::uint32_t pairs = tuning::kBinnedProbePairs;
  check(cudaMemsetAsync(buf_.same_pairs.get(), 0, sizeof(std::uint32_t), stream_), "cudaMemset");
  same_tile_pairs_kernel<T, D><<<blocks_for(pairs, 256), 256, 0, stream_>>>(layout_, geo_, pos, n, pairs, buf_.same_pairs.get());
  check_launch("pmkit::cuda::set_points::probe");
  check(cudaMemcpyAsync(&host_->same_pairs, buf_.same_pairs.get(), sizeof(host_->same_pairs), cudaMemcpyDeviceToHost,
                        stream_),
        "set_points: probe");
  check(cudaStreamSynchronize(stream_), "set_points: probe");
  return tuning::caller_order_binned(host_->same_pairs);
}

// The one-pass scatter (kernels/binning.cuh), a stable sort by tile: classify (validate,
// key, runs per warp) -> scan -> the runs -> their count read back (a wait: the sort
// needs it on the host) -> radix sort of the runs by tile -> scan of their lengths ->
// each run's and tile's first slot -> every record straight to its slot. Its stores are
// consecutive where the input is in binned order.
template <class T, int D>
void CudaBackend<T, D>::one_pass_scatter(std::size_t n, const PositionArrays<T, D>& pos) {
  const std::uint32_t tiles = geo_.num_tiles;
  if (n == 0) {
    check(cudaMemsetAsync(buf_.tile_start.get(), 0, (std::size_t(tiles) + 1) * sizeof(std::uint32_t), stream_),
          "cudaMemset");
    return;
  }
  const std::size_t warps = (n + 31) / 32;
  check(cudaMemsetAsync(buf_.warp_runs.get() + warps, 0, sizeof(std::uint32_t), stream_), "cudaMemset");
  classify_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      layout_, geo_, pos, n, spare_.tile_of.get(), buf_.warp_runs.get(), buf_.bad.get());
  check_launch("pmkit::cuda::set_points::classify");
  scan(buf_.warp_runs.get(), buf_.warp_run_start.get(), warps + 1);
  check(cudaMemcpyAsync(&host_->runs, buf_.warp_run_start.get() + warps, sizeof(host_->runs), cudaMemcpyDeviceToHost,
                        stream_),
        "set_points: runs");
  check(cudaStreamSynchronize(stream_), "set_points: runs");
  const std::uint32_t runs = host_->runs;

  // The runs' arrays; run_slot takes the unsorted keys' room once the sort has read them.
  buf_.run_key.reserve(runs, "binning scratch");
  buf_.run_head.reserve(std::size_t(runs) + 1, "binning scratch");
  buf_.run_id.reserve(runs, "binning scratch");
  buf_.sorted_key.reserve(runs, "binning scratch");
  buf_.sorted_id.reserve(runs, "binning scratch");
  buf_.sorted_start.reserve(std::size_t(runs) + 1, "binning scratch");
  int key_bits = 1;
  while ((std::uint64_t(tiles) >> key_bits) != 0) ++key_bits;  // keys up to num_tiles
  const SortedRunLength length{buf_.sorted_id.get(), buf_.run_head.get(), runs};
  const auto lengths = thrust::make_transform_iterator(thrust::counting_iterator<std::uint32_t>(0), length);
  std::size_t sort_bytes = 0, scan_bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, buf_.run_key.get(), buf_.sorted_key.get(),
                                        buf_.run_id.get(), buf_.sorted_id.get(), runs, 0, key_bits, stream_),
        "cub::DeviceRadixSort");
  check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, lengths, buf_.sorted_start.get(), runs + 1, stream_),
        "cub::DeviceScan");
  buf_.scan_temp.reserve(std::max(sort_bytes, scan_bytes), "binning scratch");

  emit_runs_kernel<<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      spare_.tile_of.get(), n, buf_.warp_run_start.get(),
      RunList{buf_.run_key.get(), buf_.run_head.get(), buf_.run_id.get()});
  check_launch("pmkit::cuda::set_points::emit_runs");
  sort_bytes = buf_.scan_temp.size();
  check(cub::DeviceRadixSort::SortPairs(buf_.scan_temp.get(), sort_bytes, buf_.run_key.get(), buf_.sorted_key.get(),
                                        buf_.run_id.get(), buf_.sorted_id.get(), runs, 0, key_bits, stream_),
        "cub::DeviceRadixSort");
  scan_bytes = buf_.scan_temp.size();
  check(cub::DeviceScan::ExclusiveSum(buf_.scan_temp.get(), scan_bytes, lengths, buf_.sorted_start.get(), runs + 1,
                                      stream_),
        "cub::DeviceScan");
  std::uint32_t* run_slot = buf_.run_key.get();
  place_runs_kernel<<<blocks_for(std::max<std::size_t>(runs, std::size_t(tiles) + 1), 256), 256, 0, stream_>>>(
      runs, tiles, buf_.sorted_key.get(), buf_.sorted_id.get(), buf_.sorted_start.get(), run_slot,
      buf_.tile_start.get());
  check_launch("pmkit::cuda::set_points::place_runs");
  scatter_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      layout_, geo_, pos, n, buf_.warp_run_start.get(), run_slot, spare_.particles.get(), spare_.perm.get(),
      spare_.slot.get());
  check_launch("pmkit::cuda::set_points::scatter");
}

// The scatter by partition (kernels/partition.cuh; n > 0): count, pass 1 into
// groups of tiles, then, where groups hold several tiles, pass 2 inside each group's
// pieces and the composed slot. Returns each tile's first slot (tiles + 1 entries).
template <class T, int D>
const std::uint32_t* CudaBackend<T, D>::partition_scatter(std::size_t n, const PositionArrays<T, D>& pos, Groups groups,
                                       std::size_t max_pieces) {
  using B = PartitionBlock<T>;
  const std::size_t tiles = geo_.num_tiles;
  const bool two_levels = groups.bits > 0;
  const unsigned pass1_blocks = blocks_for(n, B::kItems);
  const std::size_t counts = partition_counts<T>(n, groups);
  // Counts a row a block (in buf_.block_start), transposed to a row a group (buf_.block_count).
  count_groups_kernel<T, D><<<pass1_blocks, B::kThreads, 0, stream_>>>(layout_, geo_, pos, n, groups, buf_.block_start.get(),
                                                           buf_.bad.get());
  check_launch("pmkit::cuda::set_points::count_groups");
  transpose_counts_kernel<<<dim3((groups.count + 31) / 32, (pass1_blocks + 31) / 32), dim3(32, 8), 0, stream_>>>(
      buf_.block_start.get(), pass1_blocks, groups.count, buf_.block_count.get());
  check_launch("pmkit::cuda::set_points::transpose_counts");
  check(cudaMemsetAsync(buf_.block_count.get() + counts, 0, sizeof(std::uint32_t), stream_), "cudaMemset");  // the scan's total
  scan(buf_.block_count.get(), buf_.block_start.get(), counts + 1);
  // Each group starts where its first block's run does (the last entry: the total).
  check(cudaMemcpy2DAsync(buf_.group_start.get(), sizeof(std::uint32_t), buf_.block_start.get(),
                          pass1_blocks * sizeof(std::uint32_t), sizeof(std::uint32_t), groups.count + 1,
                          cudaMemcpyDeviceToDevice, stream_),
        "set_points: group starts");
  const PartitionOut<T> out = two_levels
                                  ? PartitionOut<T>{buf_.parted.get(), spare_.binned_of_place.get(), buf_.part_key.get(),
                                                    spare_.place.get(), spare_.sorted_block.get()}
                                  : PartitionOut<T>{spare_.particles.get(), spare_.perm.get(), nullptr,
                                                    spare_.slot.get(), spare_.sorted_block.get()};
  partition_kernel<T, D><<<pass1_blocks, B::kThreads, kPartitionShared, stream_>>>(
      layout_, geo_, pos, n, groups, buf_.block_start.get(), spare_.tile_of.get(), out);
  check_launch("pmkit::cuda::set_points::partition");
  if (!two_levels) return buf_.group_start.get();  // the groups are the tiles

  // Pass 2: the pieces of each group (Chunks whose `tile` is the group).
  check(cudaMemsetAsync(buf_.piece_count.get(), 0, (groups.count + 1) * sizeof(std::uint32_t), stream_), "cudaMemset");
  check(cudaMemsetAsync(buf_.tile_count.get(), 0, (tiles + 1) * sizeof(std::uint32_t), stream_), "cudaMemset");
  chunk_count_kernel<<<blocks_for(groups.count, 256), 256, 0, stream_>>>(groups.count, buf_.group_start.get(), B::kItems,
                                                             buf_.piece_count.get());
  check_launch("pmkit::cuda::set_points::piece_count");
  scan(buf_.piece_count.get(), buf_.piece_start.get(), groups.count + 1);
  chunk_fill_kernel<<<blocks_for(groups.count, 256), 256, 0, stream_>>>(groups.count, buf_.group_start.get(),
                                                            buf_.piece_start.get(), B::kItems, false,
                                                            spare_.pieces.get());
  check_launch("pmkit::cuda::set_points::piece_fill");
  // max_pieces blocks; those past the real count (buf_.piece_start[groups]) return at once.
  const unsigned piece_blocks = static_cast<unsigned>(max_pieces);
  const std::uint32_t* num_pieces = buf_.piece_start.get() + groups.count;
  count_piece_tiles_kernel<<<piece_blocks, B::kThreads, 0, stream_>>>(groups, geo_.num_tiles, spare_.pieces.get(), num_pieces,
                                                           buf_.part_key.get(), buf_.tile_count.get(),
                                                           buf_.piece_count_tiles.get());
  check_launch("pmkit::cuda::set_points::count_piece_tiles");
  scan(buf_.tile_count.get(), buf_.tile_start.get(), tiles + 1);
  // The interleave's banks, in the tile kernels' windows.
  const int window_width = kernels::dispatch(kernel_, [](auto k) { return TileWindow<decltype(k), D>::kWidth; });
  const WindowBanks<D> banks{interleaved_ ? buf_.window_banks.get() : nullptr, geo_, window_width};
  place_kernel<T, D><<<piece_blocks, B::kThreads, kPlaceShared, stream_>>>(
      groups, spare_.pieces.get(), num_pieces, buf_.piece_start.get(), buf_.part_key.get(), buf_.parted.get(),
      spare_.binned_of_place.get(), buf_.tile_start.get(), buf_.piece_count_tiles.get(), spare_.particles.get(),
      spare_.perm.get(), spare_.sorted_piece.get(), banks);
  check_launch("pmkit::cuda::set_points::place");
  compose_slot_kernel<<<blocks_for(n, tuning::kPointThreads * kComposePerThread), tuning::kPointThreads, 0, stream_>>>(
      n, spare_.place.get(), spare_.binned_of_place.get(), spare_.slot.get());
  check_launch("pmkit::cuda::set_points::compose_slot");
  // The pieces' count, for the spread's second move (lands with the call's final wait).
  check(cudaMemcpyAsync(&host_->pieces, num_pieces, sizeof(host_->pieces), cudaMemcpyDeviceToHost, stream_),
        "set_points: binning");
  return buf_.tile_start.get();
}

// Throws the CPU backend's error for the first rejected particle, if a kernel found one.
// `bad`: the smallest index of a rejected particle, read back from buf_.bad (all ones: none).
template <class T, int D>
void CudaBackend<T, D>::reject_if_bad(const PositionArrays<T, D>& pos, unsigned long long bad) {
  if (bad == std::numeric_limits<unsigned long long>::max()) return;
  double x[D];
  for (int d = 0; d < D; ++d) {
    T value;
    check(cudaMemcpyAsync(&value, pos.data[d] + static_cast<std::ptrdiff_t>(bad) * pos.stride[d], sizeof(T),
                          cudaMemcpyDeviceToHost, stream_),
          "read rejected particle");
    check(cudaStreamSynchronize(stream_), "read rejected particle");
    x[d] = value;
  }
  detail::reject_particle<D>(layout_, x, static_cast<std::size_t>(bad));
}

}  // namespace pmkit::cuda
