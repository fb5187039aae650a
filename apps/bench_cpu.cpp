// `pmkit bench`: the CPU backend against a plain OpenMP baseline on the same input.
//
// The baseline is what one writes first: one parallel loop over the particles in the
// order given, each adding its S^3 weighted contributions to the mesh with
// `#pragma omp atomic` (P2M), or summing them (M2P). Its weights come from the same
// shared stencil as pmkit's (pmkit/detail/stencil.hpp), so the two differ only in how they
// organise the work: pmkit bins the particles once (set_points) and spreads slab by
// slab without atomics.
//
// A float spread sums in double (cpu/cpu_backend.hpp). Its cost is shown against the
// same backend summing in float (CpuBackend<float, 3, float>, built here only).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "pmkit/detail/layout.hpp"
#include "pmkit/detail/stencil.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/openmp.hpp"
#include "pmkit/pmkit.hpp"

namespace pmkit::cli {
namespace {

const char* const kBenchUsage =
    "usage: pmkit bench [options]\n"
    "\n"
    "Times the CPU backend against a plain OpenMP baseline (one loop over the unsorted\n"
    "particles, `omp atomic` adds for P2M, a gather for M2P, weights from the same\n"
    "shared stencil) on uniform random particles in a periodic 3D box:\n"
    "  P2M  mp4 and linear at 1 and 8 particles per cell: set_points and spread of\n"
    "       pmkit, the baseline spread, their ratios, and the difference of the meshes;\n"
    "  M2P  mp4 at 1 particle per cell: interp of pmkit and the baseline gather at\n"
    "       1, 2, 4, ... threads up to the OpenMP maximum, with the speedups.\n"
    "Times are medians over the repetitions, after one warm-up, on the steady clock.\n"
    "Exits with 1 if pmkit and the baseline disagree (relative L2 >= 1e-5).\n"
    "\n"
    "options:\n"
    "  --particles N        particles per case (default 2^21; 1e6 and 2^20 work too);\n"
    "                       the mesh has round(cbrt(N / ppc)) cells per dimension\n"
    "  --reps R             timed repetitions (default 5)\n"
    "  --threads T          threads of the P2M cases (default: OpenMP's default); also\n"
    "                       the largest thread count of the M2P scaling\n"
    "  --precision P        float|double (default float)\n"
    "  --seed S             random seed (default 1)\n"
    "  --pairs D            also time the cutoff pair interactions (Lennard-Jones, float):\n"
    "                       D^3 cells of width = cutoff, 1, 10 and 100 particles per cell,\n"
    "                       half and full shell (0 = skip, the default; else 2 to 64)\n"
    "  -h, --help           this text\n";

struct BenchOptions {
  std::int64_t particles = std::int64_t(1) << 21;
  int reps = 5;
  int threads = 0;
  std::string precision = "float";
  std::uint64_t seed = 1;
  int pair_cells = 0;  // --pairs D: D^3 cells
};

constexpr double kAgreement = 1e-5;
// Extra time of the double sums over float sums above which the output names the case.
constexpr double kSumCostNote = 1.15;

template <class T>
struct Particles {
  std::array<std::vector<T>, 3> x;
  std::vector<T> q;
  std::size_t size() const { return q.size(); }
  typename Plan<T, 3>::Positions positions() const {
    return {View<const T>(x[0]), View<const T>(x[1]), View<const T>(x[2])};
  }
};

// Uniform in the periodic box [0, cells)^3 (spacing 1), charges uniform in [0.5, 1.5).
template <class T>
Particles<T> random_particles(std::size_t n, std::int64_t cells, std::uint64_t seed) {
  Particles<T> p;
  for (auto& xd : p.x) xd.resize(n);
  p.q.resize(n);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> box(0.0, static_cast<double>(cells)), unit(0.5, 1.5);
  for (std::size_t i = 0; i < n; ++i) {
    for (auto& xd : p.x) xd[i] = static_cast<T>(box(rng));
    p.q[i] = static_cast<T>(unit(rng));
  }
  return p;
}

// Where particle i lands, from the shared stencil code (no binning kept).
template <class K, class T>
inline void locate(const detail::Layout<3>& L, const Particles<T>& p, std::int64_t i, int (&base)[3],
                   T (&s)[3]) {
  double u[3];
  for (int d = 0; d < 3; ++d) L.axis[d].coordinate(static_cast<double>(p.x[d][i]), u[d]);
  detail::locate_particle<K, 3>(u, base, s);
}

// Baseline P2M: zero the mesh, then every particle adds its contributions atomically.
template <class K, class T>
void baseline_spread(const detail::Layout<3>& L, const Particles<T>& p, T* mesh,
                     [[maybe_unused]] int threads) {
  const auto n = static_cast<std::int64_t>(p.size());
  const std::int64_t size = L.size;
  const T* q = p.q.data();
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < size; ++i) mesh[i] = T(0);
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      int base[3];
      T s[3];
      locate<K>(L, p, i, base, s);
      const T qi = q[i];
      detail::for_each_node<K, 3>(L, base, s, [&](std::int64_t idx, T w) {
#pragma omp atomic
        mesh[idx] += qi * w;
      });
    }
  }
}

// Baseline M2P: a gather per particle, in the caller's order.
template <class K, class T>
void baseline_gather(const detail::Layout<3>& L, const Particles<T>& p, const T* mesh, T* out,
                     [[maybe_unused]] int threads) {
  const auto n = static_cast<std::int64_t>(p.size());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    int base[3];
    T s[3];
    locate<K>(L, p, i, base, s);
    T acc = 0;
    detail::for_each_node<K, 3>(L, base, s, [&](std::int64_t idx, T w) { acc += w * mesh[idx]; });
    out[i] = acc;
  }
}

// ||a - b|| / ||b||, in double.
template <class T>
double relative_l2(const std::vector<T>& a, const std::vector<T>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Median seconds of `reps` calls of f after one warm-up call.
template <class F>
double timed(int reps, F&& f) {
  f();
  std::vector<double> t(static_cast<std::size_t>(reps));
  for (auto& ti : t) ti = seconds(f);
  return median(t);
}

std::int64_t cells_for(std::int64_t particles, int ppc) {
  const auto c = static_cast<std::int64_t>(std::llround(std::cbrt(static_cast<double>(particles) / ppc)));
  return std::max<std::int64_t>(c, 4);
}

// A float spread's time with the backend's double sums and with float sums.
struct SumCost {
  std::string method;
  double double_sums, float_sums;
};

struct SpreadRow {
  std::string kernel;
  std::int64_t cells;
  double ppc;
  double set_points, spread, baseline, rel_l2;
  double private_spread, private_rel_l2;  // the CpuPrivateMeshes method on the same points
  std::string method;         // Auto's choice
  std::vector<SumCost> sums;  // float only: each method summing in double and in float
};

struct InterpRow {
  int threads;
  double pmkit, baseline, rel_l2;
};

// Median seconds of f and of g over `reps` calls each, alternated after one warm-up
// of each, so that both see the same load on a shared machine.
template <class F, class G>
std::array<double, 2> timed_alternating(int reps, F&& f, G&& g) {
  f();
  g();
  std::vector<double> tf(static_cast<std::size_t>(reps)), tg(tf.size());
  for (std::size_t k = 0; k < tf.size(); ++k) {
    tf[k] = seconds(f);
    tg[k] = seconds(g);
  }
  return {median(tf), median(tg)};
}

// The float spread of `method` by the CPU backend summing in double (the plan's) and
// summing in float (CpuBackend<float, 3, float>), on the same points.
SumCost sum_cost(const BenchOptions& o, const Grid<3>& grid, const Kernel& kernel, Options opt,
                 SpreadMethod method, const Particles<float>& p) {
  opt.spread_method = method;
  Plan<float, 3> plan(grid, kernel, opt);
  plan.set_points(p.positions());
  cpu::CpuBackend<float, 3, float> float_sums(grid, kernel, opt);
  float_sums.set_points(p.size(), p.positions());
  std::vector<float> a(static_cast<std::size_t>(plan.mesh_size())), b(a.size());
  const View<const float> q(p.q);
  const View<float> mesh(b);
  const auto t = timed_alternating(
      o.reps, [&] { plan.spread({q}, {View<float>(a)}); },
      [&] { float_sums.spread(Span<View<const float>>(&q, 1), Span<View<float>>(&mesh, 1), Accumulate::Overwrite); });
  return {plan.spread_method_name(), t[0], t[1]};
}

template <class T>
SpreadRow spread_case(const BenchOptions& o, const Kernel& kernel, int ppc, int threads) {
  const std::int64_t cells = cells_for(o.particles, ppc);
  const Grid<3> grid = Grid<3>::periodic({cells, cells, cells});
  const Particles<T> p = random_particles<T>(static_cast<std::size_t>(o.particles), cells, o.seed);
  Options opt;
  opt.num_threads = threads;
  Plan<T, 3> plan(grid, kernel, opt);
  const detail::Layout<3> L = detail::make_layout(grid, kernel.ghost_width());
  std::vector<T> mesh(static_cast<std::size_t>(plan.mesh_size())), base_mesh(mesh.size());

  SpreadRow r{kernel.name(), cells, static_cast<double>(o.particles) / static_cast<double>(cells * cells * cells),
              0, 0, 0, 0, 0, 0, "", {}};
  const auto positions = p.positions();
  r.set_points = timed(o.reps, [&] { plan.set_points(positions); });
  r.spread = timed(o.reps, [&] { plan.spread({View<const T>(p.q)}, {View<T>(mesh)}); });
  kernels::dispatch(kernel, [&](auto k) {
    using K = decltype(k);
    r.baseline = timed(o.reps, [&] { baseline_spread<K>(L, p, base_mesh.data(), threads); });
  });
  r.rel_l2 = relative_l2(base_mesh, mesh);
  {  // The other race-free method: private meshes per thread, summed.
    Options private_opt = opt;
    private_opt.spread_method = SpreadMethod::CpuPrivateMeshes;
    Plan<T, 3> private_plan(grid, kernel, private_opt);
    private_plan.set_points(positions);
    std::vector<T> private_mesh(mesh.size());
    r.private_spread = timed(o.reps, [&] { private_plan.spread({View<const T>(p.q)}, {View<T>(private_mesh)}); });
    r.private_rel_l2 = relative_l2(base_mesh, private_mesh);
  }
  r.method = plan.spread_method_name();
  if constexpr (std::is_same<T, float>::value)
    for (SpreadMethod method : {SpreadMethod::CpuSlabs, SpreadMethod::CpuPrivateMeshes})
      r.sums.push_back(sum_cost(o, grid, kernel, opt, method, p));
  std::printf("  P2M %-6s %4lld^3 mesh, %5.2f ppc: set_points %8.2f ms, spread %8.2f ms (%s), "
              "baseline %8.2f ms, rel L2 %.1e\n",
              r.kernel.c_str(), static_cast<long long>(cells), r.ppc, 1e3 * r.set_points, 1e3 * r.spread,
              plan.spread_method_name().c_str(), 1e3 * r.baseline, r.rel_l2);
  std::fflush(stdout);
  return r;
}

template <class T>
std::vector<InterpRow> interp_scaling(const BenchOptions& o, const Kernel& kernel, int ppc,
                                      int max_threads) {
  const std::int64_t cells = cells_for(o.particles, ppc);
  const Grid<3> grid = Grid<3>::periodic({cells, cells, cells});
  const Particles<T> p = random_particles<T>(static_cast<std::size_t>(o.particles), cells, o.seed);
  const detail::Layout<3> L = detail::make_layout(grid, kernel.ghost_width());
  std::vector<T> mesh(static_cast<std::size_t>(L.size));
  std::mt19937_64 rng(o.seed + 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (auto& v : mesh) v = static_cast<T>(unit(rng));

  std::vector<int> counts;
  for (int t = 1; t < max_threads; t *= 2) counts.push_back(t);
  counts.push_back(max_threads);

  std::vector<InterpRow> rows;
  std::vector<T> values(p.size()), base_values(p.size());
  for (int t : counts) {
    Options opt;
    opt.num_threads = t;
    Plan<T, 3> plan(grid, kernel, opt);
    plan.set_points(p.positions());
    InterpRow r{t, 0, 0, 0};
    r.pmkit = timed(o.reps, [&] { plan.interp({View<const T>(mesh)}, {View<T>(values)}); });
    kernels::dispatch(kernel, [&](auto k) {
      using K = decltype(k);
      r.baseline = timed(o.reps, [&] { baseline_gather<K>(L, p, mesh.data(), base_values.data(), t); });
    });
    r.rel_l2 = relative_l2(base_values, values);
    std::printf("  M2P %-6s %4lld^3 mesh, %2d threads: interp %8.2f ms, baseline gather %8.2f ms, "
                "rel L2 %.1e\n",
                kernel.name().c_str(), static_cast<long long>(cells), t, 1e3 * r.pmkit, 1e3 * r.baseline,
                r.rel_l2);
    std::fflush(stdout);
    rows.push_back(r);
  }
  return rows;
}

// Float spreads: sums in double (pmkit) against sums in float per method, and the
// cases where the double sums cost more than kSumCostNote.
void print_sum_cost(const std::vector<SpreadRow>& rows) {
  std::printf("\nP2M float, sums in double (pmkit) against sums in float: times in ms, alternated; "
              "cost = double / float; * = Auto's method\n");
  std::printf("%-7s %5s | %-19s | %8s %8s | %6s\n", "kernel", "ppc", "method", "double", "float", "cost");
  std::string costly;
  for (const SpreadRow& r : rows)
    for (const SumCost& c : r.sums) {
      const double cost = c.double_sums / c.float_sums;
      std::printf("%-7s %5.2f | %-18s%s | %8.2f %8.2f | %6.2f\n", r.kernel.c_str(), r.ppc, c.method.c_str(),
                  c.method == r.method ? "*" : " ", 1e3 * c.double_sums, 1e3 * c.float_sums, cost);
      if (cost > kSumCostNote) {
        char line[128];
        std::snprintf(line, sizeof line, "%s%s %s at %.2f ppc (%.2fx)", costly.empty() ? "" : "; ",
                      c.method.c_str(), r.kernel.c_str(), r.ppc, cost);
        costly += line;
      }
    }
  if (costly.empty())
    std::printf("double sums within %.0f%% of float sums in every case\n", 100 * (kSumCostNote - 1));
  else
    std::printf("double sums cost more than %.0f%% over float sums (they stay the default): %s\n",
                100 * (kSumCostNote - 1), costly.c_str());
}

template <class T>
int bench(const BenchOptions& o) {
  const int threads = o.threads > 0 ? o.threads : cpu::default_threads();
  std::printf("pmkit bench: CPU backend against an OpenMP atomic baseline; 3D, %s, periodic, "
              "%lld particles, %d threads (OpenMP default %d), median of %d after 1 warm-up\n",
              o.precision.c_str(), static_cast<long long>(o.particles), threads, cpu::default_threads(),
              o.reps);
  std::fflush(stdout);

  std::vector<SpreadRow> spread_rows;
  for (const Kernel& k : {Kernel::mp4(), Kernel::linear()})
    for (int ppc : {1, 8}) spread_rows.push_back(spread_case<T>(o, k, ppc, threads));
  const Kernel m2p_kernel = Kernel::mp4();
  const std::vector<InterpRow> interp_rows = interp_scaling<T>(o, m2p_kernel, 1, threads);

  bool ok = true;
  std::printf("\nP2M: times in ms; ratio = baseline time / pmkit time (above 1: pmkit is faster); "
              "spread = pmkit with Auto (its choice is named in the lines above); private = CpuPrivateMeshes forced\n");
  std::printf("%-7s %-6s %5s | %10s %8s %9s | %12s %19s | %7s | %8s %7s\n", "kernel", "mesh", "ppc", "set_points",
              "spread", "baseline", "ratio spread", "ratio set+spread", "rel L2", "private", "ratio");
  for (const SpreadRow& r : spread_rows) {
    const std::string mesh = std::to_string(r.cells) + "^3";
    std::printf("%-7s %-6s %5.2f | %10.2f %8.2f %9.2f | %12.2f %19.2f | %7.1e | %8.2f %7.2f%s\n", r.kernel.c_str(),
                mesh.c_str(), r.ppc, 1e3 * r.set_points, 1e3 * r.spread, 1e3 * r.baseline,
                r.baseline / r.spread, r.baseline / (r.set_points + r.spread), r.rel_l2, 1e3 * r.private_spread,
                r.baseline / r.private_spread,
                r.rel_l2 < kAgreement && r.private_rel_l2 < kAgreement ? "" : "  MISMATCH");
    ok = ok && r.rel_l2 < kAgreement && r.private_rel_l2 < kAgreement;
  }
  const std::int64_t m2p_cells = cells_for(o.particles, 1);
  std::printf("\nM2P %s, %lld^3 mesh: interp in ms; speedup = time at 1 thread / time; "
              "ratio = baseline / pmkit\n",
              m2p_kernel.name().c_str(), static_cast<long long>(m2p_cells));
  std::printf("%7s | %8s %8s | %8s %8s | %6s | %7s\n", "threads", "pmkit", "speedup", "baseline", "speedup",
              "ratio", "rel L2");
  for (const InterpRow& r : interp_rows) {
    std::printf("%7d | %8.2f %8.2f | %8.2f %8.2f | %6.2f | %7.1e%s\n", r.threads, 1e3 * r.pmkit,
                interp_rows[0].pmkit / r.pmkit, 1e3 * r.baseline, interp_rows[0].baseline / r.baseline,
                r.baseline / r.pmkit, r.rel_l2, r.rel_l2 < kAgreement ? "" : "  MISMATCH");
    ok = ok && r.rel_l2 < kAgreement;
  }
  if (std::is_same<T, float>::value) print_sum_cost(spread_rows);
  std::printf("\npmkit and baseline %s (relative L2 %s 1e-5 in every case)\n", ok ? "agree" : "DISAGREE",
              ok ? "<" : "not <");
  return ok ? 0 : 1;
}

// Cutoff pairs: one compute of Lennard-Jones on D^3 periodic cells of width = cutoff,
// uniform particles, half and full shell, with pair checks per second (every particle
// against the particles of its 27 cells, the count the cell list scans).
void pair_bench(const BenchOptions& o) {
  const int d = o.pair_cells;
  const int threads = o.threads > 0 ? o.threads : cpu::default_threads();
  std::printf("\nCutoff pairs, Lennard-Jones, float, %d^3 periodic cells of width = cutoff, %d threads; "
              "compute in ms (median of %d)\n", d, threads, o.reps);
  std::printf("%5s %9s | %10s %10s | %10s %12s\n", "ppc", "particles", "set_points", "half", "full", "checks/s");
  for (int ppc : {1, 10, 100}) {
    const std::size_t n = static_cast<std::size_t>(ppc) * d * d * d;
    const Particles<float> p = random_particles<float>(n, d, o.seed);
    pair_kernels::LennardJones<3> lj{1.0, 0.3, 1.0, 0.0};
    std::vector<std::vector<float>> out(4, std::vector<float>(n));
    double t_set = 0, t_half = 0, t_full = 0;
    for (bool half : {true, false}) {
      PairOptions po;
      po.half_shell = half;
      po.num_threads = threads;
      PairPlan<float, 3> plan(Box<3>::periodic({double(d), double(d), double(d)}), 1.0, po);
      t_set = timed(o.reps, [&] { plan.set_points(p.positions()); });
      const double t = timed(o.reps, [&] { plan.compute(lj, {}, {out[0], out[1], out[2], out[3]}); });
      (half ? t_half : t_full) = t;
    }
    const double checks = static_cast<double>(n) * 27.0 * ppc;
    std::printf("%5d %9zu | %10.3f %10.3f | %10.3f %12.3g\n", ppc, n, 1e3 * t_set, 1e3 * t_half, 1e3 * t_full,
                checks / std::min(t_half, t_full));
    std::fflush(stdout);
  }
}

}  // namespace

int run_bench(int argc, char** argv) {
  return guarded("bench", kBenchUsage, [&]() -> int {
    BenchOptions o;
    ArgReader args(argc, argv);
    while (args.next()) {
      if (args.is("--help")) {
        args.flag();
        std::fputs(kBenchUsage, stdout);
        return 0;
      } else if (args.is("--particles")) {
        o.particles = args.count(1, kMaxParticles, "2^20");
      } else if (args.is("--reps")) {
        o.reps = static_cast<int>(args.count(1, 1000, "5"));
      } else if (args.is("--threads")) {
        o.threads = static_cast<int>(args.count(1, 4096, "4"));
      } else if (args.is("--precision")) {
        o.precision = args.choice({"float", "double"});
      } else if (args.is("--seed")) {
        o.seed = static_cast<std::uint64_t>(args.count(0, INT64_MAX, "42"));
      } else if (args.is("--pairs")) {
        o.pair_cells = static_cast<int>(args.count(0, 64, "8"));
        // The cutoff is one cell wide and may be at most half the periodic box.
        if (o.pair_cells == 1)
          throw UsageError("--pairs = 1: one cell is narrower than twice the cutoff; give 0 (skip) or "
                           "at least 2 (example: --pairs 8)");
      } else {
        args.unknown();
      }
    }
    // Checked before any work: the largest case's arrays (positions, charges, the
    // interpolated values of both sides, three meshes at one particle a cell, and the
    // plan's binning, about 16 bytes a particle).
    const double real = o.precision == "float" ? 4.0 : 8.0;
    check_memory(double(o.particles) * (9 * real + 16), Backend::Cpu);
    const int status = o.precision == "float" ? bench<float>(o) : bench<double>(o);
    if (o.pair_cells > 0) pair_bench(o);
    return status;
  });
}

}  // namespace pmkit::cli
