#pragma once
// The CUDA pair backend's cell list: particles sorted by cell on the device, built by
// device_pair_bin (cells.cu) and read by the traversal through DevicePairView.
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>

#include "cuda/runtime.hpp"
#include "pmkit/detail/pair_geometry.hpp"
#include "pmkit/view.hpp"

namespace pmkit::detail {

// Whether `stream` is being captured into a CUDA graph (a capture's events mark places in
// the graph, not times, and no host wait may happen then).
inline bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t result = cudaStreamIsCapturing(stream, &status);
  if (result == cudaErrorStreamCaptureImplicit) {  // the legacy stream, while another one captures
    cudaGetLastError();
    return true;
  }
  cuda::check(result, "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

// The first position a binning rejected, written by the device into pinned host memory
// (mapped, so that the binning's own kernel writes it: no copy, no wait), read by the
// host at the plan's next call or at synchronize. `index` is written last; kNone: none.
// from_mesh: the binning took a mesh plan's particles (its message differs).
template <int D>
struct PairRejection {
  static constexpr unsigned long long kNone = std::numeric_limits<unsigned long long>::max();
  double x[D];
  int from_mesh;
  unsigned long long index;
};

// One PairRejection in mapped pinned memory, allocated (and cleared) by the first binning
// on the plan's device.
template <int D>
class RejectionRecord {
 public:
  RejectionRecord() = default;
  ~RejectionRecord() {
    if (record_) cudaFreeHost(record_);
  }
  RejectionRecord(const RejectionRecord&) = delete;
  RejectionRecord& operator=(const RejectionRecord&) = delete;

  // The device's view of the record (the same address: unified addressing).
  PairRejection<D>* device() {
    if (!record_) {
      void* p = nullptr;
      cuda::check(cudaHostAlloc(&p, sizeof(PairRejection<D>), cudaHostAllocMapped | cudaHostAllocPortable),
                  "PairPlan: pinned memory for the binning's status");
      record_ = static_cast<PairRejection<D>*>(p);
      clear();
    }
    return record_;
  }
  // The rejection the device recorded, if any, without waiting.
  bool found(PairRejection<D>& out) const {
    if (!record_) return false;
    const auto* record = static_cast<volatile const PairRejection<D>*>(record_);
    const unsigned long long index = record->index;
    if (index == PairRejection<D>::kNone) return false;
    std::atomic_thread_fence(std::memory_order_acquire);  // the rest, written before the index
    for (int d = 0; d < D; ++d) out.x[d] = record->x[d];
    out.from_mesh = record->from_mesh;
    out.index = index;
    return true;
  }
  void clear() { static_cast<volatile PairRejection<D>*>(record_)->index = PairRejection<D>::kNone; }

 private:
  PairRejection<D>* record_ = nullptr;
};

template <class T, int D>
struct DevicePairCells {
  PairGeometry<T, D> geometry{};
  int device = 0;
  cudaStream_t stream = nullptr;
  std::size_t n = 0;
  std::size_t cells = 0;
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
  // Scratch: keys and unsorted positions for the sort, CUB's temporary storage, and the
  // smallest rejected index of the binning under way (kNone between binnings: the
  // binning's gather reads it, records the rejection and resets it).
  cuda::DeviceBuffer<std::uint32_t> keys, keys_sorted, index;
  cuda::DeviceBuffer<std::uint32_t> corner_counts;  // each cell's count in each corner list
  cuda::DeviceBuffer<PackedPosition<T, D>> unsorted;
  cuda::DeviceBuffer<unsigned char> temp;
  cuda::DeviceBuffer<unsigned long long> status;
  RejectionRecord<D> rejection;
  cuda::DevicePointerCheck device_pointers;  // pointers already found to be device memory

  double mean_per_cell() const { return cells ? double(n) / double(cells) : 0.0; }
};

// Validates and bins device positions on cells.stream, without a host wait: a rejected
// position is binned as if at the box origin (every buffer stays in bounds) and recorded
// in cells.rejection, which report_pair_rejection turns into the error. With `order`
// (device memory), the positions are a mesh plan's binned offsets from the box origin
// (Plan::binned_positions) and order[k] the caller's index of offset k. Capturable into a
// CUDA graph once a call of as many positions has sized the buffers.
template <class T, int D>
void device_pair_bin(DevicePairCells<T, D>& cells, const std::array<View<const T>, D>& positions,
                     const std::uint32_t* order = nullptr);

// Throws the rejection a binning recorded (pmkit::Error, the message set_points gives on
// the CPU backend), after which the plan has no points; with `wait`, first waits for the
// plan's stream. Without, reads what the device has recorded so far (no CUDA call).
template <class T, int D>
void report_pair_rejection(DevicePairCells<T, D>& cells, bool wait);

}  // namespace pmkit::detail
