#pragma once
// The CUDA runtime as the library's CUDA backends, the applications, the tests and the
// benchmarks share it (not installed): the device-pointer checks, the one device buffer,
// the stream handover and the one event timer. Host code only, so g++ may include it too.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "pmkit/detail/cuda/runtime.hpp"

namespace pmkit::cuda {

// The CUDA backends take device (or managed) memory; a host pointer is a clear error
// rather than an illegal-address fault inside a kernel.
inline void require_device(const void* ptr, const char* what, std::size_t index, const char* alternative = "") {
  if (ptr == nullptr) return;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) cudaGetLastError();
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    detail::fail(ErrorCode::InvalidArgument, what, "[", index,
                 "] is not device memory: the CUDA backend takes device pointers", alternative);
}

// require_device for the arrays of repeated calls: a pointer found to be device memory is
// remembered (the last 64), because the check (cudaPointerGetAttributes) costs
// microseconds per array, as much as a whole small spread or pair compute. A remembered
// pointer is not checked again; one freed and reused for host memory since then would
// fault in the kernel (a CUDA error at the next synchronisation) instead of being refused.
class DevicePointerCheck {
 public:
  void require(const void* ptr, const char* what, std::size_t index, const char* alternative = "") {
    if (ptr == nullptr || std::find(known_.begin(), known_.end(), ptr) != known_.end()) return;
    require_device(ptr, what, index, alternative);
    if (known_.size() >= kRemembered) known_.erase(known_.begin());
    known_.push_back(ptr);
  }

 private:
  static constexpr std::size_t kRemembered = 64;
  std::vector<const void*> known_;
};

// Owning device allocation, the one device array type of the library, its tests and its
// benchmarks. A failed allocation names what it was for and the size asked for.
template <class T>
class DeviceBuffer {
 public:
  // A regrown buffer takes at least 1/kRegrowthHeadroom more than it had: one more
  // allocation per 12.5% of growth (docs/tuning.md#kregrowthheadroom).
  static constexpr std::size_t kRegrowthHeadroom = 8;

  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count, const char* what = "DeviceBuffer") { reserve(count, what); }
  // A device copy of `host` (synchronous).
  explicit DeviceBuffer(const std::vector<T>& host, const char* what = "DeviceBuffer") {
    reserve(host.size(), what);
    upload(host);
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), size_(o.size_) { o.ptr_ = nullptr; o.size_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    return *this;
  }

  // Makes room for at least `count` elements; keeps the old allocation (and its contents)
  // if it is large enough, else frees it first. A first allocation takes `count`; a
  // buffer that must grow again takes at least 1/kRegrowthHeadroom more than it had
  // (exactly `count` where that much is not free), so that a count creeping up call by
  // call, as a rank's particles after each migrate, reallocates rarely: cudaFree waits
  // for the whole device (docs/tuning.md#kregrowthheadroom).
  void reserve(std::size_t count, const char* what) {
    if (count <= size_) return;
    const std::size_t roomy = size_ == 0 ? count : std::max(count, size_ + size_ / kRegrowthHeadroom);
    release();
    if (count == 0) return;
    if (roomy > count) {
      if (cudaMalloc(reinterpret_cast<void**>(&ptr_), roomy * sizeof(T)) == cudaSuccess) {
        size_ = roomy;
        return;
      }
      cudaGetLastError();  // the failed roomy allocation's error, not one of the caller's
      ptr_ = nullptr;
    }
    const cudaError_t status = cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T));
    if (status != cudaSuccess) {
      cudaGetLastError();
      ptr_ = nullptr;
      detail::fail(ErrorCode::OutOfMemory, what, ": cudaMalloc of ", count * sizeof(T),
                   " bytes (", count * sizeof(T) / 1048576.0, " MiB) failed: ",
                   cudaGetErrorString(status));
    }
    size_ = count;
  }
  T* get() const { return ptr_; }
  std::size_t size() const { return size_; }

  // Synchronous copies between the host and the first size() elements (or host.size()).
  // An upload has landed on return: cudaMemcpy from pageable memory may return while its
  // copy to the device is still under way on the default stream, which work on a
  // non-blocking stream does not wait for; the stream's synchronisation closes that gap.
  void upload(const std::vector<T>& host) {
    if (host.size() > size_) detail::fail(ErrorCode::SizeMismatch, "DeviceBuffer::upload of ", host.size(),
                                          " values into ", size_);
    check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "DeviceBuffer::upload");
    check(cudaStreamSynchronize(nullptr), "DeviceBuffer::upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    check(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost), "DeviceBuffer::download");
    return host;
  }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

// Moves a plan from one stream to another without a host wait: the work queued next on
// the new stream runs after the work queued so far on the old one (one event, made on
// first use, recorded on the old stream and waited on by the new).
class StreamHandover {
 public:
  StreamHandover() = default;
  ~StreamHandover() {
    if (event_) cudaEventDestroy(event_);
  }
  StreamHandover(const StreamHandover&) = delete;
  StreamHandover& operator=(const StreamHandover&) = delete;

  void order(cudaStream_t from, cudaStream_t to) {
    if (from == to) return;
    if (!event_) check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(event_, from), "cudaEventRecord (the plan's previous stream)");
    check(cudaStreamWaitEvent(to, event_, 0), "cudaStreamWaitEvent (the plan's new stream)");
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// Device time between two points of a stream, by a pair of CUDA events (made on first use,
// so that a plan that never times costs nothing): start() and stop() record on the
// stream without waiting; seconds() waits for the stop event and returns the time between.
class EventTimer {
 public:
  EventTimer() = default;
  ~EventTimer() {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(cudaStream_t stream) { record(0, stream); }
  void stop(cudaStream_t stream) {
    record(1, stream);
    stopped_ = true;
  }
  // Seconds from start() to stop(); 0 if nothing was timed yet.
  double seconds(const char* what = "EventTimer") const {
    if (!stopped_) return 0;
    check(cudaEventSynchronize(events_[1]), what);
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[0], events_[1]), "cudaEventElapsedTime");
    return 1e-3 * ms;
  }
  // Times `launch` (which enqueues work on `stream`) `reps` times after one untimed run
  // and returns the median in seconds: the benchmarks' and tests' timing.
  template <class F>
  double median_seconds(cudaStream_t stream, int reps, F&& launch) {
    launch();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      start(stream);
      launch();
      stop(stream);
      t.push_back(seconds());
    }
    std::sort(t.begin(), t.end());
    return t.empty() ? 0.0 : t[t.size() / 2];
  }

 private:
  void record(int which, cudaStream_t stream) {
    if (!events_[which]) check(cudaEventCreate(&events_[which]), "cudaEventCreate");
    check(cudaEventRecord(events_[which], stream), "cudaEventRecord");
  }
  cudaEvent_t events_[2] = {nullptr, nullptr};
  bool stopped_ = false;
};

}  // namespace pmkit::cuda
