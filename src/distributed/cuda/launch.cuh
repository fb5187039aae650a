#pragma once
// What the files of a CUDA rank share: the launch shape of their memory-bound kernels and
// the rank's communicator, device and stream.
#include <cstdint>

#include <cuda_runtime.h>
#include <mpi.h>

namespace pmkit::distributed {

// Threads per block of these memory-bound kernels (docs/tuning.md#kthreads-distributed).
constexpr int kThreads = 256;

// Blocks at most of migrate's wrap pass, which strides over its list (on one rank a list
// whose length only the device knows): a step's seam crossings are few, and 2^16 threads
// take them in one round (docs/tuning.md#kwrapblocks).
constexpr unsigned kWrapBlocks = 256;

inline unsigned blocks_for(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Where a CUDA rank runs: its communicator (rank and size) and its device and stream.
struct DeviceContext {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int device = 0;
  cudaStream_t stream = nullptr;
};

}  // namespace pmkit::distributed
