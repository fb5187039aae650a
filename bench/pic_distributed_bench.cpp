// `pmkit pic` across GPUs, one MPI rank per GPU (mpirun -np 4 pic_distributed_bench): the
// PIC step of apps/pic/distributed.hpp on P = 1, 2, 4... GPUs up to the ranks launched, all
// in one run (the first P ranks), beside the single-GPU `pmkit pic` step (the Simulation on
// a plain Plan and RealFft, on rank 0's GPU in the same run). Never against the one-rank
// distributed run: P = 1 is printed as one more row against the single-GPU step.
//   weak:   2^24 electrons and 128^3 cells a GPU: 128 x 128 x 128P cells, 2^24 P electrons
//   strong: 2^26 electrons on 256^3 cells at every P
// 3D thermal electrons (unit cells), float, TSC, the field by interp_gradient of phi. A
// step's time is the slowest rank's, a stretch of eager steps after warm-up steps divided
// by their number; the phases come from further steps in which each phase waits for the
// rank's device (the slowest rank's each): deposit, the FFT (forward and inverse, without
// their exchange), the FFT's exchange of its slabs (CUDA ranks; the redistribution between
// the plan's blocks and the FFT's slabs is none: the blocks are the slabs), gather, push,
// migrate, the sort and the re-binning (set_points after the sort). Every run sorts its
// arrays every step, as `pmkit pic --step separate` does (across ranks before the
// migrate). The single-GPU step is printed twice: the separate calls eager with their
// phases (`pmkit pic --step separate --graph off`), and `pmkit pic`'s default, the
// particle step.
// Efficiency: weak, the single-GPU step over the P-GPU step; strong, over P times it.
//   mpirun -np 4 pic_distributed_bench [--steps N] [--warmup W] [--timed T]
//                                      [--backend cpu|cuda] [--shrink K]
// --shrink K divides every axis's cells by K and the electrons by K^3 (a quick run, or
// CPU ranks' smoke test with --backend cpu).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "distributed.hpp"
#include "pic.hpp"

namespace {

using pmkit::Backend;
using pmkit::pic::Config;
using pmkit::pic::PhaseTimes;
using pmkit::pic::Result;

struct Settings {
  int steps = 20, warmup = 5, timed = 10;
  Backend backend = Backend::Cuda;
  std::int64_t shrink = 1;
};

// A step's phases in ms, and its whole time.
struct Step {
  double ms = 0;
  double deposit = 0, fft = 0, exchange = 0, gather = 0, push = 0, migrate = 0, rebin = 0, sort = 0;
};

Step step_of(const Result& r, const Config& c, int timed) {
  const PhaseTimes& p = r.phases;
  const double per = 1e3 / timed;
  Step s;
  s.ms = 1e3 * r.seconds / c.steps;
  s.deposit = p.deposit * per;
  s.fft = (p.solve - p.fft_exchange) * per;
  s.exchange = p.fft_exchange * per;
  s.gather = p.gather * per;
  s.push = p.push * per;
  s.migrate = p.migrate * per;
  s.rebin = p.rebin * per;
  s.sort = p.sort * per;
  return s;
}

Config thermal(const Settings& s, std::int64_t nx, std::int64_t nz, std::int64_t particles) {
  Config c;
  c.problem = pmkit::pic::Problem::Thermal;
  c.dim = 3;
  c.cells = {nx / s.shrink, nx / s.shrink, nz / s.shrink};
  c.particles = particles / (s.shrink * s.shrink * s.shrink);
  c.backend = s.backend;
  c.steps = s.steps;
  c.sort_every = 1;
  c.graph = false;
  c.diagnostics = false;
  return c;
}

// The single-GPU `pmkit pic` step of c on rank 0: the separate calls, its arrays sorted
// every step, eager with their phases (--step separate --graph off, phase for phase what
// the ranks run), and the command's default, the same calls replayed from a CUDA graph.
struct Baseline {
  Step eager;
  double default_ms = 0;
};
Baseline single_gpu(const Settings& s, Config c, int rank) {
  Baseline b;
  if (rank == 0) {
    c.device = pmkit::pic::rank_device(MPI_COMM_SELF);
    c.sort_every = 1;
    c.particle_step = false;
    b.eager = step_of(pmkit::pic::benchmark(c, s.warmup, s.timed), c, s.timed);
    c.graph = true;
    const Result r = pmkit::pic::benchmark(c, s.warmup, 0);
    b.default_ms = 1e3 * (r.graph_steps > 0 ? r.graph_seconds / r.graph_steps : r.seconds / c.steps);
  }
  MPI_Bcast(&b, sizeof(Baseline), MPI_BYTE, 0, MPI_COMM_WORLD);
  return b;
}

void print_row(const char* what, int gpus, const Step& t, const Baseline& b, double efficiency) {
  std::printf("  %-6s %d GPU%s  step %8.3f ms  single-GPU eager %8.3f ms (efficiency %5.1f%%), `pmkit pic` default (particle step) %8.3f ms (%5.1f%%)\n",
              what, gpus, gpus == 1 ? " " : "s", t.ms, b.eager.ms, 100 * efficiency * b.eager.ms / t.ms, b.default_ms,
              100 * efficiency * b.default_ms / t.ms);
  auto phase = [](const char* name, double mine, double single) {
    std::printf("      %-13s %8.3f ms   single GPU %8.3f ms   ratio %6.2f\n", name, mine, single,
                single > 0 ? mine / single : 0.0);
  };
  phase("deposit", t.deposit, b.eager.deposit);
  phase("FFT", t.fft, b.eager.fft);
  phase("FFT exchange", t.exchange, b.eager.exchange);
  phase("gather", t.gather, b.eager.gather);
  phase("push", t.push, b.eager.push);
  phase("migrate", t.migrate, b.eager.migrate);
  phase("re-bin", t.rebin, b.eager.rebin);
  phase("sort", t.sort, b.eager.sort);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--steps") && more) s.steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--warmup") && more) s.warmup = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--timed") && more) s.timed = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--shrink") && more) s.shrink = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--backend") && more) s.backend = std::strcmp(argv[++i], "cpu") ? Backend::Cuda : Backend::Cpu;
    else {
      if (rank == 0) std::fprintf(stderr, "pic_distributed_bench: unknown argument %s\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
  }
  if (s.steps < 1 || s.timed < 1 || s.warmup < 0 || s.shrink < 1 || 128 % s.shrink != 0) {
    if (rank == 0) std::fprintf(stderr, "pic_distributed_bench: --steps and --timed at least 1, --shrink a divisor of 128\n");
    MPI_Finalize();
    return 2;
  }
  int status = 0;
  try {
    const Config weak1 = thermal(s, 128, 128, std::int64_t(1) << 24);
    const Config strong = thermal(s, 256, 256, std::int64_t(1) << 26);
    if (rank == 0)
      std::printf("pmkit pic across %d ranks (%s): 3D thermal, float, TSC, gradient field; %d steps after %d warm-up, "
                  "phases over %d more; the slowest rank's\n",
                  size, s.backend == Backend::Cuda ? "CUDA ranks, one GPU each" : "CPU ranks", s.steps, s.warmup,
                  s.timed);
    const Baseline weak_base = single_gpu(s, weak1, rank);
    const Baseline strong_base = single_gpu(s, strong, rank);
    for (int gpus = 1; gpus <= size; gpus *= 2) {
      MPI_Comm comm;
      MPI_Comm_split(MPI_COMM_WORLD, rank < gpus ? 0 : MPI_UNDEFINED, rank, &comm);
      Step weak{}, strong_step{};
      if (comm != MPI_COMM_NULL) {
        Config w = thermal(s, 128, 128 * gpus, (std::int64_t(1) << 24) * gpus);
        Config st = strong;
        w.device = st.device = pmkit::pic::rank_device(comm);
        weak = step_of(pmkit::pic::benchmark(comm, w, s.warmup, s.timed), w, s.timed);
        strong_step = step_of(pmkit::pic::benchmark(comm, st, s.warmup, s.timed), st, s.timed);
        MPI_Comm_free(&comm);
      }
      if (rank == 0) {
        std::printf("P = %d\n", gpus);
        print_row("weak", gpus, weak, weak_base, 1.0);
        print_row("strong", gpus, strong_step, strong_base, 1.0 / gpus);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pic_distributed_bench (rank %d): %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
