// The bindings' CUDA runtime calls (device_streams.hpp).
#include "device_streams.hpp"

#include <string>

#include "pmkit/error.hpp"

#if defined(PMKIT_PYTHON_CUDA)
#include <cuda_runtime.h>
#endif

namespace pmkit::python {

#if defined(PMKIT_PYTHON_CUDA)

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    detail::fail(status == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Device, what, ": ",
                 cudaGetErrorString(status));
}

cudaStream_t cuda_stream(StreamHandle s) { return reinterpret_cast<cudaStream_t>(s); }

// The calling thread's current device is `device` for the scope's life.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    changed_ = previous_ != device;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace

StreamBridge::~StreamBridge() {
  for (void* e : events_)
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

void StreamBridge::order(int which, StreamHandle from, StreamHandle to) {
  if (from == to) return;
  DeviceScope scope(device_);
  if (!events_[which]) {
    cudaEvent_t event;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    events_[which] = event;
  }
  const auto event = static_cast<cudaEvent_t>(events_[which]);
  check(cudaEventRecord(event, cuda_stream(from)), "cudaEventRecord");
  check(cudaStreamWaitEvent(cuda_stream(to), event, 0), "cudaStreamWaitEvent");
}

void StreamBridge::enter(StreamHandle caller, StreamHandle own) { order(0, caller, own); }
void StreamBridge::leave(StreamHandle caller, StreamHandle own) { order(1, own, caller); }

void synchronize_stream(StreamHandle stream, int device) {
  DeviceScope scope(device);
  check(cudaStreamSynchronize(cuda_stream(stream)), "cudaStreamSynchronize");
}

void copy_device_to_host(void* host, const void* source, std::size_t bytes, StreamHandle stream, int device) {
  DeviceScope scope(device);
  check(cudaMemcpyAsync(host, source, bytes, cudaMemcpyDeviceToHost, cuda_stream(stream)), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(cuda_stream(stream)), "cudaStreamSynchronize");
}

void copy_host_to_device(void* target, const void* host, std::size_t bytes, StreamHandle stream, int device) {
  DeviceScope scope(device);
  check(cudaMemcpyAsync(target, host, bytes, cudaMemcpyHostToDevice, cuda_stream(stream)), "cudaMemcpyAsync");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

void* DeviceBuffer::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return data_;
  DeviceScope scope(device_);
  if (data_) check(cudaFree(data_), "cudaFree");
  data_ = nullptr;
  bytes_ = 0;
  check(cudaMalloc(&data_, bytes), "cudaMalloc");
  bytes_ = bytes;
  return data_;
}

void* DeviceBuffer::copy_from(const void* source, std::size_t bytes, StreamHandle stream) {
  void* target = reserve(bytes);
  DeviceScope scope(device_);
  check(cudaMemcpyAsync(target, source, bytes, cudaMemcpyDeviceToDevice, cuda_stream(stream)), "cudaMemcpyAsync");
  return target;
}

#else

StreamBridge::~StreamBridge() = default;
void StreamBridge::order(int, StreamHandle, StreamHandle) {}
void StreamBridge::enter(StreamHandle, StreamHandle) {}
void StreamBridge::leave(StreamHandle, StreamHandle) {}
void synchronize_stream(StreamHandle, int) {}
void copy_device_to_host(void*, const void*, std::size_t, StreamHandle, int) {
  detail::fail(ErrorCode::Unsupported, "device memory: this build of pmkit's Python module has no CUDA backend");
}
void copy_host_to_device(void* target, const void* host, std::size_t bytes, StreamHandle stream, int device) {
  copy_device_to_host(target, host, bytes, stream, device);
}
DeviceBuffer::~DeviceBuffer() = default;
void* DeviceBuffer::reserve(std::size_t) {
  detail::fail(ErrorCode::Unsupported, "device memory: this build of pmkit's Python module has no CUDA backend");
}
void* DeviceBuffer::copy_from(const void*, std::size_t bytes, StreamHandle) { return reserve(bytes); }

#endif

}  // namespace pmkit::python
