// The PIC loop across MPI ranks (distributed.hpp): the Simulation of simulation.hpp on
// RankMesh, a DistributedPlan whose blocks are a DistributedRealFft's slabs.
#include "distributed.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>

#include "distributed/collective.hpp"
#include "pmkit/distributed.hpp"
#include "pmkit/distributed_fft.hpp"
#include "simulation.hpp"

#if defined(PMKIT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace pmkit::pic {

namespace {

// Slots a rank's arrays hold beyond kRankCapacityFactor times its share.
constexpr std::int64_t kCapacitySlack = 1024;

// The ranks that the FFT's slabs of n planes cover, every rank with a plane.
bool slabs_cover(std::int64_t n, int ranks) {
  const std::int64_t b = (n + ranks - 1) / ranks;
  return (ranks - 1) * b < n;
}

// This rank's block of the grid: the mesh plan on the FFT's slabs. comm is the caller's,
// for the sums of the diagnostics and the agreement on failures; the plan and the FFT
// keep communicators of their own.
template <class T, int D>
struct RankMesh {
  static constexpr bool kDistributed = true;
  DistributedRealFft<T, D> fft;
  DistributedPlan<T, D> plan;
  MPI_Comm comm;
  bool deterministic;

  RankMesh(const Config& c, const Grid<D>& grid, StreamHandle stream, MPI_Comm comm)
      : fft(comm, grid.cells, fft_options(c, stream)),
        plan(comm, grid, c.kernel, plan_options(c, stream), fft.rank_grid()),
        comm(comm),
        deterministic(c.deterministic) {}

  std::int64_t mesh_size() const { return fft.real_size(); }
  std::array<std::int64_t, D> wavenumber_index(std::size_t k) const {
    return fft.spectrum_slab().at(static_cast<std::int64_t>(k));
  }
  // Particles [n r / P, n (r + 1) / P) are loaded here, then migrate to their owners.
  std::pair<std::int64_t, std::int64_t> share(std::int64_t n) const {
    const std::int64_t r = plan.rank(), p = plan.size();
    const std::int64_t first = n * r / p;
    return {first, n * (r + 1) / p - first};
  }
  // The slab's share of n, with room to spare, and at least the share loaded here.
  std::size_t capacity(std::int64_t n) const {
    const double planes = double(plan.block().shape[D - 1]) / double(fft.shape()[D - 1]);
    const std::int64_t want = std::max(share(n).second, std::int64_t(std::ceil(kRankCapacityFactor * planes * double(n))));
    return static_cast<std::size_t>(std::min(n, want + kCapacitySlack));
  }
  template <class F>
  void agree(F&& f) {
    distributed::agree(comm, "pmkit pic", std::forward<F>(f));
  }
  void sum_over_ranks(std::vector<StepSums>& records) const {
    static_assert(sizeof(StepSums) == 7 * sizeof(double), "StepSums: seven doubles");
    MPI_Allreduce(MPI_IN_PLACE, records.data(), static_cast<int>(7 * records.size()), MPI_DOUBLE, MPI_SUM, comm);
  }
  double fft_exchange_seconds() const { return fft.last_timings().exchange_s; }
  std::string spread_method_name() const {
    return "DistributedPlan over " + std::to_string(plan.size()) + " ranks" + (deterministic ? ", fixed point" : "");
  }
};

// The slowest rank's times.
void slowest(MPI_Comm comm, Result& r) {
  PhaseTimes& p = r.phases;
  double t[] = {p.deposit, p.solve, p.gather, p.push, p.rebin, p.sort, p.migrate, p.fft_exchange, r.seconds,
                r.graph_seconds};
  MPI_Allreduce(MPI_IN_PLACE, t, 10, MPI_DOUBLE, MPI_MAX, comm);
  p = PhaseTimes{t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], 0};  // across ranks no particle step
  r.seconds = t[8];
  r.graph_seconds = t[9];
}

// validate() and validate_ranks() on every rank. Where every rank fails (the same
// configuration everywhere), each throws its own error, the same on all; where only some
// do, every rank throws, the others naming the lowest failing rank.
void check(MPI_Comm comm, const Config& c) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  std::exception_ptr error;
  try {
    validate(c);
    validate_ranks(c, ranks);
  } catch (const Error&) {
    error = std::current_exception();
  }
  int all_failed = error ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_failed, 1, MPI_INT, MPI_MIN, comm);
  if (all_failed) std::rethrow_exception(error);
  distributed::agree(comm, "pmkit pic", [&] {
    if (error) std::rethrow_exception(error);
  });
}

Result run(MPI_Comm comm, const Config& c, const Schedule& schedule) {
  check(comm, c);
  Result r = with_kind(c, [&](auto kind) {
    using T = typename decltype(kind)::type;
    constexpr int D = decltype(kind)::dim;
    return Simulation<T, D, RankMesh<T, D>>(c, comm).run(schedule);
  });
  slowest(comm, r);
  return r;
}

}  // namespace

void validate_ranks(const Config& c, int ranks) {
  auto bad = [](auto... parts) { detail::fail(ErrorCode::InvalidArgument, parts...); };
  const int axis = c.dim - 1;
  const std::int64_t n = c.cells[axis];
  if (!slabs_cover(n, ranks)) {
    int most = ranks;
    while (most > 1 && !slabs_cover(n, most)) --most;
    const std::int64_t b = (n + ranks - 1) / ranks;
    bad("cells[", axis, "] = ", n, " over ", ranks, " ranks: the field solve cuts axis ", axis, " into slabs of ceil(",
        n, " / ", ranks, ") = ", b, b == 1 ? " plane" : " planes", ", which leaves rank ", ranks - 1, " none; at most ",
        most, most == 1 ? " rank" : " ranks", ", or cells[", axis, "] a multiple of ", ranks);
  }
}

Result simulate(MPI_Comm comm, const Config& c, bool timed) { return run(comm, c, simulate_schedule(c, timed)); }

Result benchmark(MPI_Comm comm, const Config& c, int warmup, int timed_steps) {
  return run(comm, c, benchmark_schedule(c, warmup, timed_steps));
}

std::vector<double> initial_density(MPI_Comm comm, const Config& c) {
  check(comm, c);
  const std::vector<double> block = with_kind(c, [&](auto kind) {
    using T = typename decltype(kind)::type;
    constexpr int D = decltype(kind)::dim;
    return Simulation<T, D, RankMesh<T, D>>(c, comm).initial_density();
  });
  // The slabs are the grid's planes in rank order: gathered, they are the whole grid.
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine = static_cast<int>(block.size());
  std::vector<int> counts(size), offsets(size);
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  std::int64_t total = 0;
  for (int p = 0; p < size; ++p) {
    offsets[p] = static_cast<int>(total);
    total += counts[p];
  }
  std::vector<double> whole(rank == 0 ? total : 0);
  MPI_Gatherv(block.data(), mine, MPI_DOUBLE, whole.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0, comm);
  return whole;
}

HostRanks host_ranks(MPI_Comm comm) {
  MPI_Comm host;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  HostRanks r;
  MPI_Comm_rank(host, &r.rank);
  MPI_Comm_size(host, &r.size);
  MPI_Comm_free(&host);
  return r;
}

int rank_device(MPI_Comm comm) {
  const int local = host_ranks(comm).rank;
  int devices = 0;
#if defined(PMKIT_WITH_CUDA)
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
#endif
  return devices > 0 ? local % devices : 0;
}

}  // namespace pmkit::pic
