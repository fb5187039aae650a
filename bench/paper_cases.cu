// The seeds' own cases re-run on pmkit, with the papers' figures beside them. (Over 600
// lines: three papers' tables, each a setup, a timing loop and a printer that belong together.)
//
// PPM (Büyükkeçeci, Awile and Sbalzarini, "A portable OpenCL implementation of generic
// particle-mesh and mesh-particle interpolation in 2D and 3D"): the 16 cases of its
// Table 2 and the accuracy test of its Fig. 11. One particle on each node of the unit box
// (2048^2 nodes in 2D, 4096k particles; 128^3 in 3D, 2048k), each coordinate shifted by
// a uniform random number in [-2h, 2h]; strengths g(x) = exp(-|x - 1/2|^2 / 15) at the
// particles (P2M) or at the nodes (M2P). The paper names no boundary (PPM surrounds a
// sub-domain with ghost layers); the timings run on the periodic unit box (n^D nodes, pmkit
// wraps the shifted particles): no boundary work, and every node fully covered.
//   Timings (ms, medians of --reps runs after one warm-up):
//   - GPU, device arrays, CUDA events: set_points alone, the spread/interp alone, and
//     set_points + spread/interp timed together: the counterpart of the paper's
//     "w/o comm.", which counts every GPU stage, its particle sorting included.
//   - GPU with transfers: Options::host_arrays on pageable std::vector memory, wall clock
//     around set_points + spread/interp (positions and inputs up, the result down): the
//     paper's "w/comm.".
//   - CPU backend on --cpu-threads threads (default: OpenMP's, all the host's cores),
//     wall clock: set_points + spread/interp, and the spread/interp alone. PPM's CPU code
//     needs no binning; pmkit's CPU backend does, so the speedups divide the whole call.
//   - GFLOP/s of the spread/interp alone on the GPU, counted as flops_per_particle says.
//   Accuracy (Fig. 11): relative l2 and linf errors in float and double, CPU and GPU,
//   on resolutions doubling up to Table 2's (2D 64 to 2048 cells across, 3D 16 to 128;
//   the text of the paper does not give Fig. 11's own). The periodic box would put a kink into g at its faces
//   (g is even about 1/2, not periodic), so the accuracy test runs on a bounded grid
//   that reaches 2h past the unit box, with the ghost layers kept (Ghosts::Keep) and g
//   sampled on every stored node: the error is the interpolation's alone.
//
// Barracuda (Larson, Carver and Zhao, "CUDA accelerated Lagrangian interpolation to
// Cartesian grid"), Table 1:
// a "map" spreads 3 double properties in one pass with the 8-point (linear) stencil; a
// time step runs 10 to 20 maps on one binning. 69^3 cells (the paper's 330,000), bounded
// (a reactor has walls: Grid::bounded, ghost contributions folded back), the paper's
// seven particle counts (3.8M to 11.7M, 12 to 36 a cell on average), twice: uniform at
// random, and as a bed whose density falls exponentially with height (up to a few hundred
// a cell at the bottom), the uneven loading (0 to 100+ a cell) of the paper's reactor.
// GPU: set_points, one map, and a step of 10 and of 20 maps after one set_points (device
// arrays, CUDA events); CPU backend: set_points and one map (wall clock), its steps
// composed from them.
//
//   paper_cases [--quick] [--cpu-only] [--cpu-threads N] [--reps N]
// --quick: small sizes, for a smoke run. --cpu-only: no CUDA call at all (the CPU columns
// and the accuracy test on the CPU backend). Exit status 1 on a CUDA or pmkit error or an
// accuracy check outside its bound (printed with the accuracy table), 2 on bad arguments.
// PMKIT_COMMIT (environment) names the commit in the header line.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "bench/paper_figures.cuh"
#include "cuda/runtime.hpp"
#include "pmkit/plan.hpp"

namespace {

using namespace pmkit;
namespace papers = pmkit::bench::papers;

constexpr std::uint64_t kSeed = 20130101;

struct Config {
  bool quick = false;
  bool cpu_only = false;
  int cpu_threads = 0;
  int reps = 0;
  std::string device = "none (--cpu-only)";
};

// ---- timing -----------------------------------------------------------------------------

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t.empty() ? 0.0 : t[t.size() / 2];
}

// Wall clock, ms: the median of `reps` calls after one untimed call.
template <class F>
double wall_ms(int reps, F&& call) {
  call();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return median(t);
}

// Device time, ms, by CUDA events on the default stream (the plans' stream here).
template <class F>
double device_ms(int reps, F&& launch) {
  cuda::EventTimer timer;
  return 1e3 * timer.median_seconds(nullptr, reps, launch);
}

void device_sync() { cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

// ---- particles and meshes -------------------------------------------------------------

// PPM's test function, g(x) = exp(-|x - 1/2|^2 / 15).
double g_exact(const double* x, int dim) {
  double r2 = 0;
  for (int d = 0; d < dim; ++d) r2 += (x[d] - 0.5) * (x[d] - 0.5);
  return std::exp(-r2 / 15.0);
}

template <int D>
std::array<std::int64_t, D> filled(std::int64_t v) {
  std::array<std::int64_t, D> a;
  a.fill(v);
  return a;
}

// Calls f(linear index, multi-index) for every node of `shape`, x fastest.
template <int D, class F>
void for_each_node(const std::array<std::int64_t, D>& shape, F&& f) {
  std::int64_t total = 1;
  for (auto e : shape) total *= e;
  std::array<std::int64_t, D> idx{};
  for (std::int64_t k = 0; k < total; ++k) {
    std::int64_t rest = k;
    for (int d = 0; d < D; ++d) {
      idx[d] = rest % shape[d];
      rest /= shape[d];
    }
    f(k, idx);
  }
}

template <class T, int D>
struct Cloud {
  std::array<std::vector<T>, D> x;
  std::size_t size() const { return x[0].size(); }
  std::array<const T*, D> pointers() const {
    std::array<const T*, D> p;
    for (int d = 0; d < D; ++d) p[d] = x[d].data();
    return p;
  }
  // g at the particle positions as the plan sees them (rounded to T).
  std::vector<T> strengths() const {
    std::vector<T> q(size());
    for (std::size_t p = 0; p < size(); ++p) q[p] = static_cast<T>(g_exact(position(p).data(), D));
    return q;
  }
  std::array<double, D> position(std::size_t p) const {
    std::array<double, D> r;
    for (int d = 0; d < D; ++d) r[d] = static_cast<double>(x[d][p]);
    return r;
  }
};

template <class T, int D>
typename Plan<T, D>::Positions positions(const std::array<const T*, D>& p, std::size_t n) {
  typename Plan<T, D>::Positions v;
  for (int d = 0; d < D; ++d) v[d] = View<const T>(p[d], n);
  return v;
}

// One particle on each node i*h of a lattice of `nodes`^D nodes, every coordinate shifted
// by a uniform random number in [-2h, 2h] (PPM's test, section 6).
template <class T, int D>
Cloud<T, D> lattice_cloud(std::int64_t nodes, double h) {
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> shift(-2 * h, 2 * h);
  Cloud<T, D> c;
  std::int64_t n = 1;
  for (int d = 0; d < D; ++d) n *= nodes;
  for (auto& x : c.x) x.resize(static_cast<std::size_t>(n));
  for_each_node<D>(filled<D>(nodes), [&](std::int64_t k, const std::array<std::int64_t, D>& i) {
    for (int d = 0; d < D; ++d) c.x[d][k] = static_cast<T>(i[d] * h + shift(rng));
  });
  return c;
}

// g on every stored node of a mesh of `shape` whose node 0 sits at `first` in each dimension.
template <class T, int D>
std::vector<T> sample_mesh(const std::array<std::int64_t, D>& shape, double first, double h) {
  std::int64_t total = 1;
  for (auto e : shape) total *= e;
  std::vector<T> mesh(static_cast<std::size_t>(total));
  for_each_node<D>(shape, [&](std::int64_t k, const std::array<std::int64_t, D>& i) {
    double x[D];
    for (int d = 0; d < D; ++d) x[d] = first + i[d] * h;
    mesh[k] = static_cast<T>(g_exact(x, D));
  });
  return mesh;
}

// P2M: particle values onto the mesh; M2P: the mesh onto the particle values.
template <class T, int D>
void interpolate(Plan<T, D>& plan, bool p2m, T* particle_values, std::size_t n, T* mesh, std::size_t m) {
  if (p2m)
    plan.spread({View<const T>(particle_values, n)}, {View<T>(mesh, m)});
  else
    plan.interp({View<const T>(mesh, m)}, {View<T>(particle_values, n)});
}

// ---- output helpers -------------------------------------------------------------------

const char* case_name(const papers::PpmRow& r) {
  static char buf[32];
  std::snprintf(buf, sizeof buf, "%s %-6s %dD %s", r.p2m ? "P2M" : "M2P", r.mp4 ? "M'4" : "linear", r.dim,
                r.double_precision ? "f64" : "f32");
  return buf;
}

// A figure printed by `fmt` (" %W..."), or "-" in the same width W where this run has
// none (the GPU columns of --cpu-only).
void cell(double v, bool have, const char* fmt = " %8.3f") {
  if (have)
    std::printf(fmt, v);
  else
    std::printf(" %*s", std::atoi(std::strchr(fmt, '%') + 1), "-");
}

// ---- PPM: Table 2 -----------------------------------------------------------------------

// Multiply and add operations a particle costs in the interpolation kernel, the only ones
// Table 2 counts; the paper states no count of its own, so this is pmkit's: D*S
// one-dimensional weights (linear 1 flop each, 1 - s; M'4 a cubic by Horner, 3 multiplies
// and 3 adds), D - 1 multiplies a node for the tensor-product weight, and one multiply-add
// a node and property. Linear 2D 16, 3D 38; M'4 2D 96, 3D 328.
double flops_per_particle(bool mp4, int dim, int props) {
  const int s = mp4 ? 4 : 2;
  const double nodes = std::pow(s, dim);
  return dim * s * (mp4 ? 6 : 1) + nodes * (dim - 1) + 2.0 * nodes * props;
}

// Table 2's GFLOP/s for a row: its own, or for a 64-bit row half its 32-bit twin's.
double paper_rate(const papers::PpmRow& row) {
  if (!row.double_precision) return row.gflops;
  for (const papers::PpmRow& r : papers::kPpmTable2)
    if (r.p2m == row.p2m && r.mp4 == row.mp4 && r.dim == row.dim && !r.double_precision) return 0.5 * r.gflops;
  return 0;
}

struct PpmTiming {
  std::size_t particles = 0;
  double gpu_set = 0, gpu_op = 0, gpu_total = 0, gpu_with_transfers = 0;
  double cpu_total = 0, cpu_op = 0;
  std::string method;
};

template <class T, int D>
PpmTiming time_ppm(const papers::PpmRow& row, const Config& cfg) {
  const std::int64_t nodes = D == 2 ? (cfg.quick ? 256 : 2048) : (cfg.quick ? 32 : 128);
  const double h = 1.0 / nodes;
  const Grid<D> grid = Grid<D>::periodic(filled<D>(nodes), h);
  const Kernel kernel = row.mp4 ? Kernel::mp4() : Kernel::linear();
  const Cloud<T, D> cloud = lattice_cloud<T, D>(nodes, h);
  const std::size_t n = cloud.size();
  const auto host_positions = positions<T, D>(cloud.pointers(), n);
  std::vector<T> values = row.p2m ? cloud.strengths() : std::vector<T>(n);
  std::vector<T> mesh = sample_mesh<T, D>(filled<D>(nodes), 0.0, h);
  PpmTiming t;
  t.particles = n;

  Options cpu_options;
  cpu_options.num_threads = cfg.cpu_threads;
  Plan<T, D> cpu(grid, kernel, cpu_options);
  t.cpu_total = wall_ms(cfg.reps, [&] {
    cpu.set_points(host_positions);
    interpolate(cpu, row.p2m, values.data(), n, mesh.data(), mesh.size());
  });
  t.cpu_op = wall_ms(cfg.reps, [&] { interpolate(cpu, row.p2m, values.data(), n, mesh.data(), mesh.size()); });
  if (cfg.cpu_only) return t;

  Options gpu_options;
  gpu_options.backend = Backend::Cuda;
  {
    std::array<cuda::DeviceBuffer<T>, D> x;
    std::array<const T*, D> x_ptr;
    for (int d = 0; d < D; ++d) {
      x[d] = cuda::DeviceBuffer<T>(cloud.x[d], "positions");
      x_ptr[d] = x[d].get();
    }
    cuda::DeviceBuffer<T> values_dev(values, "particle values"), mesh_dev(mesh, "mesh");
    const auto dev_positions = positions<T, D>(x_ptr, n);
    Plan<T, D> gpu(grid, kernel, gpu_options);
    auto run = [&] { interpolate(gpu, row.p2m, values_dev.get(), n, mesh_dev.get(), mesh.size()); };
    t.gpu_set = device_ms(cfg.reps, [&] { gpu.set_points(dev_positions); });
    t.gpu_op = device_ms(cfg.reps, run);
    t.gpu_total = device_ms(cfg.reps, [&] {
      gpu.set_points(dev_positions);
      run();
    });
    if (row.p2m) t.method = gpu.spread_method_name();
  }
  gpu_options.host_arrays = true;
  Plan<T, D> staged(grid, kernel, gpu_options);
  t.gpu_with_transfers = wall_ms(cfg.reps, [&] {
    staged.set_points(host_positions);
    interpolate(staged, row.p2m, values.data(), n, mesh.data(), mesh.size());
    device_sync();
  });
  return t;
}

PpmTiming time_ppm_case(const papers::PpmRow& row, const Config& cfg) {
  if (row.dim == 2) return row.double_precision ? time_ppm<double, 2>(row, cfg) : time_ppm<float, 2>(row, cfg);
  return row.double_precision ? time_ppm<double, 3>(row, cfg) : time_ppm<float, 3>(row, cfg);
}

void print_ppm_table(const Config& cfg) {
  const bool gpu = !cfg.cpu_only;
  std::printf("\nPPM (Buyukkececi, Awile, Sbalzarini 2013), Table 2: pmkit on %s and %d CPU threads;\n"
              "  the paper: %s.\n",
              cfg.device.c_str(), cfg.cpu_threads, papers::kPpmHardware);
  std::printf("  ms, medians of %d runs. set = set_points, op = spread/interp alone, GPU = set + op (device arrays,\n"
              "  CUDA events; the paper's w/o comm. also counts its sorting), GPU+xfer = set + op on host arrays\n"
              "  (wall clock), CPU = set + op and CPUop = op alone on the CPU backend. w/o = CPU / GPU,\n"
              "  w/ = CPU / GPU+xfer, steady = CPUop / op (binning reused); x = pmkit / paper. GFLOP/s: op alone,\n"
              "  multiplies and adds a particle (the paper gives no count; pmkit's: 1D weights, linear 1 flop and\n"
              "  M'4 6 by Horner, D - 1 multiplies a node for the weight, a multiply-add a node): linear 2D %.0f,\n"
              "  3D %.0f; M'4 2D %.0f, 3D %.0f. The paper's 64-bit rates (*) are half its 32-bit ones, as Table 2's\n"
              "  caption states.\n",
              cfg.reps, flops_per_particle(false, 2, 1), flops_per_particle(false, 3, 1), flops_per_particle(true, 2, 1),
              flops_per_particle(true, 3, 1));
  std::printf("%-19s %8s %8s %8s %8s %8s %8s %8s | %6s %5s %6s | %6s %5s %6s | %6s | %7s %7s %5s | %s\n", "case", "N",
              "set", "op", "GPU", "GPU+xfer", "CPU", "CPUop", "w/o", "paper", "x", "w/", "paper", "x", "steady",
              "GFLOP/s", "paper", "x", "spread method");
  for (const papers::PpmRow& row : papers::kPpmTable2) {
    const PpmTiming t = time_ppm_case(row, cfg);
    const double paper_gflops = paper_rate(row);
    const double flops = flops_per_particle(row.mp4, row.dim, 1) * static_cast<double>(t.particles);
    const double gflops = gpu ? flops / (t.gpu_op * 1e-3) / 1e9 : 0;
    const double without = t.cpu_total / t.gpu_total, with = t.cpu_total / t.gpu_with_transfers;
    std::printf("%-19s %8zu", case_name(row), t.particles);
    cell(t.gpu_set, gpu);
    cell(t.gpu_op, gpu);
    cell(t.gpu_total, gpu);
    cell(t.gpu_with_transfers, gpu);
    cell(t.cpu_total, true);
    cell(t.cpu_op, true);
    std::printf(" |");
    cell(without, gpu, " %6.1f");
    std::printf(" %5.1f", row.speedup_without_transfers);
    cell(without / row.speedup_without_transfers, gpu, " %6.2f");
    std::printf(" |");
    cell(with, gpu, " %6.1f");
    std::printf(" %5.1f", row.speedup_with_transfers);
    cell(with / row.speedup_with_transfers, gpu, " %6.2f");
    std::printf(" |");
    cell(t.cpu_op / t.gpu_op, gpu, " %6.1f");
    std::printf(" |");
    cell(gflops, gpu, " %7.1f");
    std::printf(" %6.1f%s", paper_gflops, row.double_precision ? "*" : " ");
    cell(gflops / paper_gflops, gpu, " %5.2f");
    std::printf(" | %s\n", t.method.empty() ? "-" : t.method.c_str());
    std::fflush(stdout);
  }
}

// ---- PPM: Fig. 11 -----------------------------------------------------------------------

// Relative norms of an error: l2 = |e|_2 / |exact|_2, linf = max |e| / max |exact|.
struct ErrorNorms {
  double e2 = 0, r2 = 0, emax = 0, rmax = 0;
  void add(double value, double exact) {
    const double e = value - exact;
    e2 += e * e;
    r2 += exact * exact;
    emax = std::max(emax, std::abs(e));
    rmax = std::max(rmax, std::abs(exact));
  }
  double l2() const { return r2 > 0 ? std::sqrt(e2 / r2) : 0; }
  double linf() const { return rmax > 0 ? emax / rmax : 0; }
};

struct AccuracyRun {
  ErrorNorms error;
  std::vector<double> result;  // what the plan returned, for the GPU-CPU comparison
};

// The Fig. 11 test at n cells across the unit box: particles on its (n+1)^D nodes,
// shifted; the grid is bounded and reaches 2h past the box on every side (so that every
// shifted particle is inside it), with its ghost layers stored. M2P: g sampled on every
// stored node, the error on every particle. P2M: the particles' g spread, the error on
// the nodes of the unit box at least 4h from its faces (the shift and the kernel's reach):
// the nodes every contributing particle exists for.
template <class T, int D>
AccuracyRun accuracy_run(bool p2m, bool mp4, std::int64_t n, Backend backend, int cpu_threads) {
  const double h = 1.0 / n;
  const Kernel kernel = mp4 ? Kernel::mp4() : Kernel::linear();
  const int ghosts = kernel.ghost_width();
  Options options;
  options.backend = backend;
  options.num_threads = cpu_threads;
  options.host_arrays = backend == Backend::Cuda;
  Plan<T, D> plan(Grid<D>::bounded(filled<D>(n + 4), h, -2 * h, Ghosts::Keep), kernel, options);
  const Cloud<T, D> cloud = lattice_cloud<T, D>(n + 1, h);
  const std::size_t np = cloud.size();
  plan.set_points(positions<T, D>(cloud.pointers(), np));
  const auto shape = plan.mesh_shape();
  const double first = -2 * h - ghosts * h;
  std::vector<T> mesh = sample_mesh<T, D>(shape, first, h);
  std::vector<T> values = cloud.strengths();
  interpolate(plan, p2m, values.data(), np, mesh.data(), mesh.size());
  AccuracyRun run;
  if (p2m) {
    const std::int64_t offset = ghosts + 2;  // stored index of the unit box's node 0
    for_each_node<D>(shape, [&](std::int64_t k, const std::array<std::int64_t, D>& i) {
      double x[D];
      for (int d = 0; d < D; ++d) {
        const std::int64_t j = i[d] - offset;
        if (j < 4 || j > n - 4) return;
        x[d] = j * h;
      }
      run.error.add(mesh[k], g_exact(x, D));
    });
    run.result.assign(mesh.begin(), mesh.end());
  } else {
    for (std::size_t p = 0; p < np; ++p) run.error.add(values[p], g_exact(cloud.position(p).data(), D));
    run.result.assign(values.begin(), values.end());
  }
  return run;
}

// max |gpu - cpu| / max |cpu|.
double relative_difference(const std::vector<double>& gpu, const std::vector<double>& cpu) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    diff = std::max(diff, std::abs(gpu[i] - cpu[i]));
    scale = std::max(scale, std::abs(cpu[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// The bounds the accuracy checks hold the runs to.
constexpr double kOrderSlack = 0.3;          // measured l2 order >= expected order - this
constexpr double kFloatTolerance = 1e-5;     // float linf <= double linf + this (the paper: 1e-6 to 1e-5)
constexpr double kAgreementFloat = 1e-5;     // GPU vs CPU, max difference / max value
constexpr double kAgreementDouble = 1e-10;

struct AccuracyLevel {
  AccuracyRun cpu[2], gpu[2];  // [0] float, [1] double
};

template <int D>
AccuracyLevel accuracy_level(bool p2m, bool mp4, std::int64_t n, const Config& cfg) {
  AccuracyLevel level;
  level.cpu[0] = accuracy_run<float, D>(p2m, mp4, n, Backend::Cpu, cfg.cpu_threads);
  level.cpu[1] = accuracy_run<double, D>(p2m, mp4, n, Backend::Cpu, cfg.cpu_threads);
  if (!cfg.cpu_only) {
    level.gpu[0] = accuracy_run<float, D>(p2m, mp4, n, Backend::Cuda, 0);
    level.gpu[1] = accuracy_run<double, D>(p2m, mp4, n, Backend::Cuda, 0);
  }
  return level;
}

// Prints the Fig. 11 table; returns the number of checks outside their bounds.
int print_accuracy_table(const Config& cfg) {
  const bool gpu = !cfg.cpu_only;
  std::printf("\nPPM, Fig. 11 (the paper's errors: CPU and GPU identical, M'4 order 3, linear order 2,\n"
              "  float flat at 1e-6 to 1e-5): relative l2 and linf errors of g after interpolation; pmkit's CPU\n"
              "  backend and its GPU backend on %s (host arrays). M2P: error on the particles.\n"
              "  P2M: error on the nodes as section 6 defines it; with particles shifted independently at\n"
              "  random, the weights a node receives do not sum to 1, so that error is the positions' sampling\n"
              "  noise and is not expected to fall with h (its rows are checked for GPU-CPU agreement only).\n"
              "  order: log2 of the double CPU l2 error's ratio to the next coarser row. Checks: M2P double\n"
              "  order at the finest pair >= expected - %.1f; M2P float linf <= double linf + %.0e; GPU vs\n"
              "  CPU max |difference| / max |value| <= %.0e (float), %.0e (double).\n",
              cfg.device.c_str(), kOrderSlack, kFloatTolerance, kAgreementFloat, kAgreementDouble);
  std::printf("%-16s %5s %9s | %9s %9s %9s %9s | %9s %9s %9s %9s | %5s | %8s %8s\n", "case", "n", "N", "f32 CPU l2",
              "linf", "GPU l2", "linf", "f64 CPU l2", "linf", "GPU l2", "linf", "order", "GPU-CPU", "f64");
  const std::vector<std::int64_t> ladder2 =
      cfg.quick ? std::vector<std::int64_t>{64, 128, 256} : std::vector<std::int64_t>{64, 128, 256, 512, 1024, 2048};
  const std::vector<std::int64_t> ladder3 =
      cfg.quick ? std::vector<std::int64_t>{16, 32, 64} : std::vector<std::int64_t>{16, 32, 64, 128};
  int failures = 0;
  auto fail = [&](const char* what, const char* name, std::int64_t n, double value, double bound) {
    std::printf("  CHECK FAILED: %s, %s n=%lld: %.3e (bound %.3e)\n", what, name, static_cast<long long>(n), value,
                bound);
    ++failures;
  };
  for (int dim : {2, 3})
    for (bool p2m : {false, true})
      for (bool mp4 : {false, true}) {
        char name[32];
        std::snprintf(name, sizeof name, "%s %-6s %dD", p2m ? "P2M" : "M2P", mp4 ? "M'4" : "linear", dim);
        const double expected_order = mp4 ? 3 : 2;
        double coarser_l2 = 0, order = 0;
        const auto& ladder = dim == 2 ? ladder2 : ladder3;
        for (std::int64_t n : ladder) {
          const AccuracyLevel a = dim == 2 ? accuracy_level<2>(p2m, mp4, n, cfg) : accuracy_level<3>(p2m, mp4, n, cfg);
          const double l2 = a.cpu[1].error.l2();
          order = coarser_l2 > 0 && l2 > 0 ? std::log2(coarser_l2 / l2) : 0;
          const double diff_f = gpu ? relative_difference(a.gpu[0].result, a.cpu[0].result) : 0;
          const double diff_d = gpu ? relative_difference(a.gpu[1].result, a.cpu[1].result) : 0;
          const double particles = std::pow(static_cast<double>(n + 1), dim);
          std::printf("%-16s %5lld %9.0f |", name, static_cast<long long>(n), particles);
          for (int precision : {0, 1}) {
            cell(a.cpu[precision].error.l2(), true, " %9.2e");
            cell(a.cpu[precision].error.linf(), true, " %9.2e");
            cell(a.gpu[precision].error.l2(), gpu, " %9.2e");
            cell(a.gpu[precision].error.linf(), gpu, " %9.2e");
            std::printf(" |");
          }
          cell(order, coarser_l2 > 0, " %5.2f");
          std::printf(" |");
          cell(diff_f, gpu, " %8.1e");
          cell(diff_d, gpu, " %8.1e");
          std::printf("\n");
          std::fflush(stdout);
          coarser_l2 = l2;
          if (diff_f > kAgreementFloat) fail("GPU-CPU difference, float", name, n, diff_f, kAgreementFloat);
          if (diff_d > kAgreementDouble) fail("GPU-CPU difference, double", name, n, diff_d, kAgreementDouble);
          const double float_bound = a.cpu[1].error.linf() + kFloatTolerance;
          if (!p2m && a.cpu[0].error.linf() > float_bound)
            fail("float linf error", name, n, a.cpu[0].error.linf(), float_bound);
          if (!p2m && gpu && a.gpu[0].error.linf() > float_bound)
            fail("float linf error (GPU)", name, n, a.gpu[0].error.linf(), float_bound);
        }
        if (!p2m && order < expected_order - kOrderSlack)
          fail("double l2 order at the finest pair", name, ladder.back(), order, expected_order - kOrderSlack);
      }
  std::printf("accuracy checks: %s\n", failures ? "FAILED (see above)" : "all within their bounds");
  return failures;
}

// ---- Barracuda: Table 1 ----------------------------------------------------------------

constexpr int kProps = 3;

struct BarracudaTiming {
  std::size_t particles = 0;
  double cells = 0;
  std::size_t densest = 0;  // particles in the fullest cell
  double gpu_set = 0, gpu_map = 0, gpu_step10 = 0, gpu_step20 = 0;
  double cpu_set = 0, cpu_map = 0;
};

// One map: the 3 properties spread in one pass.
void map3(Plan<double, 3>& plan, const std::array<const double*, kProps>& props, std::size_t n,
          const std::array<double*, kProps>& meshes, std::size_t m) {
  plan.spread({View<const double>(props[0], n), View<const double>(props[1], n), View<const double>(props[2], n)},
              {View<double>(meshes[0], m), View<double>(meshes[1], m), View<double>(meshes[2], m)});
}

// How the particles fill the reactor: uniformly, or as a bed, dense at the bottom.
enum class Loading { Uniform, Bed };
// The bed's density falls as exp(-z / this) with height z in cells: with 11.7M particles
// on 69^3 cells, about 250 a cell at the bottom and under 1 at the top (the paper's 0 to
// 100+ a cell).
constexpr double kBedHeightCells = 10;

BarracudaTiming time_barracuda(const papers::BarracudaRow& row, Loading loading, const Config& cfg) {
  const std::int64_t cells = cfg.quick ? 23 : 69;
  const double scale = std::pow(cells / 69.0, 3);  // --quick keeps the particles a cell
  const auto n = static_cast<std::size_t>(std::llround(row.particles_m * 1e6 * scale));
  const Grid3 grid = Grid3::bounded(filled<3>(cells));
  const Kernel kernel = Kernel::linear();
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> where(0.0, static_cast<double>(cells)), what(0.5, 1.5);
  std::array<std::vector<double>, 3> x;
  std::array<std::vector<double>, kProps> props;
  for (auto& v : x) v.resize(n);
  for (auto& v : props) v.resize(n);
  // The bed's heights by inverting the truncated exponential's distribution function.
  const double bed_tail = 1 - std::exp(-static_cast<double>(cells) / kBedHeightCells);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t p = 0; p < n; ++p) {
    for (auto& v : x) v[p] = where(rng);
    if (loading == Loading::Bed)
      x[2][p] = std::min(-kBedHeightCells * std::log1p(-unit(rng) * bed_tail), static_cast<double>(cells));
    for (auto& v : props) v[p] = what(rng);
  }
  BarracudaTiming t;
  t.particles = n;
  t.cells = std::pow(static_cast<double>(cells), 3);
  std::vector<std::size_t> per_cell(static_cast<std::size_t>(t.cells));
  for (std::size_t p = 0; p < n; ++p) {
    std::int64_t c = 0;
    for (int d = 2; d >= 0; --d) c = c * cells + std::min<std::int64_t>(static_cast<std::int64_t>(x[d][p]), cells - 1);
    t.densest = std::max(t.densest, ++per_cell[static_cast<std::size_t>(c)]);
  }

  Options cpu_options;
  cpu_options.num_threads = cfg.cpu_threads;
  Plan<double, 3> cpu(grid, kernel, cpu_options);
  const std::size_t m = static_cast<std::size_t>(cpu.mesh_size());
  std::array<std::vector<double>, kProps> meshes;
  std::array<double*, kProps> mesh_ptr;
  std::array<const double*, kProps> prop_ptr;
  for (int i = 0; i < kProps; ++i) {
    meshes[i].resize(m);
    mesh_ptr[i] = meshes[i].data();
    prop_ptr[i] = props[i].data();
  }
  const auto host_positions = positions<double, 3>({x[0].data(), x[1].data(), x[2].data()}, n);
  t.cpu_set = wall_ms(cfg.reps, [&] { cpu.set_points(host_positions); });
  t.cpu_map = wall_ms(cfg.reps, [&] { map3(cpu, prop_ptr, n, mesh_ptr, m); });
  if (cfg.cpu_only) return t;

  std::array<cuda::DeviceBuffer<double>, 3> x_dev;
  std::array<cuda::DeviceBuffer<double>, kProps> props_dev, meshes_dev;
  for (int d = 0; d < 3; ++d) x_dev[d] = cuda::DeviceBuffer<double>(x[d], "positions");
  for (int i = 0; i < kProps; ++i) {
    props_dev[i] = cuda::DeviceBuffer<double>(props[i], "properties");
    meshes_dev[i] = cuda::DeviceBuffer<double>(m, "meshes");
    prop_ptr[i] = props_dev[i].get();
    mesh_ptr[i] = meshes_dev[i].get();
  }
  const auto dev_positions = positions<double, 3>({x_dev[0].get(), x_dev[1].get(), x_dev[2].get()}, n);
  Options gpu_options;
  gpu_options.backend = Backend::Cuda;
  Plan<double, 3> gpu(grid, kernel, gpu_options);
  auto step = [&](int maps) {
    gpu.set_points(dev_positions);
    for (int k = 0; k < maps; ++k) map3(gpu, prop_ptr, n, mesh_ptr, m);
  };
  t.gpu_set = device_ms(cfg.reps, [&] { step(0); });
  t.gpu_map = device_ms(cfg.reps, [&] { map3(gpu, prop_ptr, n, mesh_ptr, m); });
  t.gpu_step10 = device_ms(cfg.reps, [&] { step(10); });
  t.gpu_step20 = device_ms(cfg.reps, [&] { step(20); });
  return t;
}

// pmkit's GPU against its CPU backend on one loading of the reactor.
void print_barracuda_pmkit(const std::vector<BarracudaTiming>& runs, const char* loading, const Config& cfg) {
  const bool gpu = !cfg.cpu_only;
  const int cells = static_cast<int>(std::lround(std::cbrt(runs.front().cells)));
  std::printf("\nBarracuda (Larson, Carver, Zhao), Table 1, %s: one map = 3 double properties spread\n"
              "  in one pass, linear (8-point) stencil, %d^3 bounded cells; pmkit on %s and %d CPU threads.\n"
              "  ms, medians of %d runs. GPU: device arrays, CUDA events; step N = one set_points + N maps, timed\n"
              "  together; per map = step 10 / 10. CPU backend: wall clock, its steps = set + N * map.\n"
              "  speedup = CPU per map / GPU per map, both on 10-map steps. a cell: mean and fullest.\n",
              loading, cells, cfg.device.c_str(), cfg.cpu_threads, cfg.reps);
  std::printf("%9s %6s %6s | %8s %8s %8s %8s %8s | %8s %8s %8s %8s | %7s\n", "particles", "a cell", "max", "set",
              "map", "step 10", "step 20", "per map", "CPU set", "CPU map", "step 10", "per map", "speedup");
  for (const BarracudaTiming& t : runs) {
    const double cpu_step10 = t.cpu_set + 10 * t.cpu_map;
    std::printf("%9zu %6.1f %6zu |", t.particles, t.particles / t.cells, t.densest);
    cell(t.gpu_set, gpu);
    cell(t.gpu_map, gpu);
    cell(t.gpu_step10, gpu);
    cell(t.gpu_step20, gpu);
    cell(t.gpu_step10 / 10, gpu);
    std::printf(" |");
    cell(t.cpu_set, true);
    cell(t.cpu_map, true);
    cell(cpu_step10, true);
    cell(cpu_step10 / 10, true);
    std::printf(" |");
    cell(cpu_step10 / t.gpu_step10, gpu, " %7.1f");
    std::printf("\n");
  }
}

// pmkit beside the paper's Table 1, row by row (the same particle counts).
void print_barracuda_paper(const std::vector<BarracudaTiming>& runs, const char* loading, const Config& cfg) {
  const bool gpu = !cfg.cpu_only;
  std::printf("\n  %s, beside the paper:\n  %s.\n"
              "  Its map (Corners) excludes the sort; its per-map figure charges a tenth of the sort (map + 0.1 sort,\n"
              "  the paper's speed-up formula), like pmkit's step 10 / 10. Its CPU is one core, pmkit's %d threads.\n"
              "  x = paper / pmkit (how many times less time pmkit takes).\n",
              loading, papers::kBarracudaHardware, cfg.cpu_threads);
  std::printf("%9s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s | %7s %7s\n", "particles", "map", "paper", "x",
              "per map", "paper", "x", "CPU map", "paper", "x", "speedup", "paper");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const BarracudaTiming& t = runs[i];
    const papers::BarracudaRow& p = papers::kBarracudaTable1[i];
    const double paper_per_map = p.corners_k40c_ms + papers::kBarracudaSortShare * p.sort_ms;
    const double cpu_per_map = (t.cpu_set + 10 * t.cpu_map) / 10;
    std::printf("%8.1fM |", t.particles / 1e6);
    cell(t.gpu_map, gpu);
    std::printf(" %8.1f", p.corners_k40c_ms);
    cell(p.corners_k40c_ms / t.gpu_map, gpu, " %6.1f");
    std::printf(" |");
    cell(t.gpu_step10 / 10, gpu);
    std::printf(" %8.2f", paper_per_map);
    cell(paper_per_map / (t.gpu_step10 / 10), gpu, " %6.1f");
    std::printf(" |");
    cell(t.cpu_map, true);
    std::printf(" %8.1f %6.1f |", p.cpu_ms, p.cpu_ms / t.cpu_map);
    cell(cpu_per_map / (t.gpu_step10 / 10), gpu, " %7.1f");
    std::printf(" %7.1f\n", p.cpu_ms / paper_per_map);
  }
}

void print_barracuda_tables(const Config& cfg) {
  for (Loading loading : {Loading::Uniform, Loading::Bed}) {
    std::vector<BarracudaTiming> runs;
    for (const papers::BarracudaRow& row : papers::kBarracudaTable1) runs.push_back(time_barracuda(row, loading, cfg));
    char name[96];
    if (loading == Loading::Uniform)
      std::snprintf(name, sizeof name, "uniform random particles");
    else
      std::snprintf(name, sizeof name, "a bed (density exp(-height / %.0f cells))", kBedHeightCells);
    print_barracuda_pmkit(runs, name, cfg);
    print_barracuda_paper(runs, name, cfg);
    std::fflush(stdout);
  }
}

// ---- main -------------------------------------------------------------------------------

int usage() {
  std::fprintf(stderr, "usage: paper_cases [--quick] [--cpu-only] [--cpu-threads N] [--reps N]\n");
  return 2;
}

// A positive integer argument, or 0 if `text` is not one.
int positive(const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return (end != text && *end == '\0' && v > 0 && v <= 1 << 20) ? static_cast<int>(v) : 0;
}

void print_header(const Config& cfg) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const char* commit = std::getenv("PMKIT_COMMIT");
  std::printf("paper_cases: device %s | CPU threads %d (host: %u hardware threads) | %s | commit %s%s\n",
              cfg.device.c_str(), cfg.cpu_threads, std::thread::hardware_concurrency(), date,
              commit && *commit ? commit : "unknown", cfg.quick ? " | --quick sizes" : "");
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cfg.quick = true;
    } else if (a == "--cpu-only") {
      cfg.cpu_only = true;
    } else if ((a == "--cpu-threads" || a == "--reps") && i + 1 < argc) {
      const int v = positive(argv[++i]);
      if (!v) return usage();
      (a == "--reps" ? cfg.reps : cfg.cpu_threads) = v;
    } else {
      return usage();
    }
  }
  if (!cfg.reps) cfg.reps = cfg.quick ? 3 : 10;
#if defined(_OPENMP)
  if (!cfg.cpu_threads) cfg.cpu_threads = omp_get_max_threads();
#else
  if (!cfg.cpu_threads) cfg.cpu_threads = 1;
#endif
  try {
    if (!cfg.cpu_only) {
      cudaDeviceProp prop{};
      cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
      cfg.device = prop.name;
    }
    print_header(cfg);
    print_ppm_table(cfg);
    const int failures = print_accuracy_table(cfg);
    print_barracuda_tables(cfg);
    if (!cfg.cpu_only) device_sync();
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "paper_cases: %s\n", e.what());
    return 1;
  }
}
