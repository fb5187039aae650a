// The particle step's affine transfers (affine_values, affine_deposits) on the CPU
// backend against direct sums over the mesh's nodes, and the MLS-MPM example on them
// (examples/mpm): mass and momentum conserved to rounding in a periodic box without
// gravity, the elastic material's energy bounded. tests/mpm_reference.py compares the
// example with a NumPy program of the same scheme.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "mpm/host_exec.hpp"
#include "mpm/simulation.hpp"
#include "pmkit/particle_step.hpp"

namespace pmkit::test {
namespace {

// Moves the particles by their velocity; records the affine gather of two meshes in
// properties D.. (value, then D moments, per mesh) and deposits, per particle, two
// values with slopes that depend on its id.
template <class T, int D>
struct AffineProbe {
  static constexpr int properties = D + 2 * (1 + D);
  static constexpr int affine_values = 2;
  static constexpr int affine_deposits = 2;
  template <class Particle>
  PMKIT_HD void operator()(Particle& p) const {
    for (int m = 0; m < 2; ++m) {
      p.prop[D + m * (1 + D)] = p.affine_value[m];
      for (int d = 0; d < D; ++d) p.prop[D + m * (1 + D) + 1 + d] = p.affine_moment[m][d];
    }
    for (int d = 0; d < D; ++d) p.x[d] += p.prop[d];
    for (int a = 0; a < 2; ++a) {
      p.affine_deposit[a] = probe_value(p.id, a, -1);
      for (int d = 0; d < D; ++d) p.affine_slope[a][d] = probe_value(p.id, a, d);
    }
  }
  PMKIT_HD static T probe_value(std::uint32_t id, int a, int d) {
    return T(1 + (id % 7)) * T(0.25) + T(a) - T(0.5) * T(d + 1) * T((id % 3));
  }
};

// The quadratic B-spline of a distance in cells.
double bspline3(double t) {
  t = std::abs(t);
  return t < 0.5 ? 0.75 - t * t : t < 1.5 ? 0.5 * (1.5 - t) * (1.5 - t) : 0.0;
}

// For each stored node reached from x: f(storage index, weight, offsets x_node - x),
// by a direct walk over logical nodes (minimum images; folded ghosts on bounded axes).
template <int D, class F>
void direct_nodes(const Grid<D>& grid, const double (&x)[D], F&& f) {
  int lo[D], count[D], shape[D];
  for (int d = 0; d < D; ++d) {
    const double u = (x[d] - grid.origin[d]) / grid.spacing[d];
    lo[d] = static_cast<int>(std::floor(u)) - 2;
    count[d] = 6;
    shape[d] = static_cast<int>(grid.cells[d]) + (grid.boundary[d] == Boundary::Periodic ? 0 : 1);
  }
  int total = 1;
  for (int d = 0; d < D; ++d) total *= count[d];
  for (int c = 0; c < total; ++c) {
    double w = 1, off[D];
    std::int64_t index = 0, stride = 1;
    int rest = c;
    for (int d = 0; d < D; ++d) {
      const int m = lo[d] + rest % count[d];
      rest /= count[d];
      const double node_x = grid.origin[d] + m * grid.spacing[d];
      off[d] = node_x - x[d];
      w *= bspline3(off[d] / grid.spacing[d]);
      const int n = static_cast<int>(grid.cells[d]);
      int stored = m;
      if (grid.boundary[d] == Boundary::Periodic) stored = ((m % n) + n) % n;
      else stored = m < 0 ? -m : m > n ? 2 * n - m : m;
      index += stored * stride;
      stride *= shape[d];
    }
    if (w != 0) f(index, w, off);
  }
}

template <int D>
void expect_affine_transfers(const Grid<D>& grid, Accumulate mode) {
  using T = double;
  Plan<T, D> plan(grid, Kernel::bspline(3));
  const std::size_t n = 200, size = static_cast<std::size_t>(plan.mesh_size());
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<T>> x(D, std::vector<T>(n)), props(AffineProbe<T, D>::properties, std::vector<T>(n, 0.0));
  for (int d = 0; d < D; ++d)
    for (std::size_t k = 0; k < n; ++k) {
      const double extent = grid.spacing[d] * grid.cells[d];
      x[d][k] = grid.origin[d] + extent * (0.2 + 0.6 * unit(rng));
      props[d][k] = grid.spacing[d] * 0.7 * (2 * unit(rng) - 1);
    }
  std::vector<std::vector<T>> f(2, std::vector<T>(size)), q(2, std::vector<T>(size));
  for (auto& mesh : f)
    for (auto& value : mesh) value = 2 * unit(rng) - 1;
  for (auto& mesh : q)
    for (auto& value : mesh) value = mode == Accumulate::Add ? 3.0 : -7.0;
  const std::vector<std::vector<T>> q_before = q;
  Particles<T, D> particles(plan, AffineProbe<T, D>::properties);
  typename Plan<T, D>::Positions xv;
  for (int d = 0; d < D; ++d) xv[d] = View<const T>(x[d]);
  particles.assign(xv, std::vector<View<const T>>(props.begin(), props.end()));
  const std::vector<View<const T>> gathered{View<const T>(f[0]), View<const T>(f[1])};
  const std::vector<View<T>> deposited{View<T>(q[0]), View<T>(q[1])};
  StepMeshes<T> meshes;
  meshes.affine_values = gathered;
  meshes.affine_deposits = deposited;
  meshes.deposit_mode = mode;
  step(particles, AffineProbe<T, D>{}, meshes);

  std::vector<std::vector<T>> y = x, out = props;
  std::array<View<T>, D> yv;
  for (int d = 0; d < D; ++d) yv[d] = View<T>(y[d]);
  particles.copy_out(yv, std::vector<View<T>>(out.begin(), out.end()));
  std::vector<std::vector<double>> want_q(2, std::vector<double>(size, 0.0));
  if (mode == Accumulate::Add) want_q = {q_before[0], q_before[1]};
  double scale = 0;
  for (std::size_t k = 0; k < n; ++k) {
    double at[D], moved[D];
    for (int d = 0; d < D; ++d) at[d] = x[d][k], moved[d] = y[d][k];
    for (int m = 0; m < 2; ++m) {
      double value = 0, moment[D] = {};
      direct_nodes<D>(grid, at, [&](std::int64_t i, double w, const double (&off)[D]) {
        value += w * f[m][i];
        for (int d = 0; d < D; ++d) moment[d] += w * f[m][i] * off[d];
      });
      EXPECT_NEAR(out[D + m * (1 + D)][k], value, 1e-13) << "particle " << k << " mesh " << m;
      for (int d = 0; d < D; ++d)
        EXPECT_NEAR(out[D + m * (1 + D) + 1 + d][k], moment[d], 1e-13) << "particle " << k << " moment " << d;
    }
    for (int a = 0; a < 2; ++a) {
      const auto id = static_cast<std::uint32_t>(k);
      direct_nodes<D>(grid, moved, [&](std::int64_t i, double w, const double (&off)[D]) {
        double affine = AffineProbe<T, D>::probe_value(id, a, -1);
        for (int d = 0; d < D; ++d) affine += AffineProbe<T, D>::probe_value(id, a, d) * off[d];
        want_q[a][i] += w * affine;
        scale = std::max(scale, std::abs(w * affine));
      });
    }
  }
  for (int a = 0; a < 2; ++a)
    for (std::size_t i = 0; i < size; ++i)
      ASSERT_NEAR(q[a][i], want_q[a][i], 1e-12 * scale) << "mesh " << a << " node " << i;
}

TEST(ParticleStepAffine, MatchesDirectSumsOnAPeriodicGrid2D) {
  expect_affine_transfers<2>(Grid<2>::periodic({8, 6}, 0.5, -1.0), Accumulate::Overwrite);
}

TEST(ParticleStepAffine, MatchesDirectSumsOnABoundedGrid3DAdding) {
  expect_affine_transfers<3>(Grid<3>::bounded({6, 5, 7}, 0.25, 0.5), Accumulate::Add);
}

TEST(ParticleStepAffine, TakesOnlyTheQuadraticBSplineAndThePlansMeshSize) {
  const Grid<2> grid = Grid<2>::periodic({8, 8});
  std::vector<double> x{1.0, 2.0}, y{3.0, 4.0};
  const std::vector<double> zero(2, 0.0);
  std::vector<View<const double>> props(AffineProbe<double, 2>::properties, View<const double>(zero));
  for (const Kernel kernel : {Kernel::mp4(), Kernel::bspline(3)}) {
    Plan<double, 2> plan(grid, kernel);
    Particles<double, 2> particles(plan, AffineProbe<double, 2>::properties);
    particles.assign({View<const double>(x), View<const double>(y)}, props);
    std::vector<double> f(plan.mesh_size(), 0.0), q(plan.mesh_size() - (kernel == Kernel::mp4() ? 0 : 1));
    const std::vector<View<const double>> gathered(2, View<const double>(f));
    const std::vector<View<double>> deposited(2, View<double>(q));
    StepMeshes<double> meshes;
    meshes.affine_values = gathered;
    meshes.affine_deposits = deposited;
    try {
      step(particles, AffineProbe<double, 2>{}, meshes);
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kernel == Kernel::mp4() ? ErrorCode::Unsupported : ErrorCode::SizeMismatch) << e.what();
    }
  }
}

// The example's sums after `steps` steps in a periodic box, against the initial ones.
template <class T, int D, mpm::Material M>
void expect_conserved(int steps) {
  const mpm::Setting s = mpm::setting(D, M, true, D == 2 ? 1500 : 2000);
  const int n_grid = mpm::grid_for(s.particles, D);
  mpm::Simulation<T, D, M, mpm::HostExec> sim(s, n_grid);
  const auto initial = mpm::initial_state<T, D, M>(s);
  const mpm::Totals before = mpm::totals<T, D, M>(sim.parameters_used(), initial);
  sim.assign(initial);
  double scale = 0;  // sum m |v|
  for (std::size_t k = 0; k < initial[0].size(); ++k)
    for (int d = 0; d < D; ++d) scale += double(sim.parameters_used().mass) * std::abs(double(initial[D + d][k]));
  for (int i = 1; i <= steps; ++i) sim.step(i == steps);
  const mpm::Totals after = mpm::totals<T, D, M>(sim.parameters_used(), sim.state());
  const auto grid = sim.grid_sums();
  EXPECT_NEAR(grid[0], before.mass, 1e-13 * before.mass);
  for (int d = 0; d < D; ++d) {
    EXPECT_NEAR(after.momentum[d], before.momentum[d], 1e-13 * scale) << "axis " << d;
    EXPECT_NEAR(grid[1 + d], before.momentum[d], 1e-13 * scale) << "axis " << d;
  }
  EXPECT_GT(std::abs(after.kinetic - before.kinetic), 1e-6 * before.kinetic) << "the particles did not interact";
}

TEST(Mpm, ConservesMassAndMomentumInAPeriodicBox2DFluid) {
  expect_conserved<double, 2, mpm::Material::Fluid>(150);
}

TEST(Mpm, ConservesMassAndMomentumInAPeriodicBox3DElastic) {
  expect_conserved<double, 3, mpm::Material::Elastic>(60);
}

// The elastic block's total energy (kinetic and neo-Hookean) stays below its start
// (APIC dissipates, the scheme adds none) while it swells and springs back.
template <int D>
void expect_energy_bounded(int steps) {
  using T = double;
  constexpr auto M = mpm::Material::Elastic;
  const mpm::Setting s = mpm::setting(D, M, true, D == 2 ? 1500 : 2000);
  mpm::Simulation<T, D, M, mpm::HostExec> sim(s, mpm::grid_for(s.particles, D));
  const auto initial = mpm::initial_state<T, D, M>(s);
  const mpm::Totals start = mpm::totals<T, D, M>(sim.parameters_used(), initial);
  sim.assign(initial);
  double most_elastic = 0;
  for (int i = 1; i <= steps; ++i) {
    sim.step();
    if (i % 10) continue;
    const mpm::Totals t = mpm::totals<T, D, M>(sim.parameters_used(), sim.state());
    ASSERT_TRUE(std::isfinite(t.kinetic + t.elastic)) << "step " << i;
    EXPECT_LE(t.kinetic + t.elastic, (start.kinetic + start.elastic) * (1 + 1e-9)) << "step " << i;
    most_elastic = std::max(most_elastic, t.elastic);
  }
  EXPECT_GT(most_elastic, 1e-3 * start.kinetic) << "the block stored no elastic energy";
}

TEST(Mpm, ElasticEnergyStaysBounded2D) { expect_energy_bounded<2>(400); }

TEST(Mpm, ElasticEnergyStaysBounded3D) { expect_energy_bounded<3>(150); }

}  // namespace
}  // namespace pmkit::test
