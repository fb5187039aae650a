// Spreads three charges onto a periodic 3D mesh with the M'4 kernel and
// interpolates the mesh back to the particles.
#include <cmath>
#include <cstdio>
#include <vector>

#include <pmkit/pmkit.hpp>

int main() {
  // The unit box as 32^3 periodic cells of width 1/32.
  const auto grid = pmkit::Grid3::periodic({32, 32, 32}, 1.0 / 32);
  pmkit::Plan<double, 3> plan(grid, pmkit::Kernel::mp4());

  std::vector<double> x = {0.10, 0.50, 0.90}, y = {0.20, 0.50, 0.70}, z = {0.30, 0.50, 0.99};
  std::vector<double> q = {1.0, -2.0, 0.5};
  plan.set_points({x, y, z});  // bins the particles; reused by every spread and interp

  std::vector<double> rho(plan.mesh_size());
  plan.spread({q}, {rho});  // P2M: charges onto the mesh (x fastest)

  std::vector<double> phi(q.size());
  plan.interp({rho}, {phi});  // M2P: mesh values at the particles, in the caller's order

  double total = 0;
  for (double v : rho) total += v;
  std::printf("mesh total %.12f (sum of the charges: -0.5)\n", total);
  for (std::size_t i = 0; i < phi.size(); ++i) std::printf("particle %zu: %.6f\n", i, phi[i]);

  // Errors are pmkit::Error exceptions whose message names the bad argument.
  try {
    std::vector<double> too_short(10);
    plan.spread({q}, {too_short});
  } catch (const pmkit::Error& e) {
    std::printf("caught: %s\n", e.what());
  }
  return std::abs(total + 0.5) < 1e-12 ? 0 : 1;
}
