// The MLS-MPM example (examples/mpm) on a CUDA plan against the same run on a CPU plan:
// the particle step's affine gather and deposit on the device (atomics: the same to
// rounding), the deposit refused in deterministic mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_support.hpp"
#include "mpm/device_exec.cuh"
#include "mpm/host_exec.hpp"
#include "mpm/simulation.hpp"

namespace pmkit::test {
namespace {

template <int D, mpm::Material M>
void expect_cuda_matches_cpu(bool periodic, int steps) {
  using T = double;
  const mpm::Setting s = mpm::setting(D, M, periodic, D == 2 ? 3000 : 6000);
  const int n_grid = mpm::grid_for(s.particles, D);
  const auto initial = mpm::initial_state<T, D, M>(s);
  mpm::Simulation<T, D, M, mpm::HostExec> host(s, n_grid);
  mpm::Simulation<T, D, M, mpm::DeviceExec> device(s, n_grid);
  host.assign(initial);
  device.assign(initial);
  for (int i = 1; i <= steps; ++i) {
    host.step(i == steps);
    device.step(i == steps);
  }
  const auto want = host.state(), got = device.state();
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    double scale = 1e-300;
    for (T v : want[i]) scale = std::max(scale, std::abs(double(v)));
    for (std::size_t k = 0; k < want[i].size(); ++k) {
      double diff = double(got[i][k]) - double(want[i][k]);
      if (periodic && i < static_cast<std::size_t>(D)) diff -= std::round(diff);  // across the seam
      ASSERT_LE(std::abs(diff), 1e-10 * scale) << "array " << i << " particle " << k;
    }
  }
  const auto a = host.grid_sums(), b = device.grid_sums();
  for (int i = 0; i < 1 + D; ++i) EXPECT_NEAR(b[i], a[i], 1e-12 * (std::abs(a[0]) + std::abs(a[i])));
}

TEST(CudaMpm, MatchesTheCpuRun2DFluidWithWalls) {
  PMKIT_REQUIRE_GPU();
  expect_cuda_matches_cpu<2, mpm::Material::Fluid>(false, 200);
}

TEST(CudaMpm, MatchesTheCpuRun3DElasticPeriodic) {
  PMKIT_REQUIRE_GPU();
  expect_cuda_matches_cpu<3, mpm::Material::Elastic>(true, 100);
}

TEST(CudaMpm, RefusesTheAffineDepositInDeterministicMode) {
  PMKIT_REQUIRE_GPU();
  Options o;
  o.backend = Backend::Cuda;
  o.deterministic = true;
  Plan<double, 2> plan(Grid<2>::periodic({8, 8}, 0.125), Kernel::bspline(3), o);
  using Update = mpm::Update<double, 2, mpm::Material::Fluid>;
  Particles<double, 2> particles(plan, Update::properties);
  const auto state = mpm::initial_state<double, 2, mpm::Material::Fluid>(mpm::Setting{});
  std::vector<mpm::DeviceExec::Array<double>> arrays;
  for (const auto& a : state) arrays.push_back(mpm::DeviceExec::upload(a));
  std::vector<View<const double>> props;
  for (std::size_t i = 2; i < arrays.size(); ++i) props.emplace_back(arrays[i].data(), arrays[i].size());
  particles.assign({View<const double>(arrays[0].data(), arrays[0].size()),
                    View<const double>(arrays[1].data(), arrays[1].size())},
                   props);
  mpm::DeviceExec::Array<double> mesh(plan.mesh_size());
  const std::vector<View<const double>> gathered(2, View<const double>(mesh.data(), mesh.size()));
  const std::vector<View<double>> deposited(3, View<double>(mesh.data(), mesh.size()));
  StepMeshes<double> meshes;
  meshes.affine_values = gathered;
  meshes.affine_deposits = deposited;
  try {
    cuda::step(particles, Update{}, meshes);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
  }
}

}  // namespace
}  // namespace pmkit::test
