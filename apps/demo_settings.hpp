#pragma once
// What `pmkit demo` and `pmkit demo --distributed` share: the options of the particles,
// the grid and the kernel, and the two checks of the spread charge (conservation of the
// total and the round trip <spread(q), rho> = <q, interp(rho)>).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "pmkit/grid.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::cli {

struct DemoSettings {
  std::int64_t particles = 1000000;
  std::int64_t cells = 100;
  int dim = 3;
  Kernel kernel = Kernel::mp4();
  std::string precision = "float";
  std::string boundary = "periodic";
  int threads = 0;
  std::uint64_t seed = 1;
};

// Reads the option `args` stands at into s where it is one of DemoSettings'; false for
// any other option, which the caller reads.
inline bool read_demo_setting(ArgReader& args, DemoSettings& s) {
  if (args.is("--particles")) {
    s.particles = args.count(0, kMaxParticles, "1e6");
  } else if (args.is("--cells")) {
    s.cells = args.count(1, 1 << 20, "64");
  } else if (args.is("--dim")) {
    s.dim = args.choice({"2", "3"}) == "2" ? 2 : 3;
  } else if (args.is("--kernel")) {
    s.kernel = args.kernel(all_kernel_names());
  } else if (args.is("--precision")) {
    s.precision = args.choice({"float", "double"});
  } else if (args.is("--boundary")) {
    s.boundary = args.choice({"periodic", "fold", "keep"});
  } else if (args.is("--threads")) {
    s.threads = static_cast<int>(args.count(1, 4096, "4"));
  } else if (args.is("--seed")) {
    s.seed = static_cast<std::uint64_t>(args.count(0, INT64_MAX, "42"));
  } else {
    return false;
  }
  return true;
}

// The unit box in cells^D cells, periodic or bounded as the settings say.
template <int D>
Grid<D> demo_grid(const DemoSettings& s) {
  std::array<std::int64_t, D> cells;
  cells.fill(s.cells);
  const double h = 1.0 / static_cast<double>(s.cells);
  if (s.boundary == "periodic") return Grid<D>::periodic(cells, h);
  return Grid<D>::bounded(cells, h, 0.0, s.boundary == "keep" ? Ghosts::Keep : Ghosts::Fold);
}

// The sums behind the two checks: sum q, the mesh's total, <rho, rho> = <spread(q), rho>
// and <q, interp(rho)>.
struct ChargeSums {
  double sum_q = 0, mass = 0, rho2 = 0, q_back = 0;

  template <class T>
  void add_particles(const T* q, const T* back, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      sum_q += q[i];
      q_back += static_cast<double>(q[i]) * back[i];
    }
  }
  template <class T>
  void add_mesh(const std::vector<T>& rho) {
    for (T v : rho) {
      mass += v;
      rho2 += static_cast<double>(v) * v;
    }
  }
  double conservation() const { return std::abs(mass - sum_q) / std::abs(sum_q); }
  double round_trip() const { return std::abs(rho2 - q_back) / std::abs(rho2); }
  // The sums with the checks' values (conservation() and round_trip(), or what the caller
  // reports where there are no particles).
  void print(double conservation, double round_trip) const {
    std::printf("  conservation  sum q = %.10g, mesh total = %.10g, |difference| / |sum q| = %.2e\n", sum_q, mass,
                conservation);
    std::printf("  round trip    <spread(q), rho> = %.10g, <q, interp(rho)> = %.10g, relative difference %.2e\n", rho2,
                q_back, round_trip);
  }
};

// The failed checks, each with its value and tolerance, on stderr; true if none failed.
inline bool report_checks(const std::vector<std::pair<const char*, double>>& checks, double tolerance) {
  bool ok = true;
  for (const auto& [name, value] : checks)
    if (!(value < tolerance)) {
      std::fprintf(stderr, "pmkit demo: check failed: %s: relative error %.2e, tolerance %.0e\n", name, value,
                   tolerance);
      ok = false;
    }
  return ok;
}

}  // namespace pmkit::cli
