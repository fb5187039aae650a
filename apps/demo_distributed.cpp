// `pmkit demo --distributed`, run under mpirun: the demo's particles dealt round-robin to
// the ranks, moved to their owners by migrate, spread and interpolated by a
// DistributedPlan on CPU ranks; rank 0 prints the decomposition, the phases' times (the
// slowest rank's) and the same checks as the single-rank demo, summed over all ranks:
// conservation of the total charge and the round trip <spread(q), rho> = <q, interp(rho)>.
#include <mpi.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "demo_settings.hpp"
#include "pmkit/distributed.hpp"

namespace pmkit::cli {
namespace {

std::string distributed_usage() {
  return "usage: mpirun -np P pmkit demo --distributed [options]\n"
    "\n"
    "The demo over P MPI ranks: every rank starts with every P-th particle, migrate moves\n"
    "them to the ranks that own their blocks, then spread and interp run on the blocks.\n"
    "\n"
    "options:\n"
    "  --particles N        particles in all (default 1000000)\n"
    "  --cells N            cells per dimension (default 100)\n"
    "  --dim 2|3            dimension (default 3)\n"
    "  --kernel NAME        " + joined(all_kernel_names()) + "\n"
    "                       (default mp4)\n"
    "  --precision P        float|double (default float)\n"
    "  --boundary B         periodic|fold|keep (default periodic)\n"
    "  --deterministic      the fixed-point spread: the same bits at any rank count\n"
    "  --threads T          OpenMP threads per rank (default: OpenMP's default)\n"
    "  --seed S             random seed (default 1)\n"
    "  -h, --help           this text\n";
}

struct Settings : DemoSettings {
  bool deterministic = false;
};

double sum_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return v;
}
double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

// The ranks that share this rank's host, and so its memory.
int ranks_on_host() {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int ranks = 1;
  MPI_Comm_size(local, &ranks);
  MPI_Comm_free(&local);
  return ranks;
}

// check_memory of every rank's arrays (room for all the particles, since any rank may
// own any number, the interpolated values and the block, with about 16 bytes a particle
// of binning) times the ranks of its host, agreed over all ranks: where any rank lacks
// the memory, every rank throws before any work.
template <class T, int D>
void check_rank_memory(std::size_t n, std::size_t block) {
  const double bytes = double(sizeof(T)) * ((D + 2.0) * double(n) + double(block)) + 16.0 * double(n);
  std::string why;
  try {
    check_memory(bytes * ranks_on_host(), Backend::Cpu);
  } catch (const UsageError& e) {
    why = e.what();
  }
  int short_of_memory = why.empty() ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &short_of_memory, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (short_of_memory) throw UsageError(why.empty() ? "these options cannot run: another rank lacks the memory for its arrays" : why);
}

template <class T, int D>
int demo(const Settings& s) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Grid<D> grid = demo_grid<D>(s);
  Options options;
  options.num_threads = s.threads;
  options.deterministic = s.deterministic;
  DistributedPlan<T, D> plan = [&] {
    try {
      return DistributedPlan<T, D>(MPI_COMM_WORLD, grid, s.kernel, options);
    } catch (const Error& e) {
      throw UsageError("these options cannot run: " + message_of(e));
    }
  }();

  // This rank's share of the particles (uniform in the unit box, charges in [0.5, 1.5)),
  // in arrays with room for all of them, since any rank may own any number.
  const std::size_t n = static_cast<std::size_t>(s.particles);
  check_rank_memory<T, D>(n, static_cast<std::size_t>(plan.block_size()));
  std::array<std::vector<T>, D> x;
  for (auto& c : x) c.resize(n);
  std::vector<T> q(n);
  std::size_t count = 0;
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    T xi[D];
    for (int d = 0; d < D; ++d) xi[d] = static_cast<T>(unit(rng));
    const T qi = static_cast<T>(0.5 + unit(rng));
    if (static_cast<int>(i % size) != rank) continue;
    for (int d = 0; d < D; ++d) x[d][count] = xi[d];
    q[count++] = qi;
  }
  std::array<View<T>, D> positions;
  for (int d = 0; d < D; ++d) positions[d] = View<T>(x[d]);
  const double t_migrate = seconds([&] { count = plan.migrate(positions, {View<T>(q)}, count); });
  std::array<View<const T>, D> mine;
  for (int d = 0; d < D; ++d) mine[d] = View<const T>(x[d].data(), count);
  const double t_set = seconds([&] { plan.set_points(mine); });
  std::vector<T> rho(plan.block_size()), back(count);
  const double t_spread = seconds([&] { plan.spread({View<const T>(q.data(), count)}, {View<T>(rho)}); });
  const DistributedTimings spread_phases = plan.last_timings();
  const double t_interp = seconds([&] { plan.interp({View<const T>(rho)}, {View<T>(back)}); });
  const DistributedTimings interp_phases = plan.last_timings();

  ChargeSums sums;
  sums.add_particles(q.data(), back.data(), count);
  sums.add_mesh(rho);
  for (double* v : {&sums.sum_q, &sums.mass, &sums.rho2, &sums.q_back}) *v = sum_over_ranks(*v);
  const double least = -max_over_ranks(-static_cast<double>(count)), most = max_over_ranks(static_cast<double>(count));
  const double times[] = {max_over_ranks(t_migrate), max_over_ranks(t_set), max_over_ranks(t_spread),
                          max_over_ranks(spread_phases.exchange_s), max_over_ranks(t_interp),
                          max_over_ranks(interp_phases.exchange_s)};
  const double conservation = n ? sums.conservation() : 0.0;
  const double adjoint = n ? sums.round_trip() : 0.0;
  const double tolerance = std::is_same<T, float>::value ? 1e-4 : 1e-10;
  if (rank == 0) {
    const Block<D>& b = plan.block();
    std::string ranks;
    for (int d = 0; d < D; ++d) ranks += (d ? " x " : "") + std::to_string(b.ranks[d]);
    std::printf("pmkit demo --distributed: %dD, %zu particles over %d ranks (%s), %lld^%d cells, %s, %s, %s%s\n", D, n,
                size, ranks.c_str(), static_cast<long long>(s.cells), D, s.boundary.c_str(), s.kernel.name().c_str(),
                s.precision.c_str(), s.deterministic ? ", deterministic" : "");
    std::printf("  particles per rank after migrate: %.0f to %.0f\n", least, most);
    std::printf("timings (the slowest rank's):\n");
    std::printf("  migrate     %10.3f ms\n  set_points  %10.3f ms\n", 1e3 * times[0], 1e3 * times[1]);
    std::printf("  spread      %10.3f ms   (ghost exchange %.3f ms)\n", 1e3 * times[2], 1e3 * times[3]);
    std::printf("  interp      %10.3f ms   (ghost exchange %.3f ms)\n", 1e3 * times[4], 1e3 * times[5]);
    std::printf("checks:\n");
    sums.print(conservation, adjoint);
    report_checks({{"conservation", conservation}, {"round trip", adjoint}}, tolerance);
  }
  return conservation < tolerance && adjoint < tolerance ? 0 : 1;
}

}  // namespace

int run_distributed_demo(int argc, char** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string usage = distributed_usage();
  const int status = guarded("demo", usage, [&]() -> int {
    Settings s;
    ArgReader args(argc, argv);
    while (args.next()) {
      if (read_demo_setting(args, s)) continue;
      if (args.is("--help")) {
        args.flag();
        std::fputs(usage.c_str(), stdout);
        return 0;
      } else if (args.is("--distributed")) {
        args.flag();
      } else if (args.is("--deterministic")) {
        args.flag();
        s.deterministic = true;
      } else {
        args.unknown();
      }
    }
    int local = s.precision == "float" ? (s.dim == 2 ? demo<float, 2>(s) : demo<float, 3>(s))
                                       : (s.dim == 2 ? demo<double, 2>(s) : demo<double, 3>(s));
    MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return local;
  }, rank == 0);
  MPI_Finalize();
  return status;
}

}  // namespace pmkit::cli
