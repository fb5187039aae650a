// The transport of a CUDA rank (transport.cuh): NCCL sends and receives in one group (on
// a communicator shared by the plans of the same ranks), or the packed bytes staged
// through pinned host memory and exchanged by MPI.
#include "distributed/cuda/transport.cuh"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

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

// The NCCL communicators of this process, one per group of ranks (the same ranks in the
// same order), device and stream, shared by every plan of that group there: creating one
// costs a bootstrap over the network and NCCL's set-up, far more than a plan's own. A
// shared communicator is used by one plan's call at a time, on the plan's stream, in the
// order of the plans' collective calls, which every rank makes in the same order: NCCL's
// rule for a communicator. The communicators and the groups are freed inside
// MPI_Finalize (an attribute of MPI_COMM_SELF, whose delete callback MPI runs first
// there, while MPI still works).
class NcclCommunicators {
 public:
  static NcclCommunicators& instance() {
    // Never destroyed: its communicators are freed in MPI_Finalize's callback, and a
    // static destructor would run after the CUDA runtime's.
    static NcclCommunicators* cache = new NcclCommunicators;
    return *cache;
  }

  // The communicator of comm's group on `device` and `stream`, made once (collective).
  ncclComm_t get(const DeviceContext& context) {
    std::lock_guard<std::mutex> lock(mutex_);
    MPI_Group group;
    MPI_Comm_group(context.comm, &group);
    ncclComm_t found = nullptr;
    for (auto it = entries_.rbegin(); it != entries_.rend() && !found; ++it) {
      int same = MPI_UNEQUAL;
      MPI_Group_compare(it->group, group, &same);
      if (same == MPI_IDENT && it->device == context.device && it->stream == context.stream) found = it->comm;
    }
    // Every rank must have it to use it (ranks that made different plans since may not).
    int everywhere = found != nullptr;
    MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, context.comm);
    if (everywhere) {
      MPI_Group_free(&group);
      return found;
    }
    ncclUniqueId id;
    if (context.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, context.comm);
    ncclComm_t comm = nullptr;
    try {
      check_nccl(ncclCommInitRank(&comm, context.size, id, context.rank), "ncclCommInitRank");
    } catch (...) {
      MPI_Group_free(&group);
      throw;
    }
    if (entries_.empty()) free_in_finalize();
    entries_.push_back({group, context.device, context.stream, comm});
    return comm;
  }

 private:
  struct Entry {
    MPI_Group group;
    int device;
    cudaStream_t stream;
    ncclComm_t comm;
  };

  void free_in_finalize() {
    int key = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &NcclCommunicators::release, nullptr, &key);
    MPI_Comm_set_attr(MPI_COMM_SELF, key, this);
  }
  static int release(MPI_Comm, int, void* cache, void*) {
    auto* self = static_cast<NcclCommunicators*>(cache);
    std::lock_guard<std::mutex> lock(self->mutex_);
    for (Entry& e : self->entries_) {
      cudaSetDevice(e.device);
      ncclCommDestroy(e.comm);
      MPI_Group_free(&e.group);
    }
    self->entries_.clear();
    return MPI_SUCCESS;
  }

  std::mutex mutex_;
  std::vector<Entry> entries_;
};
#else
constexpr bool kHaveNccl = false;
#endif

}  // namespace

DeviceTransport::DeviceTransport(Transport requested, const DeviceContext& context)
    : kind_(agree_on_transport(context.comm, requested, kHaveNccl, this_gpu(context.device))), context_(context) {}

DeviceTransport::~DeviceTransport() {
  if (host_send_) cudaFreeHost(host_send_);
  if (host_recv_) cudaFreeHost(host_recv_);
}

void DeviceTransport::connect() {
#if defined(PMKIT_WITH_NCCL)
  if (kind_ == Transport::Nccl && context_.size > 1) nccl_ = NcclCommunicators::instance().get(context_);
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

void DeviceTransport::start(const unsigned char* out, const std::vector<std::int64_t>& send_offsets, unsigned char* in,
                            const std::vector<std::int64_t>& recv_offsets, cudaStream_t stream) {
  const int rank = context_.rank, size = context_.size;
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
}

void DeviceTransport::finish(const unsigned char*, const std::vector<std::int64_t>& send_offsets, unsigned char* in,
                             const std::vector<std::int64_t>& recv_offsets, cudaStream_t stream) {
  const int rank = context_.rank, size = context_.size;
  if (size == 1 || kind_ == Transport::Nccl) return;
  const std::size_t received = recv_offsets[size];
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
