// `mpirun -np P pmkit pic` (P > 1): the command's options on every rank, every check agreed
// by all ranks before any work (one message, from rank 0), the simulation across the ranks
// (distributed.hpp), and the report and the --csv file from rank 0 alone.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "command.hpp"
#include "distributed.hpp"

namespace pmkit::cli {
namespace {

// f() on every rank; where it throws a UsageError on any rank, every rank throws the
// lowest failing rank's.
template <class F>
void agreed(F&& f) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string why;
  bool failed = false;
  try {
    f();
  } catch (const UsageError& e) {
    why = e.what();
    failed = true;
  }
  int first = failed ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return;
  int length = static_cast<int>(why.size());
  MPI_Bcast(&length, 1, MPI_INT, first, MPI_COMM_WORLD);
  why.resize(length);
  MPI_Bcast(&why[0], length, MPI_CHAR, first, MPI_COMM_WORLD);
  throw UsageError(why);
}

// The arrays of one rank: its slab's share of the particles with room for migrate, and
// its slab of the mesh.
PicBytes rank_bytes(const pic::Config& c, int ranks) {
  PicBytes b = pic_bytes(c);
  const double share = pic::kRankCapacityFactor / ranks;
  return {b.device * share, b.host * share};
}

}  // namespace

int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 1;
}

int run_pic_across_ranks(int argc, char** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string usage = pic_usage();
  const int status = guarded("pic", usage, [&]() -> int {
    std::optional<PicRequest> q;
    std::optional<OutputFile> csv;
    agreed([&] {
      q = read_pic_options(argc, argv, usage, size, rank == 0);
      if (!q) return;
      check_pic_options(*q);
      pic::Config& c = q->config;
      try {
        pic::validate_ranks(c, size);
      } catch (const Error& e) {
        throw UsageError("these options cannot run: " + message_of(e));
      }
      if (c.backend == Backend::Cuda) c.device = pic::rank_device(MPI_COMM_WORLD);
      const PicBytes bytes = rank_bytes(c, size);
      check_memory(bytes.host * pic::host_ranks(MPI_COMM_WORLD).size, Backend::Cpu);  // the host's memory is shared
      if (c.backend == Backend::Cuda) check_memory(bytes.device, Backend::Cuda);
      if (rank == 0) open_csv(q->csv, csv);
    });
    if (!q) return 0;
    // Every phase timed (each waits for the rank's device): across ranks the steps run
    // eagerly anyway.
    const pic::Result r = pic::simulate(MPI_COMM_WORLD, q->config, true);
    if (rank == 0) {
      report_pic(q->config, r, false);
      write_csv(csv, r);
    }
    return 0;
  }, rank == 0);
  MPI_Finalize();
  return status;
}

}  // namespace pmkit::cli
