// The particle step (pmkit::step, pmkit::Particles) on the CPU backend against the
// unfused calls: interp and interp_gradient, the same update on the host, update_points
// and spread, over many steps with particles crossing tiles and the periodic seam.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/particle_memory.hpp"
#include "pmkit/particle_step.hpp"
#include "particle_step_cases.hpp"

namespace pmkit::test {
namespace {

TEST(ParticleStep, MatchesTheUnfusedCallsOverManySteps3D) {
  StepCase<double, 3> c(Options{}, Kernel::mp4());
  c.run(40);
}

TEST(ParticleStep, MatchesTheUnfusedCallsOverManySteps2DFloat) {
  StepCase<float, 2> c(Options{}, Kernel::linear());
  c.run(40);
}

TEST(ParticleStep, MatchesTheUnfusedCallsWithTscInFloat3D) {
  StepCase<float, 3> c(Options{}, Kernel::tsc(), 12);
  c.run(30);
}

// Spacings 0.375 and 0.3 and an origin off zero: the coordinates of the pass and of the plan's
// binning from the same arithmetic, the gradients divided by the spacing alike.
TEST(ParticleStep, MatchesTheUnfusedCallsOnAShiftedGridWithAWideKernel2D) {
  Grid<2> grid = Grid<2>::periodic({20, 24}, 0.375);
  grid.origin = {-1.25, 3.5};
  grid.spacing = {0.375, 0.3};
  StepCase<double, 2> c(Options{}, Kernel::bspline(5), grid);
  c.run(30);
}

TEST(ParticleStep, KeepsTheParticlesInBinnedOrder) {
  StepCase<double, 3> c(Options{}, Kernel::mp4());
  c.run(10);
  std::vector<std::uint32_t> order(c.n);
  c.fused_plan.binned_order(order);
  for (std::size_t k = 0; k < c.n; ++k) ASSERT_EQ(order[k], k) << "slot " << k;
}

// A full re-bin hands the plan the particles' binned order instead of binning again.
TEST(ParticleStep, LeavesThePlanBinnedAsSetPointsOfThePositions3D) {
  expect_binned_as_set_points<double, 3, HostMemory>(Options{}, Kernel::mp4(), 16, 12, true,
                                                     [](Particles<double, 3>& p, const Drift<3>& u) { step(p, u); });
}

TEST(ParticleStep, LeavesThePlanBinnedAsSetPointsOfThePositions2DFloat) {
  expect_binned_as_set_points<float, 2, HostMemory>(Options{}, Kernel::linear(), 40, 12, true,
                                                    [](Particles<float, 2>& p, const Drift<2>& u) { step(p, u); });
}

// An update that puts particle `bad` at `where` on step `when`.
template <class T, int D>
struct Misstep {
  static constexpr int properties = D;
  std::uint32_t bad;
  T where;
  template <class Particle>
  PMKIT_HD void operator()(Particle& p) const {
    for (int d = 0; d < D; ++d) p.x[d] += T(0.25) * p.prop[d];
    if (p.id == bad) p.x[D - 1] = where;
  }
};

template <class T, int D>
void expect_rejected(const Grid<D>& grid, T where, ErrorCode code) {
  Plan<T, D> plan(grid, Kernel::mp4());
  const std::size_t n = 300;
  HostParticles<T, D> host(grid, n, 11);
  Particles<T, D> particles(plan, D);
  particles.assign(host.position_views(), host.velocity_views());
  step(particles, Misstep<T, D>{n + 1, 0});  // moves every particle, rejects none
  HostParticles<T, D> before = host;
  particles.copy_out(before.position_out(), before.velocity_out());
  try {
    step(particles, Misstep<T, D>{7, where});
    FAIL() << "a bad position was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("particle 7"), std::string::npos) << e.what();
  }
  HostParticles<T, D> after = host;
  particles.copy_out(after.position_out(), after.velocity_out());
  EXPECT_EQ(after.x, before.x);
  EXPECT_EQ(after.v, before.v);
  step(particles, Misstep<T, D>{n + 1, 0});  // the plan still holds the kept state
  EXPECT_EQ(plan.num_points(), n);
}

TEST(ParticleStep, RejectsANonFinitePositionAndKeepsTheState) {
  expect_rejected<double, 3>(Grid<3>::periodic({16, 16, 16}), std::nan(""), ErrorCode::NonFinitePosition);
}

TEST(ParticleStep, RejectsAPositionOutsideABoundedAxisAndKeepsTheState) {
  expect_rejected<float, 2>(Grid<2>::bounded({16, 16}), 17.5f, ErrorCode::OutOfBounds);
}

TEST(ParticleStep, AssignWrapsPeriodicPositionsAndRejectsBadOnes) {
  const Grid<2> grid = Grid<2>::periodic({8, 8});
  Plan<double, 2> plan(grid, Kernel::mp4());
  Particles<double, 2> particles(plan, 0);
  std::vector<double> x{17.5, -0.25, 3.0}, y{1.0, 2.0, -8.5};
  particles.assign({View<const double>(x), View<const double>(y)}, {});
  std::vector<double> wx(3), wy(3);
  particles.copy_out({View<double>(wx), View<double>(wy)}, {});
  EXPECT_EQ(wx, (std::vector<double>{1.5, 7.75, 3.0}));
  EXPECT_EQ(wy, (std::vector<double>{1.0, 2.0, 7.5}));
  y[1] = std::nan("");
  try {
    particles.assign({View<const double>(x), View<const double>(y)}, {});
    FAIL() << "a NaN position was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NonFinitePosition) << e.what();
    EXPECT_NE(std::string(e.what()).find("particle 1"), std::string::npos) << e.what();
  }
}

// Fifty particles with three velocities on an M'4 plan of 8^3 cells.
struct SmallStepCase {
  Grid<3> grid = Grid<3>::periodic({8, 8, 8});
  Plan<double, 3> plan{grid, Kernel::mp4()};
  HostParticles<double, 3> host{grid, 50, 3};
  Particles<double, 3> particles{plan, 3};
  SmallStepCase() { particles.assign(host.position_views(), host.velocity_views()); }
};

TEST(ParticleStep, ChecksTheMeshCountsAgainstTheUpdate) {
  SmallStepCase c;
  Plan<double, 3>& plan = c.plan;
  Particles<double, 3>& particles = c.particles;
  std::vector<double> phi(plan.mesh_size(), 1.0);
  using Update = StepUpdate<double, 3>;
  EXPECT_THROW(step(particles, Update{}, {{}, {View<const double>(phi)}, {}}), Error);  // no values mesh
  Particles<double, 3> wrong(plan, 2);
  try {
    step(wrong, Update{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  }
}

// A step compiled for some kernels only refuses a plan of another, naming both, before
// it moves a particle; the kernel it is compiled for runs.
TEST(ParticleStep, RefusesAPlanKernelItIsNotCompiledFor) {
  SmallStepCase c;
  Plan<double, 3>& plan = c.plan;
  Particles<double, 3>& particles = c.particles;
  const std::vector<double> before(particles.positions()[0].data, particles.positions()[0].data + 50);
  std::vector<double> phi(plan.mesh_size(), 1.0), q0(plan.mesh_size()), q1(plan.mesh_size());
  const std::vector<View<const double>> fields = {View<const double>(phi)};
  const std::vector<View<double>> deposits = {View<double>(q0), View<double>(q1)};
  const StepMeshes<double> meshes{fields, fields, deposits};  // Spans of the named vectors, which outlive it
  using Update = StepUpdate<double, 3>;
  try {
    step<kernels::Linear, kernels::TSC>(particles, Update{}, meshes);
    FAIL() << "an mp4 plan was stepped by a pass compiled for linear and tsc";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
    for (const char* named : {"mp4", "linear, tsc"})
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::vector<double>(particles.positions()[0].data, particles.positions()[0].data + 50), before);
  step<kernels::MP4>(particles, Update{}, meshes);
  EXPECT_NE(std::vector<double>(particles.positions()[0].data, particles.positions()[0].data + 50), before);
}

}  // namespace
}  // namespace pmkit::test
