#pragma once
// The MLS-MPM example's simulation (mpm.hpp's scheme) on either backend: a plan on the
// unit square or cube (bounded with walls and gravity, or periodic), the particles, the
// grid's meshes, and the loop of pmkit's step and the grid update. Exec gives the memory
// and the two calls that differ between the host and a device (mpm.cpp, mpm_cuda.cu).
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mpm.hpp"
#include "pmkit/plan.hpp"

namespace mpm {

// The run's setting, from the command line (driver.hpp).
struct Setting {
  int dim = 2;
  Material material = Material::Fluid;
  std::int64_t particles = 4096;
  int n_grid = 0;  // 0: from the particle count (about 4 particles a cell in the block)
  int steps = 100;
  double dt = 0;   // 0: 1e-4 at 128 cells, proportional to the spacing
  bool periodic = false;  // no walls and no gravity
  double gravity = 9.8;
  std::uint64_t seed = 1;
};

// A setting of the defaults but these.
inline Setting setting(int dim, Material material, bool periodic, std::int64_t particles) {
  Setting s;
  s.dim = dim;
  s.material = material;
  s.periodic = periodic;
  s.particles = particles;
  return s;
}

// A block of particles in [0.15, 0.55)^D (the mpm3d setting), n_grid from the count.
inline int grid_for(std::int64_t particles, int dim) {
  return static_cast<int>(std::lround(std::pow(4.0 * static_cast<double>(particles), 1.0 / dim)));
}

template <class T, int D, Material M>
Parameters<T> parameters(const Setting& s, int n_grid) {
  Parameters<T> par;
  const double h = 1.0 / n_grid;
  par.h = T(h);
  par.dt = T(s.dt > 0 ? s.dt : 1e-4 * 128.0 / n_grid);
  par.volume = T(std::pow(0.5 * h, D));
  par.mass = par.volume;  // density 1
  const double E = M == Material::Fluid ? 400.0 : 1000.0, nu = 0.2;
  par.stiffness = T(E);
  par.mu = T(E / (2 * (1 + nu)));
  par.lambda = T(E * nu / ((1 + nu) * (1 - 2 * nu)));
  par.gravity[1] = s.periodic ? T(0) : T(-s.gravity);
  return par;
}

// The initial state on the host, in assign's layout: D position arrays, then the
// properties (v, C = 0, F = I or J = 1). The block moves, spins and swells.
template <class T, int D, Material M>
std::vector<std::vector<T>> initial_state(const Setting& s) {
  const std::size_t n = static_cast<std::size_t>(s.particles);
  std::vector<std::vector<T>> a(D + properties<D, M>(), std::vector<T>(n, T(0)));
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t k = 0; k < n; ++k) {
    double x[D];
    for (int d = 0; d < D; ++d) x[d] = 0.15 + 0.4 * u(rng);
    for (int d = 0; d < D; ++d) a[d][k] = T(x[d]);
    // v = (0.5, 0.25) + a spin of 2 about the block's centre (x-y plane) + a dilation
    // of rate 1 (which the material's stress then works against).
    const double rx = x[0] - 0.35, ry = x[1] - 0.35;
    for (int d = 0; d < D; ++d) a[D + d][k] = T(x[d] - 0.35);
    a[D][k] += T(0.5 - 2.0 * ry);
    a[D + 1][k] += T(0.25 + 2.0 * rx);
    const int f = D + D + D * D;
    if (M == Material::Fluid) {
      a[f][k] = T(1);
    } else {
      for (int d = 0; d < D; ++d) a[f + d * D + d][k] = T(1);
    }
  }
  return a;
}

// Sums over the particles (host arrays in assign's layout): mass, momentum, kinetic and
// elastic energy (neo-Hookean: V (mu/2 (tr F^T F - D) - mu ln J + lambda/2 ln^2 J)).
struct Totals {
  double mass = 0, momentum[3] = {0, 0, 0}, kinetic = 0, elastic = 0;
};
template <class T, int D, Material M>
Totals totals(const Parameters<T>& par, const std::vector<std::vector<T>>& a) {
  Totals t;
  const std::size_t n = a[0].size();
  for (std::size_t k = 0; k < n; ++k) {
    t.mass += par.mass;
    for (int d = 0; d < D; ++d) {
      const double v = a[D + d][k];
      t.momentum[d] += double(par.mass) * v;
      t.kinetic += 0.5 * double(par.mass) * v * v;
    }
    if (M == Material::Elastic) {
      double F[9], frob = 0;
      for (int i = 0; i < D * D; ++i) F[i] = a[D + D + D * D + i][k], frob += F[i] * F[i];
      const double J = D == 2 ? F[0] * F[3] - F[1] * F[2]
                              : F[0] * (F[4] * F[8] - F[5] * F[7]) - F[1] * (F[3] * F[8] - F[5] * F[6]) +
                                    F[2] * (F[3] * F[7] - F[4] * F[6]);
      const double l = std::log(J);
      t.elastic += double(par.volume) *
                   (0.5 * double(par.mu) * (frob - D) - double(par.mu) * l + 0.5 * double(par.lambda) * l * l);
    }
  }
  return t;
}

template <class T, int D, Material M, class Exec>
class Simulation {
 public:
  using Array = typename Exec::template Array<T>;

  Simulation(const Setting& s, int n_grid)
      : par_(parameters<T, D, M>(s, n_grid)),
        plan_(grid(s.periodic, n_grid), pmkit::Kernel::bspline(3), Exec::options()),
        particles_(plan_, properties<D, M>()),
        walls_(!s.periodic) {
    const std::size_t size = static_cast<std::size_t>(plan_.mesh_size());
    for (int i = 0; i < 1 + D; ++i) deposits_[i] = Array(size);
    for (int i = 0; i < D; ++i) velocity_[i] = Array(size);
    for (int d = 0; d < D; ++d) shape_[d] = n_grid + (s.periodic ? 0 : 1);
  }

  static pmkit::Grid<D> grid(bool periodic, int n_grid) {
    std::array<std::int64_t, D> cells;
    cells.fill(n_grid);
    return periodic ? pmkit::Grid<D>::periodic(cells, 1.0 / n_grid) : pmkit::Grid<D>::bounded(cells, 1.0 / n_grid);
  }

  // Takes the state (host arrays, initial_state's layout) and deposits it on the grid;
  // with `sums`, grid_sums gives the deposit's sums (a copy of the meshes to the host).
  void assign(const std::vector<std::vector<T>>& state, bool sums = false) {
    std::vector<Array> arrays;
    for (const auto& a : state) arrays.push_back(Exec::upload(a));
    typename pmkit::Plan<T, D>::Positions x;
    for (int d = 0; d < D; ++d) x[d] = pmkit::View<const T>(arrays[d].data(), arrays[d].size());
    std::vector<pmkit::View<const T>> props;
    for (std::size_t i = D; i < arrays.size(); ++i) props.emplace_back(arrays[i].data(), arrays[i].size());
    particles_.assign(x, props);
    Update<T, D, M> first{par_, true};
    advance(first, sums);
  }

  // One step: G2P, the move and P2G in pmkit's step, then the grid update; `sums` as
  // for assign.
  void step(bool sums = false) { advance(Update<T, D, M>{par_, false}, sums); }

  // The state in assign's order on the host.
  std::vector<std::vector<T>> state() const {
    const std::size_t n = particles_.size();
    std::vector<Array> arrays;
    for (int i = 0; i < D + properties<D, M>(); ++i) arrays.emplace_back(n);
    std::array<pmkit::View<T>, D> x;
    for (int d = 0; d < D; ++d) x[d] = pmkit::View<T>(arrays[d].data(), n);
    std::vector<pmkit::View<T>> props;
    for (std::size_t i = D; i < arrays.size(); ++i) props.emplace_back(arrays[i].data(), n);
    particles_.copy_out(x, props);
    std::vector<std::vector<T>> out;
    for (auto& a : arrays) out.push_back(Exec::download(a));
    return out;
  }

  // The grid's mass and momentum sums of the last P2G of a step or assign asked for them.
  const std::array<double, 1 + D>& grid_sums() const { return sums_; }

  const Parameters<T>& parameters_used() const { return par_; }
  pmkit::Particles<T, D>& particles() { return particles_; }

 private:
  void advance(const Update<T, D, M>& update, bool sums) {
    std::array<pmkit::View<const T>, D> v;
    for (int d = 0; d < D; ++d) v[d] = pmkit::View<const T>(velocity_[d].data(), velocity_[d].size());
    std::array<pmkit::View<T>, 1 + D> q;
    for (int i = 0; i < 1 + D; ++i) q[i] = pmkit::View<T>(deposits_[i].data(), deposits_[i].size());
    pmkit::StepMeshes<T> meshes;
    meshes.deposit_mode = pmkit::Accumulate::Add;  // onto the meshes the grid update cleared
    meshes.affine_values = pmkit::Span<pmkit::View<const T>>(v.data(), v.size());
    meshes.affine_deposits = pmkit::Span<pmkit::View<T>>(q.data(), q.size());
    Exec::step(particles_, update, meshes);
    if (sums)
      for (int i = 0; i < 1 + D; ++i) {
        sums_[i] = 0;
        for (T v : Exec::download(deposits_[i])) sums_[i] += v;
      }
    GridUpdate<T, D> g;
    g.par = par_;
    g.walls = walls_;
    g.spacing = plan_.grid().spacing[0];
    g.mass = deposits_[0].data();
    const auto x = particles_.positions();
    for (int d = 0; d < D; ++d) {
      g.shape[d] = shape_[d];
      g.momentum[d] = deposits_[1 + d].data();
      g.velocity[d] = velocity_[d].data();
      g.x[d] = x[d].data;
    }
    g.particles = particles_.size();
    Exec::grid_update(g, box_);
  }

  Parameters<T> par_;
  pmkit::Plan<T, D> plan_;
  pmkit::Particles<T, D> particles_;
  bool walls_;
  std::int64_t shape_[D];
  Array deposits_[1 + D];  // mass, momentum
  Array velocity_[D];
  using Ints = typename Exec::template Array<int>;
  Ints box_ = Ints(2 * D);  // the grid update's box of nodes
  std::array<double, 1 + D> sums_{};
};

}  // namespace mpm
