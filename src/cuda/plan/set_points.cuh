#pragma once
// set_points and update_points: the binning of the caller's positions into tile order,
// all on the plan's stream and without a wait for the host: every count is decided on
// the device and every buffer is sized by a bound known on the host (status.cuh says how
// the host learns the counts and a rejected position later). The one wait left is the
// one-pass scatter's count of runs (CUB's sort takes its length on the host), read back
// from tuning::kRunsReadBackParticles particles on, where a sort of the bound would cost
// more than the wait, and never under stream capture.
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

// Bins the positions (the one-block binning for few particles; else the partition, or
// the one-pass scatter where the partition does not fit or where the last probe read
// found the caller's particles in binned order; all stable sorts by tile), cuts
// the tiles into chunks (and spans), orders the chunks for the tile kernels and queues
// the status copy. In place on device arrays, so that the binning's buffers stay where a
// graph captured them: until the call's end the plan counts as having no binning (an
// allocation that fails half-way leaves none). With host_arrays into spare_, swapped in
// once the position check has come back. A rejected position is reported by a later
// call (raise_device_errors).
template <class T, int D>
void CudaBackend<T, D>::set_points(std::size_t n, const std::array<View<const T>, D>& positions) {
  const DeviceScope on_device(options_.device);
  begin_timings();
  const std::size_t tiles = geo_.num_tiles;
  const Groups groups = groups_;
  // Never on a wide grid (the partition's kernels bin in 32 bits; partition_fits keeps
  // it to far fewer tiles anyway).
  const bool may_partition = !geo_.wide && tuning::partition_fits(n, PartitionBlock<T>::kItems, groups, kPlaceShared,
                                                                  static_cast<std::size_t>(limits_.shared_optin));
  Binned<T>& b = building();
  if (&b == &current_) binning_lost_ = true;
  binning_kept_ = false;
  reserve_binning(b, n, may_partition);
  const PositionArrays<T, D> pos = device_positions(n, positions);
  const bool timed = start_call_timer();
  const bool small = binned_in_one_block(n);
  // The cut's counters; the last entry stays 0 for the scan's total.
  if (!small || cells_wanted())
    check(cudaMemsetAsync(buf_.chunk_count.get(), 0, (tiles + 1) * sizeof(std::uint32_t), stream_), "cudaMemset");
  // Where each tile's binned particles start (tiles + 1 entries).
  const std::uint32_t* tile_start = buf_.tile_start.get();
  int partition_levels = 0;
  if (small) {
    small_binning(b, n, pos);  // the chunks and every count too
  } else {
    check(cudaMemsetAsync(b.counts, 0, kBinCounts * sizeof(std::uint32_t), stream_), "cudaMemset");
    // Under stream capture, binned input of kRunsReadBackParticles or more takes the
    // partition: the one-pass sort's buffers hold the runs read back eagerly, not the
    // bound a capture sorts.
    const bool capturing = BinningStatus<T, D>::capturing(stream_);
    const bool binned_input = caller_order_binned_ && !(capturing && n >= tuning::kRunsReadBackParticles);
    if (!may_partition || (n > 0 && binned_input)) {
      one_pass_scatter(b, n, pos);
    } else if (n > 0) {
      tile_start = partition_scatter(b, n, pos, groups);
      partition_levels = groups.bits > 0 ? 2 : 1;
    } else {
      check(cudaMemsetAsync(buf_.tile_start.get(), 0, (tiles + 1) * sizeof(std::uint32_t), stream_), "cudaMemset");
    }
    cut_tiles(tile_start, tuning::kChunkParticles, false, b.chunks.get(), b.max_chunks, b.counts + kChunkCount);
    if (b.max_heavy > 0) find_heavy_tiles(b);  // from the chunk counts, before the spans' cut
  }
  if (n > 0 && interleaved_) interleave(b, partition_levels);
  if (cells_wanted())
    cut_tiles(tile_start, tuning::kCellSpanParticles, true, b.spans.get(), b.max_spans, b.counts + kSpanCount);
  const bool probed = !small && may_partition && n > 0;
  if (probed) probe_binned_order(n, pos);
  if (timed) stop_call_timer();
  b.n = n;
  b.has_away = false;
  b.identity_order = false;
  b.caller_order_binned = probed && caller_order_binned_;  // as the last probe read found
  b.partition_levels = partition_levels;
  finish_binning_call(true, pos, b.status_row, probed);
  if (&b == &spare_) std::swap(current_, spare_);
  binning_lost_ = false;
  resolve_method();
}

// The away particles of the binning in use: a wait, for the value the caller asked for.
template <class T, int D>
std::size_t CudaBackend<T, D>::num_away() const {
  if (!current_.has_away) return 0;
  const DeviceScope on_device(options_.device);
  std::uint32_t away = 0;
  check(cudaMemcpyAsync(&away, current_.counts + kAwayCount, sizeof away, cudaMemcpyDeviceToHost, stream_), "num_away");
  check(cudaStreamSynchronize(stream_), "num_away");
  return away;
}

// The last call's timings; a binning call's device time is read here (a wait).
template <class T, int D>
Timings CudaBackend<T, D>::last_timings() const {
  Timings t = timings_;
  if (call_timed_) t.compute_s += call_timer_.seconds("kernel execution");
  return t;
}

// Every allocation of set_points, before any kernel: nothing of the current binning
// changes until all succeed.
template <class T, int D>
void CudaBackend<T, D>::reserve_binning(Binned<T>& b, std::size_t n, bool may_partition) {
  const std::size_t tiles = geo_.num_tiles;
  const Groups groups = groups_;
  const std::size_t pieces = max_pieces<T>(n, groups);
  const std::size_t block_counts = may_partition ? partition_counts<T>(n, groups) : 0;
  const std::size_t warps = blocks_for(n, tuning::kPointThreads) * std::size_t(tuning::kPointThreads / 32);
  if (options_.host_arrays) {
    buf_.staging_positions.reserve(n * D, "position staging");
    buf_.staging_particles.reserve(n * tuning::kPropsPerPass, "particle staging");
  }
  b.tile_of.reserve(n, "binned particles");
  buf_.warp_runs.reserve(warps + 1, "binning scratch");
  buf_.warp_run_start.reserve(warps + 1, "binning scratch");
  buf_.tile_count.reserve(tiles + 1, "binning scratch");
  buf_.tile_start.reserve(tiles + 1, "binning scratch");
  buf_.chunk_count.reserve(tiles + 1, "binning scratch");
  buf_.chunk_start.reserve(tiles + 1, "binning scratch");
  if (may_partition) {
    buf_.block_count.reserve(block_counts + 1, "binning scratch");
    buf_.block_start.reserve(block_counts + 1, "binning scratch");
    buf_.group_start.reserve(groups.count + 1, "binning scratch");
    b.sorted_block.reserve(n, "binned particles");
    if (groups.bits > 0) {
      b.place.reserve(n, "binned particles");
      b.binned_of_place.reserve(n, "binned particles");
      b.sorted_piece.reserve(n, "binned particles");
      b.pieces.reserve(pieces, "binned particles");
      buf_.parted.reserve(n, "binning scratch");
      buf_.part_key.reserve(n, "binning scratch");
      buf_.piece_count.reserve(groups.count + 1, "binning scratch");
      buf_.piece_start.reserve(groups.count + 1, "binning scratch");
      buf_.piece_count_tiles.reserve(pieces << groups.bits, "binning scratch");
      if (interleaved_) buf_.window_banks.reserve(n, "binning scratch");
    }
  }
  b.max_chunks = static_cast<std::uint32_t>(max_chunks(n, tiles));
  b.max_pieces = may_partition && groups.bits > 0 ? static_cast<std::uint32_t>(pieces) : 0;
  // A tile is heavy past kHeavyTileChunks full chunks: none at fewer particles.
  const bool heavy_possible = n > std::size_t(tuning::kHeavyTileChunks) * tuning::kChunkParticles;
  b.max_heavy = heavy_tiles_wanted() && heavy_possible ? static_cast<std::uint32_t>(max_heavy_tiles(n, tiles)) : 0;
  b.max_spans = cells_wanted() ? static_cast<std::uint32_t>(tiles + n / tuning::kCellSpanParticles + 1) : 0;
  reserve_heavy_windows(b.max_heavy);
  b.particles.reserve(n, "binned particles");
  b.perm.reserve(n, "binned particles");
  b.slot.reserve(n, "binned particles");
  if (interleaved_) b.order.reserve(n, "binned particles");
  b.chunks.reserve(b.max_chunks, "binned particles");
  if (b.max_heavy > 0) {
    b.heavy_slot.reserve(tiles, "binned particles");
    b.heavy_tiles.reserve(max_heavy_tiles(n, tiles), "binned particles");
  }
  if (cells_wanted()) b.spans.reserve(b.max_spans, "binned particles");
  std::size_t scan_bytes = 0;
  for (std::size_t items : {warps + 1, tiles + 1, std::size_t(groups.count) + 1, block_counts + 1}) {
    std::size_t bytes = 0;
    check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, buf_.tile_count.get(), buf_.tile_start.get(),
                                        static_cast<int>(items), stream_),
          "cub::DeviceScan");
    scan_bytes = std::max(scan_bytes, bytes);
  }
  buf_.scan_temp.reserve(scan_bytes, "binning scratch");
  if (n > 0 && n < tuning::kRunsReadBackParticles) reserve_runs(n);  // the bound the one-pass sort takes
}

// Each tile (where it starts: tile_start) cut into pieces of at most `cap` particles
// (`even`: all of one size), into `out` (room for `capacity`: the entries past the count
// become empty chunks), their count into *total on the device. The counters' last entry
// stays 0 (set_points' memset) for the scan's total, which stays in
// buf_.chunk_start[tiles] until the next cut.
template <class T, int D>
void CudaBackend<T, D>::cut_tiles(const std::uint32_t* tile_start, std::uint32_t cap, bool even, Chunk* out,
                                  std::uint32_t capacity, std::uint32_t* total) {
  const std::size_t tiles = geo_.num_tiles;
  chunk_count_kernel<<<blocks_for(tiles, 256), 256, 0, stream_>>>(geo_.num_tiles, tile_start, cap,
                                                                  buf_.chunk_count.get());
  check_launch("pmkit::cuda::set_points::chunk_count");
  scan(buf_.chunk_count.get(), buf_.chunk_start.get(), tiles + 1);
  chunk_fill_kernel<<<blocks_for(std::max<std::size_t>(tiles, capacity), 256), 256, 0, stream_>>>(
      geo_.num_tiles, tile_start, buf_.chunk_start.get(), cap, even, out, capacity, total);
  check_launch("pmkit::cuda::set_points::chunk_fill");
}

// The heavy tiles of the chunks just cut (buf_.chunk_count: each tile's chunks): each
// tile's window among them (b.heavy_slot), the heavy tiles by window, and their count
// in b's counts.
template <class T, int D>
void CudaBackend<T, D>::find_heavy_tiles(Binned<T>& b) {
  const std::size_t tiles = geo_.num_tiles;
  heavy_tiles_kernel<<<blocks_for(tiles, 256), 256, 0, stream_>>>(geo_.num_tiles, buf_.chunk_count.get(),
                                                                  tuning::kHeavyTileChunks, b.counts,
                                                                  b.heavy_slot.get(), b.heavy_tiles.get());
  check_launch("pmkit::cuda::set_points::heavy_tiles");
}

// Room for the double windows of `heavy_tiles` heavy tiles (the bound: set_points sizes
// before it bins). Every window is zero between spreads: a new buffer is cleared once,
// and finish_heavy_kernel clears what it adds. A larger buffer is allocated before the
// old one goes, so that a failed allocation leaves the binning in use with its windows.
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
void CudaBackend<T, D>::interleave(Binned<T>& b, int partition_levels) {
  const unsigned blocks = b.max_chunks;
  const std::uint32_t* num_chunks = b.counts + kChunkCount;
  kernels::dispatch(kernel_, [&](auto k) {
    using K = decltype(k);
    if (partition_levels == 2) {
      constexpr int kThreads = tuning::interleave_threads(true);
      interleave_kernel<K, D, T, kThreads, true><<<blocks, kThreads, 0, stream_>>>(
          geo_, b.chunks.get(), num_chunks, b.particles.get(), buf_.window_banks.get(), b.order.get());
    } else {
      constexpr int kThreads = tuning::interleave_threads(false);
      interleave_kernel<K, D, T, kThreads, false><<<blocks, kThreads, 0, stream_>>>(
          geo_, b.chunks.get(), num_chunks, b.particles.get(), nullptr, b.order.get());
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

// Keeps the binning: every particle still in its tile gets its new record, in place;
// the others go to the away list (room for every particle, so that no count has to come
// back before it is written), which spread and interp handle apart (one thread or one
// warp a particle). A full binning instead in deterministic mode (the away particles'
// spread would take float atomics) and where the latest status read showed more than
// max_away_fraction of the particles away. Until the call's end the plan counts as
// having no binning: the records change in place.
template <class T, int D>
void CudaBackend<T, D>::update_points(std::size_t n, const std::array<View<const T>, D>& positions) {
  const DeviceScope on_device(options_.device);
  if (options_.deterministic || n == 0 || rebin_next_) {
    rebin_next_ = false;
    return set_points(n, positions);
  }
  begin_timings();
  Binned<T>& b = current_;
  binning_lost_ = true;
  if (options_.host_arrays) buf_.staging_positions.reserve(n * D, "position staging");
  b.away_slot.reserve(n, "update_points away list");
  b.away_particles.reserve(n, "update_points away list");
  const PositionArrays<T, D> pos = device_positions(n, positions);
  const bool timed = start_call_timer();
  check(cudaMemsetAsync(b.counts + kAwayCount, 0, sizeof(std::uint32_t), stream_), "cudaMemset");
  update_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      layout_, geo_, pos, n, b.tile_of.get(), b.identity_order ? nullptr : b.slot.get(), status_.first_bad(),
      b.counts + kAwayCount,
      b.particles.get(), b.away_slot.get(), b.away_particles.get());
  check_launch("pmkit::cuda::update_points");
  if (timed) stop_call_timer();
  b.has_away = true;
  binning_lost_ = false;
  binning_kept_ = true;
  finish_binning_call(false, pos, b.status_row, false);
}

// The end of an eager binning call: its status copied back without a wait
// (BinningStatus::finish; where a slot has to be waited for, the readings on the way).
template <class T, int D>
void CudaBackend<T, D>::finish_binning_call(bool full_binning, const PositionArrays<T, D>& pos, int status_row,
                                            bool probed) {
  BinningCall<T, D> call;
  call.full_binning = full_binning;
  call.positions = pos;
  call.binning = status_row;
  call.probed = probed;
  call.keeps_binning = options_.host_arrays && full_binning;
  if (BinningStatus<T, D>::capturing(stream_)) {
    captured_call_ = call;  // a replay's rejection is read by synchronize, from these arrays
    return;
  }
  status_.finish(stream_, call, [&](const BinningCall<T, D>& c, const StatusRead& r) { take_status(c, r); });
  // host_arrays: the call waited for its copies anyway, so its rejection is reported now.
  if (options_.host_arrays) raise_device_errors(true);
}

// What a status reading tells the host: a rejected position (thrown, after which the
// device forgets it), the counts as estimates for the choices, whether the next
// update_points re-bins in full, and the probe's answer.
template <class T, int D>
void CudaBackend<T, D>::take_status(const BinningCall<T, D>& call, const StatusRead& read) {
  if (read.first_bad != StatusBlock::kNoParticle) {
    status_.forget_rejection(stream_);
    rebin_next_ = false;
    binning_lost_ = binning_lost_ || !call.keeps_binning;
    reject_particle(call, read.first_bad);
  }
  if (call.full_binning) {
    known_chunks_ = read.counts[kChunkCount];
  } else {
    const auto capacity = static_cast<std::uint32_t>(options_.max_away_fraction * static_cast<double>(current_.n));
    rebin_next_ = rebin_next_ || read.counts[kAwayCount] > capacity;
    known_away_ = read.counts[kAwayCount];
  }
  if (call.probed) caller_order_binned_ = tuning::caller_order_binned(read.same_pairs);
}

// Reports a rejected position found by an earlier call: without a wait, the readings
// that have landed; with `wait`, every call queued so far, graph replays included.
template <class T, int D>
void CudaBackend<T, D>::raise_device_errors(bool wait) {
  const DeviceScope on_device(options_.device);
  auto take = [&](const BinningCall<T, D>& c, const StatusRead& r) { take_status(c, r); };
  if (!wait) {
    if (!BinningStatus<T, D>::capturing(stream_)) status_.poll(take);
    return;
  }
  const unsigned long long bad = status_.wait_and_read(stream_, take);
  if (bad == StatusBlock::kNoParticle) return;
  // Only a replay leaves a rejection on the device that no slot has shown: the captured
  // binning call's.
  status_.forget_rejection(stream_);
  rebin_next_ = false;
  binning_lost_ = true;
  reject_particle(captured_call_, bad);
}

// Exclusive sum of `items` counters (buf_.scan_temp holds the largest scan of set_points).
template <class T, int D>
void CudaBackend<T, D>::scan(const std::uint32_t* count, std::uint32_t* start, std::size_t items) {
  std::size_t bytes = buf_.scan_temp.size();
  check(cub::DeviceScan::ExclusiveSum(buf_.scan_temp.get(), bytes, count, start, static_cast<int>(items), stream_),
        "cub::DeviceScan");
}

// Whether the caller's particles are (mostly) in binned order: most sampled neighbour
// pairs share a tile (tuning::caller_order_binned). One pair a thread, counted into the
// status block; the host reads the answer with the call's status and keeps it for the
// next binning (caller_order_binned_): a hint for interp's stores and the spread's
// property moves, never for correctness.
template <class T, int D>
void CudaBackend<T, D>::probe_binned_order(std::size_t n, const PositionArrays<T, D>& pos) {
  const std::uint32_t pairs = tuning::kBinnedProbePairs;
  check(cudaMemsetAsync(status_.same_pairs(), 0, sizeof(std::uint32_t), stream_), "cudaMemset");
  same_tile_pairs_kernel<T, D><<<blocks_for(pairs, 256), 256, 0, stream_>>>(layout_, geo_, pos, n, pairs,
                                                                            status_.same_pairs());
  check_launch("pmkit::cuda::set_points::probe");
}

// Whether set_points bins n particles in one block (kernels/small_binning.cuh): eager
// calls only, since a graph replays the other paths' launches for less.
template <class T, int D>
bool CudaBackend<T, D>::binned_in_one_block(std::size_t n) const {
  return n > 0 && n <= std::size_t(tuning::kSmallBinningParticles) && !geo_.wide &&
         geo_.num_tiles <= tuning::kSmallBinningMaxTiles && small_binning_fits_ &&
         !BinningStatus<T, D>::capturing(stream_);
}

// The binning of few particles in one launch: records, permutation, tile starts, chunks
// and counts (kernels/small_binning.cuh).
template <class T, int D>
void CudaBackend<T, D>::small_binning(Binned<T>& b, std::size_t n, const PositionArrays<T, D>& pos) {
  int key_bits = 1;
  while ((std::uint64_t(geo_.num_tiles) >> key_bits) != 0) ++key_bits;  // keys up to num_tiles
  small_binning_kernel<T, D><<<1, SmallBinning::kThreads, sizeof(SmallBinning::Shared), stream_>>>(
      layout_, geo_, pos, static_cast<std::uint32_t>(n), key_bits, status_.first_bad(), b.particles.get(),
      b.perm.get(), b.slot.get(), b.tile_of.get(), buf_.tile_start.get(), b.chunks.get(),
      b.max_chunks, b.counts);
  check_launch("pmkit::cuda::set_points::small_binning");
}

// The one-pass scatter (kernels/binning.cuh), a stable sort by tile: classify (validate,
// key, runs per warp) -> scan -> the runs -> their count read back (a wait: the sort
// needs it on the host) -> radix sort of the runs by tile -> scan of their lengths ->
// each run's and tile's first slot -> every record straight to its slot. Its stores are
// consecutive where the input is in binned order.
template <class T, int D>
void CudaBackend<T, D>::one_pass_scatter(Binned<T>& b, std::size_t n, const PositionArrays<T, D>& pos) {
  const std::uint32_t tiles = geo_.num_tiles;
  if (n == 0) {
    check(cudaMemsetAsync(buf_.tile_start.get(), 0, (std::size_t(tiles) + 1) * sizeof(std::uint32_t), stream_),
          "cudaMemset");
    return;
  }
  const std::size_t warps = (n + 31) / 32;
  check(cudaMemsetAsync(buf_.warp_runs.get() + warps, 0, sizeof(std::uint32_t), stream_), "cudaMemset");
  classify_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      layout_, geo_, pos, n, b.tile_of.get(), buf_.warp_runs.get(), status_.first_bad());
  check_launch("pmkit::cuda::set_points::classify");
  scan(buf_.warp_runs.get(), buf_.warp_run_start.get(), warps + 1);
  const std::uint32_t* num_runs = buf_.warp_run_start.get() + warps;
  // The sort's length: at most a run a particle. Past tuning::kRunsReadBackParticles the
  // count is read back (a wait) so that the sort moves the runs alone; below, and under
  // stream capture, the sort takes the bound, its entries past the count padded.
  auto runs = static_cast<std::uint32_t>(n);
  if (n >= tuning::kRunsReadBackParticles) {  // below, reserve_binning reserved the bound
    if (!BinningStatus<T, D>::capturing(stream_)) {
      check(cudaMemcpyAsync(&runs, num_runs, sizeof(runs), cudaMemcpyDeviceToHost, stream_), "set_points: runs");
      check(cudaStreamSynchronize(stream_), "set_points: runs");
    }
    reserve_runs(runs);
  }

  const int key_bits = run_key_bits();
  const SortedRunLength length{buf_.sorted_id.get(), buf_.run_head.get(), num_runs};
  const auto lengths = thrust::make_transform_iterator(thrust::counting_iterator<std::uint32_t>(0), length);
  emit_runs_kernel<<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      b.tile_of.get(), n, buf_.warp_run_start.get(),
      RunList{buf_.run_key.get(), buf_.run_head.get(), buf_.run_id.get()}, runs, tiles + 1);
  check_launch("pmkit::cuda::set_points::emit_runs");
  std::size_t sort_bytes = buf_.run_temp.size();
  check(cub::DeviceRadixSort::SortPairs(buf_.run_temp.get(), sort_bytes, buf_.run_key.get(), buf_.sorted_key.get(),
                                        buf_.run_id.get(), buf_.sorted_id.get(), runs, 0, key_bits, stream_),
        "cub::DeviceRadixSort");
  std::size_t scan_bytes = buf_.run_temp.size();
  check(cub::DeviceScan::ExclusiveSum(buf_.run_temp.get(), scan_bytes, lengths, buf_.sorted_start.get(), runs + 1,
                                      stream_),
        "cub::DeviceScan");
  std::uint32_t* run_slot = buf_.run_key.get();
  place_runs_kernel<<<blocks_for(std::max<std::size_t>(runs, std::size_t(tiles) + 1), 256), 256, 0, stream_>>>(
      num_runs, tiles, buf_.sorted_key.get(), buf_.sorted_id.get(), buf_.sorted_start.get(), run_slot,
      buf_.tile_start.get());
  check_launch("pmkit::cuda::set_points::place_runs");
  scatter_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      layout_, geo_, pos, n, buf_.warp_run_start.get(), run_slot, b.particles.get(), b.perm.get(),
      b.slot.get());
  check_launch("pmkit::cuda::set_points::scatter");
}

// Keys of the one-pass sort: tiles, num_tiles for a rejected particle's run, num_tiles + 1
// for the padding past the runs.
template <class T, int D>
int CudaBackend<T, D>::run_key_bits() const {
  int key_bits = 1;
  while ((std::uint64_t(geo_.num_tiles) + 1) >> key_bits != 0) ++key_bits;
  return key_bits;
}

// The one-pass scatter's arrays for `runs` runs, and cub's room for their sort and scan;
// run_slot takes the unsorted keys' room once the sort has read them. Where the sort
// takes the bound (below tuning::kRunsReadBackParticles), reserve_binning calls it
// before any kernel, so that a capture after an eager call allocates nothing. Above, an
// eager call grows them to the runs it read back: buffers of this sort alone, which no
// capture holds (a capture of that size takes the partition).
template <class T, int D>
void CudaBackend<T, D>::reserve_runs(std::size_t runs) {
  buf_.run_key.reserve(runs, "binning scratch");
  buf_.run_head.reserve(runs + 1, "binning scratch");
  buf_.run_id.reserve(runs, "binning scratch");
  buf_.sorted_key.reserve(runs, "binning scratch");
  buf_.sorted_id.reserve(runs, "binning scratch");
  buf_.sorted_start.reserve(runs + 1, "binning scratch");
  const SortedRunLength length{buf_.sorted_id.get(), buf_.run_head.get(), buf_.warp_run_start.get()};
  const auto lengths = thrust::make_transform_iterator(thrust::counting_iterator<std::uint32_t>(0), length);
  std::size_t sort_bytes = 0, scan_bytes = 0;
  const auto items = static_cast<std::uint32_t>(runs);
  check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, buf_.run_key.get(), buf_.sorted_key.get(),
                                        buf_.run_id.get(), buf_.sorted_id.get(), items, 0, run_key_bits(), stream_),
        "cub::DeviceRadixSort");
  check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, lengths, buf_.sorted_start.get(), items + 1, stream_),
        "cub::DeviceScan");
  buf_.run_temp.reserve(std::max(sort_bytes, scan_bytes), "binning scratch");
}

// The scatter by partition (kernels/partition.cuh; n > 0): count, pass 1 into
// groups of tiles, then, where groups hold several tiles, pass 2 inside each group's
// pieces and the composed slot. Returns each tile's first slot (tiles + 1 entries).
template <class T, int D>
const std::uint32_t* CudaBackend<T, D>::partition_scatter(Binned<T>& b, std::size_t n,
                                                          const PositionArrays<T, D>& pos, Groups groups) {
  const std::size_t max_pieces = b.max_pieces;
  using B = PartitionBlock<T>;
  const std::size_t tiles = geo_.num_tiles;
  const bool two_levels = groups.bits > 0;
  const unsigned pass1_blocks = blocks_for(n, B::kItems);
  const std::size_t counts = partition_counts<T>(n, groups);
  // Counts a row a block (in buf_.block_start), transposed to a row a group (buf_.block_count).
  count_groups_kernel<T, D><<<pass1_blocks, B::kThreads, 0, stream_>>>(layout_, geo_, pos, n, groups,
                                                                      buf_.block_start.get(), status_.first_bad());
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
                                  ? PartitionOut<T>{buf_.parted.get(), b.binned_of_place.get(), buf_.part_key.get(),
                                                    b.place.get(), b.sorted_block.get()}
                                  : PartitionOut<T>{b.particles.get(), b.perm.get(), nullptr,
                                                    b.slot.get(), b.sorted_block.get()};
  partition_kernel<T, D><<<pass1_blocks, B::kThreads, kPartitionShared, stream_>>>(
      layout_, geo_, pos, n, groups, buf_.block_start.get(), b.tile_of.get(), out);
  check_launch("pmkit::cuda::set_points::partition");
  if (!two_levels) return buf_.group_start.get();  // the groups are the tiles

  // Pass 2: the pieces of each group (Chunks whose `tile` is the group).
  check(cudaMemsetAsync(buf_.piece_count.get(), 0, (groups.count + 1) * sizeof(std::uint32_t), stream_), "cudaMemset");
  check(cudaMemsetAsync(buf_.tile_count.get(), 0, (tiles + 1) * sizeof(std::uint32_t), stream_), "cudaMemset");
  chunk_count_kernel<<<blocks_for(groups.count, 256), 256, 0, stream_>>>(groups.count, buf_.group_start.get(), B::kItems,
                                                             buf_.piece_count.get());
  check_launch("pmkit::cuda::set_points::piece_count");
  scan(buf_.piece_count.get(), buf_.piece_start.get(), groups.count + 1);
  chunk_fill_kernel<<<blocks_for(std::max<std::size_t>(groups.count, max_pieces), 256), 256, 0, stream_>>>(
      groups.count, buf_.group_start.get(), buf_.piece_start.get(), B::kItems, false, b.pieces.get(),
      static_cast<std::uint32_t>(max_pieces), b.counts + kPieceCount);
  check_launch("pmkit::cuda::set_points::piece_fill");
  // max_pieces blocks; those past the real count (buf_.piece_start[groups]) return at once.
  const unsigned piece_blocks = static_cast<unsigned>(max_pieces);
  const std::uint32_t* num_pieces = buf_.piece_start.get() + groups.count;
  count_piece_tiles_kernel<<<piece_blocks, B::kThreads, 0, stream_>>>(groups, geo_.num_tiles, b.pieces.get(), num_pieces,
                                                           buf_.part_key.get(), buf_.tile_count.get(),
                                                           buf_.piece_count_tiles.get());
  check_launch("pmkit::cuda::set_points::count_piece_tiles");
  scan(buf_.tile_count.get(), buf_.tile_start.get(), tiles + 1);
  // The interleave's banks, in the tile kernels' windows.
  const int window_width = kernels::dispatch(kernel_, [](auto k) { return TileWindow<decltype(k), D>::kWidth; });
  const WindowBanks<D> banks{interleaved_ ? buf_.window_banks.get() : nullptr, geo_, window_width};
  place_kernel<T, D><<<piece_blocks, B::kThreads, kPlaceShared, stream_>>>(
      groups, b.pieces.get(), num_pieces, buf_.piece_start.get(), buf_.part_key.get(), buf_.parted.get(),
      b.binned_of_place.get(), buf_.tile_start.get(), buf_.piece_count_tiles.get(), b.particles.get(),
      b.perm.get(), b.sorted_piece.get(), banks);
  check_launch("pmkit::cuda::set_points::place");
  compose_slot_kernel<<<blocks_for(n, tuning::kPointThreads * kComposePerThread), tuning::kPointThreads, 0, stream_>>>(
      n, b.place.get(), b.binned_of_place.get(), b.slot.get());
  check_launch("pmkit::cuda::set_points::compose_slot");
  return buf_.tile_start.get();
}

// Throws the CPU backend's error for particle `index`, which `call` rejected: its
// position read back from the call's arrays (a wait: an error's path).
template <class T, int D>
void CudaBackend<T, D>::reject_particle(const BinningCall<T, D>& call, unsigned long long index) {
  double x[D];
  for (int d = 0; d < D; ++d) {
    T value;
    check(cudaMemcpyAsync(&value, call.positions.data[d] + static_cast<std::ptrdiff_t>(index) * call.positions.stride[d],
                          sizeof(T), cudaMemcpyDeviceToHost, stream_),
          "read rejected particle");
    check(cudaStreamSynchronize(stream_), "read rejected particle");
    x[d] = value;
  }
  detail::reject_particle<D>(layout_, x, static_cast<std::size_t>(index));
}

}  // namespace pmkit::cuda
