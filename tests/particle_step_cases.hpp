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
  // A template on the particle type: nvcc does not take StepParticleFor<T, D, StepUpdate>
  // inside the class template StepUpdate itself.
  template <class Particle>
  PMKIT_HD void operator()(Particle& p) const {
    for (int d = 0; d < D; ++d) {
      p.prop[d] += dt * (T(0.05) * p.value[0] - T(0.5) * p.gradient[0][d]);
      p.x[d] += dt * p.prop[d];
    }
    p.deposit[0] = T(1) + p.value[0];
    p.deposit[1] = p.prop[0];
  }
};

// The host's memory for StepCase (a CUDA test gives the device's).
struct HostMemory {
  template <class U>
  using Array = std::vector<U>;
  template <class U>
  static void upload(std::vector<U>& to, const std::vector<U>& from) {
    to = from;
  }
  template <class U>
  static std::vector<U> download(const std::vector<U>& from, std::size_t n) {
    return std::vector<U>(from.begin(), from.begin() + n);
  }
  template <class U>
  static View<U> view(std::vector<U>& a, std::size_t n) {
    return View<U>(a.data(), n);
  }
  template <class U>
  static std::vector<U> download_view(View<const U> from, std::size_t n) {
    return std::vector<U>(from.data, from.data + n);
  }
};

// The step on `fused_plan` next to the unfused calls on a second plan of the same
// options, from the same particles, the arrays in Memory's memory.
template <class T, int D, class Memory = HostMemory>
struct StepCase {
  using Update = StepUpdate<T, D>;
  template <class U>
  using Array = typename Memory::template Array<U>;
  Grid<D> grid;
  std::size_t n = 3000;
  Plan<T, D> fused_plan, plain_plan;
  HostParticles<T, D> host;
  std::size_t mesh_size;
  Array<T> phi, psi;
  std::array<Array<T>, 2> fused_rho, plain_rho;
  std::array<Array<T>, D> plain_x, gradient, out_x, out_v;
  std::array<Array<T>, 2> deposit;
  Array<T> value;

  static std::array<std::int64_t, D> uniform(std::int64_t c) {
    std::array<std::int64_t, D> cells;
    cells.fill(c);
    return cells;
  }
  View<T> view(Array<T>& a, std::size_t size) { return Memory::view(a, size); }
  View<const T> cview(Array<T>& a, std::size_t size) { return Memory::view(a, size); }

  // A periodic grid of `cells` cells an axis.
  StepCase(const Options& options, const Kernel& kernel, std::int64_t cells = 16)
      : StepCase(options, kernel, Grid<D>::periodic(uniform(cells))) {}
  StepCase(const Options& options, const Kernel& kernel, const Grid<D>& on)
      : grid(on),
        fused_plan(grid, kernel, options), plain_plan(grid, kernel, options), host(grid, n, 5),
        mesh_size(static_cast<std::size_t>(fused_plan.mesh_size())) {
    std::mt19937 rng(9);
    std::uniform_real_distribution<double> uniform_value(-1.0, 1.0);
    std::vector<T> a(mesh_size), b(mesh_size), zero(mesh_size, T(0)), particle_zero(n, T(0));
    for (auto& p : a) p = static_cast<T>(uniform_value(rng));
    for (auto& p : b) p = static_cast<T>(uniform_value(rng));
    Memory::upload(phi, a);
    Memory::upload(psi, b);
    for (auto* rho : {&fused_rho, &plain_rho})
      for (auto& r : *rho) Memory::upload(r, zero);
    for (auto* arrays : {&plain_x, &gradient, &out_x, &out_v})
      for (auto& x : *arrays) Memory::upload(x, particle_zero);
    for (auto& q : deposit) Memory::upload(q, particle_zero);
    Memory::upload(value, particle_zero);
  }

  std::array<View<const T>, D> plain_positions() {
    std::array<View<const T>, D> x;
    for (int d = 0; d < D; ++d) {
      Memory::upload(plain_x[d], host.x[d]);
      x[d] = cview(plain_x[d], n);
    }
    return x;
  }

  // The update on the host and the unfused calls, one step.
  void plain_step(const Update& update) {
    plain_plan.interp({cview(phi, mesh_size)}, {view(value, n)});
    std::vector<View<T>> gradient_views;
    for (auto& g : gradient) gradient_views.push_back(view(g, n));
    plain_plan.interp_gradient({cview(psi, mesh_size)}, gradient_views);
    const std::vector<T> values = Memory::download(value, n);
    std::array<std::vector<T>, D> gradients;
    for (int d = 0; d < D; ++d) gradients[d] = Memory::download(gradient[d], n);
    std::array<std::vector<T>, 2> deposits;
    for (auto& q : deposits) q.resize(n);
    const auto axes = detail::step_axes(grid);
    for (std::size_t k = 0; k < n; ++k) {
      StepParticleFor<T, D, Update> p{};
      for (int d = 0; d < D; ++d) {
        p.x[d] = host.x[d][k];
        p.prop[d] = host.v[d][k];
        p.gradient[0][d] = gradients[d][k];
      }
      p.value[0] = values[k];
      p.id = static_cast<std::uint32_t>(k);
      update(p);
      for (int d = 0; d < D; ++d) {
        ASSERT_TRUE(detail::wrap_position(p.x[d], axes[d]));
        host.x[d][k] = p.x[d];
        host.v[d][k] = p.prop[d];
      }
      for (int q = 0; q < 2; ++q) deposits[q][k] = p.deposit[q];
    }
    plain_plan.update_points(plain_positions());
    for (int q = 0; q < 2; ++q) Memory::upload(deposit[q], deposits[q]);
    plain_plan.spread({cview(deposit[0], n), cview(deposit[1], n)},
                      {view(plain_rho[0], mesh_size), view(plain_rho[1], mesh_size)});
  }

  // `fused` runs one step of the particles: step(particles, update, meshes).
  // exact_state: positions and velocities bit for bit (each particle's arithmetic the
  // same; else within rounding, where the fields may come from another of the plan's
  // paths); bitwise_deposits: the deposits too (else to rounding: their sums run in
  // another order).
  template <class Fused>
  void run(int steps, Fused&& fused, bool exact_state = true, bool bitwise_deposits = false) {
    Particles<T, D> particles(fused_plan, D);
    std::vector<View<const T>> velocities;
    for (int d = 0; d < D; ++d) {
      Memory::upload(out_v[d], host.v[d]);
      velocities.push_back(cview(out_v[d], n));
    }
    particles.assign(plain_positions(), velocities);
    plain_plan.set_points(plain_positions());
    const Update update{};
    for (int s = 0; s < steps; ++s) {
      fused(particles, update,
            StepMeshes<T>{{cview(phi, mesh_size)},
                          {cview(psi, mesh_size)},
                          {view(fused_rho[0], mesh_size), view(fused_rho[1], mesh_size)}});
      plain_step(update);
      std::array<View<T>, D> x;
      std::vector<View<T>> v;
      for (int d = 0; d < D; ++d) {
        x[d] = view(out_x[d], n);
        v.push_back(view(out_v[d], n));
      }
      particles.copy_out(x, v);
      particles.synchronize();
      for (int d = 0; d < D; ++d) {
        const std::vector<T> fused_x = Memory::download(out_x[d], n), fused_v = Memory::download(out_v[d], n);
        if (exact_state) {
          ASSERT_EQ(fused_x, host.x[d]) << "positions, axis " << d << ", step " << s;
          ASSERT_EQ(fused_v, host.v[d]) << "velocities, axis " << d << ", step " << s;
          continue;
        }
        // Within rounding (the periodic image nearest), then the unfused calls go on from
        // the fused state, so that the differences do not grow over the steps.
        const double extent = grid.spacing[d] * static_cast<double>(grid.cells[d]);
        const double tolerance = sizeof(T) == 4 ? 1e-4 : 1e-10;
        for (std::size_t k = 0; k < n; ++k) {
          const double apart = std::abs(static_cast<double>(fused_x[k]) - host.x[d][k]);
          ASSERT_LE(std::min(apart, extent - apart), tolerance * extent) << "particle " << k << ", step " << s;
          ASSERT_NEAR(fused_v[k], host.v[d][k], tolerance) << "particle " << k << ", step " << s;
        }
        host.x[d] = fused_x;
        host.v[d] = fused_v;
      }
      if (!exact_state) plain_plan.update_points(plain_positions());
      for (int q = 0; q < 2; ++q) {
        const std::vector<T> fused_q = Memory::download(fused_rho[q], mesh_size);
        const std::vector<T> plain_q = Memory::download(plain_rho[q], mesh_size);
        if (bitwise_deposits) {
          ASSERT_EQ(fused_q, plain_q) << "deposit " << q << ", step " << s;
          continue;
        }
        double scale = 0;
        for (T r : plain_q) scale = std::max(scale, std::abs(static_cast<double>(r)));
        const double tolerance = scale * (sizeof(T) == 4 ? 1e-5 : 1e-13);
        for (std::size_t i = 0; i < mesh_size; ++i)
          ASSERT_NEAR(fused_q[i], plain_q[i], tolerance) << "deposit " << q << ", node " << i << ", step " << s;
      }
    }
  }
  void run(int steps) {
    run(steps, [](Particles<T, D>& p, const Update& u, const StepMeshes<T>& m) { step(p, u, m); });
  }
};

// A drift of each particle by its velocity (properties 0 to D - 1).
template <int D>
struct Drift {
  static constexpr int properties = D;
  template <class Particle>
  PMKIT_HD void operator()(Particle& p) const {
    for (int d = 0; d < D; ++d) p.x[d] += p.prop[d];
  }
};

// After `steps` steps of particles crossing tiles and the periodic seam (fused(particles,
// Drift) a step), the particles' plan holds the binning that set_points of their
// positions gives a second plan: the identity order, the same binned positions, the
// same spread and interp (bitwise: to the bit; else to rounding), and the same away
// particles and spread after a further update_points of both plans to moved positions.
template <class T, int D, class Memory, class Fused>
void expect_binned_as_set_points(const Options& options, const Kernel& kernel, std::int64_t cells, int steps,
                                 bool bitwise, Fused&& fused) {
  using Array = typename Memory::template Array<T>;
  std::array<std::int64_t, D> shape;
  shape.fill(cells);
  const Grid<D> grid = Grid<D>::periodic(shape);
  const std::size_t n = 4000;
  HostParticles<T, D> host(grid, n, 13);
  Plan<T, D> plan(grid, kernel, options), fresh(grid, kernel, options);
  const std::size_t mesh_size = static_cast<std::size_t>(plan.mesh_size());
  std::array<Array, D> x, v;
  for (int d = 0; d < D; ++d) {
    Memory::upload(x[d], host.x[d]);
    Memory::upload(v[d], host.v[d]);
  }
  const auto views = [&](std::array<Array, D>& a) {
    std::array<View<const T>, D> out;
    for (int d = 0; d < D; ++d) out[d] = Memory::view(a[d], n);
    return out;
  };
  Particles<T, D> particles(plan, D);
  const auto velocities = views(v);
  particles.assign(views(x), Span<View<const T>>(velocities.data(), D));
  for (int s = 0; s < steps; ++s) fused(particles, Drift<D>{});
  // Until a step's update_points has re-binned in full (a CUDA plan's kept binning holds
  // the away particles of its update), so that the particles handed the plan their order.
  // The wait before each lets a CUDA plan read the count of away particles that decides
  // its next update_points (an eager call takes only the readings that have landed).
  for (int extra = 0; extra < 8 && plan.binning_kept(); ++extra) {
    particles.synchronize();
    fused(particles, Drift<D>{});
  }
  ASSERT_FALSE(plan.binning_kept());
  particles.synchronize();
  fresh.set_points(particles.positions());

  const auto expect_same = [&](const std::vector<T>& a, const std::vector<T>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size());
    if (bitwise) {
      ASSERT_EQ(a, b) << what;
      return;
    }
    double scale = 0;
    for (T value : b) scale = std::max(scale, std::abs(static_cast<double>(value)));
    const double tolerance = scale * (sizeof(T) == 4 ? 1e-5 : 1e-13);
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tolerance) << what << " " << i;
  };
  typename Memory::template Array<std::uint32_t> order;
  Memory::upload(order, std::vector<std::uint32_t>(n, 0u));
  for (Plan<T, D>* p : {&plan, &fresh}) {
    p->binned_order(Memory::view(order, n));
    const std::vector<std::uint32_t> got = Memory::download(order, n);
    for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(got[k], k) << "binned order, slot " << k;
  }
  std::array<Array, D> offsets_a, offsets_b;
  std::array<View<T>, D> out_a, out_b;
  for (int d = 0; d < D; ++d) {
    Memory::upload(offsets_a[d], std::vector<T>(n, T(0)));
    Memory::upload(offsets_b[d], std::vector<T>(n, T(0)));
    out_a[d] = Memory::view(offsets_a[d], n);
    out_b[d] = Memory::view(offsets_b[d], n);
  }
  plan.binned_positions(out_a);
  fresh.binned_positions(out_b);
  for (int d = 0; d < D; ++d)
    ASSERT_EQ(Memory::download(offsets_a[d], n), Memory::download(offsets_b[d], n)) << "binned positions, axis " << d;

  std::vector<T> field(mesh_size);
  for (std::size_t i = 0; i < mesh_size; ++i) field[i] = static_cast<T>(std::sin(0.31 * static_cast<double>(i)));
  Array phi, rho_a, rho_b, at_a, at_b;
  Memory::upload(phi, field);
  const auto compare_calls = [&](const char* when) {
    SCOPED_TRACE(when);
    Memory::upload(rho_a, std::vector<T>(mesh_size, T(0)));
    Memory::upload(rho_b, std::vector<T>(mesh_size, T(0)));
    Memory::upload(at_a, std::vector<T>(n, T(0)));
    Memory::upload(at_b, std::vector<T>(n, T(0)));
    const View<const T> q = particles.property(0);
    plan.spread({q}, {Memory::view(rho_a, mesh_size)});
    fresh.spread({q}, {Memory::view(rho_b, mesh_size)});
    expect_same(Memory::download(rho_a, mesh_size), Memory::download(rho_b, mesh_size), "spread, node");
    const View<const T> mesh = Memory::view(phi, mesh_size);
    plan.interp({mesh}, {Memory::view(at_a, n)});
    fresh.interp({mesh}, {Memory::view(at_b, n)});
    expect_same(Memory::download(at_a, n), Memory::download(at_b, n), "interp, particle");
  };
  compare_calls("after the steps");

  // Both plans to the same moved positions: a plan that kept its binning compares each
  // particle's tile with the one it had at the full binning.
  for (int d = 0; d < D; ++d) {
    std::vector<T> moved = Memory::download_view(particles.positions()[d], n);
    for (std::size_t k = 0; k < n; ++k) {
      const T shifted = moved[k] + T(0.375) * (d + 1);
      moved[k] = shifted >= T(cells) ? shifted - T(cells) : shifted;
    }
    Memory::upload(x[d], moved);
  }
  plan.update_points(views(x));
  fresh.update_points(views(x));
  // Where both kept their binning (a CUDA plan's status may have asked the particles'
  // plan for a full one).
  if (plan.binning_kept() == fresh.binning_kept()) {
    EXPECT_EQ(plan.num_away(), fresh.num_away());
  }
  compare_calls("after update_points");
}

}  // namespace pmkit::test
