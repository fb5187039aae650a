// `pmkit`: the command line. Subcommands: demo, verify, bench, pme, pic (see --help of each).
#include <iostream>
#include <string>

#include "commands.hpp"
#include "pmkit/version.hpp"

namespace {

const char* const kUsage =
    "usage: pmkit <command> [options]\n"
    "\n"
    "commands:\n"
    "  demo     spread and interpolate a default 3D case; print timings and checks\n"
    "  verify   convergence study of every kernel; exit 1 if an order falls short\n"
    "  bench    time the CPU backend against a plain OpenMP atomic baseline\n"
    "  pme      Coulomb energy and forces by smooth PME; errors against the Ewald sum\n"
    "  pic      electrostatic particle-in-cell: Landau damping, two-stream, thermal\n"
    "\n"
    "`pmkit <command> --help` describes the options of a command.\n"
    "`pmkit --version` prints the version and whether the CUDA backend is built.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  // Each subcommand sees argv[0] = its own name.
  if (command == "demo") return pmkit::cli::run_demo(argc - 1, argv + 1);
  if (command == "verify") return pmkit::cli::run_verify(argc - 1, argv + 1);
  if (command == "bench") return pmkit::cli::run_bench(argc - 1, argv + 1);
  if (command == "pme") return pmkit::cli::run_pme(argc - 1, argv + 1);
  if (command == "pic") return pmkit::cli::run_pic(argc - 1, argv + 1);
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "--version") {
    std::cout << "pmkit " << PMKIT_VERSION_STRING << " (CUDA backend: "
              << (pmkit::built_with_cuda() ? "built" : "not built") << ")\n";
    return 0;
  }
  std::cerr << "pmkit: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}
