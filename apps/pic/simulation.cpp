// The PIC loop on one device (pic.hpp): the Simulation of simulation.hpp on LocalMesh, a
// Plan and a RealFft of the whole grid; simulate() picks its precision and dimension.
#include <cmath>

#include "simulation.hpp"

namespace pmkit::pic {

using detail::fail;

std::array<double, 3> box_of(const Config& c) {
  // Landau and two-stream: the box holds one wavelength 2 pi / k along x; every cell is
  // a cube of the x cells' width.
  const double h = c.problem == Problem::Thermal ? c.spacing : 2 * std::acos(-1.0) / c.k / double(c.cells[0]);
  return {c.cells[0] * h, c.cells[1] * h, c.cells[2] * h};
}

int graph_cycle(const Config& c) { return c.sort_every > 0 ? 2 * c.sort_every : 1; }

void validate(const Config& c) {
  auto bad = [](auto... parts) { fail(ErrorCode::InvalidArgument, parts...); };
  if (c.dim != 2 && c.dim != 3) bad("dim = ", c.dim, ": 2 or 3");
  for (int d = 0; d < c.dim; ++d)
    if (c.cells[d] < 1) bad("cells[", d, "] = ", c.cells[d], ": at least 1");
  if (c.particles < 1) bad("particles = ", c.particles, ": at least 1");
  if (c.steps < 0) bad("steps = ", c.steps, ": at least 0");
  if (!(c.dt > 0) || !(c.dt <= kMaxDt))
    bad("dt = ", c.dt, ": in (0, ", kMaxDt, "] (leapfrog needs dt well below 2 over the plasma frequency)");
  if (c.sort_every < 0) bad("sort_every = ", c.sort_every, ": 0 (never) or a positive step count");
  if (c.stream != nullptr) bad("stream: null (the simulation runs on a CUDA stream of its own)");
  if (!(c.k > 0) || !std::isfinite(c.k)) bad("k = ", c.k, ": positive");
  if (!(c.amplitude >= 0 && c.amplitude < 1)) bad("amplitude = ", c.amplitude, ": in [0, 1)");
  if (!(c.spacing > 0) || !std::isfinite(c.spacing)) bad("spacing = ", c.spacing, ": positive");
}

namespace {

// The whole grid on one device: its particles all loaded here, the spectrum RealFft's.
template <class T, int D>
struct LocalMesh {
  static constexpr bool kDistributed = false;
  Plan<T, D> plan;
  RealFft<T, D> fft;
  std::array<std::int64_t, D> spectrum_shape;

  LocalMesh(const Config& c, const Grid<D>& grid, StreamHandle stream)
      : plan(grid, c.kernel, plan_options(c, stream)),
        fft(plan.mesh_shape(), fft_options(c, stream)),
        spectrum_shape(fft.spectrum_shape()) {}

  std::int64_t mesh_size() const { return plan.mesh_size(); }
  // RealFft's spectrum: k0 fastest.
  std::array<std::int64_t, D> wavenumber_index(std::size_t k) const {
    std::array<std::int64_t, D> index;
    for (int d = 0; d < D; ++d) {
      index[d] = static_cast<std::int64_t>(k % spectrum_shape[d]);
      k /= spectrum_shape[d];
    }
    return index;
  }
  std::pair<std::int64_t, std::int64_t> share(std::int64_t n) const { return {0, n}; }
  std::size_t capacity(std::int64_t n) const { return static_cast<std::size_t>(n); }
  template <class F>
  void agree(F&& f) {
    f();
  }
  void sum_over_ranks(std::vector<StepSums>&) const {}
  double fft_exchange_seconds() const { return 0; }
  std::string spread_method_name() const { return plan.spread_method_name(); }
};

Result run(const Config& c, const Schedule& schedule) {
  validate(c);
  return with_kind(c, [&](auto kind) {
    using T = typename decltype(kind)::type;
    constexpr int D = decltype(kind)::dim;
    return Simulation<T, D, LocalMesh<T, D>>(c).run(schedule);
  });
}

}  // namespace

Result simulate(const Config& c, bool timed) { return run(c, simulate_schedule(c, timed)); }

Result benchmark(const Config& c, int warmup, int timed_steps) {
  return run(c, benchmark_schedule(c, warmup, timed_steps));
}

std::vector<double> initial_density(const Config& c) {
  validate(c);
  return with_kind(c, [&](auto kind) {
    using T = typename decltype(kind)::type;
    constexpr int D = decltype(kind)::dim;
    return Simulation<T, D, LocalMesh<T, D>>(c).initial_density();
  });
}

}  // namespace pmkit::pic
