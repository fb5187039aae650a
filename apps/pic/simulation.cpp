// The PIC loop (pic.hpp): a Simulation<T, D> holds the particles and meshes on one device
// and runs the steps; simulate() picks its precision, dimension and device.
#include <chrono>
#include <cmath>
#include <complex>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "device.hpp"
#include "loading.hpp"
#include "pic.hpp"

namespace pmkit::pic {

using detail::fail;

std::array<double, 3> box_of(const Config& c) {
  // Landau and two-stream: the box holds one wavelength 2 pi / k along x; every cell is
  // a cube of the x cells' width.
  const double h = c.problem == Problem::Thermal ? c.spacing : 2 * std::acos(-1.0) / c.k / double(c.cells[0]);
  return {c.cells[0] * h, c.cells[1] * h, c.cells[2] * h};
}

int graph_cycle(const Config& c) { return c.sort_every > 0 ? 2 * c.sort_every : 1; }

namespace {

template <class T, int D>
class Simulation {
 public:
  explicit Simulation(const Config& c)
      : c_(c),
        box_(box_of(c)),
        grid_(Grid<D>::periodic(cells_of(c), box_[0] / double(c.cells[0]))),
        device_(c.backend == Backend::Cpu ? make_host_device<T, D>(c.num_threads) : cuda_device(c.device)),
        plan_(grid_, c.kernel, plan_options(c, device_->stream())),
        fft_(plan_.mesh_shape(), fft_options(c, device_->stream())),
        cycle_(graph_cycle(c)) {
    const auto n = static_cast<std::size_t>(c.particles);
    const auto mesh = static_cast<std::size_t>(plan_.mesh_size());
    const auto spectrum = static_cast<std::size_t>(fft_.spectrum_size());
    p_.n = n;
    for (int d = 0; d < D; ++d) {
      p_.x[d] = device_->allocate(n);
      p_.v[d] = device_->allocate(n);
      p_.a[d] = device_->allocate(n);
    }
    p_.w = device_->allocate(n);
    if (c.sort_every > 0) {  // the arrays permute_to_binned writes, swapped in after
      for (int d = 0; d < D; ++d) {
        spare_.x[d] = device_->allocate(n);
        spare_.v[d] = device_->allocate(n);
      }
    }
    rho_ = device_->allocate(mesh);
    phi_ = device_->allocate(mesh);
    spectrum_ = device_->allocate(2 * spectrum);
    if (c.field == FieldMethod::Mesh) {
      spectrum_d_ = device_->allocate(2 * spectrum);
      for (int d = 0; d < D; ++d) e_[d] = device_->allocate(mesh);
    }
    upload_green_functions();

    const Loaded<T, D> loaded = load_particles<T, D>(c, box_);
    for (int d = 0; d < D; ++d) {
      device_->upload(p_.x[d], loaded.x[d]);
      device_->upload(p_.v[d], loaded.v[d]);
    }
    // Density 1: each electron carries the box's volume over the count.
    double volume = 1;
    for (int d = 0; d < D; ++d) volume *= box_[d];
    device_->upload(p_.w, std::vector<T>(n, static_cast<T>(volume / double(n))));
  }

  // The initial field and half kick back, then `warmup` eager steps; `stretch` steps as
  // one stretch (Result::seconds; replayed from the graph where `graph`); with
  // `graph_stretch`, at least that many steps in whole cycles replayed from the graph
  // (Result::graph_seconds); then `timed` eager steps whose phases each wait for the
  // device (Result::phases).
  Result run(int warmup, int stretch, bool graph, int graph_stretch, int timed) {
    Result r;
    try {
      plan_.set_points(positions());
      solve_and_gather();
      // v_0 -> v_{-1/2}: leapfrog's velocities live at the half steps.
      push(-T(0.5) * T(c_.dt), T(0));
      if (c_.diagnostics) record();
      advance(warmup, false);
      r.seconds = seconds_of([&] { advance(stretch, graph); });
      if (graph_stretch > 0 && graph_usable()) {
        // Eager steps to a cycle's start, a cycle of them at least; the capture and a
        // first replay outside the time.
        while (steps_done_ < cycle_ || steps_done_ % cycle_ != 0) step();
        advance(cycle_, true);
        if (captured_) {
          r.graph_steps = (graph_stretch + cycle_ - 1) / cycle_ * cycle_;
          r.graph_seconds = seconds_of([&] { advance(r.graph_steps, true); });
        }
      }
      timed_ = true;
      advance(timed, false);
      plan_.synchronize();  // a position the device rejected, eager or replayed, is thrown here
      if (c_.diagnostics) collect();
    } catch (const Error&) {
      // An unstable run's positions stop being finite, which the plan rejects, a step or
      // (on CUDA) a few after the energies: those name the step where it began.
      const std::exception_ptr failed = std::current_exception();
      try {
        if (c_.diagnostics) collect();
      } catch (const Error&) {
        if (unstable_) throw;
      }
      std::rethrow_exception(failed);
    }
    r.history = std::move(history_);
    r.phases = phases_;
    r.spread_method = plan_.spread_method_name();
    r.replayed_steps = replayed_;
    r.graph_note = graph_note_;
    return r;
  }

 private:
  static std::array<std::int64_t, D> cells_of(const Config& c) {
    std::array<std::int64_t, D> cells;
    for (int d = 0; d < D; ++d) cells[d] = c.cells[d];
    return cells;
  }
  static Options plan_options(const Config& c, StreamHandle stream) {
    Options o{c};
    o.stream = stream;
    o.deterministic = c.deterministic;
    if (c.max_away_fraction >= 0) o.max_away_fraction = c.max_away_fraction;
    return o;
  }
  static FftOptions fft_options(const Config& c, StreamHandle stream) {
    FftOptions o{c};
    o.stream = stream;
    return o;
  }
  static std::unique_ptr<Device<T, D>> cuda_device(int ordinal) {
#if defined(PMKIT_WITH_CUDA)
    return make_cuda_device<T, D>(ordinal);
#else
    (void)ordinal;
    fail(ErrorCode::Unsupported, "backend cuda: this build of pmkit has no CUDA backend");
#endif
  }

  // phi_k = -n_k / k^2 (Poisson, with the ions' uniform charge cancelling k = 0), n the
  // electron density s / h^D of the spread s, over the inverse FFT's N: green = -1 / (h^D
  // k^2 N). E's components: -i k_d phi_k, the Nyquist wavenumber's derivative zero so that
  // the field stays real and antisymmetric (momentum).
  void upload_green_functions() {
    const auto shape = fft_.spectrum_shape();
    const auto real = fft_.shape();
    const auto size = static_cast<std::size_t>(fft_.spectrum_size());
    double cell = 1;
    for (int d = 0; d < D; ++d) cell *= grid_.spacing[d];
    const double two_pi = 2 * std::acos(-1.0), n = double(fft_.real_size());
    std::vector<T> green(size);
    std::array<std::vector<T>, D> derivative;
    for (auto& f : derivative) f.resize(c_.field == FieldMethod::Mesh ? size : 0);
    for (std::size_t k = 0; k < size; ++k) {
      std::size_t rest = k;
      double k2 = 0, kd[D];
      for (int d = 0; d < D; ++d) {
        const auto m = static_cast<std::int64_t>(rest % shape[d]);
        rest /= shape[d];
        const std::int64_t signed_m = m <= real[d] / 2 ? m : m - real[d];
        kd[d] = two_pi * double(signed_m) / box_[d];
        k2 += kd[d] * kd[d];
        if (2 * m == real[d]) kd[d] = 0;  // Nyquist
      }
      const double g = k == 0 ? 0.0 : -1.0 / (cell * k2 * n);
      green[k] = static_cast<T>(g);
      if (c_.field == FieldMethod::Mesh)
        for (int d = 0; d < D; ++d) derivative[d][k] = static_cast<T>(kd[d] * g);
    }
    green_ = device_->allocate(size);
    device_->upload(green_, green);
    if (c_.field == FieldMethod::Mesh)
      for (int d = 0; d < D; ++d) {
        derivative_[d] = device_->allocate(size);
        device_->upload(derivative_[d], derivative[d]);
      }
  }

  std::array<View<const T>, D> positions() const {
    std::array<View<const T>, D> x;
    for (int d = 0; d < D; ++d) x[d] = View<const T>(p_.x[d], p_.n);
    return x;
  }

  // Deposit, field solve and gather at the current positions; the field energy with them.
  void solve_and_gather() {
    const auto mesh = static_cast<std::size_t>(plan_.mesh_size());
    const auto size = static_cast<std::size_t>(fft_.spectrum_size());
    auto* spectrum = reinterpret_cast<std::complex<T>*>(spectrum_);
    timed_phase(&PhaseTimes::deposit, [&] { plan_.spread({View<const T>(p_.w, p_.n)}, {View<T>(rho_, mesh)}); });
    std::array<View<T>, D> accel;
    for (int d = 0; d < D; ++d) accel[d] = View<T>(p_.a[d], p_.n);
    if (c_.field == FieldMethod::Gradient) {
      timed_phase(&PhaseTimes::solve, [&] {
        fft_.forward(rho_, spectrum);
        device_->scale_spectrum(spectrum_, green_, spectrum_, size, false);
        fft_.inverse(spectrum, phi_);
      });
      if (c_.diagnostics) device_->dot(rho_, phi_, mesh, 0);
      // The electrons' acceleration -E = grad phi.
      timed_phase(&PhaseTimes::gather, [&] { plan_.interp_gradient({View<const T>(phi_, mesh)}, Span<View<T>>(accel.data(), D)); });
    } else {
      std::array<View<const T>, D> field;
      timed_phase(&PhaseTimes::solve, [&] {
        fft_.forward(rho_, spectrum);
        for (int d = 0; d < D; ++d) {
          device_->scale_spectrum(spectrum_, derivative_[d], spectrum_d_, size, true);
          fft_.inverse(reinterpret_cast<std::complex<T>*>(spectrum_d_), e_[d]);
          field[d] = View<const T>(e_[d], mesh);
        }
      });
      if (c_.diagnostics)
        for (int d = 0; d < D; ++d) device_->dot(e_[d], e_[d], mesh, d);
      // The acceleration is -E here: push() flips the kick's sign.
      timed_phase(&PhaseTimes::gather, [&] { plan_.interp(Span<View<const T>>(field.data(), D), Span<View<T>>(accel.data(), D)); });
    }
  }

  void push(T kick, T drift) {
    LeapfrogPush<T, D> push{c_.field == FieldMethod::Gradient ? kick : -kick, drift, {}};
    for (int d = 0; d < D; ++d) push.box[d] = static_cast<T>(box_[d]);
    device_->push(p_, push);
  }

  // One leapfrog step from time n, queued: push (v_{n+1/2}, x_{n+1}), the diagnostics'
  // record of time n (the moments after the push, the field energy of the last solve),
  // re-bin, and the field of time n + 1.
  void step() {
    timed_phase(&PhaseTimes::push, [&] { push(T(c_.dt), T(c_.dt)); });
    if (c_.diagnostics) record();
    ++steps_done_;
    rebin(steps_done_);
    solve_and_gather();
  }

  // `steps` steps: with `graph`, the whole cycles that start at a cycle's start replayed
  // from the graph (captured at the first of them), the others eager.
  void advance(int steps, bool graph) {
    while (steps > 0) {
      if (graph && steps >= cycle_ && graph_ready()) {
        replay_cycle();
        steps -= cycle_;
      } else {
        step();
        --steps;
      }
    }
  }

  bool graph_usable() {
    if (!c_.graph || !device_->can_capture()) return false;
    if (cycle_ > kMaxGraphCycle && graph_note_.empty())
      graph_note_ = "the graph's cycle of " + std::to_string(cycle_) + " steps (2 sort_every) is longer than " +
                    std::to_string(kMaxGraphCycle) + ": the steps run eagerly";
    return graph_note_.empty();
  }

  // Whether the graph can replay the cycle from here: at a cycle's start, after a cycle
  // of eager steps (so that every buffer of the plans exists), captured on first use.
  bool graph_ready() {
    if (!graph_usable() || steps_done_ < cycle_ || steps_done_ % cycle_ != 0) return false;
    if (!captured_) capture_cycle();
    return captured_;
  }

  // Records a cycle of steps into the graph without running them: the host's state (the
  // step count, the arrays' swaps) goes through the cycle and comes back where it
  // started. A capture that fails (a call that waits, allocates or is not capturable)
  // leaves the steps eager, with the reason in the result, and the particles binned
  // afresh: the calls recorded before the failure never ran.
  void capture_cycle() {
    const int start = steps_done_;
    const Particles<T, D> particles = p_, spare = spare_;
    capturing_ = true;
    try {
      device_->capture([&] {
        for (int s = 0; s < cycle_; ++s) step();
      });
      captured_ = true;
    } catch (const Error& e) {
      graph_note_ = std::string("the capture failed (the steps run eagerly): ") + e.what();
      p_ = particles;
      spare_ = spare;
    }
    capturing_ = false;
    steps_done_ = start;
    if (!captured_) plan_.set_points(positions());
  }

  // A replay of the cycle, with room for its records in the log (taken when full, as
  // after an eager record).
  void replay_cycle() {
    const std::size_t capacity = device_->record_capacity();
    if (c_.diagnostics && pending_ + cycle_ > capacity) collect();
    device_->replay();
    steps_done_ += cycle_;
    replayed_ += cycle_;
    if (c_.diagnostics && (pending_ += cycle_) >= capacity) collect();
  }

  // The moments after a push into the device's log, with the field energy's sums of the
  // last solve; the records taken when the log is full (on the CPU, every record: the
  // row is checked before the step goes on).
  void record() {
    device_->moments(p_);
    device_->record();
    if (!capturing_ && ++pending_ >= device_->record_capacity()) collect();
  }

  // The records logged since the last take, as rows of the history: row n from the
  // records of times n and n + 1 (the half steps' moments around it, and the field of
  // time n). Throws at the first row whose energies are not finite.
  void collect() {
    const std::vector<StepSums> records = device_->take_records(pending_);
    pending_ = 0;
    for (const StepSums& sums : records) {
      if (has_last_) {
        const Diagnostics r = row(last_, sums);
        if (!std::isfinite(r.total)) {
          unstable_ = true;
          fail(ErrorCode::InvalidArgument, "the energies are not finite at step ", history_.size(), " (t = ", r.t,
               "): the run is unstable; a smaller dt");
        }
        history_.push_back(r);
      }
      last_ = sums;
      has_last_ = true;
    }
  }

  Diagnostics row(const StepSums& before, const StepSums& after) const {
    Diagnostics row;
    row.t = double(history_.size()) * c_.dt;
    if (c_.field == FieldMethod::Gradient) {
      row.field = -0.5 * after.field[0];
    } else {
      double sum = 0, cell = 1;
      for (int d = 0; d < D; ++d) {
        sum += after.field[d];
        cell *= grid_.spacing[d];
      }
      row.field = 0.5 * cell * sum;
    }
    row.kinetic = 0.5 * (before.moments.kinetic + after.moments.kinetic);
    for (int d = 0; d < D; ++d) row.momentum[d] = 0.5 * (before.moments.momentum[d] + after.moments.momentum[d]);
    row.total = row.field + row.kinetic;
    return row;
  }

  // Seconds of f(), the device idle before and after.
  template <class F>
  double seconds_of(F&& f) {
    device_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    device_->synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // update_points after the small moves of a step; every sort_every steps the particle
  // arrays are put in the plan's binned order first and binned afresh.
  void rebin(int step) {
    if (c_.sort_every > 0 && step % c_.sort_every == 0) {
      timed_phase(&PhaseTimes::sort, [&] {
        // Out of place into the spare arrays, which then become the particles'. Every
        // electron has the same weight here, so w stays as it is; a code with varying
        // weights (or any other per-particle property) lists it with x and v.
        std::vector<View<const T>> from;
        std::vector<View<T>> to;
        for (int d = 0; d < D; ++d) {
          from.push_back(View<const T>(p_.x[d], p_.n));
          from.push_back(View<const T>(p_.v[d], p_.n));
          to.push_back(View<T>(spare_.x[d], p_.n));
          to.push_back(View<T>(spare_.v[d], p_.n));
        }
        plan_.permute_to_binned(from, to);
        for (int d = 0; d < D; ++d) {
          std::swap(p_.x[d], spare_.x[d]);
          std::swap(p_.v[d], spare_.v[d]);
        }
      });
      timed_phase(&PhaseTimes::rebin, [&] { plan_.set_points(positions()); });
    } else {
      timed_phase(&PhaseTimes::rebin, [&] { plan_.update_points(positions()); });
    }
  }

  template <class F>
  void timed_phase(double PhaseTimes::*phase, F&& f) {
    if (!timed_) return f();
    device_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    device_->synchronize();
    phases_.*phase += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  Config c_;
  std::array<double, 3> box_;
  Grid<D> grid_;
  std::unique_ptr<Device<T, D>> device_;
  Plan<T, D> plan_;
  RealFft<T, D> fft_;
  int cycle_;  // graph_cycle
  bool timed_ = false;
  PhaseTimes phases_;
  int steps_done_ = 0;
  // The graph: captured (replays follow), being captured (the steps are recorded, not
  // run), the steps it replayed, and why there is none where one was asked for.
  bool captured_ = false, capturing_ = false;
  int replayed_ = 0;
  std::string graph_note_;
  // The diagnostics: records queued since the last take, the last record taken (the
  // first half of the next row), the rows, and whether a row was not finite.
  std::size_t pending_ = 0;
  StepSums last_{};
  bool has_last_ = false, unstable_ = false;
  std::vector<Diagnostics> history_;
  Particles<T, D> p_{};
  Particles<T, D> spare_{};  // sort_every: the permuted arrays' destination (x, v)
  T* rho_ = nullptr;
  T* phi_ = nullptr;
  T* spectrum_ = nullptr;    // (re, im) pairs
  T* spectrum_d_ = nullptr;  // E's component d in k-space (FieldMethod::Mesh)
  T* green_ = nullptr;
  T* derivative_[D] = {};
  T* e_[D] = {};
};

}  // namespace

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
template <class T, int D, class... Args>
Result run_as(const Config& c, Args... args) {
  return Simulation<T, D>(c).run(args...);
}
template <class... Args>
Result run(const Config& c, Args... args) {
  validate(c);
  if (c.double_precision) return c.dim == 2 ? run_as<double, 2>(c, args...) : run_as<double, 3>(c, args...);
  return c.dim == 2 ? run_as<float, 2>(c, args...) : run_as<float, 3>(c, args...);
}
}  // namespace

Result simulate(const Config& c, bool timed) {
  return timed ? run(c, 0, 0, false, 0, c.steps) : run(c, 0, c.steps, c.graph, 0, 0);
}

Result benchmark(const Config& c, int warmup, int timed_steps) {
  return run(c, warmup, c.steps, false, c.graph ? c.steps : 0, timed_steps);
}

}  // namespace pmkit::pic
