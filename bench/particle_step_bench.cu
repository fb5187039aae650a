// The particle step's one pass against the unfused calls, in the same run: a PIC-like
// push (one potential's gradient, three velocity components) of float particles on a
// periodic 128^3 grid with CIC, as
//   fused:   pmkit::cuda::step(particles, push, {{}, {phi}})  (the gradient interpolated
//            in the push's kernel, the new position checked and wrapped there, then the
//            plan's update_points, the particles kept in binned order);
//   unfused: plan.interp_gradient(phi) into three arrays, a push kernel that reads them
//            and wraps the positions, plan.update_points.
//
//   particle_step_bench [--sizes "20 24"] [--cells 128] [--kernel linear] [--speed 0.1] [--reps 20]
//
// Each figure is milliseconds a step in a steady loop: `reps` steps queued back to back
// between two CUDA events (the median of 5 loops), after 10 steps of warm-up. The
// particles: uniform random positions, velocities of up to `speed` cells a step along
// each axis (how often update_points re-bins in full follows from it); phi a smooth
// field of amplitude 1. Last column: unfused / fused.
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
#include "cuda/runtime.hpp"
#include "pmkit/cuda/particle_step.cuh"
#include "pmkit/cuda/runtime.hpp"
#include "pmkit/plan.hpp"

namespace {

using namespace pmkit;
using bench::ck;
using bench::loop_ms;
using cuda::DeviceBuffer;

// v -= qm_dt grad phi, x += dt v (the step wraps x).
struct PicPush {
  static constexpr int properties = 3;
  static constexpr int gradients = 1;
  float qm_dt, dt;
  template <class Particle>
  PMKIT_HD void operator()(Particle& p) const {
    for (int d = 0; d < 3; ++d) {
      p.prop[d] -= qm_dt * p.gradient[0][d];
      p.x[d] += dt * p.prop[d];
    }
  }
};

// The unfused push: the same arithmetic from the interpolated gradient's arrays, the
// positions wrapped into [0, extent).
__global__ void push_kernel(float* x, float* y, float* z, float* vx, float* vy, float* vz, const float* gx,
                            const float* gy, const float* gz, std::size_t n, PicPush push, float extent) {
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float* pos[3] = {x, y, z};
    float* vel[3] = {vx, vy, vz};
    const float g[3] = {gx[k], gy[k], gz[k]};
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      const float v = vel[d][k] - push.qm_dt * g[d];
      float p = pos[d][k] + push.dt * v;
      if (p < 0.0f) p += extent;
      if (p >= extent) p -= extent;
      if (p >= extent) p = 0.0f;
      vel[d][k] = v;
      pos[d][k] = p;
    }
  }
}

void run(int log2n, std::int64_t cells, const Kernel& kernel, float speed, int reps) {
  const std::size_t n = std::size_t(1) << log2n;
  const Grid<3> grid = Grid<3>::periodic({cells, cells, cells}, 1.0);
  const float extent = static_cast<float>(cells);
  std::mt19937_64 rng(2024 + log2n);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> host[6];
  for (int j = 0; j < 6; ++j) {
    host[j].resize(n);
    for (auto& value : host[j]) value = j < 3 ? unit(rng) * extent : speed * (2.0f * unit(rng) - 1.0f);
  }
  Options options;
  options.backend = Backend::Cuda;
  Plan<float, 3> fused_plan(grid, kernel, options), plain_plan(grid, kernel, options);
  const auto shape = fused_plan.mesh_shape();
  std::vector<float> phi_host(static_cast<std::size_t>(fused_plan.mesh_size()));
  const double k = 2 * M_PI / static_cast<double>(cells);
  for (std::int64_t i = 0; i < shape[0]; ++i)
    for (std::int64_t j = 0; j < shape[1]; ++j)
      for (std::int64_t l = 0; l < shape[2]; ++l)
        phi_host[static_cast<std::size_t>((l * shape[1] + j) * shape[0] + i)] =
            static_cast<float>(std::sin(k * i) * std::cos(2 * k * j) + 0.5 * std::sin(3 * k * l));
  DeviceBuffer<float> phi(phi_host);
  const View<const float> phi_view(phi.get(), phi_host.size());
  const PicPush push{1e-3f, 1.0f};
  const cudaStream_t stream = cuda::to_cuda_stream(options.stream);

  double fused_ms, plain_ms;
  {
    DeviceBuffer<float> in[6];
    for (int j = 0; j < 6; ++j) in[j] = DeviceBuffer<float>(host[j]);
    Particles<float, 3> particles(fused_plan, 3);
    particles.assign({View<const float>(in[0].get(), n), View<const float>(in[1].get(), n),
                      View<const float>(in[2].get(), n)},
                     {View<const float>(in[3].get(), n), View<const float>(in[4].get(), n),
                      View<const float>(in[5].get(), n)});
    // The list's array outlives the step calls (a Span of a braced list would not).
    const View<const float> gradient_of[] = {phi_view};
    const StepMeshes<float> meshes{{}, Span<View<const float>>(gradient_of, 1)};
    fused_ms = loop_ms(stream, reps, [&] { cuda::step(particles, push, meshes); }, 10);
    particles.synchronize();
  }
  {
    // The caller's arrays in binned order, as Particles keeps its own.
    DeviceBuffer<float> a[6], gradient[3];
    for (int j = 0; j < 6; ++j) a[j] = DeviceBuffer<float>(host[j]);
    for (auto& g : gradient) g.reserve(n, "gradient");
    const Plan<float, 3>::Positions x{View<const float>(a[0].get(), n), View<const float>(a[1].get(), n),
                                      View<const float>(a[2].get(), n)};
    plain_plan.set_points(x);
    std::vector<View<float>> all;
    for (auto& array : a) all.emplace_back(array.get(), n);
    plain_plan.permute_to_binned(Span<View<float>>(all));
    plain_plan.set_points(x);
    const std::vector<View<const float>> meshes{phi_view};
    const std::vector<View<float>> g{View<float>(gradient[0].get(), n), View<float>(gradient[1].get(), n),
                                     View<float>(gradient[2].get(), n)};
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 65535 * 16));
    plain_ms = loop_ms(stream, reps, [&] {
      plain_plan.interp_gradient(meshes, g);
      push_kernel<<<blocks, 256, 0, stream>>>(a[0].get(), a[1].get(), a[2].get(), a[3].get(), a[4].get(),
                                              a[5].get(), gradient[0].get(), gradient[1].get(),
                                              gradient[2].get(), n, push, extent);
      ck(cudaGetLastError(), "push_kernel");
      plain_plan.update_points(x);
    }, 10);
    plain_plan.synchronize();
  }
  std::printf("%-8d %-8lld %-10s %8.3f %12.4f %12.4f %8.2f\n", log2n, static_cast<long long>(cells),
              kernel.name().c_str(), speed, fused_ms, plain_ms, plain_ms / fused_ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string sizes = "20 24";
  std::int64_t cells = 128;
  std::string kernel_name = "linear";
  float speed = 0.1f;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--sizes" && has_value) sizes = argv[++i];
    else if (arg == "--cells" && has_value) cells = std::atoll(argv[++i]);
    else if (arg == "--kernel" && has_value) kernel_name = argv[++i];
    else if (arg == "--speed" && has_value) speed = static_cast<float>(std::atof(argv[++i]));
    else if (arg == "--reps" && has_value) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--sizes \"20 24\"] [--cells 128] [--kernel linear] [--speed 0.1] [--reps 20]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    const Kernel kernel = Kernel::from_name(kernel_name);
    std::printf("# ms a step of a PIC-like push (float, periodic, one gradient, three velocities)\n");
    std::printf("%-8s %-8s %-10s %8s %12s %12s %8s\n", "log2n", "cells", "kernel", "speed", "fused_ms", "unfused_ms",
                "ratio");
    std::istringstream in(sizes);
    for (int log2n; in >> log2n;) run(log2n, cells, kernel, speed, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "particle_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
