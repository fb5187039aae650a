// The fixed cost of a step: set_points, update_points, spread and interp of the CUDA mesh
// plan at 2^10 to 2^24 particles, called eagerly and replayed from a CUDA graph, and a
// whole step (update_points, spread, interp) both ways.
//
//   step_bench [--sizes "10 14 17 20 24"] [--kernel bspline5] [--reps R]
//
// Each figure is milliseconds per call in a steady loop: R calls queued back to back
// between two CUDA events, the events' time divided by R (the median of 5 such loops),
// so that it holds the launches' host time where that is what limits the loop, as it
// does in a simulation that calls the plan every step. The grid: periodic, about one
// particle a cell (at least 16^3 cells), uniform random float positions; update_points
// gets positions moved by 1% of a cell, alternating between two sets. Replayed: the
// same call captured once (cudaStreamBeginCapture on the plan's stream) after an eager
// warm-up, then cudaGraphLaunch R times.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cuda_check.cuh"
#include "cuda/graph.hpp"
#include "pmkit/plan.hpp"

namespace {

using namespace pmkit;
using bench::ck;
using bench::loop_ms;
using cuda::DeviceBuffer;

struct Row {
  const char* call;
  double eager_ms, replay_ms;
};

std::vector<Row> measure(int log2n, const Kernel& kernel, int reps) {
  const std::size_t n = std::size_t(1) << log2n;
  const auto cells = std::max<std::int64_t>(16, std::llround(std::cbrt(static_cast<double>(n))));
  const Grid<3> grid = Grid<3>::periodic({cells, cells, cells}, 1.0);
  std::mt19937_64 rng(12345 + log2n);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f), jitter(-0.01f, 0.01f);
  std::vector<float> host[2][3];
  for (int d = 0; d < 3; ++d) {
    host[0][d].resize(n);
    host[1][d].resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      host[0][d][i] = unit(rng) * static_cast<float>(cells);
      float moved = host[0][d][i] + jitter(rng);
      if (moved < 0) moved += static_cast<float>(cells);
      if (moved >= static_cast<float>(cells)) moved -= static_cast<float>(cells);
      host[1][d][i] = moved;
    }
  }
  DeviceBuffer<float> pos[2][3];
  for (int s = 0; s < 2; ++s)
    for (int d = 0; d < 3; ++d) pos[s][d] = DeviceBuffer<float>(host[s][d]);
  std::vector<float> ones(n, 1.0f);
  const DeviceBuffer<float> q(ones), field(std::vector<float>(static_cast<std::size_t>(cells * cells * cells), 0.5f));
  DeviceBuffer<float> mesh(field.size()), values(n);
  cudaStream_t stream = nullptr;
  ck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Options options;
  options.backend = Backend::Cuda;
  options.stream = cuda::stream_handle(stream);
  Plan<float, 3> plan(grid, kernel, options);
  auto positions = [&](int s) {
    return Plan<float, 3>::Positions{View<const float>(pos[s][0].get(), n), View<const float>(pos[s][1].get(), n),
                                     View<const float>(pos[s][2].get(), n)};
  };
  int flip = 0;
  const std::function<void()> set = [&] { plan.set_points(positions(0)); };
  const std::function<void()> update = [&] { plan.update_points(positions(flip ^= 1)); };
  const std::function<void()> spread = [&] {
    plan.spread({View<const float>(q.get(), n)}, {View<float>(mesh.get(), mesh.size())});
  };
  const std::function<void()> interp = [&] {
    plan.interp({View<const float>(field.get(), field.size())}, {View<float>(values.get(), n)});
  };
  const std::function<void()> step = [&] {
    update();
    spread();
    interp();
  };
  set();
  step();
  plan.synchronize();
  std::vector<Row> rows;
  for (const auto& [name, call] : {std::pair<const char*, const std::function<void()>*>{"set_points", &set},
                                   {"update_points", &update},
                                   {"spread", &spread},
                                   {"interp", &interp},
                                   {"step", &step}}) {
    const double eager = loop_ms(stream, reps, *call);
    // update_points in a graph replays the same positions (the captured arrays).
    const cuda::CapturedGraph replay(stream, *call);
    const double replayed = loop_ms(stream, reps, [&] { replay.launch(); });
    plan.set_points(positions(0));  // an eager binning after each capture, for the next
    plan.synchronize();
    rows.push_back({name, eager, replayed});
  }
  ck(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {10, 14, 17, 20, 24};
  std::string kernel_name = "bspline5";
  int reps = 200;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--sizes") && i + 1 < argc) {
      std::istringstream in(argv[++i]);
      sizes.clear();
      for (int k; in >> k;) sizes.push_back(k);
    } else if (!std::strcmp(argv[i], "--kernel") && i + 1 < argc) {
      kernel_name = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--sizes \"10 14 17 20 24\"] [--kernel NAME] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  for (int k : sizes)
    if (k < 4 || k > 28) {
      std::fprintf(stderr, "step_bench: --sizes takes log2 of the particle count, 4 to 28 (got %d)\n", k);
      return 2;
    }
  if (reps < 1) {
    std::fprintf(stderr, "step_bench: --reps must be at least 1\n");
    return 2;
  }
  const Kernel kernel = Kernel::from_name(kernel_name);
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# step_bench: %s, kernel %s, float, periodic, ~1 particle a cell, ms per call in a loop of %d\n",
              prop.name, kernel.name().c_str(), reps);
  std::printf("%-9s %-14s %12s %12s %8s\n", "particles", "call", "eager_ms", "replay_ms", "eager/replay");
  for (int k : sizes)
    for (const Row& r : measure(k, kernel, reps))
      std::printf("2^%-7d %-14s %12.4f %12.4f %8.2fx\n", k, r.call, r.eager_ms, r.replay_ms, r.eager_ms / r.replay_ms);
  return 0;
}
