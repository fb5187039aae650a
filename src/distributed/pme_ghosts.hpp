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

namespace pmkit::distributed {

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
  std::array<std::vector<T>, 3> own_;
  std::size_t count_ = 0, ghosts_ = 0;
  std::unique_ptr<Memory> memory_;
};

}  // namespace pmkit::distributed
