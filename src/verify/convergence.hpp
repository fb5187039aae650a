#pragma once
// Convergence study of the interpolation kernels, shared by the tests and `pmkit verify`.
//
// A Gaussian g(x) = exp(-|x - c|^2 / sigma^2) centred in a periodic unit box is
//  * M2P: sampled on the mesh nodes and interpolated (Plan<double, D>) at fixed random
//    particle positions, compared with g at the particles;
//  * P2M: carried by particles on the mesh lattice shifted by one sub-cell offset per
//    dimension (strengths g(x_p) * h^D), spread and divided by h^D, compared with g at
//    the nodes;
//  * Gradient: sampled on the mesh nodes, its gradient interpolated (interp_gradient) at
//    the M2P particles, compared with the gradient of g there (all components);
// at several resolutions. The fitted order is the least-squares slope of log(error)
// against log(h), for the relative L2 and the relative Linf error.
#include <cstdint>
#include <string>
#include <vector>

#include "pmkit/kernels.hpp"

namespace pmkit::verify {

enum class Operation { M2P, P2M, Gradient };
const char* to_string(Operation op);

struct ConvergenceConfig {
  std::vector<std::int64_t> cells;  // cells per dimension, one study row each (>= 2 rows)
  double sigma = 0.15;              // Gaussian width; g ~ 1.5e-5 at the box faces
  std::size_t particles = 20000;    // M2P: random evaluation points
  std::uint64_t seed = 20240611;    // positions and the P2M offset: fixed, reproducible
  int num_threads = 0;              // Options::num_threads of the plans
};

// The resolutions `pmkit verify` and the tests use: 32..256 cells in 2D, 16..64 in 3D.
ConvergenceConfig default_config(int dim);

struct ConvergenceRow {
  std::int64_t cells;
  double h;
  double l2;    // relative L2 error: ||e||_2 / ||g||_2 over the compared points
  double linf;  // relative Linf error: max |e| / max |g|
};

struct ConvergenceResult {
  Kernel kernel;
  Operation op;
  int dim;
  std::vector<ConvergenceRow> rows;
  double order_l2;
  double order_linf;
};

// Every kernel pmkit has: linear, tsc, mp4, bspline4 .. bspline8.
std::vector<Kernel> all_kernels();

// Runs one study; dim is 2 or 3 (throws pmkit::Error otherwise).
ConvergenceResult convergence(const Kernel& kernel, Operation op, int dim,
                              const ConvergenceConfig& config);

// Least-squares slope of log(err) against log(h) (sizes equal, >= 2 points).
double fitted_order(const std::vector<double>& h, const std::vector<double>& err);

// The order a kernel must reach in M2P and P2M: 2.9 for M'4 (third order), 1.9 for the
// B-splines. In Gradient: 0.9 for the linear kernel (its gradient is the slope of the
// particle's cell: first order at random positions), 1.9 for every other (second order:
// the B-splines of order 3 and more as in interpolation, M'4 one order less, as its
// moment (n - u)^3 varies with the position u; tests/test_gradient.cpp derives both).
double required_order(const Kernel& kernel, Operation op = Operation::M2P);
// True when both fitted orders of the study reach required_order.
bool meets_threshold(const ConvergenceResult& result);

// A table: one block per dimension, per study an L2 and an Linf line with the error at
// every resolution, the fitted order, the required order and ok/FAIL.
std::string format_table(const std::vector<ConvergenceResult>& results);

}  // namespace pmkit::verify
