#pragma once
// How a CUDA rank's messages travel (pmkit::Transport): NCCL between device buffers, or
// through pinned host buffers and MPI (the host-staged transport, for an MPI that does
// not take device pointers). Both run on the rank's stream, in call order.
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(PMKIT_WITH_NCCL)
#include <nccl.h>
#endif

#include "distributed/cuda/launch.cuh"
#include "pmkit/distributed.hpp"

namespace pmkit::distributed {

class DeviceTransport {
 public:
  // The transport `requested` resolves to on the ranks of context.comm (collective, before
  // any NCCL set-up: transport_choice.hpp): Auto is NCCL where this build has it (the
  // faster transport where both ran: docs/distributed.md#transport) and no two ranks
  // share a GPU, host-staged MPI otherwise; Nccl fails without NCCL or on a shared GPU.
  DeviceTransport(Transport requested, const DeviceContext& context);
  ~DeviceTransport();
  DeviceTransport(const DeviceTransport&) = delete;
  DeviceTransport& operator=(const DeviceTransport&) = delete;

  // With NCCL over several ranks, the NCCL communicator of the context's ranks, device
  // and stream: one per process, shared by every plan of the same ranks there, made by
  // the first and freed in MPI_Finalize (collective).
  void connect();
  Transport kind() const { return kind_; }

  // Sends bytes [send_offsets[p], send_offsets[p+1]) of `out` to each peer p and receives
  // [recv_offsets[p], ...) of `in` from it; this rank's own part is a device copy. On the
  // rank's stream, in two halves on `stream` (the same arguments to both): start queues
  // the own part's copy and the messages (NCCL) or the copy to the host (host-staged),
  // and returns; finish (host-staged) waits for `stream`, sends and receives through MPI
  // and queues the copies back to the device. Between them the host is free to queue
  // other work on other streams, which runs while NCCL's messages travel.
  void exchange(const unsigned char* out, const std::vector<std::int64_t>& send_offsets, unsigned char* in,
                const std::vector<std::int64_t>& recv_offsets) {
    start(out, send_offsets, in, recv_offsets, context_.stream);
    finish(out, send_offsets, in, recv_offsets, context_.stream);
  }
  void start(const unsigned char* out, const std::vector<std::int64_t>& send_offsets, unsigned char* in,
             const std::vector<std::int64_t>& recv_offsets, cudaStream_t stream);
  void finish(const unsigned char* out, const std::vector<std::int64_t>& send_offsets, unsigned char* in,
              const std::vector<std::int64_t>& recv_offsets, cudaStream_t stream);

 private:
  // Pinned room for `bytes`, regrown with DeviceBuffer's headroom (cudaFreeHost waits
  // for the device too).
  static void host_reserve(unsigned char*& buffer, std::size_t& have, std::size_t bytes);

  Transport kind_;
  DeviceContext context_;
#if defined(PMKIT_WITH_NCCL)
  ncclComm_t nccl_ = nullptr;  // shared (transport.cu's cache owns it)
#endif
  // Host staging of the host-MPI transport (pinned).
  unsigned char* host_send_ = nullptr;
  unsigned char* host_recv_ = nullptr;
  std::size_t host_send_bytes_ = 0, host_recv_bytes_ = 0;
};

}  // namespace pmkit::distributed
