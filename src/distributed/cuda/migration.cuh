#pragma once
// The migration of a CUDA rank's particles (migration.hpp on device arrays): one reading
// pass classifies every particle, the counts are agreed as on the CPU ranks, then the
// leaving particles are selected, sorted by destination and packed, the staying ones
// wrapped and compacted, and the rows moved by the transport. Also set_points' search for
// the first particle outside the block.
#include <array>
#include <cstddef>

#include "core/layout.hpp"
#include "distributed/cuda/launch.cuh"
#include "distributed/cuda/transport.cuh"
#include "distributed/owners.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/view.hpp"

namespace pmkit::distributed {

template <class T, int D>
class DeviceMigration {
 public:
  DeviceMigration() = default;
  // Room for the counters (an allocation on the current device).
  DeviceMigration(const DeviceContext& context, const Owners<D>& owners, const detail::Layout<D>& global);

  // RankBackend's first_stranger and migrate.
  std::size_t first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                             std::array<double, D>& position);
  std::size_t migrate(DeviceTransport& transport, const std::array<View<T>, D>& positions, Span<View<T>> props,
                      std::size_t count);

 private:
  DeviceContext context_;
  Owners<D> owners_{};
  detail::Layout<D> global_{};
  // The migration's counters (MigrationCounters), set_points' first stranger.
  cuda::DeviceBuffer<unsigned long long> counters_;
  // Migration scratch: each particle's key; the staying particles a wrap moves; the
  // leaving particles by index, their keys, both sorted by destination; the staying
  // particles past the kept count; the selections' counts (leaving, staying past); the
  // packed rows out and in.
  cuda::DeviceBuffer<unsigned> keys_, wrapping_, leavers_, leaver_keys_, sorted_keys_, sorted_leavers_, tail_,
      selected_;
  cuda::DeviceBuffer<unsigned char> cub_scratch_;
  cuda::DeviceBuffer<T> rows_, arrivals_;
  cuda::DeviceBuffer<View<T>> columns_;
};

}  // namespace pmkit::distributed
