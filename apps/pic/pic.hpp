#pragma once
// pmkit pic: an electrostatic, periodic particle-in-cell code on pmkit's plans, in 2D and
// 3D, written as the library's worked example (docs/pic.md walks through it).
//
// Units: electrons of charge -1 and mass 1 on a uniform neutralising ion background of
// density 1, so that the plasma frequency is 1; with the thermal speed v_th = 1 the Debye
// length is 1 too. Each step: spread the electrons' charge (Plan::spread), solve
// Poisson's equation by FFT (RealFft), take the field at the particles (interp_gradient of
// the potential, or interp of E on the mesh), push by leapfrog on the device, re-bin
// (every K steps, by default every step, permute_to_binned and set_points; update_points
// between).
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pmkit/pmkit.hpp"

namespace pmkit::pic {

enum class Problem { Landau, TwoStream, Thermal };
// How the field reaches the particles: interp_gradient of the potential (one inverse
// FFT, D outputs), or E = -grad phi on the mesh by spectral derivative (D inverse FFTs)
// and interp with the deposit's kernel, which conserves momentum to rounding.
enum class FieldMethod { Gradient, Mesh };

// The run. Where it runs is its ExecutionOptions, which the mesh plan and the FFT take as
// they are: backend and num_threads (device and stream keep their defaults: the CUDA
// device's own kernels run on the current device's default stream).
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
  // 0: never permute the arrays; K: every K steps. Every step is the fastest on both
  // backends (docs/pic.md, "Sorting every step").
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
};

// One row of the diagnostics: at time t, the field energy (1/2) int E^2, the kinetic
// energy sum (1/2) w v^2 (leapfrog: the mean of the two half steps), their sum and the
// total momentum sum w v.
struct Diagnostics {
  double t = 0, field = 0, kinetic = 0, total = 0;
  std::array<double, 3> momentum{};
};

// Seconds per phase, summed over the steps (with timing on: each phase ends with a wait).
struct PhaseTimes {
  double deposit = 0, solve = 0, gather = 0, push = 0, rebin = 0, sort = 0;
  double sum() const { return deposit + solve + gather + push + rebin + sort; }
};

struct Result {
  std::vector<Diagnostics> history;
  PhaseTimes phases;  // zero unless timed
  double seconds = 0; // the steps' wall time (without the set-up)
  std::string spread_method;
};

// Runs the configured simulation. `timed`: each phase waits for the device so that its
// time is its own (the whole-step time is then a little longer than untimed).
// Throws pmkit::Error for a configuration that cannot run.
Result simulate(const Config& config, bool timed = false);

// For benchmarks: `warmup` steps, then config.steps steps timed as a whole
// (Result::seconds), then `timed_steps` steps with each phase timed (Result::phases).
Result benchmark(const Config& config, int warmup, int timed_steps);

// The box length on each axis of a configuration.
std::array<double, 3> box_of(const Config& config);

// Rows as CSV: t,field,kinetic,total,px,py,pz.
void write_csv(const std::vector<Diagnostics>& history, std::ostream& out);

// Theory and fits (analysis.cpp).
// Growth rate of the cold symmetric two-beam instability, beams of density 1/2 each at
// +-v0, wavenumber k: 1 = (1/2) [1/(w - k v0)^2 + 1/(w + k v0)^2] gives
// w^2 = k^2 v0^2 + 1/2 - sqrt(2 k^2 v0^2 + 1/4), unstable (gamma = sqrt(-w^2)) for k v0 < 1.
double two_stream_growth_rate(double k_v0);
// Damping of the field energy's peaks: peaks of W(t) (the largest sample within
// `separation` on either side, refined by a parabola through it and its neighbours) in
// [t_min, t_max]; the rate gamma is half the
// slope of the least-squares line through log W at the peaks, the frequency pi over the
// mean spacing of the peaks (W ~ cos^2 peaks twice a period).
struct PeakFit {
  double gamma = 0, omega = 0;
  int peaks = 0;
};
PeakFit fit_peaks(const std::vector<Diagnostics>& history, double t_min, double t_max, double separation);
// Exponential growth of W(t): half the slope of the least-squares line through log W on
// the samples with W between lo and hi times the run's largest W (the linear phase).
double fit_growth(const std::vector<Diagnostics>& history, double lo, double hi);

}  // namespace pmkit::pic
