// `pmkit verify`: the convergence study of every kernel and the gradients' checks
// (src/verify), as tables, with the exit status saying whether every fitted order
// reaches its threshold and every gradient check stays within its tolerance.
#include <iostream>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "verify/convergence.hpp"
#include "verify/gradient.hpp"

namespace pmkit::cli {

namespace {

std::string verify_usage() {
  return "usage: pmkit verify [--dim 2|3] [--kernel NAME] [--threads N]\n"
    "\n"
    "Interpolates (M2P), remeshes (P2M) and interpolates the gradient of (GRAD) a Gaussian\n"
    "on a periodic unit box at several resolutions and fits the order of convergence of\n"
    "the relative L2 and Linf errors. Checks interp_gradient and spread_gradient against\n"
    "the float64 reference, and their adjointness, on periodic, folding and Keep grids.\n"
    "Exit status 0 when every order reaches its threshold (M2P and P2M: M'4 2.9, the\n"
    "B-splines linear, tsc, bspline4..8 1.9; GRAD: linear 0.9, the others 1.9) and every\n"
    "gradient check is within 1e-12, 1 otherwise, 2 for bad arguments.\n"
    "\n"
    "options:\n"
    "  --dim 2|3      only this dimension (default: both)\n"
    "  --kernel NAME  only this kernel: " + joined(all_kernel_names()) + "\n"
    "                 (default: all)\n"
    "  --threads N    OpenMP threads of the plans (default: OpenMP's default)\n"
    "  -h, --help     this text\n";
}

}  // namespace

int run_verify(int argc, char** argv) {
  const std::string usage = verify_usage();
  return guarded("verify", usage, [&]() -> int {
    std::vector<int> dims = {2, 3};
    std::vector<Kernel> kernels = verify::all_kernels();
    int threads = 0;
    ArgReader args(argc, argv);
    while (args.next()) {
      if (args.is("--help")) {
        args.flag();
        std::cout << usage;
        return 0;
      } else if (args.is("--dim")) {
        dims = {static_cast<int>(args.count(2, 3, "3"))};
      } else if (args.is("--kernel")) {
        kernels = {args.kernel(all_kernel_names())};
      } else if (args.is("--threads")) {
        threads = static_cast<int>(args.count(1, 4096, "4"));
      } else {
        args.unknown();
      }
    }

    std::vector<verify::ConvergenceResult> results;
    std::vector<verify::GradientCheck> gradient_checks;
    int failed = 0, failed_checks = 0;
    for (int dim : dims) {
      verify::ConvergenceConfig config = verify::default_config(dim);
      config.num_threads = threads;
      for (const Kernel& k : kernels) {
        for (verify::Operation op : {verify::Operation::M2P, verify::Operation::P2M, verify::Operation::Gradient}) {
          results.push_back(verify::convergence(k, op, dim, config));
          if (!verify::meets_threshold(results.back())) ++failed;
        }
        gradient_checks.push_back(verify::check_gradients(k, dim, config.seed, threads));
        if (!verify::passes(gradient_checks.back())) ++failed_checks;
      }
    }
    std::cout << "Convergence of a Gaussian (sigma " << verify::ConvergenceConfig{}.sigma
              << ") on a periodic unit box, relative errors:\n"
              << verify::format_table(results) << "\n"
              << "Gradients against the float64 reference (relative L2) and their adjointness, the\n"
              << "largest over a periodic, a folding and a Keep grid:\n"
              << verify::format_gradient_table(gradient_checks) << "\n";
    if (failed > 0 || failed_checks > 0) {
      std::cout << "verify: FAILED: " << failed << " of " << results.size()
                << " studies below their required order, " << failed_checks << " of " << gradient_checks.size()
                << " gradient checks above their tolerance\n";
      return 1;
    }
    std::cout << "verify: all " << results.size() << " studies reach their required order, all "
              << gradient_checks.size() << " gradient checks are within their tolerance\n";
    return 0;
  });
}

}  // namespace pmkit::cli
