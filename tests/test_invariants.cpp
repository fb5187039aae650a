// Exact invariants, independent of the reference: adjointness of spread and interp,
// conservation of moments, reproduction of constant/linear/quadratic fields, a
// constant density spread, and bitwise determinism on the CPU.
#include <sstream>

#include <cstring>
#include <numeric>

#include "matrix_plan.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

class InvariantTest : public KernelCaseTest {
 protected:
  // Rounding allowance of a sum relative to its scale.
  double tol() const { return precision_ == Precision::Float ? 1e-5 : 1e-12; }
};

// cells2 in 2D, cells3 in 3D.
template <int D>
std::array<std::int64_t, D> pick(std::array<std::int64_t, 2> cells2, std::array<std::int64_t, 3> cells3) {
  if constexpr (D == 2)
    return cells2;
  else
    return cells3;
}

// Physical position of storage index i along dimension d (ghost layers of Keep included).
template <int D>
double node_x(const Grid<D>& g, int ghost, int d, std::int64_t i) {
  const bool keep = g.boundary[d] == Boundary::Bounded && g.ghosts == Ghosts::Keep;
  return g.origin[d] + static_cast<double>(i - (keep ? ghost : 0)) * g.spacing[d];
}

// Calls f(flat index, x) for every stored node.
template <int D, class F>
void for_each_stored_node(const Grid<D>& g, int ghost, F&& f) {
  const auto shape = mesh_shape(g, ghost);
  std::int64_t size = 1;
  for (auto e : shape) size *= e;
  for (std::int64_t flat = 0; flat < size; ++flat) {
    std::array<double, D> x{};
    std::int64_t rest = flat;
    for (int d = 0; d < D; ++d) {
      x[d] = node_x<D>(g, ghost, d, rest % shape[d]);
      rest /= shape[d];
    }
    f(flat, x);
  }
}

// ---------------------------------------------------------------------------------
// <spread(q), f> == <q, interp(f)>, for every boundary kind.
template <class T, int D>
void check_adjoint(const Variant& bc, const Kernel& kernel, BoundaryKind kind, std::array<std::int64_t, D> cells,
                   double tol, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D " + name(kind));
  const Grid<D> grid = make_grid<D>(cells, kind);
  MatrixPlan<T, D> plan(grid, kernel, bc);
  const std::size_t n = 2500;
  Positions<T, D> pos = make_positions<T, D>(grid, Distribution::Uniform, n, rng);
  const Positions<T, D> edge = make_positions<T, D>(grid, Distribution::Seam, n / 5, rng);
  for (int d = 0; d < D; ++d) std::copy(edge[d].begin(), edge[d].end(), pos[d].begin());
  plan.set_points(views_of<T, D>(pos));

  const std::vector<T> q = random_values<T>(n, rng);
  const std::vector<T> f = random_values<T>(static_cast<std::size_t>(plan.mesh_size()), rng);
  std::vector<T> m(f.size()), v(n);
  plan.spread({View<const T>(q)}, {View<T>(m)});
  plan.interp({View<const T>(f)}, {View<T>(v)});
  double lhs = 0, rhs = 0, scale = 0;
  for (std::size_t i = 0; i < f.size(); ++i) lhs += static_cast<double>(m[i]) * f[i];
  for (std::size_t p = 0; p < n; ++p) {
    rhs += static_cast<double>(q[p]) * v[p];
    scale += std::fabs(static_cast<double>(q[p]));
  }
  EXPECT_NEAR(lhs, rhs, tol * scale) << "<spread(q), f> = " << lhs << ", <q, interp(f)> = " << rhs;
}

TEST_P(InvariantTest, SpreadIsTheAdjointOfInterp) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    for (BoundaryKind kind : all_boundaries()) {
      check_adjoint<T, 2>(bc_, kernel_, kind, {23, 17}, tol(), rng_);
      check_adjoint<T, 3>(bc_, kernel_, kind, {11, 9, 13}, tol(), rng_);
    }
  });
}

// ---------------------------------------------------------------------------------
// Moments of the spread mesh against those of the particles, on a bounded Keep grid
// with every particle well inside (nothing wraps or folds).
template <class T, int D>
void check_moments(const Variant& bc, const Kernel& kernel, std::array<std::int64_t, D> cells, double tol,
                   std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D");
  const Grid<D> grid = make_grid<D>(cells, BoundaryKind::Keep);
  const int g = kernel.ghost_width();
  MatrixPlan<T, D> plan(grid, kernel, bc);
  const std::size_t n = 4000;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Positions<T, D> pos;
  std::array<double, D> centre{};
  double lmax = 0;
  for (int d = 0; d < D; ++d) {
    pos[d].resize(n);
    const double lo = g + 1.0, hi = static_cast<double>(cells[d]) - g - 1.0;  // in cells
    for (auto& x : pos[d]) x = static_cast<T>(grid.origin[d] + (lo + unit(rng) * (hi - lo)) * grid.spacing[d]);
    centre[d] = grid.origin[d] + 0.5 * box_length(grid, d);
    lmax = std::max(lmax, box_length(grid, d));
  }
  plan.set_points(views_of<T, D>(pos));
  const std::vector<T> q = random_values<T>(n, rng, 0.5, 1.5);  // positive: variances add up
  std::vector<T> m(static_cast<std::size_t>(plan.mesh_size()));
  plan.spread({View<const T>(q)}, {View<T>(m)});

  // mass, first moments, second moments (about the box centre)
  double p0 = 0, m0 = 0, p1[D] = {}, m1[D] = {}, p2[D][D] = {}, m2[D][D] = {};
  for (std::size_t i = 0; i < n; ++i) {
    const double w = q[i];
    p0 += w;
    for (int a = 0; a < D; ++a) {
      const double xa = pos[a][i] - centre[a];
      p1[a] += w * xa;
      for (int b = 0; b < D; ++b) p2[a][b] += w * xa * (pos[b][i] - centre[b]);
    }
  }
  for_each_stored_node<D>(grid, g, [&](std::int64_t i, const std::array<double, D>& x) {
    const double w = m[static_cast<std::size_t>(i)];
    m0 += w;
    for (int a = 0; a < D; ++a) {
      m1[a] += w * (x[a] - centre[a]);
      for (int b = 0; b < D; ++b) m2[a][b] += w * (x[a] - centre[a]) * (x[b] - centre[b]);
    }
  });

  EXPECT_NEAR(m0, p0, tol * p0) << "mass";
  for (int a = 0; a < D; ++a) EXPECT_NEAR(m1[a], p1[a], tol * p0 * lmax) << "first moment " << a;
  const bool interpolating_quadratics = kernel.family() == KernelFamily::MP4;
  for (int a = 0; a < D; ++a)
    for (int b = 0; b < D; ++b) {
      if (interpolating_quadratics) {
        EXPECT_NEAR(m2[a][b], p2[a][b], tol * p0 * lmax * lmax) << "second moment " << a << b;
      } else if (a == b) {
        // A B-spline adds its variance (order/12 h^2; linear s(1-s) h^2) per particle:
        // the check must see that it is not conserved.
        const double h2 = grid.spacing[a] * grid.spacing[a];
        EXPECT_GT(m2[a][a] - p2[a][a], 0.01 * p0 * h2) << "second moment " << a << a << " of " << kernel.name()
                                                        << " should grow by the kernel's variance";
      }
    }
}

TEST_P(InvariantTest, MomentsAreConserved) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    check_moments<T, 2>(bc_, kernel_, {26, 21}, tol(), rng_);
    check_moments<T, 3>(bc_, kernel_, {15, 13, 14}, tol(), rng_);
  });
}

// ---------------------------------------------------------------------------------
// M2P reproduces constant fields (every boundary kind, particles anywhere), linear
// fields (every kernel) and quadratic ones (M'4 only) on a Keep grid.
template <class T, int D>
void check_fields(const Variant& bc, const Kernel& kernel, double tol, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D");
  const std::array<std::int64_t, D> cells = pick<D>({19, 14}, {9, 8, 11});
  const double c = 1.75;
  for (BoundaryKind kind : all_boundaries()) {
    const Grid<D> grid = make_grid<D>(cells, kind);
    MatrixPlan<T, D> plan(grid, kernel, bc);
    const std::size_t n = 1500;
    const Positions<T, D> pos = make_positions<T, D>(grid, Distribution::Seam, n, rng);
    plan.set_points(views_of<T, D>(pos));
    const std::vector<T> f(static_cast<std::size_t>(plan.mesh_size()), static_cast<T>(c));
    std::vector<T> v(n);
    plan.interp({View<const T>(f)}, {View<T>(v)});
    double worst = 0;
    for (T x : v) worst = std::max(worst, std::fabs(x - c));
    EXPECT_LE(worst, 10 * tol * c) << "constant field, " << name(kind);
  }

  const Grid<D> grid = make_grid<D>(cells, BoundaryKind::Keep);
  const int g = kernel.ghost_width();
  MatrixPlan<T, D> plan(grid, kernel, bc);
  const std::size_t n = 1500;
  const Positions<T, D> pos = make_positions<T, D>(grid, Distribution::Uniform, n, rng);
  plan.set_points(views_of<T, D>(pos));
  std::array<double, D> a{}, centre{};
  for (int d = 0; d < D; ++d) {
    a[d] = 0.5 + d;
    centre[d] = grid.origin[d] + 0.5 * box_length(grid, d);
  }
  const auto linear = [&](const std::array<double, D>& x) {
    double s = 1.0;
    for (int d = 0; d < D; ++d) s += a[d] * (x[d] - centre[d]);
    return s;
  };
  const auto quadratic = [&](const std::array<double, D>& x) {
    double s = 1.0;
    for (int d = 0; d < D; ++d) {
      const double y = x[d] - centre[d];
      s += y * y + y * (x[(d + 1) % D] - centre[(d + 1) % D]) + a[d] * y;
    }
    return s;
  };
  std::vector<T> lin(static_cast<std::size_t>(plan.mesh_size())), quad(lin.size());
  double scale = 0;
  for_each_stored_node<D>(grid, g, [&](std::int64_t i, const std::array<double, D>& x) {
    lin[static_cast<std::size_t>(i)] = static_cast<T>(linear(x));
    quad[static_cast<std::size_t>(i)] = static_cast<T>(quadratic(x));
    scale = std::max({scale, std::fabs(linear(x)), std::fabs(quadratic(x))});
  });
  std::vector<T> vl(n), vq(n);
  plan.interp({View<const T>(lin), View<const T>(quad)}, {View<T>(vl), View<T>(vq)});
  double worst_l = 0, worst_q = 0;
  for (std::size_t p = 0; p < n; ++p) {
    std::array<double, D> x{};
    for (int d = 0; d < D; ++d) x[d] = pos[d][p];
    worst_l = std::max(worst_l, std::fabs(vl[p] - linear(x)));
    worst_q = std::max(worst_q, std::fabs(vq[p] - quadratic(x)));
  }
  EXPECT_LE(worst_l, 10 * tol * scale) << "linear field";
  if (kernel.family() == KernelFamily::MP4)
    EXPECT_LE(worst_q, 10 * tol * scale) << "quadratic field";
  else
    EXPECT_GT(worst_q, 1e-4 * scale) << "a B-spline cannot reproduce a quadratic field";
}

TEST_P(InvariantTest, InterpReproducesPolynomials) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    check_fields<T, 2>(bc_, kernel_, tol(), rng_);
    check_fields<T, 3>(bc_, kernel_, tol(), rng_);
  });
}

// ---------------------------------------------------------------------------------
// One unit particle per cell, all at the same sub-cell offset, on a periodic grid:
// every node receives each 1D weight once per dimension, so the mesh is 1 everywhere.
template <class T, int D>
void check_constant_density(const Variant& bc, const Kernel& kernel, double tol, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D");
  const std::array<std::int64_t, D> cells = pick<D>({21, 10}, {7, 12, 9});
  const Grid<D> grid = make_grid<D>(cells, BoundaryKind::Periodic);
  MatrixPlan<T, D> plan(grid, kernel, bc);
  const std::size_t n = static_cast<std::size_t>(plan.mesh_size());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::array<double, D> offset{};
  for (auto& o : offset) o = unit(rng);
  Positions<T, D> pos;
  for (auto& p : pos) p.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t rest = i;
    for (int d = 0; d < D; ++d) {
      const double k = static_cast<double>(rest % static_cast<std::size_t>(cells[d]));
      rest /= static_cast<std::size_t>(cells[d]);
      pos[d][i] = static_cast<T>(grid.origin[d] + (k + offset[d]) * grid.spacing[d]);
    }
  }
  plan.set_points(views_of<T, D>(pos));
  const std::vector<T> q(n, T(1));
  std::vector<T> m(n);
  plan.spread({View<const T>(q)}, {View<T>(m)});
  double worst = 0;
  for (T x : m) worst = std::max(worst, std::fabs(x - 1.0));
  EXPECT_LE(worst, 10 * tol);
}

TEST_P(InvariantTest, UniformParticlesSpreadToAConstant) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    check_constant_density<T, 2>(bc_, kernel_, tol(), rng_);
    check_constant_density<T, 3>(bc_, kernel_, tol(), rng_);
  });
}

// ---------------------------------------------------------------------------------
// Two spreads with the same thread count give the same bits: the same plan twice, and
// a second plan on the same points.
template <class T, int D>
void check_deterministic(const Variant& bc, const Kernel& kernel, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D");
  const std::array<std::int64_t, D> cells = pick<D>({40, 36}, {18, 16, 20});
  const Grid<D> grid = make_grid<D>(cells, BoundaryKind::Periodic);
  const std::size_t n = 20000;
  const Positions<T, D> pos = make_positions<T, D>(grid, Distribution::Clustered, n, rng);
  const std::vector<T> q0 = random_values<T>(n, rng), q1 = random_values<T>(n, rng);
  const std::vector<T> f = random_values<T>(static_cast<std::size_t>(mesh_size(grid, kernel.ghost_width())), rng);

  auto run = [&](MatrixPlan<T, D>& plan, std::vector<T>& m0, std::vector<T>& m1, std::vector<T>& v) {
    m0.assign(f.size(), T(0));
    m1.assign(f.size(), T(0));
    v.assign(n, T(0));
    plan.spread({View<const T>(q0), View<const T>(q1)}, {View<T>(m0), View<T>(m1)});
    plan.interp({View<const T>(f)}, {View<T>(v)});
  };
  MatrixPlan<T, D> a(grid, kernel, bc), b(grid, kernel, bc);
  a.set_points(views_of<T, D>(pos));
  b.set_points(views_of<T, D>(pos));
  std::vector<T> a0, a1, av, r0, r1, rv, b0, b1, bv;
  run(a, a0, a1, av);
  run(a, r0, r1, rv);
  run(b, b0, b1, bv);
  EXPECT_TRUE(same_bytes(a0, r0) && same_bytes(a1, r1)) << "the same plan spread twice";
  EXPECT_TRUE(same_bytes(av, rv)) << "the same plan interpolated twice";
  EXPECT_TRUE(same_bytes(a0, b0) && same_bytes(a1, b1)) << "two plans on the same points";
  EXPECT_TRUE(same_bytes(av, bv)) << "two plans on the same points (interp)";
}

TEST_P(InvariantTest, CpuSpreadIsBitwiseDeterministic) {
  if (bc_.exec.backend != Backend::Cpu) GTEST_SKIP() << "determinism is promised by the CPU backend only";
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    check_deterministic<T, 2>(bc_, kernel_, rng_);
    check_deterministic<T, 3>(bc_, kernel_, rng_);
  });
}

// Deterministic spread: identical bits across repeated runs, a permuted particle order
// (a different binning order and chunking) and one pass of 3 properties against three
// single-property calls (a different launch: other shared memory, other pass widths).
template <class T, int D>
void check_bitwise(const Variant& variant, std::array<std::int64_t, D> cells, double per_cell, Distribution dist) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<D> grid = make_grid<D>(cells, BoundaryKind::Periodic);
  double volume = 1;
  for (auto c : cells) volume *= static_cast<double>(c);
  const std::size_t n = scaled(static_cast<std::size_t>(per_cell * volume));
  const auto pos = make_positions<T, D>(grid, dist, n, rng);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::array<std::vector<T>, 3> q;
  for (auto& v : q) {
    v.resize(n);
    for (auto& x : v) x = static_cast<T>(unit(rng));
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);

  auto run = [&](bool permuted, bool one_pass) {
    MatrixPlan<T, D> plan(grid, Kernel::mp4(), variant);
    std::array<std::vector<T>, D> p = pos;
    std::array<std::vector<T>, 3> qq = q;
    if (permuted) {
      for (int d = 0; d < D; ++d)
        for (std::size_t i = 0; i < n; ++i) p[d][i] = pos[d][order[i]];
      for (int j = 0; j < 3; ++j)
        for (std::size_t i = 0; i < n; ++i) qq[j][i] = q[j][order[i]];
    }
    typename Plan<T, D>::Positions views;
    for (int d = 0; d < D; ++d) views[d] = p[d];
    plan.set_points(views);
    std::array<std::vector<T>, 3> meshes;
    for (auto& m : meshes) m.assign(static_cast<std::size_t>(plan.mesh_size()), T(7));
    if (one_pass) {
      plan.spread({qq[0], qq[1], qq[2]}, {meshes[0], meshes[1], meshes[2]});
    } else {
      for (int j = 0; j < 3; ++j) plan.spread({qq[j]}, {meshes[j]});
    }
    return meshes;
  };
  const auto first = run(false, true);
  for (const auto& variant : {run(false, true), run(true, true), run(false, false), run(true, false)})
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(0, std::memcmp(first[j].data(), variant[j].data(), first[j].size() * sizeof(T)))
          << "property " << j << ": deterministic spread differs between runs";
}

// The deterministic mode's promise: the same bits for any particle order and however the
// properties are split over calls. The variants that have the mode take it.
class DeterministicSpreadTest : public VariantTest {};

TEST_P(DeterministicSpreadTest, SameBitsForAnyOrderAndAnyCalls) {
  check_bitwise<float, 3>(bc_, {32, 32, 32}, 8.0, Distribution::Uniform);
  check_bitwise<float, 3>(bc_, {16, 16, 16}, 100.0, Distribution::Clustered);
  check_bitwise<double, 3>(bc_, {20, 20, 20}, 4.0, Distribution::Uniform);
  check_bitwise<float, 2>(bc_, {128, 96}, 16.0, Distribution::Clustered);
}

INSTANTIATE_TEST_SUITE_P(Backends, DeterministicSpreadTest, ::testing::ValuesIn(variants_named<Options>({"CudaDeterministic"})),
                         variant_name);

// ---------------------------------------------------------------------------------
// Half of the particles on the top plane of a folding bounded axis, half two planes
// below, two threads. Slabs one plane wide (the linear kernel) would let the fold of node
// cells+1 onto cells-1 race with the same-colour slab below and lose updates in nearly
// every spread; the CPU backend's slabs are at least two planes wide.
template <int D>
void check_folded_top_plane(const Variant& bc, const Kernel& kernel, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D " + kernel.name());
  const Grid<D> grid = make_grid<D>(pick<D>({16, 16}, {6, 5, 16}), BoundaryKind::Fold);
  Options options = options_of<Options>(bc);
  if (bc.exec.backend == Backend::Cpu) options.num_threads = 2;  // 8 slabs: the two heavy ones share a colour
  MatrixPlan<double, D> plan(grid, kernel, options);
  const std::size_t n = 30000;
  Positions<double, D> pos = make_positions<double, D>(grid, Distribution::Uniform, n, rng);
  const double h = grid.spacing[D - 1], top = grid.origin[D - 1] + box_length(grid, D - 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) pos[D - 1][i] = (i % 2) ? top : top - (2.0 - unit(rng)) * h;
  plan.set_points(views_of<double, D>(pos));
  const std::vector<double> q = random_values<double>(n, rng, 0.5, 1.5);
  const std::vector<double> ref = reference_spread<D>(grid, kernel, pointers<D>(pos), q);
  int wrong = 0;
  std::vector<double> m(ref.size());
  for (int rep = 0; rep < 50; ++rep) {
    plan.spread({View<const double>(q)}, {View<double>(m)});
    if (!(rel_l2<double>(View<const double>(m), ref) <= 1e-12)) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "spreads of 50 that differ from the reference";
}

class ThreadedSpreadTest : public ::testing::TestWithParam<Variant> {};

TEST_P(ThreadedSpreadTest, FoldedTopPlaneHasNoRace) {
  const Variant bc = GetParam();
  PMKIT_REQUIRE_VARIANT(bc);
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const Kernel& k : {Kernel::linear(), Kernel::tsc(), Kernel::mp4()}) check_folded_top_plane<2>(bc, k, rng);
  check_folded_top_plane<3>(bc, Kernel::linear(), rng);
}

INSTANTIATE_TEST_SUITE_P(Backends, ThreadedSpreadTest, variant_values<Options>(),
                         variant_name);

INSTANTIATE_TEST_SUITE_P(AllKernels, InvariantTest, all_kernel_cases(), kernel_case_name);

}  // namespace
}  // namespace pmkit::test
