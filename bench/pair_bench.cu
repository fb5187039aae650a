// Cutoff pair interactions on the GPU: every CUDA method of PairPlan side by side, the
// automatic choice, and the CPU backend on this machine's host cores, on
// the reference cases: d^3 periodic cells of width = cutoff (d = 8, 16, 32), 1, 10 and
// 100 particles per cell on average, uniform random, float; Lennard-Jones and the cheap
// and expensive synthetic kernels. Thread per particle is the published one-thread-per-
// particle method (PPNL), so it is the baseline of the table. The half shell evaluates
// each pair once and sums with atomics (not bit-for-bit reproducible).
//
// Times are medians of the wall time of the whole call (host checks, launch and
// synchronisation included), after warm-up calls (the first Auto call times the methods);
// the methods and Auto of a row are timed in interleaved rounds, so that they see the
// same machine;
// "kernel" is the device time of the traversal alone (CUDA events inside the call);
// "CPU bin" the CPU backend's set_points (its cell sort) on the same host cores.
// A second table times the binning of a particle-mesh code that runs both plans on the
// same particles: a mesh plan (M'4 on a grid of half the cutoff, the P3M proportion),
// and the pair plan binned from the caller's arrays or from that mesh plan
// (PairPlan::set_points(plan)); the LJ forces of the two pair plans are compared.
// Checks are N * 27 * ppc (the candidate pairs, as BENCHMARKS.md counts them); pairs are
// the ordered pairs within the cutoff, counted on the device by a counting kernel.
//
//   pair_bench [--quick] [--gpu-only] [--cpu-threads T] [--size D] [--ppc P]
// (--size / --ppc: only those rows, e.g. for a profiler run; --gpu-only: no CPU backend
// column, for device.sh's A/B rounds)
#include <cuda_runtime.h>

#include "bench/cuda_check.cuh"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/pair_synthetic.hpp"
#include "pmkit/cuda/pairs.cuh"

namespace {

using namespace pmkit;

using pmkit::bench::ck;

// One timed call (ms, wall clock); `device`: the clock stops after the device is done.
double time_call_ms(const std::function<void()>& f, bool device = true) {
  const auto a = std::chrono::steady_clock::now();
  f();
  if (device) ck(cudaDeviceSynchronize(), "sync");
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median of timed calls (ms) after `warm` untimed ones: at least `min_calls`, and up to
// `max_calls` while the total stays under 0.3 s (small cases vary by a few microseconds a
// call), but no more once it passes `cap_ms` (a call longer than that is timed once).
// `device`: as time_call_ms.
double median_ms(const std::function<void()>& f, int warm = 2, bool device = true, std::size_t min_calls = 5,
                 std::size_t max_calls = 201, double cap_ms = INFINITY) {
  for (int i = 0; i < warm; ++i) f();
  if (device) ck(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> t;
  double total = 0;
  while (t.size() < max_calls && (t.size() < min_calls || total < 300)) {
    t.push_back(time_call_ms(f, device));
    total += t.back();
    if (total > cap_ms) break;
  }
  return median(t);
}

// Medians of several calls timed in rounds (each round times every call once, in
// turn), so that a slow spell of the machine (clocks, a host hiccup) falls on all of
// them alike rather than on whichever was being timed then: at least 5 rounds, up to
// 201 while the total stays under 1 s.
std::vector<double> interleaved_medians_ms(const std::vector<std::function<void()>>& calls) {
  std::vector<std::vector<double>> t(calls.size());
  double total = 0;
  for (std::size_t round = 0; round < 5 || (round < 201 && total < 1000); ++round)
    for (std::size_t c = 0; c < calls.size(); ++c) {
      t[c].push_back(time_call_ms(calls[c]));
      total += t[c].back();
    }
  std::vector<double> medians;
  for (const auto& times : t) medians.push_back(median(times));
  return medians;
}


// What any one launch costs on this device, measured the two ways the table times a call:
// an empty kernel between two events (as "kernel ms" and the baseline programs in
// the reference baselines time a kernel) and launched and waited for on the host (as the whole
// call). The small rows' times are mostly this.
__global__ void empty_kernel() {}

void print_launch_floor() {
  cudaEvent_t e[2];
  for (cudaEvent_t& x : e) ck(cudaEventCreate(&x), "cudaEventCreate");
  auto launch = [] {
    empty_kernel<<<1, 32>>>();
    ck(cudaGetLastError(), "empty kernel");
  };
  std::vector<double> between_events;
  for (int r = 0; r < 201; ++r) {
    ck(cudaEventRecord(e[0]), "cudaEventRecord");
    launch();
    ck(cudaEventRecord(e[1]), "cudaEventRecord");
    ck(cudaEventSynchronize(e[1]), "cudaEventSynchronize");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, e[0], e[1]), "cudaEventElapsedTime");
    between_events.push_back(ms);
  }
  const double waited = median_ms(launch, 5);
  std::printf("\nlaunch floor: an empty kernel between two events %.4f ms (the 'kernel ms' measure), launched and "
              "waited for %.4f ms (the whole-call measure)\n",
              median(between_events), waited);
  for (cudaEvent_t& x : e) cudaEventDestroy(x);
}

// The CUDA methods of the table, in its column order.
constexpr int kMethodCount = 7;
constexpr PairMethod kMethods[kMethodCount] = {
    PairMethod::CudaThreadPerParticle, PairMethod::CudaThreeThreadsPerParticle, PairMethod::CudaBlockPerCell,
    PairMethod::CudaXPencil,           PairMethod::CudaHalfShell,               PairMethod::CudaCompactPencil,
    PairMethod::CudaRowSplit};

// Counts each particle's neighbours within the cutoff (the pairs of the table).
struct Row {
  int d = 0, ppc = 0;
  const char* kernel = "";
  std::size_t n = 0;
  double binning = 0, method[kMethodCount] = {}, automatic = 0, automatic_kernel = 0, cpu = -1, cpu_binning = -1;
  PairMethod chosen = PairMethod::Auto;
  double pairs = 0;
};

// Binning for both plans of one particle set (ms).
struct BinRow {
  int d = 0, ppc = 0;
  std::size_t n = 0;
  double mesh = 0, pairs_alone = 0, pairs_from_mesh = 0, max_force_diff = 0;
};

BinRow time_binning(int d, int ppc, const Box<3>& box, const std::vector<const float*>& x, std::size_t n) {
  BinRow row{d, ppc, n};
  typename Plan<float, 3>::Positions pos;
  for (int k = 0; k < 3; ++k) pos[k] = View<const float>(x[k], n);
  Options mesh_options;
  mesh_options.backend = Backend::Cuda;
  Plan<float, 3> mesh(Grid<3>::periodic({2 * d, 2 * d, 2 * d}, 0.5), Kernel::mp4(), mesh_options);
  const PairOptions pair_options{mesh_options};
  PairPlan<float, 3> alone(box, 1.0, pair_options), from_mesh(box, 1.0, pair_options);
  mesh.set_points(pos);
  alone.set_points(pos);
  from_mesh.set_points(mesh);
  const std::vector<double> ms = interleaved_medians_ms(
      {[&] { mesh.set_points(pos); }, [&] { alone.set_points(pos); }, [&] { from_mesh.set_points(mesh); }});
  row.mesh = ms[0];
  row.pairs_alone = ms[1];
  row.pairs_from_mesh = ms[2];
  // The same forces up to the rounding of the mesh plan's positions.
  const pair_kernels::LennardJones<3> lj{1.0, 0.8, 1.0, 0.0};
  std::vector<std::unique_ptr<cuda::DeviceBuffer<float>>> a, b;
  std::vector<View<float>> va, vb;
  for (int k = 0; k < 4; ++k) {
    a.push_back(std::make_unique<cuda::DeviceBuffer<float>>(n, "pair_bench: outputs"));
    b.push_back(std::make_unique<cuda::DeviceBuffer<float>>(n, "pair_bench: outputs"));
    va.push_back(View<float>(a.back()->get(), n));
    vb.push_back(View<float>(b.back()->get(), n));
  }
  alone.compute(lj, {}, va);
  from_mesh.compute(lj, {}, vb);
  double scale = 0;
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> fa = a[k]->download(), fb = b[k]->download();
    for (std::size_t i = 0; i < n; ++i) {
      scale = std::max(scale, double(std::fabs(fa[i])));
      row.max_force_diff = std::max(row.max_force_diff, double(std::fabs(fa[i] - fb[i])));
    }
  }
  if (scale > 0) row.max_force_diff /= scale;
  return row;
}

template <class Kernel>
void time_kernel(Row& row, const Kernel& kernel, const Box<3>& box, const std::vector<const float*>& x,
                 std::size_t n, const float* weights, std::vector<cuda::DeviceBuffer<float>*>& outputs, int cpu_threads,
                 const std::vector<std::vector<float>>& host_x, bool time_cpu) {
  typename PairPlan<float, 3>::Positions pos;
  for (int d = 0; d < 3; ++d) pos[d] = View<const float>(x[d], n);
  std::vector<View<const float>> in;
  if (Kernel::inputs > 0) in.push_back(View<const float>(weights, n));
  std::vector<View<float>> out;
  for (int k = 0; k < Kernel::outputs; ++k) out.push_back(View<float>(outputs[k]->get(), n));
  // One plan per method and one for Auto, all binned and warmed up (Auto's first call
  // times the candidates), then timed in interleaved rounds.
  std::vector<std::unique_ptr<PairPlan<float, 3>>> plans;
  for (int m = 0; m <= kMethodCount; ++m) {
    PairOptions opt;
    opt.backend = Backend::Cuda;
    opt.method = m < kMethodCount ? kMethods[m] : PairMethod::Auto;
    plans.push_back(std::make_unique<PairPlan<float, 3>>(box, 1.0, opt));
    plans.back()->set_points(pos);
    for (int warm = 0; warm < 2; ++warm) cuda::compute(*plans.back(), kernel, in, out);
  }
  row.binning = median_ms([&] { plans[0]->set_points(pos); });
  std::vector<double> kernel_ms;
  std::vector<std::function<void()>> calls;
  for (int m = 0; m <= kMethodCount; ++m)
    calls.push_back([&, m] {
      cuda::compute(*plans[m], kernel, in, out);
      if (m == kMethodCount) kernel_ms.push_back(plans[m]->last_timings().compute_s * 1e3);
    });
  const std::vector<double> ms = interleaved_medians_ms(calls);
  for (int m = 0; m < kMethodCount; ++m) row.method[m] = ms[m];
  row.automatic = ms[kMethodCount];
  row.automatic_kernel = median(kernel_ms);
  row.chosen = plans[kMethodCount]->last_method();
  if (time_cpu) {
    PairOptions opt;
    opt.num_threads = cpu_threads;
    PairPlan<float, 3> plan(box, 1.0, opt);
    typename PairPlan<float, 3>::Positions hpos;
    for (int d = 0; d < 3; ++d) hpos[d] = host_x[d];
    // Host calls: medians of at least 3, up to 51 within 0.3 s, and as many as 2 s allow
    // for the largest rows. With every host core in the team, a thread that the OS
    // deschedules stalls a whole call by a time slice, and a few more calls keep those
    // stalls out of the median.
    auto host_median_ms = [](const std::function<void()>& call, int warm) {
      return median_ms(call, warm, false, 3, 51, 2000);
    };
    row.cpu_binning = host_median_ms([&] { plan.set_points(hpos); }, 0);
    std::vector<std::vector<float>> hout(Kernel::outputs, std::vector<float>(n));
    std::vector<View<float>> hv(hout.begin(), hout.end());
    std::vector<float> w(n, 1.0f);
    std::vector<View<const float>> hin;
    if (Kernel::inputs > 0) hin.push_back(w);
    row.cpu = host_median_ms([&] { plan.compute(kernel, hin, hv); }, 1);  // the first call allocates
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, gpu_only = false;
  int cpu_threads = 0, only_size = 0, only_ppc = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--gpu-only")) gpu_only = true;
    else if (!std::strcmp(argv[i], "--cpu-threads") && i + 1 < argc) cpu_threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--size") && i + 1 < argc) only_size = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--ppc") && i + 1 < argc) only_ppc = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: pair_bench [--quick] [--gpu-only] [--cpu-threads T] [--size D] [--ppc P]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("Cutoff pair interactions, float, 3D periodic, cell width = cutoff = 1; %s\n", prop.name);

  std::vector<Row> rows;
  std::vector<BinRow> bin_rows;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const std::vector<int> sizes = quick ? std::vector<int>{8, 16} : std::vector<int>{8, 16, 32};
  for (int d : sizes)
    for (int ppc : {1, 10, 100}) {
      if ((only_size && d != only_size) || (only_ppc && ppc != only_ppc)) continue;
      const std::size_t n = static_cast<std::size_t>(d) * d * d * ppc;
      std::vector<std::vector<float>> hx(3, std::vector<float>(n));
      std::vector<float> hw(n);
      for (std::size_t i = 0; i < n; ++i) {
        for (int k = 0; k < 3; ++k) hx[k][i] = static_cast<float>(unit(rng) * d);
        hw[i] = static_cast<float>(unit(rng));
      }
      cuda::DeviceBuffer<float> x(hx[0]), y(hx[1]), z(hx[2]), w(hw);
      std::vector<cuda::DeviceBuffer<float>*> outs;
      std::vector<std::unique_ptr<cuda::DeviceBuffer<float>>> owned;
      for (int k = 0; k < 4; ++k) {
        owned.push_back(std::make_unique<cuda::DeviceBuffer<float>>(n, "pair_bench: outputs"));
        outs.push_back(owned.back().get());
      }
      const Box<3> box = Box<3>::periodic({double(d), double(d), double(d)});
      const std::vector<const float*> xs = {x.get(), y.get(), z.get()};

      // Ordered pairs within the cutoff.
      double pairs = 0;
      {
        PairOptions opt;
        opt.backend = Backend::Cuda;
        opt.method = PairMethod::CudaThreadPerParticle;
        PairPlan<float, 3> plan(box, 1.0, opt);
        plan.set_points({View<const float>(x.get(), n), View<const float>(y.get(), n), View<const float>(z.get(), n)});
        plan.compute(pair_kernels::NeighbourCount{}, {}, {View<float>(outs[0]->get(), n)});
        for (float c : outs[0]->download()) pairs += c;
      }
      const bool cpu = !quick && !gpu_only;  // Lennard-Jones only: the CPU backend, half shell
      Row lj{d, ppc, "lennard-jones", n}, cheap{d, ppc, "cheap", n}, expensive{d, ppc, "expensive", n};
      time_kernel(lj, pair_kernels::LennardJones<3>{1.0, 0.8, 1.0, 0.0}, box, xs, n, w.get(), outs, cpu_threads, hx, cpu);
      time_kernel(cheap, bench::CheapSynthetic{1.0}, box, xs, n, w.get(), outs, cpu_threads, hx, false);
      time_kernel(expensive, bench::ExpensiveSynthetic{1.0}, box, xs, n, w.get(), outs, cpu_threads, hx, false);
      bin_rows.push_back(time_binning(d, ppc, box, xs, n));
      for (Row* r : {&lj, &cheap, &expensive}) {
        r->pairs = pairs;
        rows.push_back(*r);
      }
      std::fprintf(stderr, "done d=%d ppc=%d\n", d, ppc);
    }

  std::printf("\n%-4s %-4s %-14s %9s %8s | %9s %9s %9s %9s %9s %9s %9s | %9s %9s %-22s %6s | %8s %8s | %9s %7s %9s\n",
              "d", "ppc", "kernel", "N", "bin ms", "thread ms", "3thr ms", "cell ms", "pencil ms", "half ms", "compact ms",
              "rowsplit ms", "auto ms", "kernel ms",
              "auto chose", "/best", "Gcheck/s", "Gpair/s", "CPU ms", "GPU/CPU", "CPU bin");
  bool auto_ok = true;
  for (const Row& r : rows) {
    const double best = *std::min_element(r.method, r.method + kMethodCount);
    const double checks = double(r.n) * 27.0 * r.ppc;
    auto_ok = auto_ok && r.automatic <= 1.10 * best;
    char cpu[32] = "-", speed[32] = "-", cpu_bin[32] = "-";
    if (r.cpu >= 0) {
      std::snprintf(cpu, sizeof cpu, "%.3f", r.cpu);
      std::snprintf(speed, sizeof speed, "%.1fx", r.cpu / r.automatic);
      std::snprintf(cpu_bin, sizeof cpu_bin, "%.3f", r.cpu_binning);
    }
    std::printf("%-4d %-4d %-14s %9zu %8.3f | %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f | %9.4f %9.4f %-22s %6.2f | "
                "%8.1f %8.1f | %9s %7s %9s\n",
                r.d, r.ppc, r.kernel, r.n, r.binning, r.method[0], r.method[1], r.method[2], r.method[3], r.method[4],
                r.method[5], r.method[6], r.automatic,
                r.automatic_kernel, to_string(r.chosen), r.automatic / best, checks / r.automatic * 1e-6, r.pairs / r.automatic * 1e-6,
                cpu, speed, cpu_bin);
  }
  std::printf("\nauto within 10%% of the best method in every row: %s\n", auto_ok ? "yes" : "NO");
  print_launch_floor();

  std::printf("\nBinning both plans of one particle set (mesh: M'4, h = cutoff / 2), ms; 'both' = mesh + pairs\n");
  std::printf("%-4s %-4s %9s | %8s | %11s %11s %7s | %10s %10s | %12s\n", "d", "ppc", "N", "mesh", "pairs alone",
              "pairs<-mesh", "ratio", "both alone", "both<-mesh", "max |dF|/|F|");
  for (const BinRow& r : bin_rows)
    std::printf("%-4d %-4d %9zu | %8.4f | %11.4f %11.4f %6.2fx | %10.4f %10.4f | %12.2e\n", r.d, r.ppc, r.n, r.mesh,
                r.pairs_alone, r.pairs_from_mesh, r.pairs_alone / r.pairs_from_mesh, r.mesh + r.pairs_alone,
                r.mesh + r.pairs_from_mesh, r.max_force_diff);
  // Issue targets (H100, float, Lennard-Jones, 32^3 cells, interaction step alone).
  for (const Row& r : rows)
    if (r.d == 32 && !std::strcmp(r.kernel, "lennard-jones")) {
      const double t = r.ppc == 1 ? 0.03 : r.ppc == 10 ? 0.15 : 5.0;
      std::printf("target 32^3 %3d ppc LJ, at most %.3f ms: whole call %.4f ms (%s, %.2fx), kernel alone %.4f ms (%s, %.2fx)\n",
                  r.ppc, t, r.automatic, r.automatic <= t ? "met" : "MISSED", r.automatic / t, r.automatic_kernel,
                  r.automatic_kernel <= t ? "met" : "MISSED", r.automatic_kernel / t);
    }
  return 0;
}
