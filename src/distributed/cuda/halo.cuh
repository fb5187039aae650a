#pragma once
// The ghost-layer exchange of a CUDA rank's local meshes (halo.hpp's sum and fill on the
// device): the ghost lists in device memory, the values they name gathered into a send
// buffer, moved by the transport, and added to or written at the nodes they stand for.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "distributed/cuda/launch.cuh"
#include "distributed/cuda/transport.cuh"
#include "distributed/halo.hpp"
#include "cuda/runtime.hpp"

namespace pmkit::distributed {

class DeviceHalo {
 public:
  DeviceHalo() = default;
  // halo's lists copied to the device, for local meshes of `local_size` nodes.
  DeviceHalo(const DeviceContext& context, const Halo& halo, std::int64_t local_size);

  // The most entries one pass sends or receives per mesh: send and recv hold this many
  // values for each mesh of a pass.
  std::size_t entries() const {
    return static_cast<std::size_t>(std::max(ghost_offsets_.back(), owned_offsets_.back()));
  }
  // sum (the ghost nodes added to their owners) or fill (the owners' values written to the
  // ghost nodes) of the first `count` of the local meshes at `meshes`, in halo.hpp's two
  // halves: gather (the values, on the rank's stream), start (the transport's start on
  // `stream`, once the caller has ordered it after the gather), finish (the transport's
  // finish on `stream`), scatter (the arrivals added or written on the rank's stream,
  // once the caller has ordered it after `stream`). Per peer its count x entries block, mesh by
  // mesh, as on the host.
  template <class V>
  void gather(const V* meshes, V* send, int count, bool sum);
  template <class V>
  void start(DeviceTransport& transport, V* send, V* recv, int count, bool sum, cudaStream_t stream) {
    messages(transport, send, recv, count, sum, stream, true);
  }
  template <class V>
  void finish(DeviceTransport& transport, V* send, V* recv, int count, bool sum, cudaStream_t stream) {
    messages(transport, send, recv, count, sum, stream, false);
  }
  template <class V>
  void scatter(V* meshes, const V* recv, int count, bool sum);

 private:
  // One of the two lists: its node indices, its offsets by peer on the device and on the host.
  struct List {
    const std::int64_t* index;
    const std::int64_t* peers;
    const std::vector<std::int64_t>& offsets;
  };
  // A pass sends from the ghost list and receives into the owned one where it sums, and the
  // reverse where it fills.
  List sent(bool sum) const { return sum ? ghosts() : owned(); }
  List received(bool sum) const { return sum ? owned() : ghosts(); }
  List ghosts() const { return {ghost_index_.get(), ghost_peers_.get(), ghost_offsets_}; }
  List owned() const { return {owned_index_.get(), owned_peers_.get(), owned_offsets_}; }

  // The transport's start or finish of a pass's messages on `stream`.
  template <class V>
  void messages(DeviceTransport& transport, V* send, V* recv, int count, bool sum, cudaStream_t stream, bool start);

  DeviceContext context_;
  std::int64_t local_size_ = 0;
  // This rank's ghost nodes by owner, its owned nodes by sender (halo.hpp), and the
  // lists' offsets by peer on the device too (the kernels find an entry's peer there).
  cuda::DeviceBuffer<std::int64_t> ghost_index_, owned_index_, ghost_peers_, owned_peers_;
  std::vector<std::int64_t> ghost_offsets_, owned_offsets_;
};

}  // namespace pmkit::distributed
