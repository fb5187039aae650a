// The particle step on the CUDA backend through pmkit::cuda::step, the update functor
// compiled here: against the unfused calls on a second CUDA plan (bit for bit in
// deterministic mode), a bad position's deferred report with the state kept, and the
// host loop that the same call runs on a CPU plan.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_support.hpp"
#include "particle_step_cases.hpp"
#include "pmkit/cuda/particle_step.cuh"

namespace pmkit::test {
namespace {

// The device's memory for StepCase.
struct DeviceMemory {
  template <class U>
  using Array = DeviceBuffer<U>;
  template <class U>
  static void upload(DeviceBuffer<U>& to, const std::vector<U>& from) {
    to.reserve(from.size(), "test array");
    cuda::check(cudaDeviceSynchronize(), "test");  // the plans' work on the old contents first
    cuda::check(cudaMemcpy(to.get(), from.data(), from.size() * sizeof(U), cudaMemcpyHostToDevice), "test upload");
  }
  template <class U>
  static std::vector<U> download(const DeviceBuffer<U>& from, std::size_t n) {
    std::vector<U> host(n);
    cuda::check(cudaDeviceSynchronize(), "test");
    cuda::check(cudaMemcpy(host.data(), from.get(), n * sizeof(U), cudaMemcpyDeviceToHost), "test download");
    return host;
  }
  template <class U>
  static std::vector<U> download_view(View<const U> from, std::size_t n) {
    std::vector<U> host(n);
    cuda::check(cudaDeviceSynchronize(), "test");
    cuda::check(cudaMemcpy(host.data(), from.data, n * sizeof(U), cudaMemcpyDeviceToHost), "test download");
    return host;
  }
  template <class U>
  static View<U> view(DeviceBuffer<U>& a, std::size_t n) {
    return View<U>(a.get(), n);
  }
};

template <class T, int D>
void cuda_step(Particles<T, D>& p, const StepUpdate<T, D>& u, const StepMeshes<T>& m) {
  cuda::step<kernels::MP4, kernels::TSC>(p, u, m);  // the kernels of the cases below
}

Options cuda_options(bool deterministic) {
  Options o;
  o.backend = Backend::Cuda;
  o.deterministic = deterministic;
  return o;
}

TEST(CudaParticleStep, MatchesTheUnfusedCallsToRounding) {
  PMKIT_REQUIRE_GPU();
  StepCase<float, 3, DeviceMemory> c(cuda_options(false), Kernel::mp4());
  c.run(40, cuda_step<float, 3>, false, false);
}

// The pass's own interpolation on a grid of spacings that are not powers of two, off the
// origin, with tiles of 32^2 crossed.
TEST(CudaParticleStep, MatchesTheUnfusedCallsToRoundingOnAShiftedGrid2D) {
  PMKIT_REQUIRE_GPU();
  Grid<2> grid = Grid<2>::periodic({72, 40}, 0.375);
  grid.origin = {-1.25, 3.5};
  grid.spacing = {0.375, 0.3};
  StepCase<double, 2, DeviceMemory> c(cuda_options(false), Kernel::bspline(3), grid);
  c.run(30, cuda_step<double, 2>, false, false);
}

template <class T, int D>
void cuda_step_cic(Particles<T, D>& p, const StepUpdate<T, D>& u, const StepMeshes<T>& m) {
  cuda::step<kernels::Linear>(p, u, m);
}

// CIC, whose pass takes several binned particles a thread into a block's box of
// fixed-point words: 3000 particles on 8^3 cells (about six a cell, every box across the
// periodic seam), velocities of up to 1.5 cells a step.
TEST(CudaParticleStep, MatchesTheUnfusedCallsToRoundingWithCic) {
  PMKIT_REQUIRE_GPU();
  StepCase<float, 3, DeviceMemory> c(cuda_options(false), Kernel::linear(), 8);
  c.run(40, cuda_step_cic<float, 3>, false, false);
}

// Deposits its first property where it stands.
struct DepositInPlace {
  static constexpr int properties = 1;
  static constexpr int deposits = 1;
  PMKIT_HD void operator()(StepParticleFor<float, 3, DepositInPlace>& p) const { p.deposit[0] = p.prop[0]; }
};

// Every particle on one node (the kernels' peak weight) with values of both signs and
// magnitudes up to 7 x 10^30: the blocks' fixed-point sums keep their headroom (an overflow would be off
// by about a block's sum of |q|), and the node's sum is the float64 sum within the sums'
// resolution (at most 2^-22 of a block's sum of |q|) and the float flush, for CIC
// (several particles a thread) and TSC (one).
TEST(CudaParticleStep, DepositsParticlesOnOneNodeWithinTheFixedPointResolution) {
  PMKIT_REQUIRE_GPU();
  const Grid<3> grid = Grid<3>::periodic({8, 8, 8}, 0.5);
  for (const Kernel& kernel : {Kernel::linear(), Kernel::tsc()}) {
    for (const double magnitude : {1.0, 1e30}) {
      Plan<float, 3> plan(grid, kernel, cuda_options(false));
      const std::size_t n = 5000, size = static_cast<std::size_t>(plan.mesh_size());
      std::vector<float> at(n, 1.5f), q(n);
      double sum = 0, sum_abs = 0;
      for (std::size_t k = 0; k < n; ++k) {
        q[k] = static_cast<float>(magnitude * (k % 3 == 0 ? -1.0 : 1.0) * (1.0 + static_cast<double>(k % 7)));
        sum += q[k];
        sum_abs += std::abs(static_cast<double>(q[k]));
      }
      DeviceBuffer<float> x, charge, rho;
      DeviceMemory::upload(x, at);
      DeviceMemory::upload(charge, q);
      DeviceMemory::upload(rho, std::vector<float>(size, 0.f));
      Particles<float, 3> particles(plan, 1);
      const std::vector<View<const float>> charges{device_cview(charge)};
      particles.assign({device_cview(x), device_cview(x), device_cview(x)}, charges);
      cuda::step<kernels::Linear, kernels::TSC>(particles, DepositInPlace{}, {{}, {}, {device_view(rho)}});
      const std::vector<float> mesh = DeviceMemory::download(rho, size);
      double total = 0, node = 0;
      for (float r : mesh) {
        ASSERT_TRUE(std::isfinite(r)) << kernel.name() << ", |q| up to " << 7 * magnitude;
        total += r;
        node = std::abs(r) > std::abs(node) ? r : node;
      }
      const double peak = kernel == Kernel::linear() ? 1.0 : 0.75 * 0.75 * 0.75;
      EXPECT_NEAR(node, peak * sum, 1e-6 * sum_abs) << kernel.name() << ", |q| up to " << 7 * magnitude;
      EXPECT_NEAR(total, sum, 1e-5 * sum_abs) << kernel.name() << ", |q| up to " << 7 * magnitude;
    }
  }
}

TEST(CudaParticleStep, MatchesTheUnfusedCallsBitForBitInDeterministicMode3D) {
  PMKIT_REQUIRE_GPU();
  StepCase<float, 3, DeviceMemory> c(cuda_options(true), Kernel::mp4());
  c.run(40, cuda_step<float, 3>, true, true);
}

TEST(CudaParticleStep, MatchesTheUnfusedCallsBitForBitInDeterministicMode2D) {
  PMKIT_REQUIRE_GPU();
  StepCase<double, 2, DeviceMemory> c(cuda_options(true), Kernel::bspline(3), 64);  // tiles of 32^2
  c.run(40, cuda_step<double, 2>, true, true);
}

template <class T, int D>
void cuda_drift(Particles<T, D>& p, const Drift<D>& u) {
  cuda::step<kernels::MP4, kernels::Linear, kernels::TSC>(p, u);  // the kernels of the cases below
}

// The full re-bins (1.5 cells a step, tiles of 8^3 and 32^2, many particles away) hand
// the plan the particles' binned order: its chunks' tiles become each particle's tile
// (the away particles of a later update_points), the order the identity.
TEST(CudaParticleStep, LeavesThePlanBinnedAsSetPointsOfThePositions) {
  PMKIT_REQUIRE_GPU();
  expect_binned_as_set_points<float, 3, DeviceMemory>(cuda_options(false), Kernel::mp4(), 24, 12, false,
                                                      cuda_drift<float, 3>);
  expect_binned_as_set_points<double, 2, DeviceMemory>(cuda_options(false), Kernel::linear(), 96, 12, false,
                                                       cuda_drift<double, 2>);
}

TEST(CudaParticleStep, LeavesThePlanBinnedAsSetPointsOfThePositionsBitForBitInDeterministicMode) {
  PMKIT_REQUIRE_GPU();
  expect_binned_as_set_points<float, 3, DeviceMemory>(cuda_options(true), Kernel::mp4(), 24, 12, true,
                                                      cuda_drift<float, 3>);
  expect_binned_as_set_points<double, 2, DeviceMemory>(cuda_options(true), Kernel::bspline(3), 64, 12, true,
                                                       cuda_drift<double, 2>);
}

TEST(CudaParticleStep, RunsTheFunctorOnTheHostForACpuPlan) {
  StepCase<double, 3> c(Options{}, Kernel::mp4());
  c.run(5, [](Particles<double, 3>& p, const StepUpdate<double, 3>& u, const StepMeshes<double>& m) {
    cuda::step(p, u, m);
  });
}

// Reads a mesh and deposits onto one.
struct ReadAndDeposit {
  static constexpr int properties = 3;
  static constexpr int values = 1;
  static constexpr int deposits = 1;
  PMKIT_HD void operator()(StepParticleFor<float, 3, ReadAndDeposit>& p) const {
    for (int d = 0; d < 3; ++d) {
      p.prop[d] += 0.25f * p.value[0];
      p.x[d] += 0.5f * p.prop[d];
    }
    p.deposit[0] = 1.0f + p.value[0];
  }
};

// A step that deposits onto the mesh it interpolates reads the mesh as it was (its
// deposits run after the pass): the same particles as a step that reads a copy of the
// mesh and deposits onto another, and the same deposit to rounding.
TEST(CudaParticleStep, DepositsOntoAMeshItReadsAsOntoAnother) {
  PMKIT_REQUIRE_GPU();
  const Grid<3> grid = Grid<3>::periodic({16, 16, 16});
  Plan<float, 3> shared_plan(grid, Kernel::tsc(), cuda_options(false)), apart_plan(grid, Kernel::tsc(),
                                                                                    cuda_options(false));
  const std::size_t n = 2000, size = static_cast<std::size_t>(shared_plan.mesh_size());
  HostParticles<float, 3> host(grid, n, 6);
  std::vector<float> field(size);
  for (std::size_t i = 0; i < size; ++i) field[i] = std::sin(0.37f * static_cast<float>(i));
  std::array<DeviceBuffer<float>, 3> x, v;
  for (int d = 0; d < 3; ++d) {
    DeviceMemory::upload(x[d], host.x[d]);
    DeviceMemory::upload(v[d], host.v[d]);
  }
  const Plan<float, 3>::Positions positions{device_cview(x[0]), device_cview(x[1]), device_cview(x[2])};
  const std::vector<View<const float>> velocities{device_cview(v[0]), device_cview(v[1]), device_cview(v[2])};
  Particles<float, 3> shared(shared_plan, 3), apart(apart_plan, 3);
  shared.assign(positions, velocities);
  apart.assign(positions, velocities);
  DeviceBuffer<float> mesh, copy, deposit;
  for (int s = 0; s < 5; ++s) {
    DeviceMemory::upload(mesh, field);
    DeviceMemory::upload(copy, field);
    DeviceMemory::upload(deposit, field);
    cuda::step<kernels::TSC>(shared, ReadAndDeposit{}, {{device_cview(mesh)}, {}, {device_view(mesh)}});
    cuda::step<kernels::TSC>(apart, ReadAndDeposit{}, {{device_cview(copy)}, {}, {device_view(deposit)}});
    const std::vector<float> a = DeviceMemory::download(mesh, size), b = DeviceMemory::download(deposit, size);
    for (std::size_t i = 0; i < size; ++i) ASSERT_NEAR(a[i], b[i], 1e-4f * (1 + std::abs(b[i]))) << "node " << i;
  }
  for (int d = 0; d < 3; ++d) {
    const std::vector<float> a = DeviceMemory::download_view(shared.positions()[d], n);
    const std::vector<float> b = DeviceMemory::download_view(apart.positions()[d], n);
    EXPECT_EQ(a, b) << "positions, axis " << d;
  }
}

// Puts particle `bad` at NaN on its first axis.
struct NanStep {
  static constexpr int properties = 3;
  std::uint32_t bad;
  PMKIT_HD void operator()(StepParticleFor<float, 3, NanStep>& p) const {
    for (int d = 0; d < 3; ++d) p.x[d] += 0.5f * p.prop[d];
    if (p.id == bad) p.x[0] = NAN;
  }
};

TEST(CudaParticleStep, ReportsABadPositionAndKeepsTheStateBeforeIt) {
  PMKIT_REQUIRE_GPU();
  const Grid<3> grid = Grid<3>::periodic({16, 16, 16});
  Plan<float, 3> plan(grid, Kernel::mp4(), cuda_options(false));
  const std::size_t n = 500;
  HostParticles<float, 3> host(grid, n, 4);
  std::array<DeviceBuffer<float>, 3> x, v;
  for (int d = 0; d < 3; ++d) {
    DeviceMemory::upload(x[d], host.x[d]);
    DeviceMemory::upload(v[d], host.v[d]);
  }
  Particles<float, 3> particles(plan, 3);
  particles.assign({device_cview(x[0]), device_cview(x[1]), device_cview(x[2])},
                   {device_cview(v[0]), device_cview(v[1]), device_cview(v[2])});
  cuda::step(particles, NanStep{n});
  const auto state = [&] {
    particles.copy_out({device_view(x[0]), device_view(x[1]), device_view(x[2])},
                       {device_view(v[0]), device_view(v[1]), device_view(v[2])});
    std::vector<std::vector<float>> out;
    for (int d = 0; d < 3; ++d) {
      out.push_back(DeviceMemory::download(x[d], n));
      out.push_back(DeviceMemory::download(v[d], n));
    }
    return out;
  };
  const auto before = state();
  try {
    // The report comes from the first call that finds it: the next step's plan calls, or
    // synchronize, which waits.
    cuda::step(particles, NanStep{9});
    cuda::step(particles, NanStep{n});  // queued after the bad step: writes nothing
    particles.synchronize();
    FAIL() << "the NaN position was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NonFinitePosition) << e.what();
    EXPECT_NE(std::string(e.what()).find("particle 9"), std::string::npos) << e.what();
  }
  EXPECT_EQ(state(), before);
  cuda::step(particles, NanStep{n});  // the plan holds the kept state again
  EXPECT_NO_THROW(particles.synchronize());
}

}  // namespace
}  // namespace pmkit::test
