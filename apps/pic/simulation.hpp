#pragma once
// Over 600 lines: one class template, whose two step paths share its state and diagnostics.
// The PIC loop (pic.hpp) on one device: Simulation<T, D, Mesh> holds a rank's particles
// and meshes and runs the steps. Mesh is where the mesh work goes: LocalMesh
// (simulation.cpp), a Plan and a RealFft of the whole grid, or RankMesh (distributed.cpp),
// a DistributedPlan and a DistributedRealFft whose blocks are the FFT's slabs. A Mesh has
//   plan, fft                      the mesh plan and the FFT (the calls they share)
//   kDistributed                   whether particles migrate
//   mesh_size()                    the values of this rank's real mesh
//   wavenumber_index(k)            the half-spectrum index at offset k of the spectrum
//   share(n), capacity(n)          the particles this rank loads, and its arrays' slots
//   agree(f)                       f(), then a failure on any rank thrown on all
//   sum_over_ranks(records)        the diagnostics' sums added over the ranks
//   fft_exchange_seconds()         the last transform's exchange (timed steps)
//   spread_method_name()
//
// On one rank a step is pmkit's particle step (pmkit/particle_step.hpp, Config::
// particle_step): the gather of the field, the push, the deposit of the charge at the new
// positions and the re-binning in one call, on electrons that it keeps in binned order;
// then the field solve. Otherwise (across ranks, where the electrons migrate between the
// push and the deposit, or with Config::particle_step off) the separate calls: push,
// re-bin (and every sort_every steps the arrays put in binned order), deposit, field
// solve, gather. Both give the same history to rounding.
#include <chrono>
#include <cmath>
#include <complex>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device.hpp"
#include "loading.hpp"
#include "pic.hpp"

namespace pmkit::pic {

inline Options plan_options(const Config& c, StreamHandle stream) {
  Options o{c};
  o.stream = stream;
  o.deterministic = c.deterministic;
  if (c.max_away_fraction >= 0) o.max_away_fraction = c.max_away_fraction;
  return o;
}

inline FftOptions fft_options(const Config& c, StreamHandle stream) {
  FftOptions o{c};
  o.stream = stream;
  return o;
}

// The steps of a run (Simulation::run's arguments): simulate()'s, untimed one stretch
// (replayed from a graph where Config::graph asks) or timed phase by phase, and
// benchmark()'s.
struct Schedule {
  int warmup = 0, stretch = 0;
  bool graph = false;
  int graph_stretch = 0, timed = 0;
};
inline Schedule simulate_schedule(const Config& c, bool timed) {
  return timed ? Schedule{0, 0, false, 0, c.steps} : Schedule{0, c.steps, c.graph, 0, 0};
}
inline Schedule benchmark_schedule(const Config& c, int warmup, int timed_steps) {
  return {warmup, c.steps, false, c.graph ? c.steps : 0, timed_steps};
}

// f(Kind<T, D>{}) for the configuration's precision and dimension.
template <class T, int D>
struct Kind {
  using type = T;
  static constexpr int dim = D;
};
template <class F>
auto with_kind(const Config& c, F&& f) {
  if (c.double_precision) return c.dim == 2 ? f(Kind<double, 2>{}) : f(Kind<double, 3>{});
  return c.dim == 2 ? f(Kind<float, 2>{}) : f(Kind<float, 3>{});
}

template <class T, int D, class Mesh>
class Simulation {
 public:
  // mesh_args: what the Mesh takes after the configuration, grid and stream.
  template <class... MeshArgs>
  explicit Simulation(const Config& c, MeshArgs... mesh_args)
      : c_(c),
        box_(box_of(c)),
        grid_(Grid<D>::periodic(cells_of(c), box_[0] / double(c.cells[0]))),
        device_(c.backend == Backend::Cpu ? make_host_device<T, D>(c.num_threads) : cuda_device(c.device)),
        mesh_(c, grid_, device_->stream(), mesh_args...),
        plan_(mesh_.plan),
        fft_(mesh_.fft),
        cycle_(graph_cycle(c)),
        fused_(!Mesh::kDistributed && c.particle_step) {
    // The arrays and the loading on every rank, then agreed: a rank that fails throws on
    // all before any step's message.
    mesh_.agree([&] { allocate_and_load(); });
  }

  // The deposit of the initial electrons: this rank's mesh, in double.
  std::vector<double> initial_density() {
    start();
    const auto mesh = static_cast<std::size_t>(mesh_.mesh_size());
    plan_.spread({View<const T>(p_.w, p_.n)}, {View<T>(rho_, mesh)});
    std::vector<T> rho(mesh);
    device_->download(rho, rho_);
    return std::vector<double>(rho.begin(), rho.end());
  }

 private:
  void allocate_and_load() {
    const auto [first, count] = mesh_.share(c_.particles);
    const std::size_t n = mesh_.capacity(c_.particles);
    const auto mesh = static_cast<std::size_t>(mesh_.mesh_size());
    const auto spectrum = static_cast<std::size_t>(fft_.spectrum_size());
    capacity_ = n;
    p_.n = static_cast<std::size_t>(count);
    for (int d = 0; d < D; ++d) {
      p_.x[d] = device_->allocate(n);
      p_.v[d] = device_->allocate(n);
      if (!fused_) p_.a[d] = device_->allocate(n);
    }
    p_.w = device_->allocate(n);
    if (!fused_ && c_.sort_every > 0) {  // the arrays permute_to_binned writes, swapped in after
      for (int d = 0; d < D; ++d) {
        spare_.x[d] = device_->allocate(n);
        spare_.v[d] = device_->allocate(n);
      }
    }
    rho_ = device_->allocate(mesh);
    phi_ = device_->allocate(mesh);
    spectrum_ = device_->allocate(2 * spectrum);
    if (c_.field == FieldMethod::Mesh) {
      spectrum_d_ = device_->allocate(2 * spectrum);
      for (int d = 0; d < D; ++d) e_[d] = device_->allocate(mesh);
    }
    upload_green_functions();

    Loaded<T, D> loaded = load_particles<T, D>(c_, box_, first, count);
    for (int d = 0; d < D; ++d) {
      loaded.x[d].resize(n);
      loaded.v[d].resize(n);
      device_->upload(p_.x[d], loaded.x[d]);
      device_->upload(p_.v[d], loaded.v[d]);
    }
    // Density 1: each electron carries the box's volume over the count.
    double volume = 1;
    for (int d = 0; d < D; ++d) volume *= box_[d];
    weight_ = static_cast<T>(volume / double(c_.particles));
    device_->upload(p_.w, std::vector<T>(n, weight_));
    if constexpr (!Mesh::kDistributed)
      if (fused_) electrons_ = std::make_unique<pmkit::Particles<T, D>>(plan_, D);
  }

 public:

  // The initial field and half kick back, then `warmup` eager steps; `stretch` steps as
  // one stretch (Result::seconds; replayed from the graph where `graph`); with
  // `graph_stretch`, at least that many steps in whole cycles replayed from the graph
  // (Result::graph_seconds); then `timed` eager steps whose phases each wait for the
  // device (Result::phases).
  Result run(const Schedule& s) {
    const auto [warmup, stretch, graph, graph_stretch, timed] = s;
    Result r;
    try {
      start();
      deposit();
      solve();
      if (!fused_) gather();
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
      synchronize();  // a position the device rejected, eager or replayed, is thrown here
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
    r.spread_method = mesh_.spread_method_name();
    r.replayed_steps = replayed_;
    r.graph_note = graph_note_;
    r.particle_step = fused_;
    return r;
  }

 private:
  static std::array<std::int64_t, D> cells_of(const Config& c) {
    std::array<std::int64_t, D> cells;
    for (int d = 0; d < D; ++d) cells[d] = c.cells[d];
    return cells;
  }
  static std::unique_ptr<Device<T, D>> cuda_device(int ordinal) {
#if defined(PMKIT_WITH_CUDA)
    return make_cuda_device<T, D>(ordinal);
#else
    (void)ordinal;
    detail::fail(ErrorCode::Unsupported, "backend cuda: this build of pmkit has no CUDA backend");
#endif
  }

  // The electrons in the plan: across ranks, each moved to the rank that owns it first;
  // with the particle step, copied into its arrays (in binned order).
  void start() {
    if constexpr (Mesh::kDistributed) {
      migrate();
    } else if (fused_) {
      std::array<View<const T>, D> v;
      for (int d = 0; d < D; ++d) v[d] = View<const T>(p_.v[d], p_.n);
      return electrons_->assign(positions(), Span<View<const T>>(v.data(), D));
    }
    plan_.set_points(positions());
  }

  // Waits for the device; a position it rejected is thrown here (with the particle step,
  // the electrons keep their state before the step that left it).
  void synchronize() {
    if constexpr (!Mesh::kDistributed)
      if (fused_) return electrons_->synchronize();
    plan_.synchronize();
  }

  // Across ranks: every electron, with its velocity, to the rank whose block holds it.
  void migrate() {
    if constexpr (Mesh::kDistributed) {
      std::array<View<T>, D> x, v;
      for (int d = 0; d < D; ++d) {
        x[d] = View<T>(p_.x[d], capacity_);
        v[d] = View<T>(p_.v[d], capacity_);
      }
      p_.n = plan_.migrate(x, Span<View<T>>(v.data(), D), p_.n);
    }
  }

  // phi_k = -n_k / k^2 (Poisson, with the ions' uniform charge cancelling k = 0), n the
  // electron density s / h^D of the spread s, over the inverse FFT's N: green = -1 / (h^D
  // k^2 N). E's components: -i k_d phi_k, the Nyquist wavenumber's derivative zero so that
  // the field stays real and antisymmetric (momentum).
  void upload_green_functions() {
    const auto real = fft_.shape();
    const auto size = static_cast<std::size_t>(fft_.spectrum_size());
    double cell = 1, n = 1;
    for (int d = 0; d < D; ++d) {
      cell *= grid_.spacing[d];
      n *= double(real[d]);
    }
    const double two_pi = 2 * std::acos(-1.0);
    std::vector<T> green(size);
    std::array<std::vector<T>, D> derivative;
    for (auto& f : derivative) f.resize(c_.field == FieldMethod::Mesh ? size : 0);
    for (std::size_t k = 0; k < size; ++k) {
      const std::array<std::int64_t, D> index = mesh_.wavenumber_index(k);
      double k2 = 0, kd[D];
      bool zero = true;
      for (int d = 0; d < D; ++d) {
        const std::int64_t m = index[d];
        zero = zero && m == 0;
        const std::int64_t signed_m = m <= real[d] / 2 ? m : m - real[d];
        kd[d] = two_pi * double(signed_m) / box_[d];
        k2 += kd[d] * kd[d];
        if (2 * m == real[d]) kd[d] = 0;  // Nyquist
      }
      const double g = zero ? 0.0 : -1.0 / (cell * k2 * n);
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

  // The electrons' velocities and weights, for the diagnostics' sums.
  Velocities<T, D> velocities() const {
    Velocities<T, D> v{{}, p_.w, p_.n};
    for (int d = 0; d < D; ++d) v.v[d] = p_.v[d];
    if constexpr (!Mesh::kDistributed)
      if (fused_)
        for (int d = 0; d < D; ++d) v.v[d] = electrons_->property(d).data;
    return v;
  }

  std::array<View<const T>, D> positions() const {
    std::array<View<const T>, D> x;
    for (int d = 0; d < D; ++d) x[d] = View<const T>(p_.x[d], p_.n);
    return x;
  }

  // The field solve's meshes: the potential, and E's components (FieldMethod::Mesh).
  View<const T> potential() const { return View<const T>(phi_, static_cast<std::size_t>(mesh_.mesh_size())); }
  std::array<View<const T>, D> field() const {
    std::array<View<const T>, D> e;
    for (int d = 0; d < D; ++d) e[d] = View<const T>(e_[d], static_cast<std::size_t>(mesh_.mesh_size()));
    return e;
  }

  // The charge density at the current positions.
  void deposit() {
    timed_phase(&PhaseTimes::deposit, [&] {
      plan_.spread({View<const T>(p_.w, p_.n)}, {View<T>(rho_, static_cast<std::size_t>(mesh_.mesh_size()))});
    });
  }

  // The potential (or E on the mesh) of the charge density, and the field energy's sums.
  void solve() {
    const auto mesh = static_cast<std::size_t>(mesh_.mesh_size());
    const auto size = static_cast<std::size_t>(fft_.spectrum_size());
    auto* spectrum = reinterpret_cast<std::complex<T>*>(spectrum_);
    timed_phase(&PhaseTimes::solve, [&] {
      forward(spectrum);
      if (c_.field == FieldMethod::Gradient) {
        device_->scale_spectrum(spectrum_, green_, spectrum_, size, false);
        inverse(spectrum, phi_);
      } else {
        for (int d = 0; d < D; ++d) {
          device_->scale_spectrum(spectrum_, derivative_[d], spectrum_d_, size, true);
          inverse(reinterpret_cast<std::complex<T>*>(spectrum_d_), e_[d]);
        }
      }
    });
    if (!c_.diagnostics) return;
    if (c_.field == FieldMethod::Gradient)
      device_->dot(rho_, phi_, mesh, 0);
    else
      for (int d = 0; d < D; ++d) device_->dot(e_[d], e_[d], mesh, d);
  }

  // The acceleration at the particles (the separate calls): -E = grad phi, or E (push()
  // then flips the kick's sign).
  void gather() {
    std::array<View<T>, D> accel;
    for (int d = 0; d < D; ++d) accel[d] = View<T>(p_.a[d], p_.n);
    timed_phase(&PhaseTimes::gather, [&] {
      if (c_.field == FieldMethod::Gradient) {
        plan_.interp_gradient({potential()}, Span<View<T>>(accel.data(), D));
      } else {
        const std::array<View<const T>, D> e = field();
        plan_.interp(Span<View<const T>>(e.data(), D), Span<View<T>>(accel.data(), D));
      }
    });
  }

  // The transforms, with the time of the distributed FFT's exchange of its slabs.
  void forward(std::complex<T>* spectrum) {
    fft_.forward(rho_, spectrum);
    if (timed_) phases_.fft_exchange += mesh_.fft_exchange_seconds();
  }
  void inverse(std::complex<T>* spectrum, T* real) {
    fft_.inverse(spectrum, real);
    if (timed_) phases_.fft_exchange += mesh_.fft_exchange_seconds();
  }

  // The leapfrog push; with the particle step, the gather before it and the deposit of
  // the charge at the new positions with it (the half kick back deposits at the
  // positions it leaves as they were: the same density, rewritten before it is read).
  void push(T kick, T drift) {
    const T signed_kick = c_.field == FieldMethod::Gradient ? kick : -kick;
    if (fused_) return particle_step(signed_kick, drift);
    LeapfrogPush<T, D> push{signed_kick, drift, {}};
    for (int d = 0; d < D; ++d) push.box[d] = static_cast<T>(box_[d]);
    device_->push(p_, push);
  }

  void particle_step(T kick, T drift) {
    if constexpr (!Mesh::kDistributed) {
      StepMeshes<T> meshes;
      const View<T> rho(rho_, static_cast<std::size_t>(mesh_.mesh_size()));
      meshes.deposits = Span<View<T>>(&rho, 1);
      if (c_.field == FieldMethod::Gradient) {
        const View<const T> phi = potential();
        meshes.gradients = Span<View<const T>>(&phi, 1);
        device_->step(*electrons_, StepPush<T, D, false>{kick, drift, weight_}, meshes);
      } else {
        const std::array<View<const T>, D> e = field();
        meshes.values = Span<View<const T>>(e.data(), D);
        device_->step(*electrons_, StepPush<T, D, true>{kick, drift, weight_}, meshes);
      }
    }
  }

  // One leapfrog step from time n, queued: push (v_{n+1/2}, x_{n+1}), the diagnostics'
  // record of time n (the moments after the push, the field energy of the last solve),
  // re-bin, and the field of time n + 1: with the particle step, the push, re-bin and
  // deposit in its call, then the field solve; else the separate calls.
  void step() {
    timed_phase(fused_ ? &PhaseTimes::step : &PhaseTimes::push, [&] { push(T(c_.dt), T(c_.dt)); });
    if (c_.diagnostics) record();
    ++steps_done_;
    if (fused_) return solve();
    rebin(steps_done_);
    deposit();
    solve();
    gather();
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
    if (fused_ && graph_note_.empty())
      graph_note_ = "the particle step (pmkit::cuda::step) is not captured into CUDA graphs: the steps run eagerly";
    if (Mesh::kDistributed && graph_note_.empty())
      graph_note_ = "across ranks the steps run eagerly: migrate waits for its counts";
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
    const ParticleArrays<T, D> particles = p_, spare = spare_;
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
    device_->moments(velocities());
    device_->record();
    if (!capturing_ && ++pending_ >= device_->record_capacity()) collect();
  }

  // The records logged since the last take, as rows of the history: row n from the
  // records of times n and n + 1 (the half steps' moments around it, and the field of
  // time n). Throws at the first row whose energies are not finite.
  void collect() {
    std::vector<StepSums> records = device_->take_records(pending_);
    pending_ = 0;
    mesh_.sum_over_ranks(records);
    for (const StepSums& sums : records) {
      if (has_last_) {
        const Diagnostics r = row(last_, sums);
        if (!std::isfinite(r.total)) {
          unstable_ = true;
          detail::fail(ErrorCode::InvalidArgument, "the energies are not finite at step ", history_.size(), " (t = ", r.t,
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
  // arrays are first put in the plan's binned order (that of the last binning: the
  // particles have moved a little since) and binned afresh. Across ranks the electrons
  // migrate after the sort and before the binning (which is in full where a migrate
  // changed a rank's electrons).
  void rebin(int step) {
    const bool sort = c_.sort_every > 0 && step % c_.sort_every == 0;
    if (sort) timed_phase(&PhaseTimes::sort, [&] { sort_into_binned_order(); });
    if constexpr (Mesh::kDistributed) timed_phase(&PhaseTimes::migrate, [&] { migrate(); });
    if (sort)
      timed_phase(&PhaseTimes::rebin, [&] { plan_.set_points(positions()); });
    else
      timed_phase(&PhaseTimes::rebin, [&] { plan_.update_points(positions()); });
  }

  // Out of place into the spare arrays, which then become the particles'. Every electron
  // has the same weight here, so w stays as it is; a code with varying weights (or any
  // other per-particle property) lists it with x and v.
  void sort_into_binned_order() {
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
  Mesh mesh_;
  decltype(Mesh::plan)& plan_;
  decltype(Mesh::fft)& fft_;
  int cycle_;  // graph_cycle
  bool fused_;  // the steps through pmkit's particle step (one rank, Config::particle_step)
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
  std::size_t capacity_ = 0;  // slots of each particle array (p_.n of them in use)
  // The arrays loaded (the separate calls' particles; with the particle step, the
  // loading that it copies in, and the weights).
  ParticleArrays<T, D> p_{};
  ParticleArrays<T, D> spare_{};  // sort_every: the permuted arrays' destination (x, v)
  T weight_ = 0;                   // every electron's charge weight
  std::unique_ptr<pmkit::Particles<T, D>> electrons_;  // the particle step's electrons
  T* rho_ = nullptr;
  T* phi_ = nullptr;
  T* spectrum_ = nullptr;    // (re, im) pairs
  T* spectrum_d_ = nullptr;  // E's component d in k-space (FieldMethod::Mesh)
  T* green_ = nullptr;
  T* derivative_[D] = {};
  T* e_[D] = {};
};


}  // namespace pmkit::pic
