#pragma once
// The migration of a CUDA rank's particles (migration.hpp on device arrays). On one rank,
// the periodic wraps in one queued pass, with no wait. On several, one reading pass lists the leaving particles and the staying ones a wrap moves; one all-reduce
// agrees on errors and on whether anything moves; where something does, the counts are
// agreed as on the CPU ranks, the leavers sorted by destination and packed, the staying
// ones wrapped and compacted, and the rows moved by the transport. Also set_points'
// search for the first particle outside the block.
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "pmkit/detail/layout.hpp"
#include "distributed/cuda/launch.cuh"
#include "distributed/cuda/transport.cuh"
#include "distributed/owners.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/view.hpp"

namespace pmkit::distributed {

// Frees pinned host memory (cudaFreeHost).
struct FreePinned {
  void operator()(unsigned long long* p) const;
};

template <class T, int D>
class DeviceMigration {
 public:
  DeviceMigration() = default;
  // Room for the counters (an allocation on the current device, and their pinned copy).
  DeviceMigration(const DeviceContext& context, const Owners<D>& owners, const detail::Layout<D>& global);

  // RankBackend's first_stranger and migrate.
  std::size_t first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                             std::array<double, D>& position);
  std::size_t migrate(DeviceTransport& transport, const std::array<View<T>, D>& positions, Span<View<T>> props,
                      std::size_t count, bool& changed);
  // A bad position that the last migrate on one rank found, thrown (a wait).
  void raise_deferred();

 private:
  std::size_t migrate_alone(const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count);
  void queue_wraps(const std::array<View<T>, D>& positions, std::size_t count, std::size_t bound);
  [[noreturn]] void reject_bad(const double (&x)[D], std::size_t first);
  void read_counters(int counters, const char* call);
  void upload_columns(const std::array<View<T>, D>& positions, Span<View<T>> props);

  DeviceContext context_;
  Owners<D> owners_{};
  detail::Layout<D> global_{};
  // The migration's counters (MigrationCounters), set_points' first stranger; their copy
  // on the host (pinned: a read of a few bytes that costs no staging).
  cuda::DeviceBuffer<unsigned long long> counters_;
  std::unique_ptr<unsigned long long, FreePinned> found_;
  // Migration scratch: the leaving particles' keys as the pass lists them and sorted (by
  // destination, then index); their indices in that order, as listed and ascending; the
  // staying particles that a wrap moves; the staying particles past the kept count and
  // their number; the packed rows out and in; the caller's columns as last uploaded.
  cuda::DeviceBuffer<unsigned long long> leavers_, sorted_keys_;
  cuda::DeviceBuffer<unsigned> by_destination_, listed_, holes_, wrapping_, tail_, selected_;
  cuda::DeviceBuffer<unsigned char> cub_scratch_;
  cuda::DeviceBuffer<T> rows_, arrivals_;
  cuda::DeviceBuffer<View<T>> columns_;
  std::vector<View<T>> uploaded_;
  // The count of the last migrate on one rank, whose check raise_deferred reads (0: none
  // to read), and the position of the bad particle it found.
  std::size_t unchecked_count_ = 0;
  cuda::DeviceBuffer<double> bad_position_;
};

}  // namespace pmkit::distributed
