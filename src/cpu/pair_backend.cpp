// The CPU pair backend: the cell list (a counting sort of the particles by cell, with the
// neighbour cells of every cell) and the traversal's threads, for the built-in kernels
// and the caller's (the work of a cell: pmkit/detail/pair_traversal.hpp).
#include <algorithm>
#include <cmath>
#include <new>
#include <vector>

#include "core/checks.hpp"
#include "core/pair_backend.hpp"
#include "pmkit/detail/wrap.hpp"
#include "cpu/counting_sort.hpp"
#include "cpu/openmp.hpp"
#include "cpu/stopwatch.hpp"

namespace pmkit::detail {
namespace {

// Shares of the parallel cell sort: one a thread, but at least kShareParticles particles
// each (a share's cell counts cost as much as sorting that many), at most kMaxShares,
// and their cell counts below kMaxShareCounts entries (docs/tuning.md#kshareparticles).
constexpr std::size_t kShareParticles = 8192;
constexpr std::size_t kMaxShares = 1024;
constexpr std::size_t kMaxShareCounts = std::size_t(1) << 24;

int sort_shares(std::size_t n, std::size_t ncells, int num_threads) {
  int shares = std::max(1, std::min<int>(openmp_threads(num_threads),
                                         static_cast<int>(std::min(n / kShareParticles + 1, kMaxShares))));
  while (shares > 1 && ncells * static_cast<std::size_t>(shares) > kMaxShareCounts) --shares;
  return shares;
}

template <class T, int D>
class CpuPairBackend final : public PairBackend<T, D>, public HostPairs<T, D> {
 public:
  using Positions = std::array<View<const T>, D>;

  CpuPairBackend(const Box<D>& box, double cutoff, const PairCellGrid<D>& grid, const PairOptions& options)
      : box_(box), num_threads_(options.num_threads), half_shell_(options.half_shell) {
    cl_.ncell = grid.ncell;
    cl_.width = grid.width;
    cl_.length = box.length;
    for (int d = 0; d < D; ++d) cl_.periodic[d] = box.boundary[d] == Boundary::Periodic;
    cl_.cutoff = cutoff;
    find_neighbours(static_cast<int>(grid.cells));
  }

  void set_points(const Positions& positions) override { bin(positions, box_.origin, nullptr); }

  void set_points(const Plan<T, D>& mesh) override {
    const std::size_t n = mesh.num_points();
    std::vector<T> offsets(D * n);
    std::vector<std::uint32_t> order(n);
    bin(binned_points(mesh, offsets.data(), order.data()), std::array<double, D>{}, order.data());
  }

  std::size_t num_points() const override { return cl_.n; }
  bool has_points() const override { return ready_; }
  void compute(const pair_kernels::LennardJones<D>& kernel, Span<View<const T>> in, Span<View<T>> out) override {
    run(kernel, in, out);
  }
  void compute(const pair_kernels::NeighbourCount& kernel, Span<View<const T>> in, Span<View<T>> out) override {
    run(kernel, in, out);
  }
  void compute(const pair_kernels::EwaldRealSpace<D>& kernel, Span<View<const T>> in, Span<View<T>> out) override {
    run(kernel, in, out);
  }
  HostPairs<T, D>* host_pairs() override { return this; }
  Timings last_timings() const override { return {0.0, compute_s_}; }

  // The cells shared out dynamically over the threads (their work varies with their
  // particles); the half shell's sums in one block a thread, then summed in thread order
  // (reproducible for a thread count), kFinishSlots particles a share. compute_s_ gets the
  // wall time on every way out.
  void traverse(const HostPairWork<T, D>& work) override {
    const Stopwatch stopwatch{compute_s_};
    const int ncells = cl_.cells();
    const int threads = openmp_threads(num_threads_);
    if (!half_shell_) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
      for (int c = 0; c < ncells; ++c) work.full_shell_cell(work.call, cl_, c);
      return;
    }
    const std::size_t n = cl_.n, block = n * static_cast<std::size_t>(work.outputs);
    const std::int64_t shares = static_cast<std::int64_t>((n + kFinishSlots - 1) / kFinishSlots);
    thread_sums_.assign(block * static_cast<std::size_t>(threads), T(0));
#pragma omp parallel num_threads(threads)
    {
      T* mine = thread_sums_.data() + block * static_cast<std::size_t>(openmp_thread_id());
#pragma omp for schedule(dynamic, 16)
      for (int c = 0; c < ncells; ++c) work.half_shell_cell(work.call, cl_, c, mine);
#pragma omp for schedule(static)
      for (std::int64_t share = 0; share < shares; ++share) {
        const std::size_t begin = static_cast<std::size_t>(share) * kFinishSlots;
        work.finish(work.call, cl_, begin, std::min(n, begin + kFinishSlots), thread_sums_.data(), threads);
      }
    }
  }

 private:
  template <class Kernel>
  void run(const Kernel& kernel, Span<View<const T>> in, Span<View<T>> out) {
    const KernelPairs<T, D, Kernel> pairs(kernel, in, out);
    traverse(pairs.work());
  }

  // The distinct neighbour cells of every cell.
  void find_neighbours(int total) {
    auto& nb = cl_.neighbours;
    nb.resize(static_cast<std::size_t>(total));
    for (int c = 0; c < total; ++c) {
      int coord[D];
      for (int d = 0, rest = c; d < D; ++d) {
        coord[d] = rest % cl_.ncell[d];
        rest /= cl_.ncell[d];
      }
      int offsets = 1;
      for (int d = 0; d < D; ++d) offsets *= 3;
      for (int o = 0; o < offsets; ++o) {
        int other = 0, stride = 1;
        bool valid = true;
        for (int d = 0, rest = o; d < D; ++d, rest /= 3) {
          int k = coord[d] + rest % 3 - 1;
          const int m = cl_.ncell[d];
          if (k < 0 || k >= m) {
            if (box_.boundary[d] == Boundary::Bounded) valid = false;
            k = (k + m) % m;
          }
          other += k * stride;
          stride *= m;
        }
        if (valid && std::find(nb[c].begin(), nb[c].end(), other) == nb[c].end()) nb[c].push_back(other);
      }
    }
  }

  // The cell sort of offsets from the box origin plus `origin` (the box's own origin for
  // the caller's positions, zeros for a mesh plan's offsets); with `order`, input k is
  // the caller's particle order[k].
  void bin(const Positions& positions, const std::array<double, D>& origin, const std::uint32_t* order) {
    const std::size_t n = positions[0].size;
    const std::size_t ncells = static_cast<std::size_t>(cl_.cells());
    // Particle i's wrapped coordinate d (a mesh plan's offset on a bounded axis: clamped
    // inside, up to its rounding to T); false where it is rejected.
    auto wrapped_coordinate = [&](int d, double x, double& u) {
      u = x - origin[d];
      if (order && !cl_.periodic[d]) u = std::min(std::max(u, 0.0), box_.length[d]);
      return wrap_coordinate(u, box_.length[d], cl_.periodic[d]);
    };
    std::vector<T> wrapped(D * n);
    auto cell_of = [&](std::size_t i, std::uint32_t& cell_out) {
      int cell = 0;
      for (int d = D - 1; d >= 0; --d) {
        double u;
        if (!wrapped_coordinate(d, positions[d][i], u)) return false;
        wrapped[d * n + i] = static_cast<T>(u);
        const int k = std::min(cl_.ncell[d] - 1, static_cast<int>(u / cl_.width[d]));
        cell = cell * cl_.ncell[d] + k;
      }
      cell_out = static_cast<std::uint32_t>(cell);
      return true;
    };
    std::vector<std::uint32_t> perm(n), start;
    std::vector<T> pos(D * n);
    auto place = [&](std::size_t i, std::uint32_t slot) {
      perm[slot] = order ? order[i] : static_cast<std::uint32_t>(i);
      for (int d = 0; d < D; ++d) pos[d * n + slot] = wrapped[d * n + i];
    };
    const std::size_t bad = cpu::counting_sort(n, ncells, sort_shares(n, ncells, num_threads_), cell_of, place,
                                               keys_, counts_, &start);
    if (bad < n) {
      double x[D], lo[D], hi[D];
      for (int d = 0; d < D; ++d) {
        x[d] = positions[d][bad];
        lo[d] = box_.origin[d];
        hi[d] = box_.origin[d] + box_.length[d];
      }
      reject_position<D>(x, bad, "box", lo, hi, [&](int d, double v) {
        double u;
        return wrapped_coordinate(d, v, u);
      });
    }
    cl_.n = n;
    cl_.start.swap(start);
    cl_.perm.swap(perm);
    cl_.pos.swap(pos);
    ready_ = true;
  }

  // Particles a call of the half shell's finish sums, one share of the threads.
  static constexpr std::size_t kFinishSlots = 1024;

  Box<D> box_;
  int num_threads_;  // OpenMP threads asked for (0: OpenMP's default)
  bool half_shell_;  // each pair once, per-thread sums
  HostPairCells<T, D> cl_;
  std::vector<T> thread_sums_;  // the half shell's sums, one block a thread
  double compute_s_ = 0;        // wall time of the last traversal
  bool ready_ = false;
  std::vector<std::uint32_t> keys_, counts_;  // scratch of the cell sort
};

}  // namespace

template <class T, int D>
std::unique_ptr<PairBackend<T, D>> make_cpu_pair_backend(const Box<D>& box, double cutoff,
                                                         const PairCellGrid<D>& grid, const PairOptions& options) {
  return std::make_unique<CpuPairBackend<T, D>>(box, cutoff, grid, options);
}

PMKIT_INSTANTIATE_PAIR_BACKEND(make_cpu_pair_backend)

}  // namespace pmkit::detail
