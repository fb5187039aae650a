// The whole PIC step of `pmkit pic` on a GPU, beside the same step in PyTorch from the same
// run (bench/pic_torch.py's output, --torch FILE): 3D, float, thermal electrons on unit
// cells, the cases. For each case: the step time as one stretch of steps, its
// phases (a run of steps where each phase waits for the device), particle-steps per
// second, and the variants: the field by interp_gradient of phi or by E on the mesh, and
// the arrays put in binned order every K steps (--sort-every).
//   pic_bench [--torch FILE] [--steps N] [--quick]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "pic.hpp"

namespace {

using pmkit::pic::Config;
using pmkit::pic::FieldMethod;

struct Case {
  std::int64_t cells;
  std::int64_t particles;
  const char* kernel;
};

// "cells particles kernel" -> the PyTorch step's milliseconds.
std::map<std::string, double> read_torch(const char* path) {
  std::map<std::string, double> ms;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    long long cells = 0, particles = 0;
    char kernel[16] = {0}, value[32] = {0};
    if (std::sscanf(line.c_str(), "torch-pic cells=%lld particles=%lld kernel=%15s ms=%31s", &cells, &particles, kernel,
                    value) == 4 &&
        std::strcmp(value, "oom") != 0)
      ms[std::to_string(cells) + " " + std::to_string(particles) + " " + kernel] = std::atof(value);
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const char* torch_file = nullptr;
  int steps = 20;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--torch") && i + 1 < argc) torch_file = argv[++i];
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else {
      std::fprintf(stderr, "usage: pic_bench [--torch FILE] [--steps N] [--quick]\n");
      return 2;
    }
  }
  const std::map<std::string, double> torch = torch_file ? read_torch(torch_file) : std::map<std::string, double>{};
  const Case cases[] = {{128, std::int64_t(1) << 24, "cic"}, {128, std::int64_t(1) << 24, "tsc"},
                        {256, std::int64_t(1) << 27, "cic"}};
  struct Variant {
    FieldMethod field;
    int sort_every;
    const char* label;
  };
  const Variant variants[] = {{FieldMethod::Gradient, 0, "gradient"},
                              {FieldMethod::Mesh, 0, "mesh E"},
                              {FieldMethod::Gradient, 10, "gradient, sort/10"},
                              {FieldMethod::Gradient, 1, "gradient, sort/1"}};
  std::printf("PIC step, 3D float, thermal electrons (v_th = 1, h = lambda_D, dt = 0.1), %d steps a measure\n", steps);
  std::printf("step: one stretch of steps; phases: steps with a wait after each phase (their sum >= step)\n");
  std::printf("%-22s %-20s %9s %11s | %8s %8s %8s %8s %8s %8s | %9s %7s\n", "case", "variant", "step ms",
              "p-steps/s", "deposit", "solve", "gather", "push", "re-bin", "sort", "torch ms", "ratio");
  for (const Case& k : cases) {
    if (quick && k.particles > (std::int64_t(1) << 24)) continue;
    const std::string key = std::to_string(k.cells) + " " + std::to_string(k.particles) + " " + k.kernel;
    const auto t = torch.find(key);
    for (const Variant& v : variants) {
      Config c;
      c.problem = pmkit::pic::Problem::Thermal;
      c.dim = 3;
      c.cells = {k.cells, k.cells, k.cells};
      c.particles = k.particles;
      c.kernel = pmkit::Kernel::from_name(k.kernel);
      c.backend = pmkit::Backend::Cuda;
      c.steps = steps;
      c.field = v.field;
      c.sort_every = v.sort_every;
      c.diagnostics = false;
      try {
        const pmkit::pic::Result r = pmkit::pic::benchmark(c, 3, steps);
        const double ms = 1e3 * r.seconds / steps, per = 1e3 / steps;
        const auto& p = r.phases;
        char torch_ms[32] = "-", ratio[32] = "-";
        if (t != torch.end()) {
          std::snprintf(torch_ms, sizeof torch_ms, "%.2f", t->second);
          std::snprintf(ratio, sizeof ratio, "%.1fx", t->second / ms);
        }
        std::printf("%4lld^3 2^%-2d %-8s   %-20s %9.3f %11.3g | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %9s %7s\n",
                    static_cast<long long>(k.cells), 63 - __builtin_clzll(static_cast<unsigned long long>(k.particles)),
                    k.kernel, v.label, ms, double(k.particles) / (ms * 1e-3), p.deposit * per, p.solve * per,
                    p.gather * per, p.push * per, p.rebin * per, p.sort * per, torch_ms, ratio);
      } catch (const std::exception& e) {
        std::printf("%4lld^3 %-12s %-20s failed: %s\n", static_cast<long long>(k.cells), k.kernel, v.label, e.what());
      }
      std::fflush(stdout);
    }
  }
  std::printf("target (H100, 2^24 on 128^3, CIC): a step <= 2.0 ms (>= 8e9 particle-steps/s) and >= 10x the torch step\n");
  return 0;
}
