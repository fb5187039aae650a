// The distributed plan on GPUs, one rank per GPU (mpirun -np P distributed_bench):
//  * weak scaling: 2^24 particles and a 256^3 block per GPU;
//  * strong scaling: 2^26 particles on 512^3 in all.
// One step is migrate after a small move (every particle by up to a quarter cell per axis,
// on the device as a simulation's push moves them; --host-move: on the host's threads, then
// uploaded, while the GPUs wait), update_points (set_points in the first step only;
// --set-points: in every step, as for the Plan), spread and interp, float, M'4, periodic.
// A rank that migrate gave or took particles bins them in full in update_points. Each
// figure is the median of the timed steps of the slowest rank, after warm-up steps (a
// rank's count-sized buffers are allocated, and regrown once, in its first steps:
// docs/tuning.md#kregrowthheadroom), printed beside its baseline from the same run, as
// the ratio baseline step / this step: the single-GPU Plan's step (update_points, spread,
// interp: the best path on one device; no decomposition, no messages) on rank 0's GPU with
// the same particles per GPU (weak) or all of them (strong), and the distributed plan on
// that one rank.
// Every distributed run goes once through each transport (NCCL, host-staged MPI), each
// twice: the exchanges after the local work (Overlap::Never), then overlapped with the
// interior particles' work (Overlap::Auto), with the step's ratio between them; each
// spread and interp shows its exchange as waited for and the interior work that ran
// while the messages travelled (DistributedTimings::overlapped_s). On one
// GPU also both steps replayed from a CUDA graph, the Plan's beside the one-rank
// DistributedPlan's (migrate, update_points, spread, interp).
// Beside each distributed step, untimed in it: the fastest step, a second set_points on
// the same positions, a second migrate right after the first (nothing left to move),
// which times migrate's fixed cost: its pass over the positions and its messages, and a
// third with one particle a rank moved one block along x, which adds the fixed cost of
// moving particles (selection, sort, packing, messages) without their number. The
// step is the sum of its phases, each the slowest rank's; beside it the slowest rank's
// whole step (a rank that finishes a phase early waits for the others in the next phase's
// messages, so the sum of the slowest phases counts that wait twice).
//   mpirun -np 2 distributed_bench [--weak-particles N] [--weak-cells C] [--strong-particles N]
//                                  [--strong-cells C] [--steps S] [--warmup W] [--skip-strong]
//                                  [--nccl-only] [--host-move] [--set-points]
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda/graph.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/cuda/runtime.hpp"
#include "pmkit/distributed.hpp"
#include "rank_gpu.cuh"

namespace {

using namespace pmkit;
using cuda::check;
using cuda::DeviceBuffer;

int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A fast reproducible generator of uniform doubles in [0, 1).
struct SplitMix {
  std::uint64_t state;
  __host__ __device__ double next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1p-53;
  }
};

// The phases of one step, in seconds (`points`: update_points, or set_points; not in the
// step: a second set_points on the same positions and a second migrate with nothing to
// move; the fastest step's total).
struct Step {
  double migrate = 0, points = 0, spread = 0, interp = 0, spread_exchange = 0, interp_exchange = 0;
  double spread_overlapped = 0, interp_overlapped = 0;
  double set_points_again = 0, idle_migrate = 0, one_moving_migrate = 0, fastest = 0, whole = 0;
  double total() const { return migrate + points + spread + interp; }
};

// Untimed steps first, then the timed ones; where the particles move between steps;
// whether the steps after the first take the particles by update_points.
struct Schedule {
  int warmup = 10, steps = 5;
  bool host_move = false;
  bool update = true;
  // The call that takes step s's positions.
  template <class P, class X>
  void take(P& plan, const X& positions, int s) const {
    if (s > 0 && update) plan.update_points(positions);
    else plan.set_points(positions);
  }
};

// Every particle by up to a quarter cell of width h along one axis, from a generator
// seeded by the particle's index and `seed`.
__global__ void move_kernel(float* x, std::size_t n, double h, std::uint64_t seed) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  SplitMix rng{seed * 0x100000001b3ull + i};
  x[i] += static_cast<float>((rng.next() - 0.5) * 0.5 * h);
}

// Particles of one rank on the device, in arrays of `capacity` slots, and their host copy.
struct Particles {
  std::size_t count = 0, capacity = 0;
  std::array<std::vector<float>, 3> host;
  std::array<DeviceBuffer<float>, 3> x;
  DeviceBuffer<float> q, values;

  Particles(std::size_t n, std::size_t cap, const std::array<double, 3>& lo, const std::array<double, 3>& hi,
            std::uint64_t seed)
      : count(n), capacity(cap) {
    SplitMix rng{seed};
    for (int d = 0; d < 3; ++d) {
      host[d].resize(cap);
      for (std::size_t i = 0; i < n; ++i) host[d][i] = static_cast<float>(lo[d] + rng.next() * (hi[d] - lo[d]));
      x[d] = DeviceBuffer<float>(host[d], "positions");
    }
    q = DeviceBuffer<float>(std::vector<float>(cap, 1.0f), "charges");
    values.reserve(cap, "interpolated values");
  }
  // Every particle by up to a quarter cell of width h per axis: on the device, on the
  // plans' stream (so that the move waits for the calls still reading the positions), or
  // on the host (kMoveThreads threads of one generator each) and uploaded.
  void move(double h, std::uint64_t seed, bool on_host, cudaStream_t stream = nullptr) {
    if (!on_host) {
      constexpr unsigned kThreads = 256;
      for (int d = 0; d < 3; ++d)
        move_kernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
            x[d].get(), count, h, seed * 3 + d);
      check(cudaGetLastError(), "move_kernel");
      return;
    }
    constexpr int kMoveThreads = 8;
    for (int d = 0; d < 3; ++d) {
      check(cudaMemcpy(host[d].data(), x[d].get(), count * sizeof(float), cudaMemcpyDeviceToHost), "download");
      std::vector<std::thread> threads;
      for (int t = 0; t < kMoveThreads; ++t)
        threads.emplace_back([&, t] {
          SplitMix rng{seed * 64 + 8 * d + t};
          for (std::size_t i = count * t / kMoveThreads; i < count * (t + 1) / kMoveThreads; ++i)
            host[d][i] += static_cast<float>((rng.next() - 0.5) * 0.5 * h);
        });
      for (auto& t : threads) t.join();
      check(cudaMemcpy(x[d].get(), host[d].data(), count * sizeof(float), cudaMemcpyHostToDevice), "upload");
    }
  }
  // Particle 0 moved by `by` along axis d (a periodic plan wraps it).
  void shift_first(int d, float by) {
    float v;
    check(cudaMemcpy(&v, x[d].get(), sizeof(float), cudaMemcpyDeviceToHost), "download");
    v += by;
    check(cudaMemcpy(x[d].get(), &v, sizeof(float), cudaMemcpyHostToDevice), "upload");
  }
  std::array<View<const float>, 3> positions() const {
    return {View<const float>(x[0].get(), count), View<const float>(x[1].get(), count),
            View<const float>(x[2].get(), count)};
  }
};

// The CUDA options of this rank: its GPU (main sets it current), the default stream.
Options cuda_options() {
  Options o;
  o.backend = Backend::Cuda;
  check(cudaGetDevice(&o.device), "cudaGetDevice");
  return o;
}

double max_over(MPI_Comm comm, double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, comm);
  return v;
}

Step median(std::vector<Step> steps) {
  std::vector<double> wholes;
  for (const Step& s : steps) wholes.push_back(s.whole);
  std::sort(wholes.begin(), wholes.end());
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.total() < b.total(); });
  Step m = steps[steps.size() / 2];
  m.fastest = steps.front().total();
  m.whole = wholes[wholes.size() / 2];
  return m;
}

// The single-GPU Plan: update_points (or set_points), spread, interp after each move.
Step run_plan(const Grid<3>& grid, Particles& p, const Schedule& schedule) {
  Plan<float, 3> plan(grid, Kernel::mp4(), cuda_options());
  DeviceBuffer<float> mesh(static_cast<std::size_t>(plan.mesh_size()), "mesh");
  std::vector<Step> timed;
  for (int s = 0; s < schedule.warmup + schedule.steps; ++s) {
    p.move(grid.spacing[0], 1000 + s, schedule.host_move);
    // Positions moved past a periodic end are wrapped by the plan itself.
    Step t;
    check(cudaDeviceSynchronize(), "step");
    double t0 = MPI_Wtime();
    schedule.take(plan, p.positions(), s);
    check(cudaDeviceSynchronize(), "update_points");
    double t1 = MPI_Wtime();
    plan.spread({View<const float>(p.q.get(), p.count)}, {View<float>(mesh.get(), mesh.size())});
    check(cudaDeviceSynchronize(), "spread");
    double t2 = MPI_Wtime();
    plan.interp({View<const float>(mesh.get(), mesh.size())}, {View<float>(p.values.get(), p.count)});
    check(cudaDeviceSynchronize(), "interp");
    double t3 = MPI_Wtime();
    t.points = t1 - t0;
    t.spread = t2 - t1;
    t.interp = t3 - t2;
    t.whole = t3 - t0;
    if (s >= schedule.warmup) timed.push_back(t);
  }
  return median(timed);
}

// The distributed plan on comm: migrate, update_points (or set_points), spread, interp
// after each move; the slowest rank's phases.
Step run_distributed(MPI_Comm comm, DistributedPlan<float, 3>& plan, Particles& p, const Schedule& schedule) {
  const Grid<3>& grid = plan.grid();
  DeviceBuffer<float> block(static_cast<std::size_t>(plan.block_size()), "block");
  std::vector<Step> timed;
  for (int s = 0; s < schedule.warmup + schedule.steps; ++s) {
    p.move(grid.spacing[0], 2000 + 7919 * world_rank() + s, schedule.host_move);
    Step t;
    check(cudaDeviceSynchronize(), "step");
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    std::array<View<float>, 3> x = {View<float>(p.x[0].get(), p.capacity), View<float>(p.x[1].get(), p.capacity),
                                    View<float>(p.x[2].get(), p.capacity)};
    p.count = plan.migrate(x, {View<float>(p.q.get(), p.capacity)}, p.count);
    check(cudaDeviceSynchronize(), "migrate");
    double t1 = MPI_Wtime();
    schedule.take(plan, p.positions(), s);
    check(cudaDeviceSynchronize(), "update_points");
    double t2 = MPI_Wtime();
    plan.spread({View<const float>(p.q.get(), p.count)}, {View<float>(block.get(), block.size())});
    check(cudaDeviceSynchronize(), "spread");
    double t3 = MPI_Wtime();
    const DistributedTimings spread_phases = plan.last_timings();
    const double t3_after = MPI_Wtime();
    plan.interp({View<const float>(block.get(), block.size())}, {View<float>(p.values.get(), p.count)});
    check(cudaDeviceSynchronize(), "interp");
    double t4 = MPI_Wtime();
    const DistributedTimings interp_phases = plan.last_timings();
    MPI_Barrier(comm);
    const double again = MPI_Wtime();
    plan.set_points(p.positions());
    check(cudaDeviceSynchronize(), "set_points");
    t.set_points_again = max_over(comm, MPI_Wtime() - again);
    double t5 = MPI_Wtime();
    p.count = plan.migrate(x, {View<float>(p.q.get(), p.capacity)}, p.count);
    check(cudaDeviceSynchronize(), "migrate");
    t.idle_migrate = max_over(comm, MPI_Wtime() - t5);
    p.shift_first(0, static_cast<float>(plan.block().cells[0] * grid.spacing[0]));
    MPI_Barrier(comm);
    const double t6 = MPI_Wtime();
    p.count = plan.migrate(x, {View<float>(p.q.get(), p.capacity)}, p.count);
    check(cudaDeviceSynchronize(), "migrate");
    t.one_moving_migrate = max_over(comm, MPI_Wtime() - t6);
    t.whole = max_over(comm, t4 - t0);
    t.migrate = max_over(comm, t1 - t0);
    t.points = max_over(comm, t2 - t1);
    t.spread = max_over(comm, t3 - t2);
    t.interp = max_over(comm, t4 - t3_after);
    t.spread_exchange = max_over(comm, spread_phases.exchange_s);
    t.interp_exchange = max_over(comm, interp_phases.exchange_s);
    t.spread_overlapped = max_over(comm, spread_phases.overlapped_s);
    t.interp_overlapped = max_over(comm, interp_phases.overlapped_s);
    if (s >= schedule.warmup) timed.push_back(t);
  }
  return median(timed);
}

// A CUDA stream of the graph runs (the legacy default stream cannot capture).
struct OwnStream {
  cudaStream_t s = nullptr;
  OwnStream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~OwnStream() { cudaStreamDestroy(s); }
};

// Steps between the eager ones of a graph run: a replay keeps the binning it captured (the
// particles that left their tiles handled apart), and an eager update_points re-bins
// where many have left, in place, so that the graph stays valid (pme_bench measures the
// choice: eager every 4 to 32 steps).
constexpr int kEagerEvery = 8;

// The mean seconds of a step replayed from a CUDA graph (the eager steps among them): `step` queues the step's calls
// on `stream`; two eager steps of the same sizes first, then one capture, then after each
// move (outside the graph) one replay, or every kEagerEvery steps an eager step, timed to
// its end.
template <class F>
double replayed_step(Particles& p, const Grid<3>& grid, const Schedule& schedule, cudaStream_t stream, F&& step) {
  for (int s = 0; s < 2; ++s) {
    p.move(grid.spacing[0], 3000 + s, false, stream);
    check(cudaDeviceSynchronize(), "move");
    step();
    check(cudaStreamSynchronize(stream), "step");
  }
  cuda::CapturedGraph graph(stream, step);
  std::vector<double> times;
  for (int s = 0; s < schedule.warmup + 2 * kEagerEvery; ++s) {
    p.move(grid.spacing[0], 4000 + s, false, stream);
    check(cudaDeviceSynchronize(), "move");
    const double t0 = MPI_Wtime();
    if (s % kEagerEvery == kEagerEvery - 1) step();
    else graph.launch();
    check(cudaStreamSynchronize(stream), "replay");
    if (s >= schedule.warmup) times.push_back(MPI_Wtime() - t0);
  }
  double sum = 0;
  for (double t : times) sum += t;
  return sum / static_cast<double>(times.size());
}

// The one-GPU step replayed from a CUDA graph, the Plan's (update_points, spread, interp)
// and the one-rank DistributedPlan's (migrate first), on the same particles.
void print_replayed_steps(const Grid<3>& grid, Particles& p, const Schedule& schedule) {
  OwnStream stream;
  Options options = cuda_options();
  options.stream = cuda::stream_handle(stream.s);
  Plan<float, 3> plan(grid, Kernel::mp4(), options);
  DeviceBuffer<float> mesh(static_cast<std::size_t>(plan.mesh_size()), "mesh");
  plan.set_points(p.positions());
  const double single = replayed_step(p, grid, schedule, stream.s, [&] {
    plan.update_points(p.positions());
    plan.spread({View<const float>(p.q.get(), p.count)}, {View<float>(mesh.get(), mesh.size())});
    plan.interp({View<const float>(mesh.get(), mesh.size())}, {View<float>(p.values.get(), p.count)});
  });
  DistributedPlan<float, 3> distributed(MPI_COMM_SELF, grid, Kernel::mp4(), options);
  DeviceBuffer<float> block(static_cast<std::size_t>(distributed.block_size()), "block");
  std::array<View<float>, 3> x = {View<float>(p.x[0].get(), p.capacity), View<float>(p.x[1].get(), p.capacity),
                                  View<float>(p.x[2].get(), p.capacity)};
  distributed.migrate(x, {View<float>(p.q.get(), p.capacity)}, p.count);  // the moves left positions past L
  distributed.set_points(p.positions());
  const double one_rank = replayed_step(p, grid, schedule, stream.s, [&] {
    distributed.migrate(x, {View<float>(p.q.get(), p.capacity)}, p.count);
    distributed.update_points(p.positions());
    distributed.spread({View<const float>(p.q.get(), p.count)}, {View<float>(block.get(), block.size())});
    distributed.interp({View<const float>(block.get(), block.size())}, {View<float>(p.values.get(), p.count)});
  });
  distributed.synchronize();
  std::printf("  %-34s step %8.3f ms (update_points + spread + interp, replayed from a CUDA graph, eager every %d)\n",
              "1 GPU, Plan, graph", 1e3 * single, kEagerEvery);
  std::printf("  %-34s step %8.3f ms (migrate + update_points + spread + interp, replayed from a CUDA graph, eager every %d)   "
              "1-GPU Plan graph step %.3f ms / this = %.3f\n",
              "1 GPU, DistributedPlan, graph", 1e3 * one_rank, kEagerEvery, 1e3 * single, single / one_rank);
  std::fflush(stdout);
}

// One figure and, beside it, the 1-GPU Plan's step of the same run against it.
void print(const char* label, const Step& t, double baseline, const Schedule& schedule) {
  if (world_rank() != 0) return;
  const char* points = schedule.update ? "update_points" : "set_points";
  std::printf("  %-34s step %8.3f ms = migrate %7.3f + %s %7.3f + spread %7.3f (exchange %6.3f, overlapped "
              "%6.3f) + interp %7.3f (exchange %6.3f, overlapped %6.3f)   1-GPU Plan step (%s) %.3f ms / this = "
              "%.3f   [whole step %.3f; fastest step %.3f; set_points again %.3f; migrate with nothing to move "
              "%.3f, with one particle a rank %.3f]\n",
              label, 1e3 * t.total(), 1e3 * t.migrate, points, 1e3 * t.points, 1e3 * t.spread,
              1e3 * t.spread_exchange, 1e3 * t.spread_overlapped, 1e3 * t.interp, 1e3 * t.interp_exchange,
              1e3 * t.interp_overlapped, points, 1e3 * baseline,
              baseline / t.total(), 1e3 * t.whole, 1e3 * t.fastest, 1e3 * t.set_points_again, 1e3 * t.idle_migrate,
              1e3 * t.one_moving_migrate);
  std::fflush(stdout);
}

// The block of a rank in a grid of `ranks` blocks of `cells` cells each (per axis).
std::array<std::array<double, 3>, 2> block_bounds(const Grid<3>& grid, const Block<3>& b) {
  std::array<std::array<double, 3>, 2> r;
  for (int d = 0; d < 3; ++d) {
    r[0][d] = grid.origin[d] + b.first_cell[d] * grid.spacing[d];
    r[1][d] = grid.origin[d] + (b.first_cell[d] + b.cells[d]) * grid.spacing[d];
  }
  return r;
}

// One scaling study: the 1-GPU baselines on rank 0, then the distributed runs on all.
void study(const char* name, const Grid<3>& single_grid, std::size_t single_n, const Grid<3>& grid,
           std::size_t n_per_rank, const Schedule& schedule, bool weak, bool nccl_only) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double baseline = 0, one_rank_total = 0, one_rank_whole = 0;
  if (rank == 0) {
    std::printf("%s: %d GPUs, %zu particles per GPU, grid %lld x %lld x %lld; 1-GPU baseline %zu particles on "
                "%lld^3\n",
                name, size, n_per_rank, static_cast<long long>(grid.cells[0]), static_cast<long long>(grid.cells[1]),
                static_cast<long long>(grid.cells[2]), single_n, static_cast<long long>(single_grid.cells[0]));
    const std::size_t capacity = single_n + single_n / 8;
    Particles p(single_n, capacity, {0, 0, 0},
                {single_grid.cells[0] * single_grid.spacing[0], single_grid.cells[1] * single_grid.spacing[1],
                 single_grid.cells[2] * single_grid.spacing[2]},
                17);
    const Step plan_step = run_plan(single_grid, p, schedule);
    baseline = plan_step.total();
    print("1 GPU, Plan", plan_step, baseline, schedule);
    DistributedPlan<float, 3> plan(MPI_COMM_SELF, single_grid, Kernel::mp4(), cuda_options());
    const Step one_rank = run_distributed(MPI_COMM_SELF, plan, p, schedule);
    print("1 GPU, DistributedPlan", one_rank, baseline, schedule);
    if (schedule.update) print_replayed_steps(single_grid, p, schedule);
    one_rank_total = one_rank.total();
    one_rank_whole = one_rank.whole;
  }
  MPI_Bcast(&baseline, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Bcast(&one_rank_total, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Bcast(&one_rank_whole, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (size == 1) return;
  double after_step = 0;  // the transport's step with the exchanges after the work
  int gpus = 0;
  check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  const bool shared_gpus = size > gpus;  // NCCL refuses ranks that share a GPU
  if (shared_gpus && rank == 0) std::printf("  NCCL: not run (%d ranks share %d GPUs, which NCCL refuses)\n", size, gpus);
  for (Transport transport : {Transport::Nccl, Transport::HostMpi})
    for (Overlap overlap : {Overlap::Never, Overlap::Auto}) {
      if (nccl_only && transport != Transport::Nccl) continue;
      if (shared_gpus && transport == Transport::Nccl) continue;
      // The decomposition first, for the particles' blocks.
      DistributedPlan<float, 3> plan(MPI_COMM_WORLD, grid, Kernel::mp4(), cuda_options(), {}, transport);
      plan.set_overlap(overlap);
      const auto bounds = block_bounds(grid, plan.block());
      Particles p(n_per_rank, n_per_rank + n_per_rank / 8, bounds[0], bounds[1], 31 + rank);
      const Step t = run_distributed(MPI_COMM_WORLD, plan, p, schedule);
      const std::string label = std::to_string(size) + " GPUs, " +
                                (transport == Transport::Nccl ? "NCCL" : "host-staged MPI") +
                                (overlap == Overlap::Never ? ", after" : ", overlapped");
      print(label.c_str(), t, baseline, schedule);
      if (overlap == Overlap::Never) after_step = t.total();
      else if (rank == 0)
        std::printf("    overlap: the step with the exchanges after the work %.3f ms / this = %.3f\n",
                    1e3 * after_step, after_step / t.total());
      // Against both 1-GPU runs: the Plan (what distributing costs in all, against the best
      // path on one device) and the DistributedPlan on one rank (the scaling of the
      // distributed plan itself).
      const double per_gpu = weak ? 1.0 : 1.0 / size;
      if (rank == 0)
        std::printf("    %s efficiency %.1f%% against the 1-GPU Plan (%s), %.1f%% against the 1-GPU DistributedPlan "
                    "(1-GPU step / this step%s)\n",
                    weak ? "weak-scaling" : "strong-scaling", 100.0 * baseline / t.total() * per_gpu,
                    schedule.update ? "update_points" : "set_points",
                    100.0 * one_rank_total / t.total() * per_gpu, weak ? "" : " / GPUs");
      if (rank == 0)
        std::printf("    by the whole steps: %.1f%% against the 1-GPU Plan, %.1f%% against the 1-GPU DistributedPlan\n",
                    100.0 * baseline / t.whole * per_gpu, 100.0 * one_rank_whole / t.whole * per_gpu);
    }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::size_t weak_n = std::size_t(1) << 24, strong_n = std::size_t(1) << 26;
  std::int64_t weak_cells = 256, strong_cells = 512;
  Schedule schedule;
  bool strong = true, nccl_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::strtoll(argv[++i], nullptr, 0) : 0; };
    if (a == "--weak-particles") weak_n = next();
    else if (a == "--weak-cells") weak_cells = next();
    else if (a == "--strong-particles") strong_n = next();
    else if (a == "--strong-cells") strong_cells = next();
    else if (a == "--steps") schedule.steps = static_cast<int>(next());
    else if (a == "--warmup") schedule.warmup = static_cast<int>(next());
    else if (a == "--skip-strong") strong = false;
    else if (a == "--nccl-only") nccl_only = true;
    else if (a == "--host-move") schedule.host_move = true;
    else if (a == "--set-points") schedule.update = false;
  }
  std::string gpu;
  const int devices = use_rank_gpu(rank, gpu);
  if (rank == 0) {
    std::printf("distributed_bench: %d ranks, %d GPUs visible (%s), float, M'4, periodic, %d timed steps (median) "
                "after %d warm-up steps, particles moved on the %s, taken by %s\n",
                size, devices, gpu.c_str(), schedule.steps, schedule.warmup, schedule.host_move ? "host" : "device",
                schedule.update ? "update_points (set_points in the first step)" : "set_points in every step");
  }
  try {
    // Weak: each GPU a 256^3 block; the rank grid MPI_Dims_create gives.
    std::array<int, 3> dims{};
    MPI_Dims_create(size, 3, dims.data());
    std::array<std::int64_t, 3> cells;
    for (int d = 0; d < 3; ++d) cells[d] = weak_cells * dims[d];
    const double h = 1.0 / static_cast<double>(weak_cells);
    study("weak scaling", Grid<3>::periodic({weak_cells, weak_cells, weak_cells}, h), weak_n,
          Grid<3>::periodic(cells, h), weak_n, schedule, true, nccl_only);
    if (strong) {
      const Grid<3> grid = Grid<3>::periodic({strong_cells, strong_cells, strong_cells}, 1.0 / strong_cells);
      study("strong scaling", grid, strong_n, grid, strong_n / size, schedule, false, nccl_only);
    }
  } catch (const pmkit::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
