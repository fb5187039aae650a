// The transport of a CUDA rank (transport.cuh): NCCL sends and receives in one group, or
// the packed bytes staged through pinned host memory and exchanged by MPI.
#include "distributed/cuda/transport.cuh"

#include <algorithm>
#include <string>

#include "distributed/collective.hpp"
#include "distributed/transport_choice.hpp"
#include "cuda/runtime.hpp"

namespace pmkit::distributed {

using cuda::check;
using detail::fail;

namespace {

#if defined(PMKIT_WITH_NCCL)
void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) fail(ErrorCode::Device, what, ": ", ncclGetErrorString(status));
}
#endif

// This rank's GPU as the transport's choice names it (empty if the runtime cannot say).
std::string this_gpu(int device) {
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return gpu_name(bus_id);
}

#if defined(PMKIT_WITH_NCCL)
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

}  // namespace

DeviceTransport::DeviceTransport(Transport requested, const DeviceContext& context)
    : kind_(agree_on_transport(context.comm, requested, kHaveNccl, this_gpu(context.device))), context_(context) {}

DeviceTransport::~DeviceTransport() {
#if defined(PMKIT_WITH_NCCL)
  if (nccl_) ncclCommDestroy(nccl_);
#endif
  if (host_send_) cudaFreeHost(host_send_);
  if (host_recv_) cudaFreeHost(host_recv_);
}

void DeviceTransport::connect() {
#if defined(PMKIT_WITH_NCCL)
  if (kind_ == Transport::Nccl && context_.size > 1) {
    ncclUniqueId id;
    if (context_.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, context_.comm);
    check_nccl(ncclCommInitRank(&nccl_, context_.size, id, context_.rank), "ncclCommInitRank");
  }
#endif
}

void DeviceTransport::host_reserve(unsigned char*& buffer, std::size_t& have, std::size_t bytes) {
  if (bytes <= have) return;
  const std::size_t headroom = cuda::DeviceBuffer<unsigned char>::kRegrowthHeadroom;
  const std::size_t roomy = have == 0 ? bytes : std::max(bytes, have + have / headroom);
  if (buffer) cudaFreeHost(buffer);
  buffer = nullptr;
  have = 0;
  check(cudaMallocHost(reinterpret_cast<void**>(&buffer), roomy), "pinned staging buffer");
  have = roomy;
}

void DeviceTransport::exchange(const unsigned char* out, const std::vector<std::int64_t>& send_offsets,
                               unsigned char* in, const std::vector<std::int64_t>& recv_offsets) {
  const int rank = context_.rank, size = context_.size;
  const cudaStream_t stream = context_.stream;
  const std::int64_t self = send_offsets[rank + 1] - send_offsets[rank];
  if (self > 0)
    check(cudaMemcpyAsync(in + recv_offsets[rank], out + send_offsets[rank], self, cudaMemcpyDeviceToDevice, stream),
          "ghost exchange (own part)");
  if (size == 1) return;
#if defined(PMKIT_WITH_NCCL)
  if (kind_ == Transport::Nccl) {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const std::int64_t s = send_offsets[p + 1] - send_offsets[p], r = recv_offsets[p + 1] - recv_offsets[p];
      if (s > 0) check_nccl(ncclSend(out + send_offsets[p], s, ncclChar, p, nccl_, stream), "ncclSend");
      if (r > 0) check_nccl(ncclRecv(in + recv_offsets[p], r, ncclChar, p, nccl_, stream), "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    return;
  }
#endif
  const std::size_t sent = send_offsets[size], received = recv_offsets[size];
  host_reserve(host_send_, host_send_bytes_, sent);
  host_reserve(host_recv_, host_recv_bytes_, received);
  if (sent > 0) check(cudaMemcpyAsync(host_send_, out, sent, cudaMemcpyDeviceToHost, stream), "staging to host");
  check(cudaStreamSynchronize(stream), "staging to host");
  exchange_bytes(context_.comm, 1, host_send_, send_offsets, host_recv_, recv_offsets);
  // The own part is already on the device: copy the peers' parts around it.
  if (recv_offsets[rank] > 0)
    check(cudaMemcpyAsync(in, host_recv_, recv_offsets[rank], cudaMemcpyHostToDevice, stream), "staging to device");
  if (static_cast<std::int64_t>(received) > recv_offsets[rank + 1])
    check(cudaMemcpyAsync(in + recv_offsets[rank + 1], host_recv_ + recv_offsets[rank + 1],
                          received - recv_offsets[rank + 1], cudaMemcpyHostToDevice, stream),
          "staging to device");
}

}  // namespace pmkit::distributed
