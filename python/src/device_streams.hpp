#pragma once
// The CUDA runtime calls of the bindings whose C++ objects do not move to the caller's
// stream themselves: DistributedPlan runs on the stream it was built with, so a call from
// another stream is ordered by a pair of events (the plan's stream after the caller's
// work, the caller's stream after the plan's); RealFft's inverse, which overwrites its
// spectrum, reads a copy in a device buffer unless the caller lets it. Without the CUDA
// backend (no PMKIT_PYTHON_CUDA) no CUDA object exists to call them with: they do
// nothing, or fail with ErrorCode::Unsupported.
#include <cstddef>

#include "pmkit/backend.hpp"

namespace pmkit::python {

// Two events of one device that order two streams both ways around a call.
class StreamBridge {
 public:
  explicit StreamBridge(int device) : device_(device) {}
  ~StreamBridge();
  StreamBridge(const StreamBridge&) = delete;
  StreamBridge& operator=(const StreamBridge&) = delete;

  // `own` waits for the work queued on `caller` so far (no host wait; nothing where
  // they are one stream).
  void enter(StreamHandle caller, StreamHandle own);
  // `caller` waits for the work queued on `own` so far.
  void leave(StreamHandle caller, StreamHandle own);

 private:
  void order(int which, StreamHandle from, StreamHandle to);
  int device_;
  void* events_[2] = {nullptr, nullptr};
};

// Waits on the host for the work queued on `stream` of `device`.
void synchronize_stream(StreamHandle stream, int device);

// Copies `bytes` from device memory to the host, in order after the work queued on
// `stream`, and waits for it.
void copy_device_to_host(void* host, const void* source, std::size_t bytes, StreamHandle stream, int device);
// Copies `bytes` from the host to device memory, queued on `stream`; `host` may be freed
// when it returns (pageable memory is staged before the call returns).
void copy_host_to_device(void* target, const void* host, std::size_t bytes, StreamHandle stream, int device);

// Device memory of one device, kept for reuse; grows on demand.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int device) : device_(device) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` of device memory (its contents undefined).
  void* reserve(std::size_t bytes);
  // Copies `bytes` from device memory `source` into this buffer, queued on `stream`.
  void* copy_from(const void* source, std::size_t bytes, StreamHandle stream);

 private:
  int device_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace pmkit::python
