// DistributedRealFft on GPUs, one rank per GPU (mpirun -np P distributed_fft_bench): a
// Poisson solve's transforms, forward then inverse, of a float (--double: double) mesh:
//  * weak scaling: a C^3 slab per GPU (--weak-cells C, 128 by default: the PIC step's
//    mesh per GPU), the mesh C x C x (C P);
//  * strong scaling: one S^3 mesh (--strong-cells S, 256 by default) over all GPUs.
// Baselines from the same run on rank 0's GPU: the single-GPU RealFft of the mesh one GPU
// holds (weak: C^3; strong: S^3), and the DistributedRealFft on that one rank. Every
// distributed run goes through each transport (NCCL where the ranks have GPUs of their
// own, then host-staged MPI). Each time is the median over the timed pairs of the slowest
// rank's (a barrier, the call, the stream's synchronisation), after warm-up pairs; printed
// beside the single-GPU RealFft's as the ratio RealFft / this (weak: the efficiency;
// strong: the speed-up, and the efficiency, the speed-up over the GPUs' count), with the
// slowest rank's exchange inside each call (last_timings) in brackets.
//   mpirun -np 4 distributed_fft_bench [--weak-cells C] [--strong-cells S] [--steps N]
//                                      [--warmup W] [--double] [--skip-strong]
#include <mpi.h>

#include <algorithm>
#include <array>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/runtime.hpp"
#include "rank_gpu.cuh"
#include "pmkit/distributed_fft.hpp"
#include "pmkit/fft.hpp"

namespace {

using namespace pmkit;
using cuda::check;
using cuda::DeviceBuffer;

// The median forward and inverse times (seconds) of the slowest rank of comm, and of their
// exchanges (DistributedRealFft::last_timings, the slowest rank's; 0 for RealFft).
struct Pair {
  double forward = 0, inverse = 0, forward_exchange = 0, inverse_exchange = 0;
  double total() const { return forward + inverse; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `steps` pairs of forward(real -> spectrum), inverse(spectrum -> real) after
// `warmup` untimed ones, each call from a barrier of comm to the end of its stream's work;
// exchange(): the seconds of the last call's exchange.
template <class F, class I, class E>
Pair time_pairs(MPI_Comm comm, cudaStream_t stream, int warmup, int steps, F&& forward, I&& inverse, E&& exchange) {
  std::vector<double> fw, iv, fx, ix;
  auto slowest = [&](double t) {
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    return t;
  };
  auto timed = [&](auto&& call, std::vector<double>& times, std::vector<double>& exchanges, bool keep) {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    call();
    check(cudaStreamSynchronize(stream), "the transform");
    const double t = slowest(MPI_Wtime() - t0), x = slowest(exchange());
    if (keep) times.push_back(t), exchanges.push_back(x);
  };
  for (int s = 0; s < warmup + steps; ++s) {
    timed(forward, fw, fx, s >= warmup);
    timed(inverse, iv, ix, s >= warmup);
  }
  return {median(fw), median(iv), median(fx), median(ix)};
}

// A mesh of values in [-1, 1) on the device (the same on every run).
template <class T>
DeviceBuffer<T> random_mesh(std::int64_t n, std::uint64_t seed) {
  std::vector<T> host(static_cast<std::size_t>(n));
  std::uint64_t s = seed;
  for (T& v : host) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<T>(static_cast<double>(s >> 11) * 0x1p-52 - 1.0);
  }
  return DeviceBuffer<T>(host, "mesh");
}

// The single-GPU RealFft of `shape` on this rank's GPU (rank 0 calls it; `comm` of one rank).
template <class T>
Pair real_fft_pair(const std::array<std::int64_t, 3>& shape, cudaStream_t stream, int warmup, int steps) {
  FftOptions o;
  o.backend = Backend::Cuda;
  check(cudaGetDevice(&o.device), "cudaGetDevice");
  o.stream = stream;
  RealFft<T, 3> fft(shape, o);
  DeviceBuffer<T> real = random_mesh<T>(fft.real_size(), 1);
  DeviceBuffer<std::complex<T>> spectrum(static_cast<std::size_t>(fft.spectrum_size()), "spectrum");
  return time_pairs(MPI_COMM_SELF, stream, warmup, steps, [&] { fft.forward(real.get(), spectrum.get()); },
                    [&] { fft.inverse(spectrum.get(), real.get()); }, [] { return 0.0; });
}

// The DistributedRealFft of `shape` over comm through `transport`.
template <class T>
Pair distributed_pair(MPI_Comm comm, const std::array<std::int64_t, 3>& shape, Transport transport,
                      cudaStream_t stream, int warmup, int steps, Transport& taken) {
  FftOptions o;
  o.backend = Backend::Cuda;
  check(cudaGetDevice(&o.device), "cudaGetDevice");
  o.stream = stream;
  DistributedRealFft<T, 3> fft(comm, shape, o, transport);
  taken = fft.transport();
  DeviceBuffer<T> real = random_mesh<T>(fft.real_size(), 1 + fft.rank());
  DeviceBuffer<std::complex<T>> spectrum(static_cast<std::size_t>(std::max<std::int64_t>(fft.spectrum_size(), 1)),
                                         "spectrum");
  return time_pairs(comm, stream, warmup, steps, [&] { fft.forward(real.get(), spectrum.get()); },
                    [&] { fft.inverse(spectrum.get(), real.get()); }, [&] { return fft.last_timings().exchange_s; });
}

const char* name(Transport t) { return t == Transport::Nccl ? "NCCL" : "host-staged MPI"; }

void print_row(const char* what, const Pair& p, const Pair& baseline, int gpus, bool strong) {
  const double ratio = baseline.total() / p.total();
  std::printf("| %s | %.3f ms | %.3f (%.3f) | %.3f (%.3f) | %.3f", what, 1e3 * p.total(), 1e3 * p.forward,
              1e3 * p.forward_exchange, 1e3 * p.inverse, 1e3 * p.inverse_exchange, ratio);
  if (strong) std::printf(" | %.1f%%", 100.0 * ratio / gpus);
  std::printf(" |\n");
}

// One scaling case: the baselines on rank 0's GPU, then the ranks through each transport.
template <class T>
void run_case(const char* title, const std::array<std::int64_t, 3>& whole, const std::array<std::int64_t, 3>& one_gpu,
              bool strong, int warmup, int steps) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Pair real_fft, one_rank;
  Transport unused;
  if (rank == 0) {
    real_fft = real_fft_pair<T>(one_gpu, stream, warmup, steps);
    one_rank = distributed_pair<T>(MPI_COMM_SELF, one_gpu, Transport::Auto, stream, warmup, steps, unused);
  }
  MPI_Bcast(&real_fft, sizeof(Pair), MPI_BYTE, 0, MPI_COMM_WORLD);
  MPI_Bcast(&one_rank, sizeof(Pair), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("\n%s: %lld x %lld x %lld over %d GPUs (RealFft baseline: %lld x %lld x %lld on one)\n", title,
                (long long)whole[0], (long long)whole[1], (long long)whole[2], size, (long long)one_gpu[0],
                (long long)one_gpu[1], (long long)one_gpu[2]);
    std::printf("| run | forward + inverse | forward (exchange) | inverse (exchange) | RealFft / this%s |\n",
                strong ? " | / GPUs" : "");
    std::printf("|---|---|---|---|---|%s\n", strong ? "---|" : "");
    print_row("1 GPU, RealFft", real_fft, real_fft, 1, strong);
    print_row("1 GPU, DistributedRealFft", one_rank, real_fft, 1, strong);
  }
  for (Transport t : {Transport::Auto, Transport::HostMpi}) {
    Transport taken = Transport::HostMpi;
    const Pair p = distributed_pair<T>(MPI_COMM_WORLD, whole, t, stream, warmup, steps, taken);
    if (rank == 0) {
      const std::string what = std::to_string(size) + " GPUs, " + name(taken);
      print_row(what.c_str(), p, real_fft, size, strong);
    }
    if (t == Transport::Auto && taken == Transport::HostMpi) break;  // ranks share a GPU: one transport
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

template <class T>
void run(std::int64_t weak_cells, std::int64_t strong_cells, bool strong, int warmup, int steps) {
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::int64_t c = weak_cells, s = strong_cells;
  run_case<T>("weak", {c, c, c * size}, {c, c, c}, false, warmup, steps);
  if (strong) run_case<T>("strong", {s, s, s}, {s, s, s}, true, warmup, steps);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::int64_t weak_cells = 128, strong_cells = 256;
  int steps = 20, warmup = 5;
  bool strong = true, use_double = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::strtoll(argv[++i], nullptr, 0) : 0; };
    if (a == "--weak-cells") weak_cells = next();
    else if (a == "--strong-cells") strong_cells = next();
    else if (a == "--steps") steps = static_cast<int>(next());
    else if (a == "--warmup") warmup = static_cast<int>(next());
    else if (a == "--skip-strong") strong = false;
    else if (a == "--double") use_double = true;
  }
  std::string gpu;
  const int devices = use_rank_gpu(rank, gpu);
  if (rank == 0) {
    std::printf("distributed_fft_bench: %d ranks, %d GPUs visible (%s), %s, forward then inverse, median of %d "
                "pairs after %d warm-up pairs, the slowest rank's\n",
                size, devices, gpu.c_str(), use_double ? "double" : "float", steps, warmup);
  }
  int status = 0;
  try {
    if (use_double) run<double>(weak_cells, strong_cells, strong, warmup, steps);
    else run<float>(weak_cells, strong_cells, strong, warmup, steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
