// Smooth PME on the GPU next to OpenMM's, and the B-spline spreading table of Guo et al., "Efficient particle-mesh spreading on GPUs".
//
//   pme_bench --openmm DIR [N ...]   the cases bench/pme_openmm.py wrote (DIR/pme-case-N.bin):
//       pmkit's reciprocal part (PmePlan<float>::compute_reciprocal) with OpenMM's alpha,
//       mesh and order 5 on the same charges, timed alone and with set_points (the binning
//       a step of molecular dynamics repeats, as OpenMM's step re-sorts its atoms), next to
//       OpenMM's milliseconds per reciprocal step from the same run, as ratios; the forces
//       of both against pmkit's in double on the same mesh and against a converged
//       reciprocal force (pmkit in double, order 8 on a mesh twice as fine: its own mesh
//       error far below the others'), relative RMS; then pmkit's step phase by phase
//       (set_points, spread, forward FFT, inverse FFT, interp_gradient) on the library's
//       plans alone; then steps of molecular dynamics (every charge moves by its own
//       velocity, MD_STEP nm rms a step, as bench/pme_openmm.py moves OpenMM's) with pmkit's
//       update_points at several PmeOptions::max_away_fraction, and with set_points every
//       step, next to OpenMM's MD step from the same run; then the same MD step with
//       update_points + compute_reciprocal captured once into a CUDA graph and replayed
//       (an eager step every 4, 8, 16 or 32 steps re-bins), beside the eager step on the
//       same stream and OpenMM's. N: 10^4, 10^5 and 10^6 unless given.
//   pme_bench --md-kernels DIR N STEPS   STEPS MD steps of case N at the default
//       max_away_fraction, after 10 untimed, for Nsight Compute (bench/device.sh's pme step).
//   pme_bench --spreads              Guo et al.'s table: B-spline orders 4 and 6, K^3 periodic
//       meshes K = 32..256, N = 10^3..10^7 uniform random particles, float; the time per
//       spread of a binning followed by 1 spread and by 20 spreads (as Brownian dynamics
//       with Lanczos iterations spreads 20 times a step).
// Times: medians of CUDA-event times over repetitions after warm-up calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/graph.hpp"
#include "cuda_check.cuh"
#include "pme_openmm_case.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/fft.hpp"
#include "pmkit/pme.hpp"
#include "pmkit/plan.hpp"

namespace {

using namespace pmkit;
using cuda::DeviceBuffer;

// OpenMM's Coulomb constant, kJ mol^-1 nm e^-2 (ONE_4PI_EPS0).
constexpr double kOpenMMCoulomb = 138.935456;

using bench::median_ms;

// nm rms a charge moves in a step of molecular dynamics, as bench/pme_openmm.py's MD_STEP.
constexpr double kMdStep = 0.005;

using bench::OpenMMCase;
using bench::read_case;

// sqrt(sum |a - b|^2 / sum |b|^2)
double relative_rms(const std::array<std::vector<double>, 3>& a, const std::array<std::vector<double>, 3>& b) {
  double e = 0, w = 0;
  for (int d = 0; d < 3; ++d)
    for (std::size_t i = 0; i < b[d].size(); ++i) {
      e += (a[d][i] - b[d][i]) * (a[d][i] - b[d][i]);
      w += b[d][i] * b[d][i];
    }
  return std::sqrt(e / w);
}

struct PmeTiming {
  double compute_ms = 0, step_ms = 0, energy = 0;
  std::array<std::vector<double>, 3> force;
};

template <class T>
PmeTiming run_pmkit(const OpenMMCase& c, int reps, int order = 5, std::int64_t refine = 1) {
  PmeParameters p;
  p.alpha = c.alpha;
  for (int d = 0; d < 3; ++d) p.mesh[d] = c.mesh[d] * refine;
  p.order = order;
  p.cutoff = 1.0;
  PmeOptions o;
  o.backend = Backend::Cuda;
  o.coulomb_constant = kOpenMMCoulomb;
  PmePlan<T> plan({c.length, c.length, c.length}, p, o);
  std::array<std::vector<T>, 3> x;
  for (int d = 0; d < 3; ++d) x[d].assign(c.x[d].begin(), c.x[d].end());
  DeviceBuffer<T> dx(x[0]), dy(x[1]), dz(x[2]), dq(std::vector<T>(c.q.begin(), c.q.end())), fx(c.n), fy(c.n), fz(c.n);
  DeviceBuffer<double> energy(1);
  const typename PmePlan<T>::Positions pos = {View<const T>(dx.get(), c.n), View<const T>(dy.get(), c.n),
                                              View<const T>(dz.get(), c.n)};
  const View<const T> charges(dq.get(), c.n);
  const typename PmePlan<T>::Forces forces = {View<T>(fx.get(), c.n), View<T>(fy.get(), c.n), View<T>(fz.get(), c.n)};
  PmeTiming t;
  t.step_ms = median_ms([&] {
    plan.set_points(pos);
    plan.compute_reciprocal(charges, forces, View<double>(energy.get(), 1));
  }, reps);
  plan.set_points(pos);
  t.compute_ms = median_ms([&] { plan.compute_reciprocal(charges, forces, View<double>(energy.get(), 1)); }, reps);
  cuda::check(cudaDeviceSynchronize(), "pme_bench");
  const std::vector<T> f[3] = {fx.download(), fy.download(), fz.download()};
  for (int d = 0; d < 3; ++d) t.force[d].assign(f[d].begin(), f[d].end());
  t.energy = energy.download()[0];
  return t;
}

// pmkit's step phase by phase, float, on the library's plans alone (what PmePlan runs,
// without its convolution and last step): median ms of each, and of interp_gradient with
// its outputs side by side.
void phases(const OpenMMCase& c) {
  const std::size_t n = c.n;
  Grid3 grid = Grid3::periodic(c.mesh);
  for (int d = 0; d < 3; ++d) grid.spacing[d] = c.length / double(c.mesh[d]);
  Options o;
  o.backend = Backend::Cuda;
  Plan<float, 3> plan(grid, Kernel::bspline(5), o);
  RealFft<float, 3> fft(c.mesh, FftOptions{o});
  std::array<std::vector<float>, 3> x;
  for (int d = 0; d < 3; ++d) x[d].assign(c.x[d].begin(), c.x[d].end());
  DeviceBuffer<float> dx(x[0]), dy(x[1]), dz(x[2]), dq(std::vector<float>(c.q.begin(), c.q.end())), g(3 * n);
  DeviceBuffer<float> mesh(static_cast<std::size_t>(fft.real_size())), spectrum(2 * static_cast<std::size_t>(fft.spectrum_size()));
  const std::array<View<const float>, 3> pos = {View<const float>(dx.get(), n), View<const float>(dy.get(), n),
                                                View<const float>(dz.get(), n)};
  auto* complex = reinterpret_cast<std::complex<float>*>(spectrum.get());
  const double bin = median_ms([&] { plan.set_points(pos); }, 21);
  const double spread = median_ms([&] { plan.spread({View<const float>(dq.get(), n)}, {View<float>(mesh.get(), mesh.size())}); }, 21);
  const double forward = median_ms([&] { fft.forward(mesh.get(), complex); }, 21);
  const double inverse = median_ms([&] { fft.inverse(complex, mesh.get()); }, 21);
  const double gradient = median_ms([&] {
    plan.interp_gradient({View<const float>(mesh.get(), mesh.size())},
                         {View<float>(g.get(), n), View<float>(g.get() + n, n), View<float>(g.get() + 2 * n, n)});
  }, 21);
  // The same with x, y and z of a charge side by side instead of in three arrays: its
  // stores to the caller's order then fall on one sector a charge instead of three.
  const double side_by_side = median_ms([&] {
    plan.interp_gradient({View<const float>(mesh.get(), mesh.size())},
                         {View<float>(g.get(), n, 3), View<float>(g.get() + 1, n, 3), View<float>(g.get() + 2, n, 3)});
  }, 21);
  std::printf("%9zu phases (ms): set_points %.3f, spread %.3f (%s), forward FFT %.3f, inverse FFT %.3f, "
              "interp_gradient %.3f; sum %.3f; interp_gradient with x y z side by side %.3f\n", n, bin, spread,
              plan.spread_method_name().c_str(), forward, inverse, gradient,
              bin + spread + forward + inverse + gradient, side_by_side);
}

// One step of every charge's own velocity (nm a step, x y z interleaved), wrapped into
// the box [0, length).
__global__ void move_kernel(float* x, float* y, float* z, const float* velocity, std::size_t n, float length) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float* const coordinate[3] = {x, y, z};
  for (int d = 0; d < 3; ++d) {
    float u = coordinate[d][i] + velocity[3 * i + d];
    if (u < 0) u += length;
    if (u >= length) u -= length;
    coordinate[d][i] = u;
  }
}

// Velocities of kMdStep nm rms a step (3D; Gaussian, the same for every run of a case).
std::vector<float> md_velocities(std::size_t n) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> component(0.0f, static_cast<float>(kMdStep / std::sqrt(3.0)));
  std::vector<float> v(3 * n);
  for (float& u : v) u = component(rng);
  return v;
}

// The fraction of the charges that have left their block of 8^3 mesh cells (the CUDA
// plan's tile) after `steps` steps of their velocities.
double fraction_away(const OpenMMCase& c, const std::vector<float>& v, int steps) {
  std::size_t away = 0;
  for (std::size_t i = 0; i < c.n; ++i) {
    bool moved = false;
    for (int d = 0; d < 3; ++d) {
      const double h = c.length / double(c.mesh[d]);
      double u = c.x[d][i] + steps * double(v[3 * i + d]);
      u -= c.length * std::floor(u / c.length);
      moved = moved || std::int64_t(std::floor(c.x[d][i] / h)) / 8 != std::int64_t(std::floor(u / h)) / 8;
    }
    away += moved;
  }
  return double(away) / double(c.n);
}

// One case's charges in steps of molecular dynamics on a float plan: each step moves
// every charge by its velocity (move_kernel), then update_points (set_points where
// `resort`) and compute_reciprocal, all on `stream` (the default stream unless given).
struct MdSystem {
  const OpenMMCase& c;
  cudaStream_t stream;
  PmePlan<float> plan;
  DeviceBuffer<float> dx, dy, dz, dv, dq, fx, fy, fz;
  DeviceBuffer<double> energy{1};

  static PmePlan<float> make_plan(const OpenMMCase& c, double max_away_fraction, cudaStream_t stream) {
    PmeParameters p;
    p.alpha = c.alpha;
    p.mesh = c.mesh;
    p.order = 5;
    p.cutoff = 1.0;
    PmeOptions o;
    o.backend = Backend::Cuda;
    o.coulomb_constant = kOpenMMCoulomb;
    o.max_away_fraction = max_away_fraction;
    o.stream = cuda::stream_handle(stream);
    return PmePlan<float>({c.length, c.length, c.length}, p, o);
  }
  static std::vector<float> coordinates(const OpenMMCase& c, int d) { return {c.x[d].begin(), c.x[d].end()}; }

  MdSystem(const OpenMMCase& c_, const std::vector<float>& velocity, double max_away_fraction,
           cudaStream_t stream_ = nullptr)
      : c(c_), stream(stream_), plan(make_plan(c_, max_away_fraction, stream_)), dx(coordinates(c_, 0)),
        dy(coordinates(c_, 1)),
        dz(coordinates(c_, 2)), dv(velocity), dq(std::vector<float>(c_.q.begin(), c_.q.end())), fx(c_.n), fy(c_.n),
        fz(c_.n) {
    plan.set_points(positions());
  }
  PmePlan<float>::Positions positions() const {
    return {View<const float>(dx.get(), c.n), View<const float>(dy.get(), c.n), View<const float>(dz.get(), c.n)};
  }
  void move() {
    const unsigned blocks = static_cast<unsigned>((c.n + 255) / 256);
    move_kernel<<<blocks, 256, 0, stream>>>(dx.get(), dy.get(), dz.get(), dv.get(), c.n,
                                            static_cast<float>(c.length));
  }
  void bin(bool resort) {
    if (resort)
      plan.set_points(positions());
    else
      plan.update_points(positions());
  }
  void compute() {
    plan.compute_reciprocal(View<const float>(dq.get(), c.n),
                            {View<float>(fx.get(), c.n), View<float>(fy.get(), c.n), View<float>(fz.get(), c.n)},
                            View<double>(energy.get(), 1));
  }
  void step(bool resort) {
    move();
    bin(resort);
    compute();
  }
};

// Mean ms of a step of molecular dynamics over `steps` steps (after 10 untimed). The
// mean, not the median: the full re-binnings of update_points fall on some steps only.
double md_step_ms(const OpenMMCase& c, const std::vector<float>& velocity, double max_away_fraction, bool resort,
                  int steps) {
  MdSystem md(c, velocity, max_away_fraction);
  for (int i = 0; i < 10; ++i) md.step(resort);
  cuda::EventTimer timer;
  timer.start(nullptr);
  for (int i = 0; i < steps; ++i) md.step(resort);
  timer.stop(nullptr);
  return 1e3 * timer.seconds("pme_bench") / steps;
}

// The MD step at the default max_away_fraction cut by events on the device's timeline:
// mean ms of the move, of update_points (its kernels, its wait for the host and the
// host's next launch, and the full binnings it falls back to) and of compute_reciprocal
// (with the away charges), over `steps` steps after 10 untimed; and of
// compute_reciprocal right after set_points (no away charges), as the first table's.
void md_phases(const OpenMMCase& c, const std::vector<float>& velocity, int steps) {
  MdSystem md(c, velocity, PmeOptions{}.max_away_fraction);
  for (int i = 0; i < 10; ++i) md.step(false);
  std::vector<cudaEvent_t> events(4 * static_cast<std::size_t>(steps));
  for (cudaEvent_t& e : events) cuda::check(cudaEventCreate(&e), "pme_bench: events");
  for (int i = 0; i < steps; ++i) {
    cudaEvent_t* e = &events[4 * static_cast<std::size_t>(i)];
    cuda::check(cudaEventRecord(e[0]), "pme_bench: events");
    md.move();
    cuda::check(cudaEventRecord(e[1]), "pme_bench: events");
    md.bin(false);
    cuda::check(cudaEventRecord(e[2]), "pme_bench: events");
    md.compute();
    cuda::check(cudaEventRecord(e[3]), "pme_bench: events");
  }
  cuda::check(cudaDeviceSynchronize(), "pme_bench");
  double sum[3] = {};
  for (int i = 0; i < steps; ++i)
    for (int k = 0; k < 3; ++k) {
      float ms = 0;
      cuda::check(cudaEventElapsedTime(&ms, events[4 * static_cast<std::size_t>(i) + k],
                                       events[4 * static_cast<std::size_t>(i) + k + 1]),
                  "pme_bench: events");
      sum[k] += ms;
    }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  md.plan.set_points(md.positions());
  const double alone = median_ms([&] { md.compute(); }, 50);
  std::printf("%9zu MD step at the default (ms, mean of %d steps on the device's timeline): move %.3f, "
              "update_points %.3f, compute_reciprocal %.3f (after set_points alone: %.3f); sum %.3f\n",
              c.n, steps, sum[0] / steps, sum[1] / steps, sum[2] / steps, alone, (sum[0] + sum[1] + sum[2]) / steps);
}

// The MD table's row for one case.
void md_steps(const OpenMMCase& c) {
  const std::vector<float> v = md_velocities(c.n);
  const int steps = 300;
  const double resort = md_step_ms(c, v, 0, true, steps);
  const double fractions[] = {0.005, 0.01, 0.02, 0.05, 0.1, 0.2};
  const double chosen = PmeOptions{}.max_away_fraction;
  double update[6], update_chosen = md_step_ms(c, v, chosen, false, steps);
  for (int k = 0; k < 6; ++k) update[k] = md_step_ms(c, v, fractions[k], false, steps);
  std::printf("%9zu %10.3f | %10.3f | %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f | %7.3f | %9.2f %9.2f\n", c.n,
              c.openmm_md_ms, resort, update[0], update[1], update[2], update[3], update[4], update[5], update_chosen,
              c.openmm_md_ms / resort, c.openmm_md_ms / update_chosen);
  std::printf("%9s away from their 8^3-cell tile after 1, 2, 5, 10, 20 steps: %.2f%%, %.2f%%, %.2f%%, %.2f%%, %.2f%%; "
              "OpenMM's charges moved %.4f nm rms a step\n", "", 100 * fraction_away(c, v, 1),
              100 * fraction_away(c, v, 2), 100 * fraction_away(c, v, 5), 100 * fraction_away(c, v, 10),
              100 * fraction_away(c, v, 20), c.openmm_md_rms);
  md_phases(c, v, steps);
}

// A stream of the benchmark's own: the legacy default stream cannot be captured.
struct OwnStream {
  cudaStream_t s = nullptr;
  OwnStream() { cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "pme_bench: stream"); }
  ~OwnStream() { cudaStreamDestroy(s); }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
};

// Mean ms of an MD step at the default max_away_fraction over `steps` steps (after 10
// untimed eager ones) on a stream of its own: each step moves the charges (an eager
// launch), then runs update_points and compute_reciprocal, eagerly where `eager_every`
// is 0, else replayed from a CUDA graph captured once, with an eager step every
// `eager_every` steps: a replay never re-bins in full (its away list grows), an eager
// update_points re-bins once more than max_away_fraction of the charges are away.
// NaN (and the reason on stderr) where the capture fails.
double md_graph_step_ms(const OpenMMCase& c, const std::vector<float>& velocity, int eager_every, int steps,
                        std::size_t* nodes = nullptr) {
  const OwnStream stream;
  MdSystem md(c, velocity, PmeOptions{}.max_away_fraction, stream.s);
  for (int i = 0; i < 10; ++i) md.step(false);
  std::unique_ptr<cuda::CapturedGraph> graph;
  if (eager_every > 0) {
    try {
      graph = std::make_unique<cuda::CapturedGraph>(stream.s, [&] {
        md.bin(false);
        md.compute();
      });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pme_bench: the MD step did not capture into a graph: %s\n", e.what());
      return std::nan("");
    }
    if (nodes) *nodes = graph->nodes();
  }
  cuda::EventTimer timer;
  timer.start(stream.s);
  for (int i = 0; i < steps; ++i) {
    if (!graph || i % eager_every == 0) {
      md.step(false);
    } else {
      md.move();
      graph->launch();
    }
  }
  timer.stop(stream.s);
  const double ms = 1e3 * timer.seconds("pme_bench") / steps;
  md.plan.synchronize();
  return ms;
}

// The graph table's row for one case: the eager MD step on a stream of its own, the
// replayed one with an eager step every 4, 8, 16 and 32 steps, OpenMM's MD step beside
// them, and the ratios.
void md_graph_steps(const OpenMMCase& c) {
  const std::vector<float> v = md_velocities(c.n);
  const int steps = 300;
  const double eager = md_graph_step_ms(c, v, 0, steps);
  const int every[] = {4, 8, 16, 32};
  double replayed[4], best = std::nan("");
  std::size_t nodes = 0;
  for (int k = 0; k < 4; ++k) {
    replayed[k] = md_graph_step_ms(c, v, every[k], steps, &nodes);
    if (std::isnan(best) || replayed[k] < best) best = replayed[k];
  }
  std::printf("%9zu %10.3f | %10.3f | %7.3f %7.3f %7.3f %7.3f | %6zu | %9.2f %9.2f\n", c.n, c.openmm_md_ms, eager,
              replayed[0], replayed[1], replayed[2], replayed[3], nodes, c.openmm_md_ms / eager, c.openmm_md_ms / best);
}

// `steps` MD steps at the default max_away_fraction after 10 untimed, for a profiler
// (bench/device.sh's pme step runs Nsight Compute on them with PMKIT_PME_KERNELS).
int md_kernels(const std::string& dir, const std::string& size, int steps) {
  const OpenMMCase c = read_case(dir + "/pme-case-" + size + ".bin");
  MdSystem md(c, md_velocities(c.n), PmeOptions{}.max_away_fraction);
  for (int i = 0; i < 10 + steps; ++i) md.step(false);
  cuda::check(cudaDeviceSynchronize(), "pme_bench");
  return 0;
}

int openmm_cases(const std::string& dir, std::vector<std::string> sizes) {
  if (sizes.empty()) sizes = {"10000", "100000", "1000000"};
  std::printf("PME reciprocal part, pmkit (float, CUDA) against OpenMM 8.6.1 (CUDA, single), same charges, alpha, "
              "mesh, order 5\n");
  std::printf("%9s %13s %10s | %10s %10s | %9s %9s | %11s %11s %11s\n", "N", "mesh", "OpenMM ms", "pmkit ms",
              "pmkit ms", "compute", "step", "rms err", "rms err", "OpenMM vs");
  std::printf("%9s %13s %10s | %10s %10s | %9s %9s | %11s %11s %11s\n", "", "", "per step", "compute", "step",
              "speed-up", "speed-up", "pmkit f32", "OpenMM", "pmkit f32");
  for (const std::string& s : sizes) {
    const OpenMMCase c = read_case(dir + "/pme-case-" + s + ".bin");
    const PmeTiming single = run_pmkit<float>(c, 50);
    const PmeTiming reference = run_pmkit<double>(c, 5);
    const PmeTiming converged = run_pmkit<double>(c, 1, 8, 2);
    char mesh[32];
    std::snprintf(mesh, sizeof mesh, "%lldx%lldx%lld", static_cast<long long>(c.mesh[0]),
                  static_cast<long long>(c.mesh[1]), static_cast<long long>(c.mesh[2]));
    std::printf("%9zu %13s %10.3f | %10.3f %10.3f | %9.2f %9.2f | %11.2e %11.2e %11.2e\n", c.n, mesh,
                c.openmm_ms, single.compute_ms, single.step_ms, c.openmm_ms / single.compute_ms,
                c.openmm_ms / single.step_ms,
                relative_rms(single.force, reference.force), relative_rms(c.force, reference.force),
                relative_rms(c.force, single.force));
    std::printf("%9s against the converged force (f64, order 8, mesh x2): pmkit f32 %.2e, pmkit f64 %.2e, OpenMM %.2e\n",
                "", relative_rms(single.force, converged.force), relative_rms(reference.force, converged.force),
                relative_rms(c.force, converged.force));
    // OpenMM's reciprocal force group holds the self energy too: -alpha / sqrt(pi) k sum q^2.
    double squares = 0;
    for (double q : c.q) squares += q * q;
    const double self = -c.alpha / std::sqrt(3.14159265358979323846) * kOpenMMCoulomb * squares;
    std::printf("%9s reciprocal energy + self energy: pmkit f32 %.3f, f64 %.3f, converged %.3f, OpenMM %.3f kJ/mol\n", "",
                single.energy + self, reference.energy + self, converged.energy + self, c.openmm_energy);
    phases(c);
  }
  std::printf("(rms err: relative RMS difference of the reciprocal forces from pmkit's in double on the same mesh;\n"
              " speed-up: OpenMM's ms per step over pmkit's; step = set_points + compute_reciprocal; the target is\n"
              " a step speed-up of at least 2 at 10^6 charges and 1 at 10^5)\n");
  std::printf("\nMD steps: every charge moves by its own velocity, %.4f nm rms a step; OpenMM's Verlet step of 2 fs\n"
              "(its reciprocal group; bench/pme_openmm.py) against pmkit's move + set_points or update_points +\n"
              "compute_reciprocal, mean ms a step over 300 steps\n", kMdStep);
  std::printf("%9s %10s | %10s | %47s | %7s | %9s %9s\n", "N", "OpenMM ms", "pmkit ms", "pmkit ms, update_points at max_away_fraction",
              "pmkit ms", "speed-up", "speed-up");
  std::printf("%9s %10s | %10s | %7s %7s %7s %7s %7s %7s | %7s | %9s %9s\n", "", "MD step", "set_points", "0.005", "0.01",
              "0.02", "0.05", "0.1", "0.2", "default", "resort", "update");
  for (const std::string& s : sizes) md_steps(read_case(dir + "/pme-case-" + s + ".bin"));
  std::printf("(default: PmeOptions' max_away_fraction, %.3f; speed-up: OpenMM's MD step over pmkit's with set_points\n"
              " every step (resort) and with update_points at the default (update))\n", PmeOptions{}.max_away_fraction);
  std::printf("\nMD steps from a CUDA graph: update_points + compute_reciprocal captured once on a stream of the\n"
              "plan's and replayed, the move launched before each step, an eager step every 4, 8, 16 or 32 steps;\n"
              "beside the same steps made eagerly on that stream and OpenMM's MD step; mean ms a step over 300 steps\n");
  std::printf("%9s %10s | %10s | %31s | %6s | %9s %9s\n", "N", "OpenMM ms", "pmkit ms", "pmkit ms, graph, eager every",
              "graph", "speed-up", "speed-up");
  std::printf("%9s %10s | %10s | %7s %7s %7s %7s | %6s | %9s %9s\n", "", "MD step", "eager", "4", "8", "16", "32",
              "nodes", "eager", "graph");
  for (const std::string& s : sizes) md_graph_steps(read_case(dir + "/pme-case-" + s + ".bin"));
  std::printf("(graph: the replays never re-bin in full, an eager step re-bins past max_away_fraction; speed-up:\n"
              " OpenMM's MD step over pmkit's eager step and over its fastest graph column; nan: no capture)\n");
  return 0;
}

int spread_table() {
  std::printf("Guo et al., Efficient particle-mesh spreading on GPUs: B-spline spreading, float, K^3 periodic mesh, N uniform random particles;\n"
              "ms per spread for a binning (set_points) followed by 1 and by 20 spreads\n");
  std::printf("%6s %5s %10s | %12s %12s | %12s %12s\n", "order", "K", "N", "set_points", "spread", "1 spread",
              "20 spreads");
  std::printf("%6s %5s %10s | %12s %12s | %12s %12s\n", "", "", "", "ms", "ms", "ms/spread", "ms/spread");
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (std::size_t n : {std::size_t(1000), std::size_t(10000), std::size_t(100000), std::size_t(1000000),
                        std::size_t(10000000)}) {
    std::array<std::vector<float>, 3> x;
    for (auto& v : x) {
      v.resize(n);
      for (float& u : v) u = unit(rng);
    }
    std::vector<float> q(n);
    for (float& v : q) v = 2 * unit(rng) - 1;
    DeviceBuffer<float> dx(x[0]), dy(x[1]), dz(x[2]), dq(q);
    const std::array<View<const float>, 3> pos = {View<const float>(dx.get(), n), View<const float>(dy.get(), n),
                                                  View<const float>(dz.get(), n)};
    for (int order : {4, 6})
      for (std::int64_t k : {32, 64, 128, 256}) {
        Options o;
        o.backend = Backend::Cuda;
        Plan<float, 3> plan(Grid3::periodic({k, k, k}, 1.0 / double(k)), Kernel::bspline(order), o);
        DeviceBuffer<float> mesh(static_cast<std::size_t>(plan.mesh_size()));
        const View<float> m(mesh.get(), mesh.size());
        const View<const float> charges(dq.get(), n);
        const int reps = n >= 10000000 ? 5 : 11;
        const double bin = median_ms([&] { plan.set_points(pos); }, reps);
        const double spread = median_ms([&] { plan.spread({charges}, {m}); }, reps);
        const double one = median_ms([&] {
          plan.set_points(pos);
          plan.spread({charges}, {m});
        }, reps);
        const double twenty = median_ms([&] {
          plan.set_points(pos);
          for (int i = 0; i < 20; ++i) plan.spread({charges}, {m});
        }, reps) / 20;
        std::printf("%6d %5lld %10zu | %12.4f %12.4f | %12.4f %12.4f\n", order, static_cast<long long>(k), n, bin,
                    spread, one, twenty);
      }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: pme_bench --openmm DIR [N ...] | --spreads | --md-kernels DIR N STEPS\n";
  if (argc >= 3 && std::string(argv[1]) == "--openmm")
    return openmm_cases(argv[2], std::vector<std::string>(argv + 3, argv + argc));
  if (argc == 2 && std::string(argv[1]) == "--spreads") return spread_table();
  if (argc == 5 && std::string(argv[1]) == "--md-kernels") return md_kernels(argv[2], argv[3], std::atoi(argv[4]));
  std::fputs(usage.c_str(), stderr);
  return 2;
}
