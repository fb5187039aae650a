// `pmkit pic`: runs one of the PIC problems and writes its diagnostics (pic.hpp); the
// parts that the run across MPI ranks shares (command.hpp, command_ranks.cpp).
#include <cmath>
#include <complex>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "commands.hpp"

namespace pmkit::cli {

// The defaults that differ by case: the two-stream seed is small enough for a linear
// phase of several e-foldings before saturation, and its run lasts past saturation.
constexpr double kLandauAmplitude = 0.01, kTwoStreamAmplitude = 1e-4;
constexpr int kSteps = 180, kTwoStreamSteps = 400;
// A fit this far from theory, or over fewer points or less change of the field energy
// than these, gets a warning.
constexpr double kTheoryGap = 0.1, kShortWindowDecades = 0.5;
constexpr int kShortWindowPoints = 4;

std::string pic_usage() {
  return "usage: pmkit pic [options]\n"
         "\n"
         "Electrostatic, periodic particle-in-cell on pmkit's plans (docs/pic.md): electrons on a\n"
         "neutralising background, normalised units (plasma frequency 1, Debye length 1 at v_th 1).\n"
         "Landau and two-stream fit the damping or growth of the field energy over a window\n"
         "chosen from the run, print it, and compare with the linear theory at --k.\n"
         "\n"
         "  --case landau|two-stream|thermal  the problem (default landau: k = 0.5, 1% density)\n"
         "  --dim 2|3               dimensions (default 2)\n"
         "  --cells N[,N[,N]]       cells per axis: one value for every axis, or --dim values\n"
         "                          (default 64,2,2)\n"
         "  --particles N           electrons (default 1024 per cell)\n"
         "  --kernel " + joined(pic_kernel_names()) + "    the deposit and gather kernel (default tsc)\n"
         "  --steps N               time steps (default 180; two-stream 400)\n"
         "  --dt X                  time step in 1/plasma frequency, at most 1 (default 0.1)\n"
         "  --backend cpu|cuda      (default cpu)\n"
         "  --step separate|fused   separate (default, the faster): one call each for the\n"
         "                          gather, push, re-bin and deposit; fused (one rank): the four\n"
         "                          in one call of pmkit's particle step, which keeps the\n"
         "                          electrons in binned order\n"
         "  --graph on|off          cuda, --step separate: replay the steady steps from a CUDA\n"
         "                          graph (default on; off: every step eager, with its phases\n"
         "                          timed; --step fused and across ranks off)\n"
         "  --precision float|double  (default float)\n"
         "  --seed N                random loading's seed (thermal, or --noisy)\n"
         "  --sort-every K          --step separate: every K steps put the particle arrays in\n"
         "                          binned order (Plan::permute_to_binned; default 1, the fastest;\n"
         "                          0: never); --step fused keeps them so every step itself\n"
         "  --field gradient|mesh   field at the particles: interp_gradient of phi (default), or\n"
         "                          E on the mesh and interp (conserves momentum to rounding)\n"
         "  --amplitude X           density perturbation, below 1 (default 0.01; two-stream 1e-4)\n"
         "  --k X                   wavenumber along x (landau, two-stream; default 0.5)\n"
         "  --beam-speed X          two-stream beams at +-X (default 1)\n"
         "  --noisy                 random loading instead of the quiet start\n"
         "  --threads N             CPU threads (default: OpenMP's)\n"
         "  --csv FILE              diagnostics every step (t,field,kinetic,total,px,py,pz); an\n"
         "                          existing FILE is replaced only when the run succeeds\n"
         "  -h, --help              this text\n"
         "\n"
         "Across MPI ranks: mpirun -np P pmkit pic [options] (P > 1). Each rank owns the electrons\n"
         "in its slab of the mesh along the last axis (cells of the last axis over P, every rank\n"
         "with one), migrated every step; the field solve is distributed; CUDA ranks take GPU\n"
         "(rank on the host) mod the GPUs visible. Rank 0 prints and writes --csv.\n";
}

namespace {

// The cells of --cells: one value for every axis, or one value per dimension.
void parse_cells(const std::string& text, pic::Config& c) {
  std::vector<std::int64_t> cells;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const auto n = ArgReader::parse_count(text.substr(start, comma - start));
    if (!n || *n < 1 || *n > (1 << 20)) throw UsageError("--cells = " + text + ": whole numbers from 1 (example: --cells 64,4)");
    cells.push_back(*n);
    start = comma + 1;
  }
  if (cells.size() != 1 && cells.size() != static_cast<std::size_t>(c.dim))
    throw UsageError("--cells = " + text + ": one value for every axis or " + std::to_string(c.dim) +
                     " values (--dim " + std::to_string(c.dim) + ")");
  for (int d = 0; d < 3; ++d) c.cells[d] = cells[std::min<std::size_t>(d, cells.size() - 1)];
}

}  // namespace

// The bytes that a run's arrays take on its device and, for the loading, on the host:
// per electron x, v, w, with the particle step its two states of x and v and its ids
// (about 12 bytes), else a and the sort's spare x and v, with the plan's binning (about
// 16 bytes); per mesh node rho, phi, the spectrum, the Green's function, and for the mesh
// field E, its spectrum and the derivatives.
PicBytes pic_bytes(const pic::Config& c) {
  const double real = c.double_precision ? 8.0 : 4.0, n = double(c.particles);
  double nodes = 1;
  for (int d = 0; d < c.dim; ++d) nodes *= double(c.cells[d]);
  const double per_particle =
      c.particle_step ? (6.0 * c.dim + 1) * real + 28.0
                      : (3.0 * c.dim + 1 + (c.sort_every > 0 ? 2.0 * c.dim : 0.0)) * real + 16.0;
  const double per_node = (4.0 + (c.field == pic::FieldMethod::Mesh ? 3.0 * c.dim + 2 : 0.0)) * real;
  PicBytes b;
  b.device = n * per_particle + nodes * per_node;
  b.host = n * (2.0 * c.dim + 1) * real + (c.backend == Backend::Cpu ? b.device : 0.0);
  return b;
}

namespace {

// Prints the fit of a rate against theory ("damping" or "growth"), or why there is none,
// with a warning on stderr where the fit cannot be trusted.
void report_fit(const char* what, const pic::RateFit& f, double theory, const char* unit_name) {
  if (!f.fitted()) {
    std::printf("  %s: not enough %s to fit (%d in the window; theory %.4f)\n", what, unit_name, f.points, theory);
    return;
  }
  std::printf("  %s %.4f (theory %.4f) from %d %s in t = %.2f .. %.2f; the window ends at %s\n", what, f.gamma,
              theory, f.points, unit_name, f.t_first, f.t_last, f.end.c_str());
  const double decades = 2 * std::abs(f.gamma) * (f.t_last - f.t_first) / std::log(10.0);
  if (decades < kShortWindowDecades || f.points < kShortWindowPoints)
    std::fprintf(stderr,
                 "pmkit pic: warning: the fit's window holds %d %s over %.2f decades of the field energy: too short "
                 "to trust\n",
                 f.points, unit_name, decades);
  if (theory != 0 && std::abs(f.gamma - theory) > kTheoryGap * std::abs(theory))
    std::fprintf(stderr, "pmkit pic: warning: the fitted %s %.4f is %.0f%% from theory %.4f\n", what, f.gamma,
                 100 * std::abs(f.gamma - theory) / std::abs(theory), theory);
}

void report_landau(const pic::Config& c, const pic::Result& r) {
  const std::optional<std::complex<double>> root = pic::landau_root(c.k);
  if (!root) {
    std::printf("  Landau: no root of the dispersion relation found at k = %g\n", c.k);
    return;
  }
  const pic::RateFit f = pic::fit_damping(r.history, c.k, root->real());
  std::printf("  Landau at k = %g: theory omega = %.4f %+.4fi (Maxwellian dispersion relation)\n", c.k, root->real(),
              root->imag());
  report_fit("damping", f, root->imag(), "peaks");
  if (f.fitted()) std::printf("  frequency %.4f (theory %.4f)\n", f.omega, root->real());
  // Trapped electrons bounce at sqrt(k E) = sqrt(amplitude) in these units; where that is
  // not well below the damping, the field stops decaying before linear theory says.
  const double bounce = std::sqrt(c.amplitude);
  if (std::abs(root->imag()) < 0.5 * bounce)
    std::fprintf(stderr,
                 "pmkit pic: warning: the trapped electrons' bounce rate sqrt(amplitude) = %.3g is more than twice "
                 "the damping rate %.4f: the decay is nonlinear (a smaller --amplitude and more --particles and --steps "
                 "approach linear theory)\n",
                 bounce, -root->imag());
}

void report_two_stream(const pic::Config& c, const pic::Result& r) {
  const double k_v0 = c.k * c.beam_speed, theory = pic::two_stream_growth_rate(k_v0);
  std::printf("  two-stream at k v0 = %.3f: cold two-beam theory growth %.4f\n", k_v0, theory);
  report_fit("growth", pic::fit_growth(r.history), theory, "samples");
}

}  // namespace

// The options of a run, read (`ranks`: the MPI ranks it runs on, for the defaults that
// differ across ranks); nothing where --help printed the usage (where `print`).
std::optional<PicRequest> read_pic_options(int argc, char** argv, const std::string& usage, int ranks, bool print) {
  PicRequest q;
  pic::Config& c = q.config;
  bool particles_given = false, steps_given = false, amplitude_given = false;
  std::string cells;
  ArgReader args(argc, argv);
  while (args.next()) {
    if (args.is("--help")) {
      args.flag();
      if (print) std::fputs(usage.c_str(), stdout);
      return std::nullopt;
    } else if (args.is("--case")) {
      const std::string p = args.choice({"landau", "two-stream", "thermal"});
      c.problem = p == "landau" ? pic::Problem::Landau : p == "two-stream" ? pic::Problem::TwoStream : pic::Problem::Thermal;
    } else if (args.is("--dim")) {
      c.dim = args.choice({"2", "3"}) == "2" ? 2 : 3;
    } else if (args.is("--cells")) {
      cells = args.value();
    } else if (args.is("--particles")) {
      c.particles = args.count(1, kMaxParticles, "1e6");
      particles_given = true;
    } else if (args.is("--kernel")) {
      c.kernel = args.kernel(pic_kernel_names());
    } else if (args.is("--steps")) {
      c.steps = static_cast<int>(args.count(0, 1 << 30, "200"));
      steps_given = true;
    } else if (args.is("--dt")) {
      c.dt = args.positive("0.1", pic::kMaxDt);
    } else if (args.is("--backend")) {
      c.backend = args.choice({"cpu", "cuda"}) == "cpu" ? Backend::Cpu : Backend::Cuda;
    } else if (args.is("--step")) {
      c.particle_step = args.choice({"separate", "fused"}) == "fused";
      q.step_given = true;
    } else if (args.is("--graph")) {
      c.graph = args.choice({"on", "off"}) == "on";
      q.graph_given = true;
    } else if (args.is("--precision")) {
      c.double_precision = args.choice({"float", "double"}) == "double";
    } else if (args.is("--seed")) {
      c.seed = static_cast<std::uint64_t>(args.count(0, INT64_MAX, "42"));
    } else if (args.is("--sort-every")) {
      c.sort_every = static_cast<int>(args.count(0, 1 << 30, "20"));
    } else if (args.is("--field")) {
      c.field = args.choice({"gradient", "mesh"}) == "mesh" ? pic::FieldMethod::Mesh : pic::FieldMethod::Gradient;
    } else if (args.is("--amplitude")) {
      c.amplitude = args.positive("0.01", 1.0, false);
      amplitude_given = true;
    } else if (args.is("--k")) {
      c.k = args.positive("0.5");
    } else if (args.is("--beam-speed")) {
      c.beam_speed = args.positive("1");
    } else if (args.is("--noisy")) {
      args.flag();
      c.quiet = false;
    } else if (args.is("--threads")) {
      c.num_threads = static_cast<int>(args.count(1, 4096, "4"));
    } else if (args.is("--csv")) {
      q.csv = args.value();
    } else {
      args.unknown();
    }
  }
  // The cells against --dim, the case's and the rank count's defaults.
  if (!cells.empty()) parse_cells(cells, c);
  const bool two_stream = c.problem == pic::Problem::TwoStream;
  if (!amplitude_given) c.amplitude = two_stream ? kTwoStreamAmplitude : kLandauAmplitude;
  if (!steps_given) c.steps = two_stream ? kTwoStreamSteps : kSteps;
  if (!particles_given) {
    c.particles = 1024;
    for (int d = 0; d < c.dim; ++d) c.particles *= c.cells[d];
  }
  if (ranks > 1) {
    if (q.graph_given && c.graph)
      throw UsageError("--graph on: not across ranks (migrate waits for its counts every step: the steps run eagerly)");
    c.graph = false;
    if (q.step_given && c.particle_step)
      throw UsageError("--step fused: one rank only (across ranks the electrons migrate between the push and the "
                       "deposit: --step separate)");
    c.particle_step = false;
  } else if (c.particle_step && !q.graph_given) {
    c.graph = false;  // the particle step runs eagerly
  }
  return q;
}

// Checked before any work: the whole configuration, the graph, the backend.
void check_pic_options(const PicRequest& q) {
  const pic::Config& c = q.config;
  try {
    pic::validate(c);
  } catch (const Error& e) {
    throw UsageError("these options cannot run: " + message_of(e));
  }
  if (q.graph_given && c.graph && c.backend != Backend::Cuda)
    throw UsageError("--graph on: CUDA graphs need --backend cuda");
  if (q.graph_given && c.graph && c.particle_step)
    throw UsageError("--graph on: the particle step (--step fused) runs eagerly; --step separate, the default, "
                     "replays a graph");
  check_backend(c.backend);
}

void open_csv(const std::string& csv, std::optional<OutputFile>& file) {
  if (csv.empty()) return;
  try {
    file.emplace(csv);
  } catch (const std::runtime_error& e) {
    throw UsageError("--csv: " + message_of(e));
  }
}

void report_pic(const pic::Config& c, const pic::Result& r, bool graph) {
  const double step_s = c.steps > 0 ? (graph ? r.seconds : r.phases.sum()) / c.steps : 0.0;
  std::printf("pmkit pic: %d steps of %lld particles, kernel %s, spread %s: %.3f ms a step, %.3g particle-steps/s\n",
              c.steps, static_cast<long long>(c.particles), c.kernel.name().c_str(), r.spread_method.c_str(),
              1e3 * step_s, step_s > 0 ? double(c.particles) / step_s : 0.0);
  if (graph) {
    std::printf("  %d of the steps replayed from a CUDA graph (the phases: --graph off)\n", r.replayed_steps);
    if (!r.graph_note.empty()) std::fprintf(stderr, "pmkit pic: warning: no CUDA graph: %s\n", r.graph_note.c_str());
  } else {
    const pic::PhaseTimes& p = r.phases;
    const double per = c.steps > 0 ? 1e3 / c.steps : 0.0;
    if (r.particle_step)
      std::printf("  per step (ms): particle step %.3f (gather, push, re-bin, deposit), field solve %.3f\n",
                  p.step * per, p.solve * per);
    else
      std::printf("  per step (ms): deposit %.3f, field solve %.3f, gather %.3f, push %.3f, re-bin %.3f, sort %.3f\n",
                  p.deposit * per, p.solve * per, p.gather * per, p.push * per, p.rebin * per, p.sort * per);
    if (p.migrate > 0)
      std::printf("  across ranks (ms, the slowest rank's): migrate %.3f; the FFT's exchange %.3f of the field solve\n",
                  p.migrate * per, p.fft_exchange * per);
  }
  if (!r.history.empty()) {
    const pic::Diagnostics& a = r.history.front();
    const pic::Diagnostics& b = r.history.back();
    std::printf("  total energy %.6g -> %.6g (relative change %.3g); momentum x %.3g -> %.3g\n", a.total, b.total,
                (b.total - a.total) / a.total, a.momentum[0], b.momentum[0]);
  }
  if (c.problem == pic::Problem::Landau) report_landau(c, r);
  if (c.problem == pic::Problem::TwoStream) report_two_stream(c, r);
}

void write_csv(std::optional<OutputFile>& file, const pic::Result& r) {
  if (!file) return;
  pic::write_csv(r.history, file->stream());
  file->commit();
}

int run_pic(int argc, char** argv) {
#if defined(PMKIT_WITH_MPI)
  if (launched_ranks() > 1) return run_pic_across_ranks(argc, argv);
#endif
  const std::string usage = pic_usage();
  return guarded("pic", usage, [&]() -> int {
    const std::optional<PicRequest> q = read_pic_options(argc, argv, usage, 1, true);
    if (!q) return 0;
    const pic::Config& c = q->config;
    check_pic_options(*q);
    const PicBytes bytes = pic_bytes(c);
    check_memory(bytes.host, Backend::Cpu);
    if (c.backend == Backend::Cuda) check_memory(bytes.device, Backend::Cuda);
    std::optional<OutputFile> csv;
    open_csv(q->csv, csv);
    // With the graph, the steps run as one stretch; without, each phase waits for the
    // device, so that the breakdown is the phases' own.
    const bool graph = c.graph && c.backend == Backend::Cuda;
    const pic::Result r = pic::simulate(c, !graph);
    report_pic(c, r, graph);
    write_csv(csv, r);
    return 0;
  });
}

}  // namespace pmkit::cli
