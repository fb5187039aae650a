// PME's real space on the GPU: PmePlan's pairs (the pair plan binned from the mesh plan's
// points, the Ewald erfc kernel) by CUDA pair method, beside the methods that Auto chose
// from before the compacted ones, beside OpenMM's direct space where given, and inside the
// whole compute.
//
//   pme_real_space_bench [--openmm DIR] [--reps R] [N ...]
//
// N charges (default 10^4, 10^5, 10^6) at water's density (100 a nm^3, the box (N / 100)^(1/3)
// nm), cutoff 1 nm, OpenMM's alpha (ewaldErrorTolerance 5e-4) and mesh, order 5, float.
// With --openmm DIR, the charges and positions of DIR/pme-case-N.bin (bench/pme_openmm.py)
// and OpenMM's direct-space milliseconds a step from DIR/pme-direct-N.txt (the nonbonded
// force group integrated alone; OpenMM keeps its neighbour list between steps where pmkit
// bins each call). Without, random positions and alternating charges of the same density.
//
// Per N: the binning (PairPlan::set_points of the mesh plan, as PmePlan's compute makes it)
// and the traversal (PairPlan::compute with EwaldRealSpace) of every method, each with
// its ratio to "before" (the fastest of the methods before the compacted ones: what Auto
// picked from) and to OpenMM's direct step; each method's forces and potentials against the
// x-pencil's (max relative difference); then PmePlan: set_points + compute,
// compute alone, compute_reciprocal alone, and the real space as their difference.
// Times: medians of CUDA-event times over R repetitions (default 20) after warm-up calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/runtime.hpp"
#include "cuda_check.cuh"
#include "pme_openmm_case.hpp"
#include "pmkit/pairs.hpp"
#include "pmkit/pme.hpp"
#include "pmkit/plan.hpp"

namespace {

using namespace pmkit;
using cuda::DeviceBuffer;

constexpr double kCutoff = 1.0, kTolerance = 5e-4;
constexpr int kOrder = 5;

using bench::median_ms;

struct Case {
  std::size_t n = 0;
  double length = 0, openmm_direct_ms = -1;
  PmeParameters params;
  std::array<std::vector<float>, 3> x;
  std::vector<float> q;
};

// OpenMM's case (pme_openmm.py's file) or random charges of the same density.
Case make_case(std::size_t n, const std::string& dir) {
  Case c;
  c.n = n;
  if (!dir.empty()) {
    const bench::OpenMMCase openmm = bench::read_case(dir + "/pme-case-" + std::to_string(n) + ".bin");
    c.length = openmm.length;
    c.params.alpha = openmm.alpha;
    c.params.mesh = openmm.mesh;
    c.params.order = kOrder;
    c.params.cutoff = kCutoff;
    for (std::size_t i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) c.x[d].push_back(static_cast<float>(openmm.x[d][i]));
      c.q.push_back(static_cast<float>(openmm.q[i]));
    }
    std::ifstream direct(dir + "/pme-direct-" + std::to_string(n) + ".txt");
    if (direct) direct >> c.openmm_direct_ms;
    return c;
  }
  c.length = std::cbrt(double(n) / 100.0);
  c.params = PmeParameters::choose({c.length, c.length, c.length}, kCutoff, kTolerance, kOrder);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) c.x[d].push_back(static_cast<float>(unit(rng) * c.length));
    c.q.push_back(i % 2 ? -1.0f : 1.0f);
  }
  return c;
}

// The methods timed; the first five are those Auto chose from before the compacted ones.
constexpr PairMethod kMethods[] = {PairMethod::CudaThreadPerParticle, PairMethod::CudaThreeThreadsPerParticle,
                                   PairMethod::CudaBlockPerCell,      PairMethod::CudaXPencil,
                                   PairMethod::CudaHalfShell,         PairMethod::CudaCompactPencil,
                                   PairMethod::CudaRowSplit,          PairMethod::Auto};
constexpr int kBefore = 5, kMethodCount = sizeof kMethods / sizeof kMethods[0];

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, double(std::abs(b[i])));
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

void run(const Case& c, int reps) {
  const std::size_t n = c.n;
  const std::array<double, 3> box = {c.length, c.length, c.length};
  std::array<std::unique_ptr<DeviceBuffer<float>>, 3> x;
  for (int d = 0; d < 3; ++d) x[d] = std::make_unique<DeviceBuffer<float>>(c.x[d]);
  DeviceBuffer<float> q(c.q);
  std::vector<std::unique_ptr<DeviceBuffer<float>>> out;
  for (int k = 0; k < 4; ++k) out.push_back(std::make_unique<DeviceBuffer<float>>(n));
  const Plan<float, 3>::Positions positions = {View<const float>(x[0]->get(), n), View<const float>(x[1]->get(), n),
                                               View<const float>(x[2]->get(), n)};

  // The mesh plan as PmePlan makes it (its grid: the PME mesh over the box).
  Grid<3> grid = Grid<3>::periodic(c.params.mesh);
  for (int d = 0; d < 3; ++d) grid.spacing[d] = box[d] / double(c.params.mesh[d]);
  Options mesh_options;
  mesh_options.backend = Backend::Cuda;
  Plan<float, 3> mesh(grid, Kernel::bspline(kOrder), mesh_options);
  mesh.set_points(positions);

  const pair_kernels::EwaldRealSpace<3> ewald{c.params.alpha};
  const View<const float> in[1] = {View<const float>(q.get(), n)};
  View<float> outs[4];
  for (int k = 0; k < 4; ++k) outs[k] = View<float>(out[k]->get(), n);
  double bin_ms[kMethodCount], pair_ms[kMethodCount], diff[kMethodCount];
  PairMethod chosen = PairMethod::Auto;
  std::vector<std::vector<float>> pencil;
  bool same_bits_as_pencil = false;
  for (int m = 0; m < kMethodCount; ++m) {
    PairOptions opt;
    opt.backend = Backend::Cuda;
    opt.method = kMethods[m];
    PairPlan<float, 3> pairs(Box<3>::periodic(box), kCutoff, opt);
    bin_ms[m] = median_ms([&] { pairs.set_points(mesh); }, reps);
    pairs.compute(ewald, Span<View<const float>>(in, 1), Span<View<float>>(outs, 4));  // Auto's timing
    pair_ms[m] = median_ms([&] { pairs.compute(ewald, Span<View<const float>>(in, 1), Span<View<float>>(outs, 4)); },
                           reps);
    if (kMethods[m] == PairMethod::Auto) chosen = pairs.last_method();
    std::vector<std::vector<float>> got;
    for (int k = 0; k < 4; ++k) got.push_back(out[k]->download());
    if (kMethods[m] == PairMethod::CudaXPencil) pencil = got;
    diff[m] = -1;
    if (!pencil.empty()) {
      diff[m] = 0;
      for (int k = 0; k < 4; ++k) diff[m] = std::max(diff[m], max_rel_diff(got[k], pencil[k]));
    }
    if (kMethods[m] == PairMethod::CudaCompactPencil) same_bits_as_pencil = got == pencil;
  }
  const double before = *std::min_element(pair_ms, pair_ms + kBefore);
  const int before_method = static_cast<int>(std::min_element(pair_ms, pair_ms + kBefore) - pair_ms);

  std::printf("\nN = %zu, box %.4f nm, %d^3 cells of the cutoff, %.0f charges a cell, alpha %.6f, mesh %lld^3\n", n,
              c.length, static_cast<int>(std::floor(c.length / kCutoff)),
              double(n) / std::pow(std::floor(c.length / kCutoff), 3), c.params.alpha,
              static_cast<long long>(c.params.mesh[0]));
  std::printf("%-24s %10s %12s %10s %12s %14s\n", "method", "bin ms", "pairs ms", "/before", "/OpenMM", "max rel diff");
  for (int m = 0; m < kMethodCount; ++m) {
    char vs_openmm[32] = "-", rel[32] = "-";
    if (c.openmm_direct_ms > 0)
      std::snprintf(vs_openmm, sizeof vs_openmm, "%.2f", (bin_ms[m] + pair_ms[m]) / c.openmm_direct_ms);
    if (diff[m] >= 0) std::snprintf(rel, sizeof rel, "%.1e", diff[m]);
    std::string name = to_string(kMethods[m]);
    if (kMethods[m] == PairMethod::Auto) name += std::string(" (") + to_string(chosen) + ")";
    std::printf("%-24s %10.4f %12.4f %10.2f %12s %14s\n", name.c_str(), bin_ms[m], pair_ms[m], pair_ms[m] / before,
                vs_openmm, rel);
  }
  std::printf("before (the fastest of the first five, %s): %.4f ms; auto: %.4f ms, %.2fx faster\n",
              to_string(kMethods[before_method]), before, pair_ms[kMethodCount - 1],
              before / pair_ms[kMethodCount - 1]);
  std::printf("compact-pencil's outputs bit for bit the x-pencil's: %s\n", same_bits_as_pencil ? "yes" : "no");
  if (c.openmm_direct_ms > 0)
    std::printf("OpenMM direct space (its neighbour list kept): %.4f ms; pmkit binning + pairs (auto) %.4f ms, "
                "%.2fx of it\n",
                c.openmm_direct_ms, bin_ms[kMethodCount - 1] + pair_ms[kMethodCount - 1],
                (bin_ms[kMethodCount - 1] + pair_ms[kMethodCount - 1]) / c.openmm_direct_ms);

  // PmePlan: the whole compute, and its real space as the difference to the reciprocal.
  PmeOptions pme_options;
  pme_options.backend = Backend::Cuda;
  PmePlan<float> pme(box, c.params, pme_options);
  DeviceBuffer<double> energy(1);
  const PmePlan<float>::Forces forces = {View<float>(out[0]->get(), n), View<float>(out[1]->get(), n),
                                         View<float>(out[2]->get(), n)};
  const View<double> e(energy.get(), 1);
  auto step = [&] {
    pme.set_points(positions);
    pme.compute(in[0], forces, e);
  };
  step();  // the pair plan's Auto timing
  const double step_ms = median_ms(step, reps);
  const double compute_ms = median_ms([&] { pme.compute(in[0], forces, e); }, reps);
  const double reciprocal_ms = median_ms([&] { pme.compute_reciprocal(in[0], forces, e); }, reps);
  const double set_points_ms = median_ms([&] { pme.set_points(positions); }, reps);
  std::printf("PmePlan: set_points + compute %.4f ms (set_points %.4f); compute %.4f ms, compute_reciprocal %.4f ms, "
              "real space (the difference, with the binning) %.4f ms = %.0f%% of the compute\n",
              step_ms, set_points_ms, compute_ms, reciprocal_ms, step_ms - set_points_ms - reciprocal_ms,
              100.0 * (step_ms - set_points_ms - reciprocal_ms) / (step_ms - set_points_ms));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int reps = 20;
  std::vector<std::size_t> sizes;
  for (int a = 1; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--openmm") && a + 1 < argc) {
      dir = argv[++a];
    } else if (!std::strcmp(argv[a], "--reps") && a + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++a]));
    } else if (argv[a][0] != '-') {
      sizes.push_back(static_cast<std::size_t>(std::atof(argv[a])));
    } else {
      std::fprintf(stderr, "usage: pme_real_space_bench [--openmm DIR] [--reps R] [N ...]\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {10000, 100000, 1000000};
  int device = 0;
  cudaDeviceProp prop{};
  cudaGetDevice(&device);
  cudaGetDeviceProperties(&prop, device);
  std::printf("PME real space (float, cutoff %.1f nm, order %d) on %s, %d repetitions a median\n", kCutoff, kOrder,
              prop.name, reps);
  for (std::size_t n : sizes) run(make_case(n, dir), reps);
  return 0;
}
