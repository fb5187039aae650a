#pragma once
// What both plans share in their options: where they run, on which CUDA stream, and the
// per-call timings they report.
namespace pmkit {

enum class Backend { Cpu, Cuda };

// A CUDA stream as an opaque handle, so that this header needs no CUDA header: a
// cudaStream_t converted to void* (pmkit::cuda::stream_handle in pmkit/cuda/runtime.hpp
// does it). Null is the default stream. Every kernel, copy and event of a plan runs on
// its stream; the plan waits only where a call must return a host value.
using StreamHandle = void*;

// Seconds spent in the phases of the last call (CUDA host_arrays: the copies are
// reported apart from the computation).
struct Timings {
  double transfer_s = 0;
  double compute_s = 0;
};

}  // namespace pmkit
