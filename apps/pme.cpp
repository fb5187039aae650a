// `pmkit pme`: smooth particle-mesh Ewald on random charges at water density (100 per
// nm^3, charges +1 and -1 alternating, neutral), with the parameters that a cutoff and a
// tolerance give (PmeParameters::choose, as OpenMM's ewaldErrorTolerance): prints the
// parameters, the energy (kJ/mol), the median time of a compute, and for small systems
// the relative errors of the energy and the forces against the float64 Ewald sum.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "pmkit/pme.hpp"
#include "verify/ewald.hpp"
#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
#endif

namespace pmkit::cli {
namespace {

const char* const kPmeUsage =
    "usage: pmkit pme [options]\n"
    "\n"
    "Coulomb energy and forces of random charges at water density (100 per nm^3, +1 and -1\n"
    "alternating) by smooth PME, with alpha and the mesh chosen from the cutoff and the\n"
    "tolerance as OpenMM chooses them; prints the energy, the time of a compute and, up to\n"
    "--check particles, the errors against the Ewald sum.\n"
    "\n"
    "options:\n"
    "  --particles N        number of charges (default 1000; the box is (N / 100)^(1/3) nm)\n"
    "  --cutoff R           real-space cutoff in nm (default 1; at most half the box)\n"
    "  --tolerance E        error tolerance, 1e-10 to 0.5 (default 5e-4)\n"
    "  --order P            B-spline order 4..8 (default 5)\n"
    "  --precision P        float|double (default float)\n"
    "  --backend B          cpu|cuda (default cpu)\n"
    "  --threads T          OpenMP threads (default: OpenMP's default)\n"
    "  --reps R             timed computes (default 10)\n"
    "  --check N            compare with the Ewald sum up to N charges (default 2000)\n"
    "  --seed S             random seed (default 1)\n"
    "  -h, --help           this text\n";

// The smallest --tolerance: below it the mesh outgrows any memory long before the
// float64 Ewald sum could tell the difference.
constexpr double kMinTolerance = 1e-10;

// kJ mol^-1 nm e^-2: the Coulomb constant in the units of OpenMM and GROMACS.
constexpr double kCoulombKJ = 138.935458;

struct PmeCommand {
  std::int64_t particles = 1000;
  double cutoff = 1.0;
  double tolerance = 5e-4;
  int order = 5;
  std::string precision = "float";
  std::string backend = "cpu";
  int threads = 0;
  int reps = 10;
  std::int64_t check = 2000;
  std::uint64_t seed = 1;
};

// The plan's energy and forces (and the compute's median seconds) on host arrays,
// through device copies on the CUDA backend.
template <class T>
verify::CoulombResult run(const verify::ChargeSystem& s, const PmeParameters& params, const PmeOptions& options,
                          int reps, double& seconds_per_compute) {
  const std::size_t n = s.size();
  std::array<std::vector<T>, 3> x, f;
  for (int d = 0; d < 3; ++d) {
    x[d].assign(s.x[d].begin(), s.x[d].end());
    f[d].assign(n, T(0));
  }
  std::vector<T> q(s.q.begin(), s.q.end());
  double energy = 0;
  PmePlan<T> plan(s.box, params, options);
  std::vector<double> times;
  auto timed = [&](auto&& compute, auto&& wait) {
    for (int r = 0; r <= reps; ++r) {  // the first call (plans, Auto timings) is not counted
      const double t = seconds([&] {
        compute();
        wait();
      });
      if (r > 0) times.push_back(t);
    }
  };
  if (options.backend == Backend::Cpu) {
    plan.set_points({x[0], x[1], x[2]});
    timed([&] { plan.compute(q, {f[0], f[1], f[2]}, View<double>(&energy, 1)); }, [] {});
  } else {
#if defined(PMKIT_WITH_CUDA)
    cuda::DeviceBuffer<T> dx(x[0]), dy(x[1]), dz(x[2]), dq(q), fx(n), fy(n), fz(n);
    cuda::DeviceBuffer<double> de(1);
    plan.set_points({View<const T>(dx.get(), n), View<const T>(dy.get(), n), View<const T>(dz.get(), n)});
    timed([&] {
      plan.compute(View<const T>(dq.get(), n), {View<T>(fx.get(), n), View<T>(fy.get(), n), View<T>(fz.get(), n)},
                   View<double>(de.get(), 1));
    }, [] { cuda::check(cudaDeviceSynchronize(), "pmkit pme"); });
    f = {fx.download(), fy.download(), fz.download()};
    energy = de.download()[0];
#endif
  }
  seconds_per_compute = median(times);
  verify::CoulombResult r;
  r.energy = energy;
  for (int d = 0; d < 3; ++d) r.force[d].assign(f[d].begin(), f[d].end());
  return r;
}

// The bytes of a run's arrays: the charges in double and in the plan's precision, the
// forces, the mesh and its spectrum (one real and one complex mesh of the chosen size),
// and about 16 bytes a particle of binning.
double pme_bytes(const PmeCommand& o, const PmeParameters& params) {
  const double real = o.precision == "float" ? 4.0 : 8.0;
  const double nodes = double(params.mesh[0]) * double(params.mesh[1]) * double(params.mesh[2]);
  return double(o.particles) * (4 * 8.0 + 7 * real + 16.0) + 3 * real * nodes;
}

int pme_body(const PmeCommand& o) {
  const double length = std::cbrt(double(o.particles) / 100.0);
  verify::ChargeSystem s;
  s.box = {length, length, length};
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> unit(0.0, length);
  for (std::int64_t i = 0; i < o.particles; ++i) {
    for (int d = 0; d < 3; ++d) s.x[d].push_back(unit(rng));
    s.q.push_back(i % 2 == 0 ? 1.0 : -1.0);
  }
  const PmeParameters params = PmeParameters::choose(s.box, o.cutoff, o.tolerance, o.order);
  PmeOptions options;
  options.backend = o.backend == "cuda" ? Backend::Cuda : Backend::Cpu;
  options.num_threads = o.threads;
  options.coulomb_constant = kCoulombKJ;
  std::printf("pmkit pme: %lld charges in a %.4f nm box, cutoff %g nm, tolerance %g, %s, %s backend\n",
              static_cast<long long>(o.particles), length, o.cutoff, o.tolerance, o.precision.c_str(),
              o.backend.c_str());
  std::printf("  alpha %.6f / nm, mesh %lld x %lld x %lld, B-spline order %d\n", params.alpha,
              static_cast<long long>(params.mesh[0]), static_cast<long long>(params.mesh[1]),
              static_cast<long long>(params.mesh[2]), params.order);
  double seconds_per_compute = 0;
  const verify::CoulombResult got = o.precision == "float"
                                        ? run<float>(s, params, options, o.reps, seconds_per_compute)
                                        : run<double>(s, params, options, o.reps, seconds_per_compute);
  std::printf("  energy %.10g kJ/mol\n", got.energy);
  std::printf("  time   %.3f ms per compute (median of %d)\n", 1e3 * seconds_per_compute, o.reps);
  if (o.particles > o.check || o.particles == 0) {
    std::printf("  error against Ewald: not computed (more than --check = %lld charges)\n",
                static_cast<long long>(o.check));
    return 0;
  }
  verify::CoulombResult want = verify::ewald_sum(s);
  double diff = 0, norm = 0;
  for (int d = 0; d < 3; ++d)
    for (std::int64_t i = 0; i < o.particles; ++i) {
      const double w = kCoulombKJ * want.force[d][i];
      diff += (got.force[d][i] - w) * (got.force[d][i] - w);
      norm += w * w;
    }
  const double reference = kCoulombKJ * want.energy;
  std::printf("  Ewald sum %.10g kJ/mol: energy relative error %.2e, RMS force relative error %.2e\n", reference,
              std::abs(got.energy - reference) / std::abs(reference), std::sqrt(diff / norm));
  return 0;
}

}  // namespace

int run_pme(int argc, char** argv) {
  return guarded("pme", kPmeUsage, [&]() -> int {
    PmeCommand o;
    ArgReader args(argc, argv);
    while (args.next()) {
      if (args.is("--help")) {
        args.flag();
        std::fputs(kPmeUsage, stdout);
        return 0;
      } else if (args.is("--particles")) {
        o.particles = args.count(0, kMaxParticles, "1e5");
      } else if (args.is("--cutoff")) {
        o.cutoff = args.positive("1.0");
      } else if (args.is("--tolerance")) {
        o.tolerance = args.positive("5e-4", 0.5, false, kMinTolerance);
      } else if (args.is("--order")) {
        o.order = static_cast<int>(args.count(4, 8, "5"));
      } else if (args.is("--precision")) {
        o.precision = args.choice({"float", "double"});
      } else if (args.is("--backend")) {
        o.backend = args.choice({"cpu", "cuda"});
      } else if (args.is("--threads")) {
        o.threads = static_cast<int>(args.count(1, 4096, "4"));
      } else if (args.is("--reps")) {
        o.reps = static_cast<int>(args.count(1, 100000, "10"));
      } else if (args.is("--check")) {
        o.check = args.count(0, 100000, "2000");
      } else if (args.is("--seed")) {
        o.seed = static_cast<std::uint64_t>(args.count(0, INT64_MAX, "42"));
      } else {
        args.unknown();
      }
    }
    // Checked before any work: the backend, the parameters the box and the options give,
    // and the memory of their mesh.
    const Backend backend = o.backend == "cuda" ? Backend::Cuda : Backend::Cpu;
    check_backend(backend);
    const double length = std::cbrt(double(o.particles) / 100.0);
    PmeParameters params;
    try {
      params = PmeParameters::choose({length, length, length}, o.cutoff, o.tolerance, o.order);
    } catch (const Error& e) {
      throw UsageError("these options cannot run: " + message_of(e));
    }
    check_memory(pme_bytes(o, params), Backend::Cpu);
    if (backend == Backend::Cuda) check_memory(pme_bytes(o, params), Backend::Cuda);
    return pme_body(o);
  });
}

}  // namespace pmkit::cli
