#pragma once
// The deterministic spread on a CUDA rank (exact_spread.hpp on the device): set_points'
// stencils, each property's largest |q|, the contributions added to fixed-point local
// meshes with 64-bit integer atomics, and the owned nodes rounded into the blocks. The
// ghost sums between them are the rank's halo pass on these meshes (halo.cuh).
#include <array>
#include <cstdint>
#include <vector>

#include "pmkit/detail/layout.hpp"
#include "core/split.hpp"
#include "distributed/cuda/launch.cuh"
#include "distributed/cuda/region.cuh"
#include "distributed/exact_spread.hpp"
#include "distributed/owners.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/distributed.hpp"

namespace pmkit::distributed {

// The deterministic spread's stencils of a rank's particles (exact_stencil), per axis.
template <class T, int D>
struct ExactStencils {
  int* base[D];
  T* frac[D];
};

template <int D>
struct FirstCell {
  std::int64_t cell[D];
};

template <class T, int D>
class DeviceExactSpread {
 public:
  DeviceExactSpread() = default;
  // first_cell: the block's first cell per axis; interior: the owned nodes as the split's
  // box (Region::interior); halo_entries: DeviceHalo::entries().
  DeviceExactSpread(const DeviceContext& context, const Kernel& kernel, const Owners<D>& owners,
                    const FirstCell<D>& first_cell, const detail::Layout<D>& local, const DeviceRegion<D>& region,
                    const detail::NodeBox<D>& interior, std::size_t halo_entries);

  // RankBackend's locate_exact, largest_values, exact_meshes (reserve), spread_exact
  // (spread) and exact_to_block (to_block).
  void locate(const std::array<View<const T>, D>& positions, std::size_t n);
  void largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs);
  void reserve(int count);
  // spread: the particles of `part` (core/split.hpp, by the block's owned nodes); All
  // and Boundary first clear the meshes.
  void spread(Span<View<const T>> props, std::size_t n, const std::vector<double>& scale, detail::Part part);
  void to_block(Span<View<T>> blocks, const std::vector<double>& inverse, Accumulate mode);

  // The fixed-point local meshes and the ghost buffers of their halo pass (room for the
  // meshes of the last reserve).
  ExactWords* meshes() { return exact_.get(); }
  ExactWords* send() { return exact_send_.get(); }
  ExactWords* recv() { return exact_recv_.get(); }

 private:
  // The stencil arrays, as the kernels take them.
  ExactStencils<T, D> exact_stencils();

  DeviceContext context_;
  Kernel kernel_ = Kernel::linear();
  Owners<D> owners_{};
  FirstCell<D> first_cell_{};
  detail::Layout<D> local_{};
  std::int64_t local_size_ = 0;
  DeviceRegion<D> region_{};
  std::size_t halo_entries_ = 0;
  detail::NodeBox<D> interior_{};  // the block's owned nodes (core/split.hpp)
  // The particles' stencils, the fixed-point local meshes and ghost buffers, each
  // property's largest |q| and first value that is not finite.
  std::array<cuda::DeviceBuffer<int>, D> exact_base_;
  std::array<cuda::DeviceBuffer<T>, D> exact_frac_;
  cuda::DeviceBuffer<ExactWords> exact_, exact_send_, exact_recv_;
  cuda::DeviceBuffer<unsigned long long> largest_;
};

}  // namespace pmkit::distributed
