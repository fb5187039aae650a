#pragma once
// The real space of DistributedPmePlan on one rank: its own charges and the ghosts, the
// charges of other ranks within the cutoff of its z slab (each once, wherever its periodic
// image is the near one), exchanged at every compute with their positions and charges.
// The pair plan takes the rank's charges first, then the ghosts; its minimum image finds
// each pair's near image, and the rank keeps the results of its own charges. Staged
// through host memory on CUDA ranks.
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include <mpi.h>

#include "pmkit/pme.hpp"
#include "pmkit/view.hpp"

#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
#endif

namespace pmkit::distributed {

#if defined(PMKIT_WITH_CUDA)
// A CUDA rank's charges (device memory) for device_near_faces, and its scratch.
template <class T>
struct GhostDeviceArrays {
  const T *x, *y, *z, *q;
  cuda::DeviceBuffer<T>* values;
  cuda::DeviceBuffer<unsigned long long>* indices;
  cuda::DeviceBuffer<unsigned long long>* count;
  int device;
  StreamHandle stream;
};

// The charges of n within `reach` of a face of the slab [lo, hi) (cuda/pme_ghosts.cu):
// on the host, x, y, z and q of each, in the charges' order. Waits for the stream.
template <class T>
void device_near_faces(const GhostDeviceArrays<T>& arrays, std::size_t n, double lo, double hi, double reach,
                       std::vector<T>& values);
#endif

template <class T>
class PmeGhosts {
 public:
  // slabs: every rank's z range [slabs[2 r], slabs[2 r + 1]) of the box [0, length);
  // device: the arrays are device memory on options.device (CUDA ranks).
  PmeGhosts(MPI_Comm comm, std::vector<double> slabs, double length, double cutoff, const ExecutionOptions& options);
  ~PmeGhosts();
  PmeGhosts(PmeGhosts&&) noexcept;
  PmeGhosts& operator=(PmeGhosts&&) noexcept;

  // A copy of this rank's positions (n values an axis), for the next exchange.
  void set_positions(const std::array<View<const T>, 3>& positions);
  // Sends the charges near other slabs to those ranks and receives this rank's ghosts
  // (collective); the arrays below hold the own charges, then the ghosts.
  void exchange(View<const T> charges);

  std::array<View<const T>, 3> positions() const;
  View<const T> charges() const;
  std::size_t count() const { return count_; }    // own charges and ghosts
  std::size_t ghosts() const { return ghosts_; }  // of the last exchange
  // Room for `components` values of each of count() particles (the pair plan's outputs).
  T* outputs(int components);

 private:
  struct Memory;
  MPI_Comm comm_;
  std::vector<double> slabs_;
  double length_, reach_;
  int rank_ = 0, size_ = 1;
  std::size_t own_count_ = 0, count_ = 0, ghosts_ = 0;
  std::unique_ptr<Memory> memory_;
};

}  // namespace pmkit::distributed
