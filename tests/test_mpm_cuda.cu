// The MLS-MPM example (examples/mpm) on a CUDA plan against the same run on a CPU plan:
// the particle step's affine gather and deposit on the device (atomics: the same to
// rounding; deterministic mode: the same bits on every run).
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

// Every value of `got` within 1e-10 of `want` relative to the largest of its array
// (positions across the unit box's periodic seam as the same).
template <int D>
void expect_states_near(const std::vector<std::vector<double>>& want, const std::vector<std::vector<double>>& got,
                        bool periodic) {
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    double scale = 1e-300;
    for (double v : want[i]) scale = std::max(scale, std::abs(v));
    for (std::size_t k = 0; k < want[i].size(); ++k) {
      double diff = got[i][k] - want[i][k];
      if (periodic && i < static_cast<std::size_t>(D)) diff -= std::round(diff);
      ASSERT_LE(std::abs(diff), 1e-10 * scale) << "array " << i << " particle " << k;
    }
  }
}

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
  expect_states_near<D>(host.state(), device.state(), periodic);
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

// The device's run in deterministic mode (the affine deposit in integers).
struct DeterministicDeviceExec : mpm::DeviceExec {
  static Options options() {
    Options o = mpm::DeviceExec::options();
    o.deterministic = true;
    return o;
  }
};

TEST(CudaMpm, DeterministicModeRepeatsBitForBitAndMatchesTheCpuRun) {
  PMKIT_REQUIRE_GPU();
  constexpr auto M = mpm::Material::Fluid;
  const mpm::Setting s = mpm::setting(3, M, false, 5000);
  const int n_grid = mpm::grid_for(s.particles, 3);
  const auto initial = mpm::initial_state<double, 3, M>(s);
  std::vector<std::vector<double>> runs[2];
  for (auto& run : runs) {
    mpm::Simulation<double, 3, M, DeterministicDeviceExec> device(s, n_grid);
    device.assign(initial);
    for (int i = 0; i < 100; ++i) device.step();
    run = device.state();
  }
  EXPECT_EQ(runs[0], runs[1]);
  mpm::Simulation<double, 3, M, mpm::HostExec> host(s, n_grid);
  host.assign(initial);
  for (int i = 0; i < 100; ++i) host.step();
  expect_states_near<3>(host.state(), runs[0], false);
}

}  // namespace
}  // namespace pmkit::test
