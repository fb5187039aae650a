#include "verify/gradient.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "pmkit/error.hpp"
#include "pmkit/plan.hpp"
#include "pmkit/reference.hpp"

namespace pmkit::verify {

namespace {

using detail::fail;

double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double e2 = 0, w2 = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    e2 += (got[i] - want[i]) * (got[i] - want[i]);
    w2 += want[i] * want[i];
  }
  return std::sqrt(e2 / w2);
}

// Sum of a[i] b[i] over every pair of arrays, and the sum of the terms' magnitudes.
struct Dot {
  double sum = 0, magnitude = 0;
  void add(const std::vector<double>& a, const std::vector<double>& b) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      sum += a[i] * b[i];
      magnitude += std::fabs(a[i] * b[i]);
    }
  }
};

template <int D>
Grid<D> grid_of_kind(int kind) {
  std::array<std::int64_t, D> cells{};
  for (int d = 0; d < D; ++d) cells[d] = D == 2 ? 24 + 3 * d : 11 + 2 * d;
  Grid<D> g = Grid<D>::periodic(cells, 0.25, -1.0);
  if (kind > 0) {
    for (auto& b : g.boundary) b = Boundary::Bounded;
    g.ghosts = kind == 1 ? Ghosts::Fold : Ghosts::Keep;
  }
  return g;
}

// The three errors on one grid, each folded into `check` as the largest so far.
template <int D>
void check_grid(const Grid<D>& grid, const Kernel& kernel, std::mt19937_64& rng, int num_threads,
                GradientCheck& check) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Options options;
  options.num_threads = num_threads;
  Plan<double, D> plan(grid, kernel, options);
  const auto size = static_cast<std::size_t>(plan.mesh_size());
  std::size_t n = 1;
  for (auto c : grid.cells) n *= static_cast<std::size_t>(c);  // one particle per cell

  std::array<std::vector<double>, D> pos;
  std::array<const double*, D> pos_pointers{};
  typename Plan<double, D>::Positions pos_views;
  for (int d = 0; d < D; ++d) {
    pos[d].resize(n);
    for (auto& x : pos[d]) x = grid.origin[d] + unit(rng) * static_cast<double>(grid.cells[d]) * grid.spacing[d];
    pos_pointers[d] = pos[d].data();
    pos_views[d] = View<const double>(pos[d]);
  }
  plan.set_points(pos_views);

  std::vector<double> field(size), mesh(size), want_mesh(size);
  for (auto& f : field) f = 2 * unit(rng) - 1;
  std::vector<std::vector<double>> vectors(D, std::vector<double>(n)), gradient(D, std::vector<double>(n)),
      want_gradient(D, std::vector<double>(n));
  std::vector<View<const double>> vector_views;
  std::vector<View<double>> gradient_views;
  std::vector<const double*> vector_pointers;
  std::vector<double*> want_pointers;
  for (int d = 0; d < D; ++d) {
    for (auto& v : vectors[d]) v = 2 * unit(rng) - 1;
    vector_views.emplace_back(vectors[d]);
    gradient_views.emplace_back(gradient[d]);
    vector_pointers.push_back(vectors[d].data());
    want_pointers.push_back(want_gradient[d].data());
  }
  plan.interp_gradient({View<const double>(field)}, gradient_views);
  plan.spread_gradient(vector_views, {View<double>(mesh)});
  const double* field_pointer = field.data();
  double* want_mesh_pointer = want_mesh.data();
  reference::interp_gradient<D>(grid, kernel, n, pos_pointers, 1, &field_pointer, want_pointers.data());
  reference::spread_gradient<D>(grid, kernel, n, pos_pointers, 1, vector_pointers.data(), &want_mesh_pointer);

  double interp_error = 0;
  Dot particles, nodes;
  for (int d = 0; d < D; ++d) {
    interp_error = std::max(interp_error, relative_l2(gradient[d], want_gradient[d]));
    particles.add(vectors[d], gradient[d]);
  }
  nodes.add(mesh, field);
  // Written so that a NaN carries through std::max.
  auto worst = [](double so_far, double e) { return !(e <= so_far) ? e : so_far; };
  check.interp_error = worst(check.interp_error, interp_error);
  check.spread_error = worst(check.spread_error, relative_l2(mesh, want_mesh));
  check.adjoint_error =
      worst(check.adjoint_error, std::fabs(nodes.sum - particles.sum) / (nodes.magnitude + particles.magnitude));
}

template <int D>
GradientCheck check_all(const Kernel& kernel, std::uint64_t seed, int num_threads) {
  std::mt19937_64 rng(seed);
  GradientCheck check{kernel, D, 0.0, 0.0, 0.0};
  for (int kind = 0; kind < 3; ++kind) check_grid<D>(grid_of_kind<D>(kind), kernel, rng, num_threads, check);
  return check;
}

}  // namespace

GradientCheck check_gradients(const Kernel& kernel, int dim, std::uint64_t seed, int num_threads) {
  if (dim == 2) return check_all<2>(kernel, seed, num_threads);
  if (dim == 3) return check_all<3>(kernel, seed, num_threads);
  fail(ErrorCode::InvalidArgument, "dim = ", dim, ": pmkit grids are 2D or 3D");
}

bool passes(const GradientCheck& c) {
  return c.interp_error <= kGradientTolerance && c.spread_error <= kGradientTolerance &&
         c.adjoint_error <= kGradientTolerance;
}

std::string format_gradient_table(const std::vector<GradientCheck>& checks) {
  std::ostringstream os;
  os << "kernel    dim  interp_gradient  spread_gradient  adjointness  tolerance\n";
  for (const GradientCheck& c : checks) {
    char line[160];
    std::snprintf(line, sizeof line, "%-9s %dD   %15.2e  %15.2e  %11.2e  %9.0e  %s\n", c.kernel.name().c_str(),
                  c.dim, c.interp_error, c.spread_error, c.adjoint_error, kGradientTolerance,
                  passes(c) ? "ok" : "FAIL");
    os << line;
  }
  return os.str();
}

}  // namespace pmkit::verify
