#pragma once
// pmkit pic: an electrostatic, periodic particle-in-cell code on pmkit's plans, in 2D and
// 3D, written as the library's worked example (docs/pic.md walks through it).
//
// Units: electrons of charge -1 and mass 1 on a uniform neutralising ion background of
// density 1, so that the plasma frequency is 1; with the thermal speed v_th = 1 the Debye
// length is 1 too. Each step: spread the electrons' charge (Plan::spread), solve
// Poisson's equation by FFT (RealFft), take the field at the particles (interp_gradient of
// the potential, or interp of E on the mesh), push by leapfrog, re-bin. On one rank the
// gather, the push, the re-bin and the next step's deposit are one call of pmkit's
// particle step (pmkit/particle_step.hpp), which keeps the electrons in binned order;
// across ranks (or with Config::particle_step off) they are separate calls, the re-bin
// every K steps (by default every step) permute_to_binned and set_points, update_points
// between. On CUDA the steps run on a stream of the simulation's own and, with the
// separate calls, once the plans' buffers exist, are replayed from a CUDA graph
// (Config::graph).
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pmkit/pmkit.hpp"
#include "theory.hpp"

namespace pmkit::pic {

enum class Problem { Landau, TwoStream, Thermal };
// How the field reaches the particles: interp_gradient of the potential (one inverse
// FFT, D outputs), or E = -grad phi on the mesh by spectral derivative (D inverse FFTs)
// and interp with the deposit's kernel, which conserves momentum to rounding.
enum class FieldMethod { Gradient, Mesh };

// The run. Where it runs is its ExecutionOptions, which the mesh plan and the FFT take:
// backend, device and num_threads. The stream stays null: on CUDA the simulation makes a
// stream of its own, which its kernels, the plan and the FFT share.
struct Config : ExecutionOptions {
  Problem problem = Problem::Landau;
  int dim = 2;
  std::array<std::int64_t, 3> cells{64, 2, 2};  // the first `dim` are used
  std::int64_t particles = 64 * 2 * 1024;
  Kernel kernel = Kernel::tsc();
  int steps = 180;
  double dt = 0.1;
  bool double_precision = false;
  std::uint64_t seed = 1;
  // One rank: each step's gather, push, re-bin and deposit as one call of pmkit's
  // particle step (docs/pic.md, "The particle step"), which keeps the electrons in binned
  // order itself (sort_every has no effect) and runs eagerly on CUDA (no graph). Off (the
  // default: the separate calls with the sort are the faster on both backends,
  // docs/pic.md), and always across ranks: the separate calls.
  bool particle_step = false;
  // The separate calls: 0: never permute the arrays; K: every K steps. Every step is the
  // fastest on both backends (docs/pic.md, "Sorting every step").
  int sort_every = 1;
  FieldMethod field = FieldMethod::Gradient;
  // CUDA update_points: Options::max_away_fraction (negative: the plan's default).
  double max_away_fraction = -1;
  // Physics. Landau: wavenumber k (along x; the box is 2 pi / k long in x, with cells of
  // that width in the other axes) and density perturbation `amplitude`; two-stream: beams
  // at +-beam_speed, the same k, a seed perturbation `amplitude`; thermal: a Maxwellian
  // of thermal speed 1 in a box of cells of width `spacing`.
  double k = 0.5;
  double amplitude = 0.01;
  double beam_speed = 1.0;
  double spacing = 1.0;
  bool quiet = true;     // low-discrepancy loading (Landau and two-stream)
  bool diagnostics = true;  // energies and momentum every step (a reduction each)
  // CUDA: the steady steps replayed from a CUDA graph, captured after a cycle of eager
  // steps (docs/pic.md, "The step on a stream and in a graph"). The CPU ignores it.
  bool graph = true;
  // CUDA: the plan's bit-for-bit repeatable spread (Options::deterministic), so that a
  // run's history is the same in every run and with the graph on or off.
  bool deterministic = false;
};

// The steps of a graph's cycle: the particle arrays swap with the spare set at every
// sort, so the arrays (and the plan's binnings) are back where they started after
// 2 sort_every steps; 1 step without sorting. Longer cycles run eagerly.
int graph_cycle(const Config& config);
constexpr int kMaxGraphCycle = 256;

// One row of the diagnostics: at time t, the field energy (1/2) int E^2, the kinetic
// energy sum (1/2) w v^2 (leapfrog: the mean of the two half steps), their sum and the
// total momentum sum w v.
struct Diagnostics {
  double t = 0, field = 0, kinetic = 0, total = 0;
  std::array<double, 3> momentum{};
};

// Seconds per phase, summed over the steps (with timing on: each phase ends with a wait).
// Across ranks: migrate, and within the solve the distributed FFT's exchange of its slabs
// (CUDA ranks; FFTW's MPI transforms exchange inside, untimed); each the slowest rank's.
// With the particle step, its call is `step` (gather, push, re-bin and deposit) and the
// others but solve are 0.
struct PhaseTimes {
  double deposit = 0, solve = 0, gather = 0, push = 0, rebin = 0, sort = 0, migrate = 0;
  double fft_exchange = 0;  // part of solve
  double step = 0;
  double sum() const { return deposit + solve + gather + push + rebin + sort + migrate + step; }
};

struct Result {
  std::vector<Diagnostics> history;
  PhaseTimes phases;  // zero unless timed
  double seconds = 0; // the steps' wall time (without the set-up)
  std::string spread_method;
  int replayed_steps = 0;  // of all the run's steps, those replayed from the CUDA graph
  // Where Config::graph asks for a graph on CUDA and none ran: why.
  std::string graph_note;
  // benchmark(): the graph's stretch, whole cycles replayed (0 steps without a graph).
  double graph_seconds = 0;
  int graph_steps = 0;
  bool particle_step = false;  // the steps ran through pmkit's particle step
};

// The largest time step: leapfrog is unstable from dt = 2 (in 1 / plasma frequency) and
// inaccurate well before.
constexpr double kMaxDt = 1.0;

// Throws pmkit::Error (InvalidArgument, naming the field and what is accepted) for a
// configuration that cannot run.
void validate(const Config& config);

// Runs the configured simulation. `timed`: each phase waits for the device so that its
// time is its own (the whole-step time is then a little longer than untimed), and every
// step runs eagerly; untimed, Config::graph replays the steady steps from a graph.
// Throws pmkit::Error for a configuration that cannot run.
Result simulate(const Config& config, bool timed = false);

// The charge density of the initial electrons, the first deposit of a run (for tests):
// the grid's nodes, x fastest.
std::vector<double> initial_density(const Config& config);

// For benchmarks: `warmup` steps, then config.steps eager steps timed as a whole
// (Result::seconds); with Config::graph on CUDA, the whole cycles of at least
// config.steps steps replayed from the graph, timed as a whole (Result::graph_seconds,
// graph_steps); then `timed_steps` eager steps with each phase timed (Result::phases).
Result benchmark(const Config& config, int warmup, int timed_steps);

// The box length on each axis of a configuration.
std::array<double, 3> box_of(const Config& config);

// Rows as CSV: t,field,kinetic,total,px,py,pz.
void write_csv(const std::vector<Diagnostics>& history, std::ostream& out);

// Fits of rates to the field energy W(t) (analysis.cpp), each over a window of the run
// that it chooses from the run itself and reports. The theory they compare with is in
// theory.hpp.
struct RateFit {
  int points = 0;       // peaks (damping) or samples (growth) in the window
  double gamma = 0;     // the field amplitude's rate: half the slope of log W
  double omega = 0;     // damping: the frequency, pi over the mean spacing of the peaks
  double t_first = 0, t_last = 0;  // the window
  std::string end;      // what ends the window
  // Too few points for a line through them: no rate.
  bool fitted() const { return points >= 3; }
};
// Damping of a mode of wavenumber k and frequency near omega_guess: the least-squares
// line through log W at its peaks (W ~ cos^2 peaks twice a period; each peak the
// largest sample within 0.45 pi / omega_guess, refined by a parabola through it and its
// neighbours). The window starts after the free streaming of the initial perturbation
// (t >= 1 / k, where its density has decayed as exp(-(k t)^2 / 2) by exp(-1/2)) and ends
// before the first peak that is not lower than the one before it (the noise floor or
// trapping; then the peaks within 3 times the lowest peak after it go too), or that is
// less than 20 times the trough after it (the noise floor between the peaks).
RateFit fit_damping(const std::vector<Diagnostics>& history, double k, double omega_guess);
// Exponential growth: the least-squares line through log W over the linear phase, the
// last stretch of samples before the largest W with W from 100 times the initial W
// (after the seed's other modes have decayed) up to a hundredth of the largest
// (before saturation).
RateFit fit_growth(const std::vector<Diagnostics>& history);

}  // namespace pmkit::pic
