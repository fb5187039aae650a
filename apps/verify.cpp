// `pmkit verify`: the convergence study of every kernel (src/verify), as a table, with
// the exit status saying whether every fitted order reaches its threshold.
#include <iostream>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "verify/convergence.hpp"

namespace pmkit::cli {

namespace {

const char* const kVerifyUsage =
    "usage: pmkit verify [--dim 2|3] [--kernel NAME] [--threads N]\n"
    "\n"
    "Interpolates (M2P) and remeshes (P2M) a Gaussian on a periodic unit box at several\n"
    "resolutions and fits the order of convergence of the relative L2 and Linf errors.\n"
    "Exit status 0 when every order reaches its threshold (M'4: 2.9, the B-splines\n"
    "linear, tsc, bspline4..8: 1.9), 1 otherwise, 2 for bad arguments.\n"
    "\n"
    "options:\n"
    "  --dim 2|3      only this dimension (default: both)\n"
    "  --kernel NAME  only this kernel: linear, tsc, mp4, bspline2 .. bspline8\n"
    "                 (default: all)\n"
    "  --threads N    OpenMP threads of the plans (default: OpenMP's default)\n"
    "  --help         this message\n";

}  // namespace

int run_verify(int argc, char** argv) {
  return guarded("verify", kVerifyUsage, [&]() -> int {
    std::vector<int> dims = {2, 3};
    std::vector<Kernel> kernels = verify::all_kernels();
    int threads = 0;
    ArgReader args(argc, argv);
    while (args.next()) {
      if (args.is("--help")) {
        args.flag();
        std::cout << kVerifyUsage;
        return 0;
      } else if (args.is("--dim")) {
        dims = {static_cast<int>(args.count(2, 3, "3"))};
      } else if (args.is("--kernel")) {
        kernels = {args.kernel()};
      } else if (args.is("--threads")) {
        threads = static_cast<int>(args.count(1, 4096, "4"));
      } else {
        args.unknown();
      }
    }

    std::vector<verify::ConvergenceResult> results;
    int failed = 0;
    for (int dim : dims) {
      verify::ConvergenceConfig config = verify::default_config(dim);
      config.num_threads = threads;
      for (const Kernel& k : kernels)
        for (verify::Operation op : {verify::Operation::M2P, verify::Operation::P2M}) {
          results.push_back(verify::convergence(k, op, dim, config));
          if (!verify::meets_threshold(results.back())) ++failed;
        }
    }
    std::cout << "Convergence of a Gaussian (sigma " << verify::ConvergenceConfig{}.sigma
              << ") on a periodic unit box, relative errors:\n"
              << verify::format_table(results) << "\n";
    if (failed > 0) {
      std::cout << "verify: FAILED: " << failed << " of " << results.size()
                << " studies below their required order\n";
      return 1;
    }
    std::cout << "verify: all " << results.size() << " studies reach their required order\n";
    return 0;
  });
}

}  // namespace pmkit::cli
