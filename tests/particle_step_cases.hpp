#pragma once
// The particle step's test cases, shared by the CPU test and the CUDA test: random
// particles, the update functor, and a case that runs the step next to the unfused calls.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "core/particle_memory.hpp"
#include "pmkit/particle_step.hpp"

namespace pmkit::test {

// Particles in a grid's domain with velocities of up to 1.5 cells a step, in the order
// of their index.
template <class T, int D>
struct HostParticles {
  std::size_t n;
  std::array<std::vector<T>, D> x, v;
  HostParticles(const Grid<D>& grid, std::size_t count, unsigned seed) : n(count) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int d = 0; d < D; ++d) {
      x[d].resize(n);
      v[d].resize(n);
      const double extent = grid.spacing[d] * static_cast<double>(grid.cells[d]);
      for (std::size_t k = 0; k < n; ++k) {
        x[d][k] = static_cast<T>(grid.origin[d] + extent * (0.05 + 0.9 * unit(rng)));
        v[d][k] = static_cast<T>(grid.spacing[d] * 1.5 * (2 * unit(rng) - 1));
      }
    }
  }
  std::array<View<const T>, D> position_views() const {
    std::array<View<const T>, D> out;
    for (int d = 0; d < D; ++d) out[d] = View<const T>(x[d]);
    return out;
  }
  std::vector<View<const T>> velocity_views() const { return {v.begin(), v.end()}; }
  std::array<View<T>, D> position_out() {
    std::array<View<T>, D> out;
    for (int d = 0; d < D; ++d) out[d] = View<T>(x[d]);
    return out;
  }
  std::vector<View<T>> velocity_out() { return {v.begin(), v.end()}; }
};

// A push in a potential's gradient and a scalar field's value, depositing a weight and
// the first velocity component at the new position.
template <class T, int D>
struct StepUpdate {
  static constexpr int properties = D;
  static constexpr int values = 1;
  static constexpr int gradients = 1;
  static constexpr int deposits = 2;
  T dt = T(1);
  PMKIT_HD void operator()(StepParticleFor<T, D, StepUpdate>& p) const {
    for (int d = 0; d < D; ++d) {
      p.prop[d] += dt * (T(0.05) * p.value[0] - T(0.5) * p.gradient[0][d]);
      p.x[d] += dt * p.prop[d];
    }
    p.deposit[0] = T(1) + p.value[0];
    p.deposit[1] = p.prop[0];
  }
};

// The step on `fused_plan` next to the unfused calls on a second plan of the same
// options, from the same particles. Positions and velocities must agree bit for bit (each
// particle's arithmetic is the same), the deposits to rounding (their sums run in another
// order), or bit for bit where `bitwise_deposits`.
template <class T, int D>
struct StepCase {
  using Update = StepUpdate<T, D>;
  Grid<D> grid = Grid<D>::periodic(uniform(16));
  std::size_t n = 3000;
  Plan<T, D> fused_plan, plain_plan;
  HostParticles<T, D> host;
  std::vector<T> phi, psi;
  std::array<std::vector<T>, 2> fused_rho, plain_rho;

  static std::array<std::int64_t, D> uniform(std::int64_t c) {
    std::array<std::int64_t, D> cells;
    cells.fill(c);
    return cells;
  }

  StepCase(const Options& options, const Kernel& kernel)
      : fused_plan(grid, kernel, options), plain_plan(grid, kernel, options), host(grid, n, 5) {
    std::mt19937 rng(9);
    std::uniform_real_distribution<double> value(-1.0, 1.0);
    phi.resize(fused_plan.mesh_size());
    psi.resize(fused_plan.mesh_size());
    for (auto& p : phi) p = static_cast<T>(value(rng));
    for (auto& p : psi) p = static_cast<T>(value(rng));
    for (auto* rho : {&fused_rho, &plain_rho})
      for (auto& r : *rho) r.assign(fused_plan.mesh_size(), T(0));
  }

  // The update on the host and the unfused calls, one step.
  void plain_step(const Update& update) {
    std::vector<T> value(n);
    std::array<std::vector<T>, D> gradient;
    for (auto& g : gradient) g.resize(n);
    plain_plan.interp({View<const T>(phi)}, {View<T>(value)});
    std::vector<View<T>> gradient_views(gradient.begin(), gradient.end());
    plain_plan.interp_gradient({View<const T>(psi)}, gradient_views);
    std::array<std::vector<T>, 2> deposit;
    for (auto& q : deposit) q.resize(n);
    const auto axes = detail::step_axes(grid);
    for (std::size_t k = 0; k < n; ++k) {
      StepParticleFor<T, D, Update> p{};
      for (int d = 0; d < D; ++d) {
        p.x[d] = host.x[d][k];
        p.prop[d] = host.v[d][k];
        p.gradient[0][d] = gradient[d][k];
      }
      p.value[0] = value[k];
      p.id = static_cast<std::uint32_t>(k);
      update(p);
      for (int d = 0; d < D; ++d) {
        ASSERT_TRUE(detail::wrap_position(p.x[d], axes[d]));
        host.x[d][k] = p.x[d];
        host.v[d][k] = p.prop[d];
      }
      for (int q = 0; q < 2; ++q) deposit[q][k] = p.deposit[q];
    }
    plain_plan.update_points(host.position_views());
    plain_plan.spread({View<const T>(deposit[0]), View<const T>(deposit[1])},
                      {View<T>(plain_rho[0]), View<T>(plain_rho[1])});
  }

  // `fused` runs one step of the particles: step(particles, update, meshes).
  template <class Fused>
  void run(int steps, Fused&& fused, bool bitwise_deposits = false) {
    Particles<T, D> particles(fused_plan, D);
    particles.assign(host.position_views(), host.velocity_views());
    plain_plan.set_points(host.position_views());
    const Update update{};
    HostParticles<T, D> out = host;
    for (int s = 0; s < steps; ++s) {
      fused(particles, update,
            StepMeshes<T>{{View<const T>(phi)}, {View<const T>(psi)}, {View<T>(fused_rho[0]), View<T>(fused_rho[1])}});
      plain_step(update);
      particles.copy_out(out.position_out(), out.velocity_out());
      for (int d = 0; d < D; ++d) {
        ASSERT_EQ(out.x[d], host.x[d]) << "positions, axis " << d << ", step " << s;
        ASSERT_EQ(out.v[d], host.v[d]) << "velocities, axis " << d << ", step " << s;
      }
      for (int q = 0; q < 2; ++q) {
        if (bitwise_deposits) {
          ASSERT_EQ(fused_rho[q], plain_rho[q]) << "deposit " << q << ", step " << s;
          continue;
        }
        double scale = 0;
        for (T r : plain_rho[q]) scale = std::max(scale, std::abs(static_cast<double>(r)));
        const double tolerance = scale * (sizeof(T) == 4 ? 1e-5 : 1e-13);
        for (std::size_t i = 0; i < plain_rho[q].size(); ++i)
          ASSERT_NEAR(fused_rho[q][i], plain_rho[q][i], tolerance) << "deposit " << q << ", node " << i << ", step " << s;
      }
    }
  }
  void run(int steps) {
    run(steps, [](Particles<T, D>& p, const Update& u, const StepMeshes<T>& m) { step(p, u, m); });
  }
};

}  // namespace pmkit::test
