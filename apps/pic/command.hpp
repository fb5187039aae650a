#pragma once
// `pmkit pic` (command.cpp): what the single-rank command and the command across MPI
// ranks (command_ranks.cpp, built with MPI) share.
#include <optional>
#include <string>

#include "cli.hpp"
#include "pic.hpp"

namespace pmkit::cli {

std::string pic_usage();

// A run as the command line asks for it.
struct PicRequest {
  pic::Config config;
  std::string csv;
  bool graph_given = false;
  bool step_given = false;
};
// Reads the options and applies the defaults of the case and of `ranks` ranks (across
// ranks: sort_every 0 unless given, the graph off; --graph on a UsageError). Nothing where
// --help asked for the usage, which it prints where `print`.
std::optional<PicRequest> read_pic_options(int argc, char** argv, const std::string& usage, int ranks, bool print);
// UsageError, before any work, for a configuration that cannot run or a backend that is
// not here.
void check_pic_options(const PicRequest& request);

// The bytes that a run's arrays take on its device and, for the loading, on the host.
struct PicBytes {
  double device = 0, host = 0;
};
PicBytes pic_bytes(const pic::Config& config);

// The --csv file opened into `file` (UsageError where it cannot be); nothing without --csv.
void open_csv(const std::string& csv, std::optional<OutputFile>& file);
// The run's summary and fits on stdout (`graph`: the steps ran as one stretch).
void report_pic(const pic::Config& config, const pic::Result& result, bool graph);
// The history into the file, committed.
void write_csv(std::optional<OutputFile>& file, const pic::Result& result);

#if defined(PMKIT_WITH_MPI)
// The ranks of the MPI job that started this process (1 outside one): its launcher's
// environment (Open MPI's OMPI_COMM_WORLD_SIZE, PMI's PMI_SIZE).
int launched_ranks();
// `mpirun -np P pmkit pic` with P > 1.
int run_pic_across_ranks(int argc, char** argv);
#endif

}  // namespace pmkit::cli
