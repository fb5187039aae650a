#pragma once
// Subcommands of the `pmkit` executable. Each gets the arguments after the program
// name: argv[0] is the subcommand itself ("verify"), options follow. Returns the exit status.

namespace pmkit::cli {

int run_demo(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_verify(int argc, char** argv);
int run_pme(int argc, char** argv);
int run_pic(int argc, char** argv);
// `pmkit demo --distributed` (builds with PMKIT_MPI): the demo over MPI ranks.
int run_distributed_demo(int argc, char** argv);

}  // namespace pmkit::cli
