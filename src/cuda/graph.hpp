#pragma once
// A CUDA graph captured from the work a function queues on a stream, for the tests and
// benchmarks that replay the plans' calls (not installed; the library captures nothing
// itself). Host code only, so g++ may include it too.
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/runtime.hpp"

namespace pmkit::cuda {

// A CUDA graph of the work that `enqueue` queues on `stream` (cudaStreamBeginCapture in
// the global mode, so that a host wait inside fails the capture instead of running),
// instantiated once; launch() replays it on the same stream. How the benchmarks and the
// tests replay a step of the plans' calls. A throw from `enqueue` ends the capture and
// propagates.
class CapturedGraph {
 public:
  template <class F>
  CapturedGraph(cudaStream_t stream, F&& enqueue) : stream_(stream) {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch() const { check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch"); }
  std::size_t nodes() const {
    std::size_t count = 0;
    check(cudaGraphGetNodes(graph_, nullptr, &count), "cudaGraphGetNodes");
    return count;
  }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace pmkit::cuda
