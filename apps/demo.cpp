// `pmkit demo`: spreads random charges onto a mesh and interpolates back, then prints
// the timings and the checks that hold for any kernel and boundary:
//  * conservation: the mesh total equals the sum of the charges;
//  * round trip: interp is the adjoint of spread, so <spread(q), rho> = <q, interp(rho)>;
//  * accuracy: a smooth field interpolated to the particles, against its exact value
//    (printed, not checked: it depends on the resolution).
// The first two fail the run (exit 1) beyond a tolerance; each failure names its check,
// value and tolerance. With no particles there is nothing to measure, and the run passes.
// A periodic box narrower than the kernel's support is allowed: the stencil wraps
// around and adds onto the same nodes, and both checks still hold.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "cpu/openmp.hpp"
#include "demo_settings.hpp"
#include "pmkit/pmkit.hpp"
#include "vtk.hpp"

namespace pmkit::cli {
namespace {

std::string demo_usage() {
  return "usage: pmkit demo [options]\n"
    "\n"
    "Spreads one random charge per particle (uniform positions in the unit box) onto the\n"
    "mesh, interpolates the result back, and prints the timings, the conservation error\n"
    "and the round-trip checks.\n"
    "\n"
    "options:\n"
    "  --particles N        number of particles (default 1000000; 1e6 and 2^20 work too)\n"
    "  --cells N            cells per dimension (default 100)\n"
    "  --dim 2|3            dimension (default 3)\n"
    "  --kernel NAME        " + joined(all_kernel_names()) + "\n"
    "                       (default mp4)\n"
    "  --precision P        float|double (default float)\n"
    "  --boundary B         periodic|fold|keep (default periodic); fold and keep are\n"
    "                       bounded grids whose ghost layers are folded back or kept\n"
    "  --backend B          cpu|cuda (default cpu); cuda needs a CUDA build and a GPU,\n"
    "                       the arrays stay on the host and the plan copies them\n"
    "  --threads T          OpenMP threads (default: OpenMP's default)\n"
    "  --seed S             random seed (default 1)\n"
    "  --tolerance E        relative tolerance of the conservation and round-trip\n"
    "                       checks (default 1e-4 in float, 1e-10 in double)\n"
    "  --distributed        over MPI ranks: mpirun -np P pmkit demo --distributed\n"
    "                       (`pmkit demo --distributed --help` gives its options)\n"
    "  --vtk FILE           write the spread mesh as a legacy VTK file (ParaView);\n"
    "                       checked for writing before the run\n"
    "  -h, --help           this text\n";
}

struct DemoOptions : DemoSettings {
  std::string backend = "cpu";
  double tolerance = 0;  // 0: the default of the precision
  std::string vtk;
};

Options plan_options(const DemoOptions& o) {
  Options opt;
  opt.num_threads = o.threads;
  if (o.backend == "cuda") {
    opt.backend = Backend::Cuda;
    opt.host_arrays = true;
  }
  return opt;
}

// The plan of the options. A grid or backend that the library rejects (too few cells
// for a folded boundary, too many nodes, no CUDA backend in this build) is a usage
// error; a device that fails stays a failed run.
template <class T, int D>
Plan<T, D> make_plan(const DemoOptions& o, const Grid<D>& grid) {
  try {
    return Plan<T, D>(grid, o.kernel, plan_options(o));
  } catch (const Error& e) {
    if (e.code() == ErrorCode::Device) throw;
    throw UsageError("these options cannot run: " + message_of(e));
  }
}

// Writes the spread mesh to --vtk, if given.
template <class T, int D>
void write_mesh(const DemoOptions& o, OutputFile* vtk, const Grid<D>& grid, const std::vector<T>& rho) {
  if (!vtk) return;
  write_vtk(vtk->stream(), vtk_image(grid, o.kernel.ghost_width()), "charge", rho.data());
  vtk->commit();
  std::printf("wrote %s: legacy VTK, %s values of the spread charge\n", o.vtk.c_str(), o.precision.c_str());
}

// The bytes of the run's arrays (positions, charges, the interpolated values and two
// meshes) and an allowance for the plan's binning: about 16 bytes a particle.
template <class T, int D>
double demo_bytes(std::size_t n, std::int64_t mesh) {
  return double(sizeof(T)) * ((D + 2.0) * double(n) + 2.0 * double(mesh)) + 16.0 * double(n);
}

template <class T, int D>
int demo(const DemoOptions& o, OutputFile* vtk) {
  const Grid<D> grid = demo_grid<D>(o);
  Plan<T, D> plan = make_plan<T, D>(o, grid);

  // Every array before the particles, so that sizes beyond memory fail before any work.
  const std::size_t n = static_cast<std::size_t>(o.particles);
  check_memory(demo_bytes<T, D>(n, plan.mesh_size()), Backend::Cpu);
  if (o.backend == "cuda") check_memory(demo_bytes<T, D>(n, plan.mesh_size()), Backend::Cuda);
  std::array<std::vector<T>, D> x;
  std::vector<T> q(n);
  for (auto& xd : x) xd.resize(n);
  std::vector<T> rho(static_cast<std::size_t>(plan.mesh_size()));
  std::vector<T> field(rho.size());
  std::vector<T> back(n);

  // Particles: uniform in [0, 1)^D, charges uniform in [0.5, 1.5).
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < D; ++d) x[d][i] = static_cast<T>(unit(rng));
    q[i] = static_cast<T>(0.5 + unit(rng));
  }
  typename Plan<T, D>::Positions pos;
  for (int d = 0; d < D; ++d) pos[d] = View<const T>(x[d]);

  const double t_set = seconds([&] { plan.set_points(pos); });
  const Timings tm_set = plan.last_timings();
  const double t_spread = seconds([&] { plan.spread({View<const T>(q)}, {View<T>(rho)}); });
  const Timings tm_spread = plan.last_timings();
  const double t_interp = seconds([&] { plan.interp({View<const T>(rho)}, {View<T>(back)}); });
  const Timings tm_interp = plan.last_timings();

  // What was done.
  const auto shape = plan.mesh_shape();
  std::string shape_str, cells_str;
  for (int d = 0; d < D; ++d) {
    shape_str += (d ? " x " : "") + std::to_string(shape[d]);
    cells_str += (d ? " x " : "") + std::to_string(grid.cells[d]);
  }
  const char* boundary_str = o.boundary == "periodic" ? "periodic"
                             : o.boundary == "fold"   ? "bounded, ghosts folded"
                                                      : "bounded, ghosts kept";
  double cell_volume = 1.0;
  for (int d = 0; d < D; ++d) cell_volume *= static_cast<double>(grid.cells[d]);
  std::printf("pmkit demo: %dD, %zu particles (uniform in the unit box, seed %llu, %.2f per cell)\n",
              D, n, static_cast<unsigned long long>(o.seed), static_cast<double>(n) / cell_volume);
  std::printf("  grid     %s cells, h = %g, %s; mesh of %s nodes\n", cells_str.c_str(), grid.spacing[0],
              boundary_str, shape_str.c_str());
  std::printf("  kernel   %s: %d nodes per dimension, accuracy order %d\n", o.kernel.name().c_str(),
              o.kernel.support(), o.kernel.accuracy_order());
  std::printf("  plan     %s, %s backend", o.precision.c_str(), o.backend.c_str());
  if (o.backend == "cpu")
    std::printf(", %d threads", o.threads > 0 ? o.threads : cpu::default_threads());
  std::printf(", spread method %s\n", plan.spread_method_name().c_str());

  std::printf("timings (one call each, steady clock):\n");
  auto print_time = [&](const char* what, double t, const Timings& tm) {
    std::printf("  %-11s %10.3f ms", what, 1e3 * t);
    if (plan.options().host_arrays)
      std::printf("   (copies %.3f ms, compute %.3f ms)", 1e3 * tm.transfer_s, 1e3 * tm.compute_s);
    std::printf("\n");
  };
  print_time("set_points", t_set, tm_set);
  print_time("spread", t_spread, tm_spread);
  print_time("interp", t_interp, tm_interp);

  ChargeSums sums;
  sums.add_particles(q.data(), back.data(), n);
  sums.add_mesh(rho);
  std::printf("checks:\n");
  if (n == 0) {
    std::printf("  conservation  no particles: nothing to measure\n");
    std::printf("  round trip    no particles: nothing to measure\n");
    std::printf("  accuracy      no particles: nothing to measure\n");
    write_mesh(o, vtk, grid, rho);
    return 0;
  }
  sums.print(sums.conservation(), sums.round_trip());

  // A smooth field, prod cos(2 pi x_d): periodic on the unit box and mirror-symmetric about
  // both ends, so it is exact on periodic, folded and kept ghost nodes alike.
  const double two_pi = 8.0 * std::atan(1.0);
  const int g = o.kernel.ghost_width();
  const bool keep = o.boundary == "keep";
  for (std::size_t j = 0; j < field.size(); ++j) {
    std::size_t rest = j;
    double f = 1.0;
    for (int d = 0; d < D; ++d) {
      const auto m = static_cast<std::int64_t>(rest % static_cast<std::size_t>(shape[d])) - (keep ? g : 0);
      rest /= static_cast<std::size_t>(shape[d]);
      f *= std::cos(two_pi * (grid.origin[d] + m * grid.spacing[d]));
    }
    field[j] = static_cast<T>(f);
  }
  plan.interp({View<const T>(field)}, {View<T>(back)});
  double max_err = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double f = 1.0;
    for (int d = 0; d < D; ++d) f *= std::cos(two_pi * static_cast<double>(x[d][i]));
    max_err = std::max(max_err, std::abs(f - static_cast<double>(back[i])));
  }
  std::printf("  accuracy      prod cos(2 pi x_d) interpolated from the mesh: max |error| = %.2e"
              " (h = %g, order %d)\n",
              max_err, grid.spacing[0], o.kernel.accuracy_order());

  write_mesh(o, vtk, grid, rho);
  const double tolerance = o.tolerance > 0 ? o.tolerance : std::is_same<T, float>::value ? 1e-4 : 1e-10;
  return report_checks({{"conservation", sums.conservation()}, {"round trip", sums.round_trip()}}, tolerance) ? 0 : 1;
}

}  // namespace

int run_demo(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--distributed") {
#if defined(PMKIT_WITH_MPI)
      return run_distributed_demo(argc, argv);
#else
      return guarded("demo", demo_usage(), []() -> int {
        throw UsageError("--distributed: this build of pmkit has no MPI (configure with PMKIT_MPI=ON)");
      });
#endif
    }
  const std::string usage = demo_usage();
  return guarded("demo", usage, [&]() -> int {
    DemoOptions o;
    ArgReader args(argc, argv);
    while (args.next()) {
      if (read_demo_setting(args, o)) continue;
      if (args.is("--help")) {
        args.flag();
        std::fputs(usage.c_str(), stdout);
        return 0;
      } else if (args.is("--backend")) {
        o.backend = args.choice({"cpu", "cuda"});
      } else if (args.is("--tolerance")) {
        o.tolerance = args.positive("1e-6");
      } else if (args.is("--vtk")) {
        o.vtk = args.value();
      } else {
        args.unknown();
      }
    }
    check_backend(o.backend == "cuda" ? Backend::Cuda : Backend::Cpu);
    std::optional<OutputFile> vtk;
    if (!o.vtk.empty()) {
      try {
        vtk.emplace(o.vtk);
      } catch (const std::runtime_error& e) {
        throw UsageError("--vtk: " + message_of(e));
      }
    }
    OutputFile* out = vtk ? &*vtk : nullptr;
    if (o.precision == "float") return o.dim == 2 ? demo<float, 2>(o, out) : demo<float, 3>(o, out);
    return o.dim == 2 ? demo<double, 2>(o, out) : demo<double, 3>(o, out);
  });
}

}  // namespace pmkit::cli
