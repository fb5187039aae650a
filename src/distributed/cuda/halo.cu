// The CUDA rank's ghost exchange (halo.cuh): one mesh at a time, a gather kernel, the
// transport's exchange, then a scatter kernel (atomic adds for the sum).
#include "distributed/cuda/halo.cuh"

#include <algorithm>

#include "distributed/collective.hpp"
#include "distributed/cuda/atomics.cuh"

namespace pmkit::distributed {

namespace {

template <class T>
__global__ void gather_kernel(const T* mesh, const std::int64_t* index, std::int64_t n, T* out) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) out[e] = mesh[index[e]];
}

// Two entries of one list may name the same node (halo.hpp): atomic adds.
template <class T>
__global__ void scatter_add_kernel(T* mesh, const std::int64_t* index, std::int64_t n, const T* in) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) add_atomically(mesh + index[e], in[e]);
}

template <class T>
__global__ void scatter_kernel(T* mesh, const std::int64_t* index, std::int64_t n, const T* in) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) mesh[index[e]] = in[e];
}

}  // namespace

DeviceHalo::DeviceHalo(const DeviceContext& context, const Halo& halo, std::int64_t local_size)
    : context_(context),
      local_size_(local_size),
      ghost_index_(halo.ghosts().index, "ghost list"),
      owned_index_(halo.owned().index, "ghost owners list"),
      ghost_offsets_(halo.ghosts().offsets),
      owned_offsets_(halo.owned().offsets) {}

// One mesh at a time: gather the values the lists send, exchange, then add them to the
// owners' nodes (sum: from the ghost nodes) or write them to the ghost nodes (fill: from
// the owned ones).
template <class V>
void DeviceHalo::pass(DeviceTransport& transport, V* meshes, V* send, V* recv, int count, bool sum) {
  cuda::DeviceScope scope(context_.device);
  const std::int64_t* from = sum ? ghost_index_.get() : owned_index_.get();
  const std::int64_t* to = sum ? owned_index_.get() : ghost_index_.get();
  const std::vector<std::int64_t>& from_offsets = sum ? ghost_offsets_ : owned_offsets_;
  const std::vector<std::int64_t>& to_offsets = sum ? owned_offsets_ : ghost_offsets_;
  const std::int64_t out = from_offsets.back(), in = to_offsets.back();
  const auto send_bytes = byte_offsets(from_offsets, sizeof(V));
  const auto recv_bytes = byte_offsets(to_offsets, sizeof(V));
  for (int j = 0; j < count; ++j) {
    V* mesh = meshes + j * local_size_;
    if (out > 0) gather_kernel<<<blocks_for(out), kThreads, 0, context_.stream>>>(mesh, from, out, send);
    transport.exchange(reinterpret_cast<const unsigned char*>(send), send_bytes, reinterpret_cast<unsigned char*>(recv),
                       recv_bytes);
    if (in > 0 && sum) scatter_add_kernel<<<blocks_for(in), kThreads, 0, context_.stream>>>(mesh, to, in, recv);
    if (in > 0 && !sum) scatter_kernel<<<blocks_for(in), kThreads, 0, context_.stream>>>(mesh, to, in, recv);
  }
  cuda::check_launch("pmkit::DistributedPlan::halo_pass");
}

template void DeviceHalo::pass<float>(DeviceTransport&, float*, float*, float*, int, bool);
template void DeviceHalo::pass<double>(DeviceTransport&, double*, double*, double*, int, bool);
template void DeviceHalo::pass<ExactWords>(DeviceTransport&, ExactWords*, ExactWords*, ExactWords*, int, bool);

}  // namespace pmkit::distributed
