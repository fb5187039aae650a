// The whole PIC step of `pmkit pic` on a GPU, beside the same step in PyTorch from the same
// run (bench/pic_torch.py's output, --torch FILE): 3D, float, thermal electrons on unit
// cells, the reference cases. For each case: the step time as one stretch of eager steps,
// and of the same simulation's steps replayed from a CUDA graph right after; the phases
// (a run of eager steps where each phase waits for the device), particle-steps per
// second of the faster step, and the variants: the step through pmkit's particle step
// (`step`: the gather, push, re-bin and deposit in one call, `pmkit pic`'s default on one
// rank), each beside the fastest of the separate calls' variants of its field method
// (`vs sep`), and the separate calls: the field by interp_gradient of phi or by E on the
// mesh, and the arrays put in binned order every K steps (--sort-every).
// --paper adds Stantchev et al.'s own cases beside the paper's figures (paper_cases below).
//   pic_bench [--torch FILE] [--steps N] [--quick] [--paper]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "pic.hpp"
#include "cuda/runtime.hpp"

namespace {

using pmkit::pic::Config;
using pmkit::pic::FieldMethod;

struct Case {
  std::int64_t cells;
  std::int64_t particles;
  const char* kernel;
};

// "cells particles kernel" -> the PyTorch step's milliseconds.
std::map<std::string, double> read_torch(const char* path) {
  std::map<std::string, double> ms;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    long long cells = 0, particles = 0;
    char kernel[16] = {0}, value[32] = {0};
    if (std::sscanf(line.c_str(), "torch-pic cells=%lld particles=%lld kernel=%15s ms=%31s", &cells, &particles, kernel,
                    value) == 4 &&
        std::strcmp(value, "oom") != 0)
      ms[std::to_string(cells) + " " + std::to_string(particles) + " " + kernel] = std::atof(value);
  }
  return ms;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds of f() with the device idle before and after (the median of `reps`).
template <class F>
double device_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    pmkit::cuda::check(cudaDeviceSynchronize(), "sync");
    const double t0 = now();
    f();
    pmkit::cuda::check(cudaDeviceSynchronize(), "sync");
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The cases of Stantchev, Dorland and Gumerov, "Fast parallel particle-to-grid interpolation for
// plasma PIC simulations on the GPU" (2008, bench's `--paper`): the CIC deposit on
// 32^3 (their Fig. 14) and 64^3 (Fig. 15) cells at the papers' particle counts, and on
// 64^3 the re-binning after one step (update_points after a thermal step of 0.1 cell
// r.m.s. a coordinate) against a full binning of particles in random order (set_points;
// their Fig. 13 compares their binning with a full radix sort). Float, unit cells, the
// particles uniform at random.
void paper_cases() {
  struct Row {
    int cells;
    int log2_particles;
    double paper_deposit_ms, paper_binning_ms, paper_sort_ms;  // 0: the paper has none
  };
  const Row rows[] = {{32, 18, 0.7, 0, 0},   {32, 19, 1.3, 0, 0},         {32, 20, 2.6, 0, 0},
                      {32, 21, 5.3, 0, 0},   {32, 22, 10.9, 0, 0},        {32, 23, 24.1, 0, 0},
                      {32, 24, 50.9, 0, 0},  {64, 20, 3.2, 5.8, 117.6},   {64, 21, 5.5, 9.7, 173.7},
                      {64, 22, 10.3, 18.3, 351.8}, {64, 23, 20.3, 37.8, 709.8}, {64, 24, 42.3, 73.5, 1407.7}};
  std::printf("\nStantchev et al. 2008: CIC deposit, re-binning after one step, full binning; ms\n");
  std::printf("%-6s %10s %6s | %9s %9s | %10s %10s | %10s %10s\n", "cells", "particles", "ppc", "deposit", "paper",
              "re-bin", "paper", "full bin", "paper sort");
  std::mt19937_64 rng(7);
  for (const Row& row : rows) {
    const std::size_t n = std::size_t(1) << row.log2_particles;
    const double box = row.cells;
    std::vector<float> host[3], moved[3];
    std::uniform_real_distribution<float> u(0.0f, float(box));
    std::normal_distribution<float> step(0.0f, 0.1f);
    for (int d = 0; d < 3; ++d) {
      host[d].resize(n);
      moved[d].resize(n);
      for (std::size_t p = 0; p < n; ++p) {
        host[d][p] = u(rng);
        moved[d][p] = host[d][p] + step(rng);
      }
    }
    pmkit::Options o;
    o.backend = pmkit::Backend::Cuda;
    pmkit::Plan<float, 3> plan(pmkit::Grid<3>::periodic({row.cells, row.cells, row.cells}), pmkit::Kernel::linear(), o);
    pmkit::cuda::DeviceBuffer<float> x(host[0]), y(host[1]), z(host[2]), x2(moved[0]), y2(moved[1]), z2(moved[2]);
    pmkit::cuda::DeviceBuffer<float> q(std::vector<float>(n, 1.0f)), mesh(static_cast<std::size_t>(plan.mesh_size()));
    const std::array<pmkit::View<const float>, 3> at{pmkit::View<const float>(x.get(), n), pmkit::View<const float>(y.get(), n),
                                                     pmkit::View<const float>(z.get(), n)};
    const std::array<pmkit::View<const float>, 3> next{pmkit::View<const float>(x2.get(), n),
                                                       pmkit::View<const float>(y2.get(), n),
                                                       pmkit::View<const float>(z2.get(), n)};
    const double full = device_seconds(5, [&] { plan.set_points(at); });
    const double deposit = device_seconds(10, [&] {
      plan.spread({pmkit::View<const float>(q.get(), n)}, {pmkit::View<float>(mesh.get(), mesh.size())});
    });
    // Each repetition: back to the binning of `at`, then the step to `next`, timed alone.
    std::vector<double> rebin;
    for (int r = 0; r < 5; ++r) {
      plan.set_points(at);
      rebin.push_back(device_seconds(1, [&] { plan.update_points(next); }));
    }
    std::sort(rebin.begin(), rebin.end());
    char paper_bin[16] = "-", paper_sort[16] = "-";
    if (row.paper_binning_ms > 0) {
      std::snprintf(paper_bin, sizeof paper_bin, "%.1f", row.paper_binning_ms);
      std::snprintf(paper_sort, sizeof paper_sort, "%.1f", row.paper_sort_ms);
    }
    std::printf("%3d^3  %7s2^%d %6zu | %9.3f %9.1f | %10.3f %10s | %10.3f %10s\n", row.cells, "", row.log2_particles,
                n / (std::size_t(row.cells) * row.cells * row.cells), 1e3 * deposit, row.paper_deposit_ms,
                1e3 * rebin[2], paper_bin, 1e3 * full, paper_sort);
  }
  std::printf("paper: 2008 GPU (CUDA 1.1); their binning is a re-sort after one step, their full sort CUDPP's radix sort\n");
}

}  // namespace

int main(int argc, char** argv) {
  const char* torch_file = nullptr;
  int steps = 20;
  bool quick = false, paper = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--torch") && i + 1 < argc) torch_file = argv[++i];
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--paper")) paper = true;
    else {
      std::fprintf(stderr, "usage: pic_bench [--torch FILE] [--steps N] [--quick] [--paper]\n");
      return 2;
    }
  }
  const std::map<std::string, double> torch = torch_file ? read_torch(torch_file) : std::map<std::string, double>{};
  // The reference cases, and a small one where the launches and waits weigh more.
  const Case cases[] = {{128, std::int64_t(1) << 24, "cic"}, {128, std::int64_t(1) << 24, "tsc"},
                        {256, std::int64_t(1) << 27, "cic"}, {32, std::int64_t(1) << 18, "cic"}};
  struct Variant {
    FieldMethod field;
    int sort_every;
    double max_away_fraction;  // negative: the plan's default
    const char* label;
    bool particle_step = false;
  };
  // The separate calls first: each particle step's row compares with them.
  const Variant variants[] = {{FieldMethod::Gradient, 0, -1, "gradient"},
                              {FieldMethod::Mesh, 0, -1, "mesh E"},
                              {FieldMethod::Gradient, 0, 0.05, "gradient, away 5%"},
                              {FieldMethod::Gradient, 4, -1, "gradient, sort/4"},
                              {FieldMethod::Gradient, 1, -1, "gradient, sort/1"},
                              {FieldMethod::Mesh, 1, -1, "mesh E, sort/1"},
                              {FieldMethod::Gradient, 1, -1, "step, gradient", true},
                              {FieldMethod::Mesh, 1, -1, "step, mesh E", true},
                              {FieldMethod::Gradient, 1, 0.05, "step, gradient, a5%", true},
                              {FieldMethod::Gradient, 1, 0.2, "step, gradient, a20%", true}};
  std::printf("PIC step, 3D float, thermal electrons (v_th = 1, h = lambda_D, dt = 0.1), %d steps a measure\n", steps);
  std::printf("step: one stretch of eager steps; graph: the next stretch replayed from a CUDA graph (whole cycles\n"
              "of 2 sort-every steps; the particle step runs eagerly); phases: eager steps with a wait after each\n"
              "phase (their sum >= step; `p-step`: the particle step's call); p-steps/s and the ratios: the faster\n"
              "of step and graph; vs sep: the fastest separate-calls row of the same field over this row\n");
  std::printf("%-22s %-20s %9s %9s %11s | %8s %8s %8s %8s %8s %8s %8s | %9s %7s %7s\n", "case", "variant", "step ms",
              "graph ms", "p-steps/s", "deposit", "solve", "gather", "push", "re-bin", "sort", "p-step", "torch ms",
              "ratio", "vs sep");
  for (const Case& k : cases) {
    if (quick && k.particles > (std::int64_t(1) << 24)) continue;
    const std::string key = std::to_string(k.cells) + " " + std::to_string(k.particles) + " " + k.kernel;
    const auto t = torch.find(key);
    std::map<FieldMethod, double> separate_ms;  // the fastest separate-calls step of each field
    for (const Variant& v : variants) {
      Config c;
      c.problem = pmkit::pic::Problem::Thermal;
      c.dim = 3;
      c.cells = {k.cells, k.cells, k.cells};
      c.particles = k.particles;
      c.kernel = pmkit::Kernel::from_name(k.kernel);
      c.backend = pmkit::Backend::Cuda;
      c.steps = steps;
      c.field = v.field;
      c.sort_every = v.sort_every;
      c.max_away_fraction = v.max_away_fraction;
      c.particle_step = v.particle_step;
      c.diagnostics = false;
      try {
        const pmkit::pic::Result r = pmkit::pic::benchmark(c, 3, steps);
        const double ms = 1e3 * r.seconds / steps, per = 1e3 / steps;
        const double graph_ms = r.graph_steps > 0 ? 1e3 * r.graph_seconds / r.graph_steps : 0.0;
        const double best_ms = graph_ms > 0 ? std::min(ms, graph_ms) : ms;
        const auto& p = r.phases;
        char graph[32] = "-", torch_ms[32] = "-", ratio[32] = "-", vs[32] = "-";
        const auto separate = separate_ms.find(v.field);
        if (!v.particle_step && (separate == separate_ms.end() || best_ms < separate->second))
          separate_ms[v.field] = best_ms;
        if (v.particle_step && separate != separate_ms.end())
          std::snprintf(vs, sizeof vs, "%.2fx", separate->second / best_ms);
        if (graph_ms > 0) std::snprintf(graph, sizeof graph, "%.3f", graph_ms);
        if (t != torch.end()) {
          std::snprintf(torch_ms, sizeof torch_ms, "%.2f", t->second);
          std::snprintf(ratio, sizeof ratio, "%.1fx", t->second / best_ms);
        }
        std::printf(
            "%4lld^3 2^%-2d %-8s   %-20s %9.3f %9s %11.3g | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %9s %7s %7s\n",
            static_cast<long long>(k.cells), 63 - __builtin_clzll(static_cast<unsigned long long>(k.particles)), k.kernel,
            v.label, ms, graph, double(k.particles) / (best_ms * 1e-3), p.deposit * per, p.solve * per, p.gather * per,
            p.push * per, p.rebin * per, p.sort * per, p.step * per, torch_ms, ratio, vs);
        if (!r.graph_note.empty() && !v.particle_step) std::printf("    no graph: %s\n", r.graph_note.c_str());
      } catch (const std::exception& e) {
        std::printf("%4lld^3 %-12s %-20s failed: %s\n", static_cast<long long>(k.cells), k.kernel, v.label, e.what());
      }
      std::fflush(stdout);
    }
  }
  std::printf("target (H200, 2^24 on 128^3, CIC, `step, gradient`): a step <= 1.0 ms (>= 1.68e10 particle-steps/s) and\n"
              ">= 20x the torch step\n");
  if (paper) paper_cases();
  return 0;
}
