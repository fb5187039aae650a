// `pmkit pic`: runs one of the PIC problems and writes its diagnostics (pic.hpp).
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli.hpp"
#include "commands.hpp"
#include "pic.hpp"

namespace pmkit::cli {
namespace {

const char* const kPicUsage =
    "usage: pmkit pic [options]\n"
    "\n"
    "Electrostatic, periodic particle-in-cell on pmkit's plans (docs/pic.md): electrons on a\n"
    "neutralising background, normalised units (plasma frequency 1, Debye length 1 at v_th 1).\n"
    "\n"
    "  --case landau|two-stream|thermal  the problem (default landau: k = 0.5, 1% density)\n"
    "  --dim 2|3               dimensions (default 2)\n"
    "  --cells N[,N[,N]]       cells per axis; one value for every axis (default 64,2,2)\n"
    "  --particles N           electrons (default 1024 per cell)\n"
    "  --kernel cic|tsc|mp4    the deposit and gather kernel (default tsc)\n"
    "  --steps N               time steps (default 180)\n"
    "  --dt X                  time step in 1/plasma frequency (default 0.1)\n"
    "  --backend cpu|cuda      (default cpu)\n"
    "  --precision float|double  (default float)\n"
    "  --seed N                random loading's seed (thermal, or --noisy)\n"
    "  --sort-every K          every K steps put the particle arrays in binned order\n"
    "                          (Plan::permute_to_binned; default 1, the fastest; 0: never)\n"
    "  --field gradient|mesh   field at the particles: interp_gradient of phi (default), or\n"
    "                          E on the mesh and interp (conserves momentum to rounding)\n"
    "  --amplitude X           density perturbation (default 0.01)\n"
    "  --k X                   wavenumber along x (landau, two-stream; default 0.5)\n"
    "  --beam-speed X          two-stream beams at +-X (default 1)\n"
    "  --noisy                 random loading instead of the quiet start\n"
    "  --threads N             CPU threads (default: OpenMP's)\n"
    "  --csv FILE              diagnostics every step (t,field,kinetic,total,px,py,pz)\n";

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
  if (cells.size() > 3) throw UsageError("--cells = " + text + ": at most three values");
  for (int d = 0; d < 3; ++d) c.cells[d] = cells[std::min<std::size_t>(d, cells.size() - 1)];
}

}  // namespace

int run_pic(int argc, char** argv) {
  return guarded("pic", kPicUsage, [&]() -> int {
    pic::Config c;
    bool particles_given = false;
    std::string csv;
    ArgReader args(argc, argv);
    while (args.next()) {
      if (args.is("--help")) {
        args.flag();
        std::fputs(kPicUsage, stdout);
        return 0;
      } else if (args.is("--case")) {
        const std::string p = args.choice({"landau", "two-stream", "thermal"});
        c.problem = p == "landau" ? pic::Problem::Landau : p == "two-stream" ? pic::Problem::TwoStream : pic::Problem::Thermal;
      } else if (args.is("--dim")) {
        c.dim = args.choice({"2", "3"}) == "2" ? 2 : 3;
      } else if (args.is("--cells")) {
        parse_cells(args.value(), c);
      } else if (args.is("--particles")) {
        c.particles = args.count(1, kMaxParticles, "1e6");
        particles_given = true;
      } else if (args.is("--kernel")) {
        c.kernel = args.kernel();
      } else if (args.is("--steps")) {
        c.steps = static_cast<int>(args.count(0, 1 << 30, "200"));
      } else if (args.is("--dt")) {
        c.dt = args.positive("0.1");
      } else if (args.is("--backend")) {
        c.backend = args.choice({"cpu", "cuda"}) == "cpu" ? Backend::Cpu : Backend::Cuda;
      } else if (args.is("--precision")) {
        c.double_precision = args.choice({"float", "double"}) == "double";
      } else if (args.is("--seed")) {
        c.seed = static_cast<std::uint64_t>(args.count(0, INT64_MAX, "42"));
      } else if (args.is("--sort-every")) {
        c.sort_every = static_cast<int>(args.count(0, 1 << 30, "20"));
      } else if (args.is("--field")) {
        c.field = args.choice({"gradient", "mesh"}) == "mesh" ? pic::FieldMethod::Mesh : pic::FieldMethod::Gradient;
      } else if (args.is("--amplitude")) {
        c.amplitude = args.positive("0.01");
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
        csv = args.value();
      } else {
        args.unknown();
      }
    }
    if (!particles_given) {
      c.particles = 1024;
      for (int d = 0; d < c.dim; ++d) c.particles *= c.cells[d];
    }
    std::ofstream csv_file;
    if (!csv.empty()) {
      csv_file.open(csv);
      if (!csv_file) throw UsageError("--csv: cannot open '" + csv + "'");
    }
    const pic::Result r = pic::simulate(c, true);
    // Each phase waits for the device here, so that the breakdown is the phases' own.
    const double step_s = c.steps > 0 ? r.phases.sum() / c.steps : 0.0;
    std::printf("pmkit pic: %d steps of %lld particles, kernel %s, spread %s: %.3f ms a step, %.3g particle-steps/s\n",
                c.steps, static_cast<long long>(c.particles), c.kernel.name().c_str(), r.spread_method.c_str(),
                1e3 * step_s, step_s > 0 ? double(c.particles) / step_s : 0.0);
    const pic::PhaseTimes& p = r.phases;
    const double per = c.steps > 0 ? 1e3 / c.steps : 0.0;
    std::printf("  per step (ms): deposit %.3f, field solve %.3f, gather %.3f, push %.3f, re-bin %.3f, sort %.3f\n",
                p.deposit * per, p.solve * per, p.gather * per, p.push * per, p.rebin * per, p.sort * per);
    if (!r.history.empty()) {
      const pic::Diagnostics& a = r.history.front();
      const pic::Diagnostics& b = r.history.back();
      std::printf("  total energy %.6g -> %.6g (relative change %.3g); momentum x %.3g -> %.3g\n", a.total, b.total,
                  (b.total - a.total) / a.total, a.momentum[0], b.momentum[0]);
    }
    if (c.problem == pic::Problem::Landau) {
      // Peaks half a period apart (W ~ cos^2); the window ends before the noise floor of
      // the default size.
      const pic::PeakFit f = pic::fit_peaks(r.history, 2.0, 16.0, 1.0);
      std::printf("  Landau: damping %.4f (theory -0.1533 at k = 0.5), frequency %.4f (theory 1.4156), %d peaks\n",
                  f.gamma, f.omega, f.peaks);
    } else if (c.problem == pic::Problem::TwoStream) {
      std::printf("  two-stream: growth %.4f (cold two-beam theory %.4f at k v0 = %.3f)\n",
                  pic::fit_growth(r.history, 1e-5, 1e-2), pic::two_stream_growth_rate(c.k * c.beam_speed),
                  c.k * c.beam_speed);
    }
    if (!csv.empty()) pic::write_csv(r.history, csv_file);
    return 0;
  });
}

}  // namespace pmkit::cli
