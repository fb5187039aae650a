#pragma once
// The rank backend of a CUDA rank: the local meshes in device memory and the parts that
// work on them, one file each as on the host side: the ghost exchange (halo.cuh), the
// deterministic spread (exact_spread.cuh), the migration (migration.cuh) and the
// transport their messages take (transport.cuh). Every call runs on the plan's device
// and stream.
#include <array>
#include <cstdint>

#include "distributed/cuda/exact_spread.cuh"
#include "distributed/cuda/halo.cuh"
#include "distributed/cuda/launch.cuh"
#include "distributed/cuda/migration.cuh"
#include "distributed/cuda/region.cuh"
#include "distributed/cuda/transport.cuh"
#include "distributed/owners.hpp"
#include "distributed/rank_backend.hpp"
#include "cuda/runtime.hpp"

namespace pmkit::distributed {

template <class T, int D>
class DeviceRank final : public RankBackend<T, D> {
 public:
  explicit DeviceRank(const RankSetup<D>& setup);
  ~DeviceRank() override;

  PMKIT_RANK_BACKEND_OVERRIDES
  Transport transport() const override { return transport_.kind(); }
  bool update_checked_by_binning() const override { return alone_; }
  void raise_deferred() override;

 private:
  // A halo pass's halves on `meshes`, with its send and receive buffers.
  template <class V>
  void halo_start(V* meshes, V* send, V* recv, int count, bool sum);
  template <class V>
  void halo_finish(V* meshes, V* send, V* recv, int count, bool sum);

  DeviceContext context_;
  std::int64_t local_size_ = 0;
  bool alone_ = false;  // one rank, not deterministic: the local plan checks update_points
  DeviceRegion<D> region_{};
  std::array<cuda::DeviceBuffer<int>, D> owner_tables_;
  Owners<D> owners_{};  // its tables: owner_tables_
  DeviceHalo halo_;
  cuda::DeviceBuffer<T> meshes_, send_, recv_;  // the local meshes; their ghost buffers
  DeviceExactSpread<T, D> exact_;
  DeviceMigration<T, D> migration_;
  std::array<cudaEvent_t, RankBackend<T, D>::kMarks> marks_{};  // the phases' marks
  // The ghost messages' stream, and its fork from and join to the rank's stream.
  cudaStream_t messages_ = nullptr;
  cudaEvent_t gathered_ = nullptr, arrived_ = nullptr;
  // Last: destroyed first (the NCCL communicator, then the pinned buffers, before the
  // device buffers).
  DeviceTransport transport_;
};

}  // namespace pmkit::distributed
