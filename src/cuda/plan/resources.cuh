#pragma once
// What a CUDA mesh plan holds besides its kernels' parameters: the device's limits that
// the method choice reads, the binning (two of them: the current one and the one
// set_points builds), and every scratch buffer of the phases (status.cuh holds what the
// host reads back). All device memory is cuda::DeviceBuffer.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda/kernels/kernels.cuh"
#include "cuda/runtime.hpp"

namespace pmkit::cuda {

// The device properties the plan sizes and chooses by.
struct DeviceLimits {
  int shared_optin = 0;  // dynamic shared memory a block may opt into, bytes
  double l2_bytes = 0;   // the L2 cache
  std::size_t total_bytes = 0;  // global memory
};

// The limits of `device`; ErrorCode::Unsupported where no CUDA device is present,
// InvalidArgument where `device` is not one.
inline DeviceLimits query_device(int device) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    detail::fail(ErrorCode::Unsupported, "options.backend = Cuda: no CUDA device is available");
  }
  if (device < 0 || device >= devices)
    detail::fail(ErrorCode::InvalidArgument, "options.device = ", device, ": there are ", devices, " CUDA devices");
  const DeviceScope on_device(device);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  DeviceLimits limits;
  limits.shared_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  limits.l2_bytes = static_cast<double>(prop.l2CacheSize);
  limits.total_bytes = total_bytes;
  return limits;
}

// The number of device threads' blocks of `threads` that cover n items: at most CUDA's
// 2^31 - 1 blocks a grid (every launch over particles, tiles or mesh nodes stays far
// below: 2^35 nodes take 2^27 blocks of 256).
inline unsigned blocks_for(std::size_t n, int threads) {
  const std::size_t blocks = (n + threads - 1) / threads;
  if (blocks > 0x7fffffffu)
    detail::fail(ErrorCode::Unsupported, n, " items in blocks of ", threads,
                 " threads: more than the 2^31 - 1 blocks of a CUDA grid");
  return static_cast<unsigned>(blocks);
}
// The blocks of `threads` that give each of n items a warp.
inline unsigned warp_blocks_for(std::size_t n, int threads) { return blocks_for(32 * n, threads); }

// One binning of the plan's particles: their records in tile order, the permutation
// both ways, the blocks' chunks, the update_points away list, and what the partition
// keeps for the spread's property moves.
template <class T>
struct Binned {
  std::size_t n = 0;
  DeviceBuffer<Packed<T>> particles;
  DeviceBuffer<std::uint32_t> perm;   // binned slot -> caller's index
  DeviceBuffer<std::uint32_t> slot;   // caller's index -> binned slot
  DeviceBuffer<std::uint16_t> order;  // per chunk: the tile kernels' order (interleave_kernel)
  DeviceBuffer<Chunk> chunks;
  // Cell moments: tiles cut into spans of up to tuning::kCellSpanParticles (only where
  // cell moments are asked for).
  DeviceBuffer<Chunk> spans;
  DeviceBuffer<std::uint32_t> tile_of;  // caller's index -> tile at the full binning
  // update_points: the particles away from their tile, with their binned slots (room
  // for every particle, so that no count has to come back before the list is written).
  DeviceBuffer<std::uint32_t> away_slot;
  DeviceBuffer<Packed<T>> away_particles;
  // The counts the device decides (BinCount, a row of the status block), and the bounds
  // on the host that size the launches reading them: a launch covers the bound, and its
  // blocks past the count return at once (Chunk) or its grid-stride loop stops there
  // (ItemCount).
  std::uint32_t* counts = nullptr;
  int status_row = 0;
  std::uint32_t max_chunks = 0, max_spans = 0, max_pieces = 0, max_heavy = 0;
  bool has_away = false;  // update_points may have listed particles as away since set_points
  // The host's latest reading of the chunks' and away particles' counts (the status
  // slots), for the choices an estimate serves (window_use, the away launches' grids):
  // the bounds until a reading lands.
  std::uint32_t known_chunks = 0;
  std::size_t known_away = 0;
  // The probe found the caller's particles in binned order: perm keeps a slot's caller
  // index near the slot, so stores through it fall on few lines (launch_interp).
  bool caller_order_binned = false;
  // The caller's order is the binned one exactly (adopt_binned_order): perm and slot are
  // the identity, which update_points need not read.
  bool identity_order = false;
  // The partition's moves, kept for the spread's properties (props_to_slots): 0 levels
  // (the one-pass scatter: none), 1 (slot is each particle's only move), or 2 (place:
  // caller's index -> pass-1 place; binned_of_place: place -> binned slot; pass 2's
  // pieces and each piece's sorted order). sorted_block: pass 1's block-local index
  // of each sorted place, block by block.
  int partition_levels = 0;
  DeviceBuffer<std::uint16_t> sorted_block, sorted_piece;
  DeviceBuffer<std::uint32_t> place, binned_of_place;
  DeviceBuffer<Chunk> pieces;
  // The fast float tile spread's heavy tiles (more than tuning::kHeavyTileChunks chunks):
  // each tile's window among them or kLightTile, and the heavy tiles by window.
  DeviceBuffer<std::uint32_t> heavy_slot, heavy_tiles;
};

// The scratch of every phase, grown as needed and kept between calls (a later call of
// the same size allocates nothing).
template <class T>
struct PlanBuffers {
  // set_points: each tile's count and first slot; the cut into chunks.
  DeviceBuffer<std::uint32_t> tile_count, tile_start, chunk_count, chunk_start;
  // set_points, one-pass scatter (kernels/binning.cuh): runs per warp and their scan;
  // each run's key, first index and number, the three sorted by key, and the runs'
  // first slots in that order.
  DeviceBuffer<std::uint32_t> warp_runs, warp_run_start, run_key, run_head, run_id, sorted_key, sorted_id,
      sorted_start;
  // set_points, partition (kernels/partition.cuh): the probe's count; the counts and
  // starts per (group, pass-1 block), per group, per piece of pass 2 and per (piece,
  // tile); records and tile keys in pass-1 order; the interleave's banks by binned slot.
  DeviceBuffer<std::uint32_t> block_count, block_start, group_start, piece_count, piece_start,
      piece_count_tiles;
  DeviceBuffer<Packed<T>> parted;
  DeviceBuffer<std::uint16_t> part_key;
  DeviceBuffer<std::uint8_t> window_banks;
  // cub's temporary storage, sized for the largest scan of set_points; the one-pass
  // sort's own (its sort and scan of the runs), apart so that an eager call that grows it
  // (the runs read back) frees no buffer a captured graph of the other paths holds.
  DeviceBuffer<unsigned char> scan_temp, run_temp;
  // Deterministic spread: the integer meshes, max |q| per property.
  DeviceBuffer<unsigned long long> exact, max_abs;
  // Fast float spread: the heavy tiles' double windows (PropPass::heavy_windows), all
  // zero between spreads.
  DeviceBuffer<double> heavy_windows;
  // interp: values in binned order, before unbin_kernel; spread: the properties in binned
  // order (props_to_slots), and at their pass-1 places before that (two levels).
  DeviceBuffer<T> binned_values, mid_values;
  // host_arrays: the device copies of the caller's host arrays.
  DeviceBuffer<T> staging_positions, staging_particles, staging_meshes;
};

// Copies a strided array (strides in elements) between host and device on `stream`.
// Asynchronous where the host side is pinned or device memory; the caller waits before
// it reads a host destination.
template <class T>
void copy_strided(T* dst, std::ptrdiff_t dst_stride, const T* src, std::ptrdiff_t src_stride, std::size_t n,
                  cudaMemcpyKind kind, cudaStream_t stream, const char* what) {
  if (n == 0) return;
  if (dst_stride == 1 && src_stride == 1)
    check(cudaMemcpyAsync(dst, src, n * sizeof(T), kind, stream), what);
  else
    check(cudaMemcpy2DAsync(dst, dst_stride * sizeof(T), src, src_stride * sizeof(T), sizeof(T), n, kind, stream),
          what);
}

}  // namespace pmkit::cuda
