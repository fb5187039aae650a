#pragma once
// pmkit pic across the ranks of an MPI communicator (docs/pic.md, "Across ranks"): the
// simulation of pic.hpp with each rank holding the electrons in its block of the mesh.
// The blocks are the distributed FFT's slabs (DistributedRealFft: the last axis, z in 3D
// and y in 2D, cut into slabs of ceil(n / P) planes), so that the deposit's blocks go into
// the field solve and the potential comes back to the gather with no redistribution.
// Every step: push, every sort_every steps the arrays in the rank's binned order
// (DistributedPlan::permute_to_binned), migrate (DistributedPlan::migrate, the electrons
// with their velocities), the binning, the deposit (DistributedPlan::spread), Poisson on the
// rank's slab of the spectrum (DistributedRealFft) and the gather (interp_gradient, or
// interp of E). The diagnostics' sums are added over the ranks; every call is collective.
//
// With Config::deterministic the deposit is DistributedPlan's fixed-point spread: the same
// bits at any rank count. The field solve's rounding depends on the rank count, so later
// steps' particles, and with them the energies and momentum, agree to rounding.
#include <mpi.h>

#include <vector>

#include "pic.hpp"

namespace pmkit::pic {

// Throws pmkit::Error (InvalidArgument, naming the field and what is accepted) where the
// configuration cannot run across `ranks` ranks: cells[dim - 1] that the FFT's slabs
// cannot split over them (a rank would hold no plane).
void validate_ranks(const Config& config, int ranks);

// A rank's arrays hold its slab's share of the electrons times this (the loading is
// uniform along the slabs' axis; the rest is room for their fluctuation).
constexpr double kRankCapacityFactor = 1.25;

// simulate(), benchmark() and initial_density() across the ranks of comm: collective,
// with the same configuration on every rank, which validate() and validate_ranks() check
// on every rank before any work (one rank's error thrown on all). The history is the
// whole plasma's on every rank; the phases and seconds the slowest rank's. On CUDA ranks
// Config::device is the rank's GPU (rank_device()), and every step runs eagerly
// (Result::graph_note says why). initial_density: the whole grid's on rank 0 (nodes x
// fastest), empty on the others.
Result simulate(MPI_Comm comm, const Config& config, bool timed = false);
Result benchmark(MPI_Comm comm, const Config& config, int warmup, int timed_steps);
std::vector<double> initial_density(MPI_Comm comm, const Config& config);

// This rank's place among the ranks of comm on its host, and their number.
struct HostRanks {
  int rank = 0, size = 1;
};
HostRanks host_ranks(MPI_Comm comm);

// This rank's GPU: host_ranks(comm).rank modulo the GPUs visible (0 in a build without
// CUDA or where none is).
int rank_device(MPI_Comm comm);

}  // namespace pmkit::pic
