// The transport of a CUDA rank (transport.cuh): NCCL sends and receives in one group, or
// the packed bytes staged through pinned host memory and exchanged by MPI.
#include "distributed/cuda/transport.cuh"

#include <algorithm>

#include "distributed/collective.hpp"
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

// Auto: NCCL where this build has it (the faster transport where both ran:
// docs/distributed.md#transport), host-staged MPI otherwise.
Transport resolve(Transport requested) {
#if defined(PMKIT_WITH_NCCL)
  return requested == Transport::Auto ? Transport::Nccl : requested;
#else
  if (requested == Transport::Nccl)
    fail(ErrorCode::Unsupported, "transport = Nccl: this build of pmkit found no NCCL (host-staged MPI only)");
  return Transport::HostMpi;
#endif
}

}  // namespace

DeviceTransport::DeviceTransport(Transport requested) : kind_(resolve(requested)) {}

DeviceTransport::~DeviceTransport() {
#if defined(PMKIT_WITH_NCCL)
  if (nccl_) ncclCommDestroy(nccl_);
#endif
  if (host_send_) cudaFreeHost(host_send_);
  if (host_recv_) cudaFreeHost(host_recv_);
}

void DeviceTransport::connect(const DeviceContext& context) {
  context_ = context;
#if defined(PMKIT_WITH_NCCL)
  if (kind_ == Transport::Nccl && context.size > 1) {
    ncclUniqueId id;
    if (context.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, context.comm);
    check_nccl(ncclCommInitRank(&nccl_, context.size, id, context.rank), "ncclCommInitRank");
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
