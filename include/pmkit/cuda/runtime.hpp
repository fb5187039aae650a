#pragma once
// A CUDA stream as the options' StreamHandle, and back, for code that includes the CUDA
// runtime: options.stream = pmkit::cuda::stream_handle(stream). Host code only, so g++
// may include it too.
#include <cuda_runtime.h>

#include "pmkit/backend.hpp"

namespace pmkit::cuda {

inline cudaStream_t to_cuda_stream(StreamHandle stream) { return static_cast<cudaStream_t>(stream); }
inline StreamHandle stream_handle(cudaStream_t stream) { return static_cast<StreamHandle>(stream); }

}  // namespace pmkit::cuda
