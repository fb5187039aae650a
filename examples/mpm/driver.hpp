#pragma once
// The MLS-MPM example's command line, shared by the host program (mpm.cpp) and the CUDA
// one (mpm_cuda.cu):
//   --dim 2|3 --material fluid|elastic --precision double|float --particles N
//   --n-grid G --steps S --dt DT --periodic --gravity G --seed S
//   --report K                every K steps: mass, momentum, kinetic and elastic energy
//   --dump-initial F --dump-final F   the state before the first and after the last step,
//                             as text (tests/mpm_reference.py reads them)
//   --bench W                 W untimed steps, then the timed ones: particle-steps/s
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "simulation.hpp"

namespace mpm {

inline const char* name(Material m) { return m == Material::Fluid ? "fluid" : "elastic"; }

template <class T, int D, Material M>
void dump(const char* path, const Setting& s, const Parameters<T>& par, int n_grid,
          const std::vector<std::vector<T>>& state) {
  if (!path) return;
  FILE* f = std::fopen(path, "w");
  if (!f) throw std::runtime_error(std::string("cannot write ") + path);
  std::fprintf(f, "# dim material n_grid steps dt h mass volume mu lambda stiffness gravity bound periodic\n");
  std::fprintf(f, "%d %s %d %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d %d\n", D, name(M), n_grid, s.steps,
               double(par.dt), double(par.h), double(par.mass), double(par.volume), double(par.mu),
               double(par.lambda), double(par.stiffness), double(par.gravity[1]), par.bound, s.periodic ? 1 : 0);
  for (std::size_t k = 0; k < state[0].size(); ++k) {
    for (std::size_t i = 0; i < state.size(); ++i) std::fprintf(f, i ? " %.17g" : "%.17g", double(state[i][k]));
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

struct Command {
  Setting setting;
  bool single = false;
  int report = 0;
  int bench_warmup = -1;
  const char* dump_initial = nullptr;
  const char* dump_final = nullptr;
};

template <class T, int D, Material M, class Exec>
int run(const Command& c) {
  const Setting& s = c.setting;
  const int n_grid = s.n_grid > 0 ? s.n_grid : grid_for(s.particles, D);
  Simulation<T, D, M, Exec> sim(s, n_grid);
  const auto initial = initial_state<T, D, M>(s);
  dump<T, D, M>(c.dump_initial, s, sim.parameters_used(), n_grid, initial);
  const auto report = [&](int step) {
    const Totals t = totals<T, D, M>(sim.parameters_used(), sim.state());
    const auto g = sim.grid_sums();
    std::printf("step %d mass %.17g grid_mass %.17g momentum", step, t.mass, g[0]);
    for (int d = 0; d < D; ++d) std::printf(" %.17g", t.momentum[d]);
    std::printf(" grid_momentum");
    for (int d = 0; d < D; ++d) std::printf(" %.17g", g[1 + d]);
    std::printf(" kinetic %.17g elastic %.17g energy %.17g\n", t.kinetic, t.elastic, t.kinetic + t.elastic);
  };
  sim.assign(initial, c.report > 0);
  if (c.report > 0) report(0);
  const int warmup = c.bench_warmup > 0 ? c.bench_warmup : 0;
  for (int i = 0; i < warmup; ++i) sim.step();
  Exec::synchronize(sim.particles());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= s.steps; ++i) {
    const bool reported = c.report > 0 && i % c.report == 0;
    sim.step(reported);
    if (reported) report(i);
  }
  Exec::synchronize(sim.particles());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  dump<T, D, M>(c.dump_final, s, sim.parameters_used(), n_grid, sim.state());
  if (c.bench_warmup >= 0)
    std::printf("pmkit_mpm backend %s dim %d material %s precision %s particles %lld n_grid %d steps %d seconds %.6g "
                "particle_steps_per_second %.6g\n",
                Exec::name(), D, name(M), sizeof(T) == 4 ? "float" : "double", static_cast<long long>(s.particles),
                n_grid, s.steps, seconds, double(s.particles) * s.steps / seconds);
  return 0;
}

template <class Exec, class T, int D>
int run_material(const Command& c) {
  return c.setting.material == Material::Fluid ? run<T, D, Material::Fluid, Exec>(c)
                                               : run<T, D, Material::Elastic, Exec>(c);
}

template <class Exec, class T>
int run_dim(const Command& c) {
  return c.setting.dim == 2 ? run_material<Exec, T, 2>(c) : run_material<Exec, T, 3>(c);
}

inline Command parse(int argc, char** argv) {
  Command c;
  Setting& s = c.setting;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw std::runtime_error(a + " takes a value");
      return argv[++i];
    };
    if (a == "--dim") s.dim = std::atoi(value());
    else if (a == "--material") {
      const std::string m = value();
      if (m != "fluid" && m != "elastic") throw std::runtime_error("--material takes fluid or elastic, not " + m);
      s.material = m == "fluid" ? Material::Fluid : Material::Elastic;
    } else if (a == "--precision") {
      const std::string p = value();
      if (p != "float" && p != "double") throw std::runtime_error("--precision takes float or double, not " + p);
      c.single = p == "float";
    } else if (a == "--particles") s.particles = std::atoll(value());
    else if (a == "--n-grid") s.n_grid = std::atoi(value());
    else if (a == "--steps") s.steps = std::atoi(value());
    else if (a == "--dt") s.dt = std::atof(value());
    else if (a == "--periodic") s.periodic = true;
    else if (a == "--gravity") s.gravity = std::atof(value());
    else if (a == "--seed") s.seed = std::strtoull(value(), nullptr, 10);
    else if (a == "--report") c.report = std::atoi(value());
    else if (a == "--dump-initial") c.dump_initial = value();
    else if (a == "--dump-final") c.dump_final = value();
    else if (a == "--bench") c.bench_warmup = std::atoi(value());
    else throw std::runtime_error("unknown argument " + a + " (see examples/mpm/driver.hpp)");
  }
  if (s.dim != 2 && s.dim != 3) throw std::runtime_error("--dim takes 2 or 3");
  if (s.particles < 1 || s.steps < 0) throw std::runtime_error("--particles takes 1 or more, --steps 0 or more");
  return c;
}

template <class Exec>
int main_for(int argc, char** argv) {
  try {
    const Command c = parse(argc, argv);
    return c.single ? run_dim<Exec, float>(c) : run_dim<Exec, double>(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmkit_mpm: %s\n", e.what());
    return 1;
  }
}

}  // namespace mpm
