// The CUDA rank's ghost exchange (halo.cuh): a gather kernel over every mesh of the pass,
// the transport's exchange, then a scatter kernel (atomic adds for the sum).
#include "distributed/cuda/halo.cuh"

#include <algorithm>

#include "distributed/collective.hpp"
#include "distributed/cuda/atomics.cuh"

namespace pmkit::distributed {

namespace {

// Where entry e of a list (offsets[0..peers], by peer) travels for mesh j of `count`: its
// peer p's block of count x n_p values, mesh by mesh (halo.hpp's layout).
__device__ __forceinline__ std::int64_t packed(const std::int64_t* offsets, int peers, std::int64_t e, int j,
                                               int count) {
  int lo = 0, hi = peers;  // offsets[lo] <= e < offsets[hi]: the last peer whose list starts at or before e
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid] <= e) lo = mid;
    else hi = mid;
  }
  const std::int64_t first = offsets[lo];
  return first * count + static_cast<std::int64_t>(j) * (offsets[lo + 1] - first) + (e - first);
}

// Grid: entries along x, meshes along y.
template <class T>
__global__ void gather_kernel(const T* meshes, std::int64_t local_size, const std::int64_t* index,
                              const std::int64_t* offsets, int peers, std::int64_t n, int count, T* out) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const int j = blockIdx.y;
  if (e < n) out[packed(offsets, peers, e, j, count)] = meshes[j * local_size + index[e]];
}

// Two entries of one list may name the same node (halo.hpp): atomic adds for the sum.
template <class T>
__global__ void scatter_kernel(T* meshes, std::int64_t local_size, const std::int64_t* index,
                               const std::int64_t* offsets, int peers, std::int64_t n, int count, const T* in,
                               bool add) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const int j = blockIdx.y;
  if (e >= n) return;
  T* node = meshes + j * local_size + index[e];
  const T value = in[packed(offsets, peers, e, j, count)];
  if (add) add_atomically(node, value);
  else *node = value;
}

}  // namespace

DeviceHalo::DeviceHalo(const DeviceContext& context, const Halo& halo, std::int64_t local_size)
    : context_(context),
      local_size_(local_size),
      ghost_index_(halo.ghosts().index, "ghost list"),
      owned_index_(halo.owned().index, "ghost owners list"),
      ghost_peers_(halo.ghosts().offsets, "ghost list offsets"),
      owned_peers_(halo.owned().offsets, "ghost owners list offsets"),
      ghost_offsets_(halo.ghosts().offsets),
      owned_offsets_(halo.owned().offsets) {}

template <class V>
void DeviceHalo::gather(const V* meshes, V* send, int count, bool sum) {
  cuda::DeviceScope scope(context_.device);
  const List from = sent(sum);
  const std::int64_t out = from.offsets.back();
  if (out == 0 || count == 0) return;
  const int peers = static_cast<int>(from.offsets.size()) - 1;
  gather_kernel<<<dim3(blocks_for(out), count), kThreads, 0, context_.stream>>>(meshes, local_size_, from.index,
                                                                                   from.peers, peers, out, count, send);
  cuda::check_launch("pmkit::DistributedPlan::halo_gather");
}

template <class V>
void DeviceHalo::messages(DeviceTransport& transport, V* send, V* recv, int count, bool sum, cudaStream_t stream,
                          bool start) {
  cuda::DeviceScope scope(context_.device);
  const std::int64_t unit = count * static_cast<std::int64_t>(sizeof(V));
  const auto out = reinterpret_cast<const unsigned char*>(send);
  const auto in = reinterpret_cast<unsigned char*>(recv);
  const std::vector<std::int64_t> out_bytes = byte_offsets(sent(sum).offsets, unit);
  const std::vector<std::int64_t> in_bytes = byte_offsets(received(sum).offsets, unit);
  if (start) transport.start(out, out_bytes, in, in_bytes, stream);
  else transport.finish(out, out_bytes, in, in_bytes, stream);
}

template <class V>
void DeviceHalo::scatter(V* meshes, const V* recv, int count, bool sum) {
  cuda::DeviceScope scope(context_.device);
  const List to = received(sum);
  const std::int64_t in = to.offsets.back();
  if (in == 0 || count == 0) return;
  const int peers = static_cast<int>(to.offsets.size()) - 1;
  scatter_kernel<<<dim3(blocks_for(in), count), kThreads, 0, context_.stream>>>(meshes, local_size_, to.index,
                                                                                  to.peers, peers, in, count, recv, sum);
  cuda::check_launch("pmkit::DistributedPlan::halo_scatter");
}

#define PMKIT_DEVICE_HALO(V)                                                                            \
  template void DeviceHalo::gather<V>(const V*, V*, int, bool);                                          \
  template void DeviceHalo::messages<V>(DeviceTransport&, V*, V*, int, bool, cudaStream_t, bool);        \
  template void DeviceHalo::scatter<V>(V*, const V*, int, bool);
PMKIT_DEVICE_HALO(float)
PMKIT_DEVICE_HALO(double)
PMKIT_DEVICE_HALO(ExactWords)
#undef PMKIT_DEVICE_HALO

}  // namespace pmkit::distributed
