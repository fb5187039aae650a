#pragma once
// The caller's stream and the plan's. A plan runs on the stream it was built with
// (Options::stream); Python code queues its work on its framework's current stream (torch's
// or CuPy's), which may be another one. A call then orders the two with CUDA events, with
// no host synchronisation: the plan's stream waits for the work queued so far on the
// caller's, and the caller's stream waits for the call's work. Where the streams are the
// same (the default), a call records nothing.
#include <cstdint>

#if defined(PMKIT_PYTHON_CUDA)
#include "pmkit/cuda/runtime.hpp"
#endif
#include "pmkit/backend.hpp"

namespace pmkit::python {

#if defined(PMKIT_PYTHON_CUDA)

// The two events of one plan, created on its device at the first call that needs them.
class StreamEvents {
 public:
  StreamEvents() = default;
  StreamEvents(const StreamEvents&) = delete;
  StreamEvents& operator=(const StreamEvents&) = delete;
  ~StreamEvents() {
    if (caller_done_) cudaEventDestroy(caller_done_);
    if (plan_done_) cudaEventDestroy(plan_done_);
  }
  void create() {
    if (caller_done_) return;
    cuda::check(cudaEventCreateWithFlags(&caller_done_, cudaEventDisableTiming), "cudaEventCreate");
    cuda::check(cudaEventCreateWithFlags(&plan_done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  cudaEvent_t caller_done() const { return caller_done_; }
  cudaEvent_t plan_done() const { return plan_done_; }

 private:
  cudaEvent_t caller_done_ = nullptr;
  cudaEvent_t plan_done_ = nullptr;
};

// For the length of one call on a CUDA plan: the plan's stream after the caller's, and
// (when the call ends, thrown or not) the caller's after the plan's.
class StreamOrder {
 public:
  StreamOrder(StreamEvents& events, bool cuda_plan, int device, std::uintptr_t caller, StreamHandle plan)
      : events_(events),
        caller_(reinterpret_cast<cudaStream_t>(caller)),
        plan_(cuda::to_cuda_stream(plan)),
        active_(cuda_plan && caller_ != plan_),
        device_(device) {
    if (!active_) return;
    cuda::DeviceScope scope(device_);
    events_.create();
    cuda::check(cudaEventRecord(events_.caller_done(), caller_), "cudaEventRecord (caller's stream)");
    cuda::check(cudaStreamWaitEvent(plan_, events_.caller_done(), 0), "cudaStreamWaitEvent (plan's stream)");
  }
  ~StreamOrder() {
    if (!active_) return;
    cuda::DeviceScope scope(device_);
    if (cudaEventRecord(events_.plan_done(), plan_) != cudaSuccess ||
        cudaStreamWaitEvent(caller_, events_.plan_done(), 0) != cudaSuccess)
      cudaGetLastError();  // no throw from a destructor; the next CUDA call reports it
  }
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

 private:
  StreamEvents& events_;
  cudaStream_t caller_;
  cudaStream_t plan_;
  bool active_;
  int device_;
};

// Waits for the work queued on a plan's stream.
inline void synchronize(int device, StreamHandle stream) {
  cuda::DeviceScope scope(device);
  cuda::check(cudaStreamSynchronize(cuda::to_cuda_stream(stream)), "cudaStreamSynchronize");
}

#else

// A build without CUDA has only CPU plans: nothing to order.
class StreamEvents {};
class StreamOrder {
 public:
  StreamOrder(StreamEvents&, bool, int, std::uintptr_t, StreamHandle) {}
  ~StreamOrder() {}  // user-provided, as the CUDA one's: a guard is not an unused variable
};
inline void synchronize(int, StreamHandle) {}

#endif

}  // namespace pmkit::python
