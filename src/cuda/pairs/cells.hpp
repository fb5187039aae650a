#pragma once
// The CUDA pair backend's cell list: particles sorted by cell on the device, built by
// device_pair_bin (cells.cu) and read by the traversal through DevicePairView.
#include <array>
#include <cstdint>

#include "cuda/runtime.hpp"
#include "pmkit/detail/pair_geometry.hpp"
#include "pmkit/view.hpp"

namespace pmkit::detail {

template <class T, int D>
struct DevicePairCells {
  PairGeometry<T, D> geometry{};
  int device = 0;
  cudaStream_t stream = nullptr;
  std::size_t n = 0;
  std::size_t cells = 0;
  std::uint32_t max_per_cell = 0;
  bool ready = false;
  cuda::DeviceBuffer<PackedPosition<T, D>> pos;  // sorted, wrapped into the box
  cuda::DeviceBuffer<std::uint32_t> perm;         // sorted slot -> the caller's index
  cuda::DeviceBuffer<std::uint32_t> start;        // first slot of each cell, plus the end
  // Dense 3D cells only (corner_lists): for each of the 4 corner offsets q (corner_q),
  // the sorted slots of the sources that can be within the cutoff of the x-row at minus
  // that offset, in sorted order, and where each cell's entries start in corner_index
  // (corner_start[q * (cells + 1) + c]; the four lists lie end to end there); the pencil
  // methods stage a corner row from these.
  bool corner_lists = false;
  cuda::DeviceBuffer<std::uint32_t> corner_index, corner_start;
  // set_points builds into these, then swaps (a failed call keeps the previous points).
  cuda::DeviceBuffer<PackedPosition<T, D>> next_pos;
  cuda::DeviceBuffer<std::uint32_t> next_perm, next_start, next_corner_index, next_corner_start;
  // Scratch: keys and unsorted positions for the sort, CUB's temporary storage, the
  // error flag and the largest cell.
  cuda::DeviceBuffer<std::uint32_t> keys, keys_sorted, index;
  cuda::DeviceBuffer<std::uint32_t> corner_counts;  // each cell's count in each corner list
  cuda::DeviceBuffer<PackedPosition<T, D>> unsorted;
  cuda::DeviceBuffer<unsigned char> temp;
  cuda::DeviceBuffer<unsigned long long> status;
  cuda::DevicePointerCheck device_pointers;  // pointers already found to be device memory

  double mean_per_cell() const { return cells ? double(n) / double(cells) : 0.0; }
};

// Validates and bins device positions on cells.stream (waiting for the result). With
// `order` (device memory), the positions are a mesh plan's binned offsets from the box
// origin (Plan::binned_positions) and order[k] the caller's index of offset k.
template <class T, int D>
void device_pair_bin(DevicePairCells<T, D>& cells, const std::array<View<const T>, D>& positions,
                     const std::uint32_t* order = nullptr);

}  // namespace pmkit::detail
