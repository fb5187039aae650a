#pragma once
// The device half of a distributed plan on a CUDA rank: the local meshes, the ghost
// lists and the particles' migration buffers live in device memory, and the messages go
// through NCCL (device to device) or through host memory and MPI (the host-staged
// transport, for an MPI that does not take device pointers). The host code holds no CUDA
// type: cuda/device_rank.cu implements it.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <mpi.h>

#include "distributed/decomposition.hpp"
#include "distributed/halo.hpp"
#include "distributed/region.hpp"
#include "core/layout.hpp"
#include "pmkit/distributed.hpp"

namespace pmkit::distributed {

template <class T, int D>
class DeviceRank {
 public:
  DeviceRank(const Decomposition<D>& decomposition, const Halo& halo, const Region<D>& region,
             const detail::Layout<D>& global, const detail::Layout<D>& local, MPI_Comm comm, const Kernel& kernel,
             const Options& options, Transport transport);
  ~DeviceRank();

  // count local meshes (block and ghosts), one after another, in device memory.
  T* meshes(int count);
  // Blocks -> the local meshes' owned nodes, and back (Overwrite or Add).
  void block_to_local(const T* const* blocks, int count);
  void local_to_block(T* const* blocks, int count, Accumulate mode);
  // The ghost exchange of the first `count` local meshes (halo.hpp: sum and fill).
  void halo_sum(int count);
  void halo_fill(int count);
  // The index of the first of n particles that lies outside this rank's block (or is not
  // finite, or outside [0, cells] on an axis), n if none; its position in `position`.
  std::size_t first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                             std::array<double, D>& position);
  // migrate (migration.hpp) on device arrays; the same checks, messages and result.
  std::size_t migrate(const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count);
  // The deterministic spread (exact_spread.hpp) on the device: set_points' stencils; each
  // property's largest |q| (a value that is not finite fails, named); `count` fixed-point
  // local meshes; the contributions added there with 64-bit integer atomics; their ghost
  // sums exchanged and added as integers; the owned nodes rounded into the blocks.
  void locate_exact(const std::array<View<const T>, D>& positions, std::size_t n);
  void largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs);
  void exact_meshes(int count);
  void spread_exact(Span<View<const T>> props, std::size_t n, const std::vector<double>& scale);
  void halo_sum_exact(int count);
  void exact_to_block(T* const* blocks, int count, const std::vector<double>& inverse, Accumulate mode);
  // Waits for the rank's stream: the phases' timings end there.
  void synchronize();
  Transport transport() const { return transport_; }

 private:
  template <class V>
  void halo_pass(V* meshes, V* send, V* recv, int count, bool sum);
  struct State;
  std::unique_ptr<State> state_;
  Transport transport_;
};

}  // namespace pmkit::distributed
