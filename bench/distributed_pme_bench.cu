// DistributedPmePlan on GPUs, weak scaling, one rank per GPU (mpirun -np 4
// distributed_pme_bench): the steps of molecular dynamics of 10^6 float charges a GPU
// (--charges N) at water's density of charges (100 nm^-3), in a box of L x L x (L P) on P
// GPUs, P = 1, 2, 4... up to the ranks launched, all in one run (the first P ranks).
// Parameters: PmeParameters::choose for the one-GPU box L^3 (cutoff 1 nm, tolerance 5e-4,
// order 5), the mesh's z axis times P on P GPUs, so that each GPU holds the same mesh.
//
// A step: every charge moves by its velocity (a kernel), then migrate and update_points,
// then compute (the full Coulomb interaction: reciprocal, real space with the ghosts,
// energy) or compute_reciprocal. Each time is the median over the timed steps of the
// slowest rank's (a barrier, the call, the stream's synchronisation), after warm-up steps.
// The baseline, from the same run on rank 0's GPU: the single-GPU PmePlan's step of the
// one-GPU box (move, update_points, compute or compute_reciprocal); each distributed time
// is printed beside it with the ratio PmePlan / this, the weak-scaling efficiency. Every
// P > 1 goes through each transport (NCCL where the ranks have GPUs of their own, then
// host-staged MPI).
//   mpirun -np 4 distributed_pme_bench [--charges N] [--steps S] [--warmup W]
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/runtime.hpp"
#include "pmkit/cuda/runtime.hpp"
#include "pmkit/distributed_pme.hpp"
#include "pmkit/pme.hpp"
#include "rank_gpu.cuh"

namespace {

using namespace pmkit;
using cuda::check;
using cuda::DeviceBuffer;

constexpr double kDensity = 100.0;  // charges per nm^3, about water's atoms

__global__ void move_kernel(float* x, float* y, float* z, const float* vx, const float* vy, const float* vz,
                            std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  x[i] += vx[i];
  y[i] += vy[i];
  z[i] += vz[i];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One rank's charges: positions, velocities, charges and forces in device memory, with
// room for `capacity` (migrate's arrivals).
struct Charges {
  std::size_t n, capacity;
  DeviceBuffer<float> x, y, z, vx, vy, vz, q, fx, fy, fz;
  DeviceBuffer<double> energy{1};

  // n charges uniform in [0, L)^2 x [z0, z0 + L), alternating +1 and -1, velocities of
  // about 0.002 nm a step (a 2 fs step at 300 K).
  Charges(std::size_t n_, std::size_t capacity_, double length, double z0, std::uint64_t seed)
      : n(n_), capacity(capacity_), x(capacity_), y(capacity_), z(capacity_), vx(capacity_), vy(capacity_),
        vz(capacity_), q(capacity_), fx(capacity_), fy(capacity_), fz(capacity_) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::normal_distribution<double> speed(0.0, 0.002);
    std::vector<float> hx(capacity), hy(capacity), hz(capacity), hq(capacity);
    std::array<std::vector<float>, 3> hv;
    for (auto& c : hv) c.resize(capacity);
    for (std::size_t i = 0; i < n; ++i) {
      hx[i] = float(unit(rng) * length);
      hy[i] = float(unit(rng) * length);
      hz[i] = float(z0 + unit(rng) * length);
      for (int d = 0; d < 3; ++d) hv[d][i] = float(speed(rng));
      hq[i] = i % 2 ? -1.0f : 1.0f;
    }
    x.upload(hx), y.upload(hy), z.upload(hz), q.upload(hq);
    vx.upload(hv[0]), vy.upload(hv[1]), vz.upload(hv[2]);
  }
  std::array<View<const float>, 3> positions() const {
    return {View<const float>(x.get(), n), View<const float>(y.get(), n), View<const float>(z.get(), n)};
  }
  std::array<View<float>, 3> forces() {
    return {View<float>(fx.get(), n), View<float>(fy.get(), n), View<float>(fz.get(), n)};
  }
  void move(cudaStream_t stream) {
    if (n == 0) return;
    move_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(x.get(), y.get(), z.get(), vx.get(), vy.get(),
                                                                vz.get(), n);
    check(cudaGetLastError(), "move");
  }
};

// The medians (ms) of a step's parts: move + migrate + update_points, compute, and
// compute_reciprocal in steps of their own; and the phases of a profiled step, each the
// slowest rank's (DistributedPmePlan only).
struct Step {
  double update = 0, full = 0, reciprocal = 0;
  DistributedPmeTimings phases;
};

// Times `steps` steps after `warmup`: update() then compute (full) and, in a second run of
// steps, update() then compute_reciprocal; each part from a barrier of comm to its stream's
// end, the slowest rank's.
template <class U, class F, class R>
Step time_steps(MPI_Comm comm, cudaStream_t stream, int warmup, int steps, U&& update, F&& full, R&& reciprocal) {
  auto timed = [&](auto&& call) {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    call();
    check(cudaStreamSynchronize(stream), "the step");
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    return 1e3 * t;
  };
  std::vector<double> u, f, r;
  for (int s = 0; s < warmup + steps; ++s) {
    const double tu = timed(update), tf = timed(full);
    if (s >= warmup) u.push_back(tu), f.push_back(tf);
  }
  for (int s = 0; s < warmup + steps; ++s) {
    timed(update);
    const double tr = timed(reciprocal);
    if (s >= warmup) r.push_back(tr);
  }
  Step step;
  step.update = median(u), step.full = median(f), step.reciprocal = median(r);
  return step;
}

PmeOptions gpu_options(cudaStream_t stream) {
  PmeOptions o;
  o.backend = Backend::Cuda;
  check(cudaGetDevice(&o.device), "cudaGetDevice");
  o.stream = cuda::stream_handle(stream);
  o.coulomb_constant = 138.935458;
  return o;
}

// The single-GPU PmePlan's step on the one-GPU box.
Step single_gpu(std::size_t n, double length, const PmeParameters& p, cudaStream_t stream, int warmup, int steps) {
  Charges c(n, n, length, 0.0, 1);
  PmePlan<float> pme({length, length, length}, p, gpu_options(stream));
  pme.set_points(c.positions());
  return time_steps(
      MPI_COMM_SELF, stream, warmup, steps,
      [&] {
        c.move(stream);
        pme.update_points(c.positions());
      },
      [&] { pme.compute(View<const float>(c.q.get(), n), c.forces(), View<double>(c.energy.get(), 1)); },
      [&] { pme.compute_reciprocal(View<const float>(c.q.get(), n), c.forces(), View<double>(c.energy.get(), 1)); });
}

// DistributedPmePlan over comm (P ranks): each rank's n charges drawn in its L-high part of
// the box, migrated to their owners, then the steps.
Step distributed(MPI_Comm comm, std::size_t n, double length, PmeParameters p, Transport transport,
                 cudaStream_t stream, int warmup, int steps, Transport& taken) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  p.mesh[2] *= size;
  const std::array<double, 3> box = {length, length, length * size};
  DistributedPmePlan<float> pme(comm, box, p, gpu_options(stream), transport);
  taken = pme.transport();
  Charges c(n, n + n / 2, length, length * rank, 7 + rank);
  auto migrate = [&] {
    View<float> props[4] = {View<float>(c.q.get(), c.capacity), View<float>(c.vx.get(), c.capacity),
                            View<float>(c.vy.get(), c.capacity), View<float>(c.vz.get(), c.capacity)};
    c.n = pme.migrate({View<float>(c.x.get(), c.capacity), View<float>(c.y.get(), c.capacity),
                       View<float>(c.z.get(), c.capacity)},
                      Span<View<float>>(props, 4), c.n);
  };
  migrate();
  pme.set_points(c.positions());
  auto update = [&] {
    c.move(stream);
    migrate();
    pme.update_points(c.positions());
  };
  auto full = [&] { pme.compute(View<const float>(c.q.get(), c.n), c.forces(), View<double>(c.energy.get(), 1)); };
  Step step = time_steps(comm, stream, warmup, steps, update, full, [&] {
    pme.compute_reciprocal(View<const float>(c.q.get(), c.n), c.forces(), View<double>(c.energy.get(), 1));
  });
  // A profiled step (a wait after each phase): each phase's slowest rank.
  pme.set_profiling(true);
  update();
  full();
  step.phases = pme.last_timings();
  MPI_Allreduce(MPI_IN_PLACE, &step.phases, sizeof(DistributedPmeTimings) / sizeof(double), MPI_DOUBLE, MPI_MAX, comm);
  return step;
}

const char* name(Transport t) { return t == Transport::Nccl ? "NCCL" : "host-staged MPI"; }

// The parts' times, each of compute and compute_reciprocal with the step's ratio (with the
// update), then the step's time and ratio.
void print_row(const char* what, int gpus, const Step& s, const Step& base) {
  const double step = s.update + s.full, base_step = base.update + base.full;
  std::printf("| %s | %d | %.3f | %.3f (%.3f) | %.3f (%.3f) | %.3f (%.3f) |\n", what, gpus, s.update, s.full,
              base_step / step, s.reciprocal, (base.update + base.reciprocal) / (s.update + s.reciprocal), step,
              base_step / step);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::size_t n = 1000000;
  int steps = 20, warmup = 5;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string arg = argv[a];
    if (arg == "--charges") n = std::strtoull(argv[a + 1], nullptr, 10);
    else if (arg == "--steps") steps = std::atoi(argv[a + 1]);
    else if (arg == "--warmup") warmup = std::atoi(argv[a + 1]);
  }
  std::string gpu;
  const int devices = use_rank_gpu(rank, gpu);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const double length = std::cbrt(double(n) / kDensity);
  const PmeParameters p = PmeParameters::choose({length, length, length}, 1.0, 5e-4);

  Step base;
  if (rank == 0) base = single_gpu(n, length, p, stream, warmup, steps);
  MPI_Bcast(&base, sizeof(Step), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("DistributedPmePlan<float>, weak scaling: %zu charges a GPU, box %.2f nm a GPU (L x L x L P), mesh "
                "%lld x %lld x %lld a GPU, alpha %.4f / nm, cutoff 1 nm, order %d; %s, %d visible\n",
                n, length, (long long)p.mesh[0], (long long)p.mesh[1], (long long)p.mesh[2], p.alpha, p.order,
                gpu.c_str(), devices);
    std::printf("Median ms of the slowest rank; (ratio) = PmePlan on one GPU / this, the weak efficiency. Step = "
                "move + migrate + update_points, then compute.\n\n");
    std::printf("| run | GPUs | move + migrate + update_points | compute (step ratio) | compute_reciprocal "
                "(step ratio) | step (ratio) |\n|---|---|---|---|---|---|\n");
    std::printf("| PmePlan | 1 | %.3f | %.3f | %.3f | %.3f |\n", base.update, base.full, base.reciprocal,
                base.update + base.full);
  }
  std::vector<std::pair<std::string, DistributedPmeTimings>> phases;
  for (int gpus = 1; gpus <= size; gpus *= 2) {
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, rank < gpus ? 0 : MPI_UNDEFINED, rank, &comm);
    const std::vector<Transport> transports =
        gpus == 1 ? std::vector<Transport>{Transport::Auto} : std::vector<Transport>{Transport::Auto, Transport::HostMpi};
    for (std::size_t k = 0; k < transports.size(); ++k) {
      if (comm == MPI_COMM_NULL) continue;
      Transport taken = Transport::HostMpi;
      const Step s = distributed(comm, n, length, p, transports[k], stream, warmup, steps, taken);
      if (rank == 0) {
        const std::string what = "DistributedPmePlan, " + std::string(gpus == 1 ? "one rank" : name(taken));
        print_row(what.c_str(), gpus, s, base);
        phases.push_back({what + ", " + std::to_string(gpus) + " GPUs", s.phases});
      }
    }
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) {
    std::printf("\nPhases of one profiled step (ms, the slowest rank's each; a wait for the stream after each):\n"
                "| run | migrate | spread | FFT (its exchange) | convolve | gather | ghosts | real space | finish |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& [what, t] : phases)
      std::printf("| %s | %.3f | %.3f | %.3f (%.3f) | %.3f | %.3f | %.3f | %.3f | %.3f |\n", what.c_str(),
                  1e3 * t.migrate_s, 1e3 * t.spread_s, 1e3 * t.fft_s, 1e3 * t.fft_exchange_s, 1e3 * t.convolve_s,
                  1e3 * t.gather_s, 1e3 * t.ghosts_s, 1e3 * t.real_space_s, 1e3 * t.finish_s);
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  MPI_Finalize();
  return 0;
}
