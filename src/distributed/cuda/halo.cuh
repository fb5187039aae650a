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

  // The most entries one pass sends or receives: the room of its buffers, per mesh.
  std::size_t entries() const {
    return static_cast<std::size_t>(std::max(ghost_offsets_.back(), owned_offsets_.back()));
  }
  // sum (the ghost nodes added to their owners) or fill (the owners' values written to the
  // ghost nodes) of the first `count` of the local meshes at `meshes`; send and recv hold
  // entries() values each.
  template <class V>
  void pass(DeviceTransport& transport, V* meshes, V* send, V* recv, int count, bool sum);

 private:
  DeviceContext context_;
  std::int64_t local_size_ = 0;
  // This rank's ghost nodes by owner, its owned nodes by sender (halo.hpp).
  cuda::DeviceBuffer<std::int64_t> ghost_index_, owned_index_;
  std::vector<std::int64_t> ghost_offsets_, owned_offsets_;
};

}  // namespace pmkit::distributed
