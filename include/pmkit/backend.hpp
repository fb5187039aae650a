#pragma once
// What every plan shares: where it runs (ExecutionOptions, which the options of Plan,
// PairPlan, RealFft, PmePlan and DistributedPlan all extend) and the per-call timings
// it reports.
namespace pmkit {

enum class Backend { Cpu, Cuda };

// A CUDA stream as an opaque handle, so that this header needs no CUDA header: a
// cudaStream_t converted to void* (pmkit::cuda::stream_handle in pmkit/cuda/runtime.hpp
// does it). Null is the default stream. Every kernel, copy and event of a plan runs on
// its stream; the plan waits only where a call must return a host value.
using StreamHandle = void*;

// Where and how a plan runs. Every plan's options struct derives from it, so one
// ExecutionOptions (or any plan's options, sliced) sets up the others alike:
//   pmkit::FftOptions fft{plan_options};  // the mesh plan's backend, device, stream, threads
struct ExecutionOptions {
  Backend backend = Backend::Cpu;
  int device = 0;                 // CUDA: device ordinal
  // CUDA: the stream every kernel, copy and event of the plan runs on, in call order
  // (pmkit::cuda::stream_handle(cudaStream_t); null: the default stream).
  StreamHandle stream = nullptr;
  int num_threads = 0;            // CPU: OpenMP threads (and FFTW's), 0 = OpenMP's default
};

// Seconds spent in the phases of the last call (CUDA host_arrays: the copies are
// reported apart from the computation).
struct Timings {
  double transfer_s = 0;
  double compute_s = 0;
};

}  // namespace pmkit
