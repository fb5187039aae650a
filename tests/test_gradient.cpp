// Gradients at the particles (Plan::interp_gradient) and their adjoint
// (Plan::spread_gradient) on every backend, on fresh random inputs: against the float64
// reference (every kernel, float and double, 2D and 3D, every boundary kind, faces, the
// periodic seam, clustered particles and empty cells, interleaved and separate
// components, more meshes than one stencil pass takes); against central differences of
// interp in the particle position; the convergence order on a smooth periodic field;
// adjointness; exactness on linear fields; the zero normal gradient on a folding face;
// and spread_gradient's reproducibility, CUDA's deterministic mode included.
#include "matrix_plan.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

// Against the reference, relative L2: the derivative sums cancel in part (a particle's
// weight derivatives sum to zero along each axis), so their rounding error relative to
// the result is a few times interp's.
template <class T>
constexpr double gradient_tolerance() {
  return 4 * tolerance<T>();
}

// D views of one interleaved array (x0 y0 [z0] x1 ...) or of D separate arrays.
template <class T, int D>
std::vector<View<T>> interleaved_views(std::vector<T>& a) {
  const std::size_t n = a.size() / D;
  std::vector<View<T>> v;
  for (int d = 0; d < D; ++d) v.emplace_back(a.data() + d, n, D);
  return v;
}
template <class T>
std::vector<View<T>> separate_views(std::vector<std::vector<T>>& arrays) {
  std::vector<View<T>> v;
  for (auto& a : arrays) v.emplace_back(a);
  return v;
}
template <class T>
std::vector<View<const T>> const_views(const std::vector<View<T>>& v) {
  return std::vector<View<const T>>(v.begin(), v.end());
}

// Runs a reference function f(inputs, outputs) on double arrays: `count` outputs of
// `length` values each.
template <class F>
std::vector<std::vector<double>> run_reference(const std::vector<std::vector<double>>& inputs, std::size_t count,
                                               std::size_t length, F&& f) {
  std::vector<std::vector<double>> out(count, std::vector<double>(length));
  std::vector<const double*> in_pointers;
  std::vector<double*> out_pointers;
  for (auto& a : inputs) in_pointers.push_back(a.data());
  for (auto& a : out) out_pointers.push_back(a.data());
  f(in_pointers.data(), out_pointers.data());
  return out;
}

// The reference's interp_gradient of `meshes` (D components per mesh, as the plan's).
template <int D>
std::vector<std::vector<double>> reference_gradients(const Grid<D>& grid, const Kernel& kernel,
                                                     const std::array<const double*, D>& positions, std::size_t n,
                                                     const std::vector<std::vector<double>>& meshes) {
  const int count = static_cast<int>(meshes.size());
  return run_reference(meshes, D * meshes.size(), n, [&](const double* const* in, double* const* out) {
    reference::interp_gradient<D>(grid, kernel, n, positions, count, in, out);
  });
}
// The reference's spread_gradient of `vectors` (D components per mesh).
template <int D>
std::vector<std::vector<double>> reference_gradient_spread(const Grid<D>& grid, const Kernel& kernel,
                                                           const std::array<const double*, D>& positions,
                                                           std::size_t n,
                                                           const std::vector<std::vector<double>>& vectors) {
  const int count = static_cast<int>(vectors.size() / D);
  const auto size = static_cast<std::size_t>(mesh_size(grid, kernel.ghost_width()));
  return run_reference(vectors, vectors.size() / D, size, [&](const double* const* in, double* const* out) {
    reference::spread_gradient<D>(grid, kernel, n, positions, count, in, out);
  });
}

template <class T>
std::vector<std::vector<double>> to_double_all(const std::vector<View<T>>& views) {
  std::vector<std::vector<double>> out;
  for (const auto& v : views) out.push_back(to_double<T>(View<const T>(v)));
  return out;
}

// A plan on make_grid(cells, boundary) with a random mesh of its size.
template <class T, int D>
struct PlanAndField {
  Grid<D> grid;
  MatrixPlan<T, D> plan;
  std::vector<T> field;

  PlanAndField(const Variant& bc, const Kernel& kernel, BoundaryKind boundary,
               const std::array<std::int64_t, D>& cells, std::mt19937_64& rng)
      : grid(make_grid<D>(cells, boundary)),
        plan(grid, kernel, bc),
        field(random_values<T>(static_cast<std::size_t>(plan.mesh_size()), rng)) {}
};

// Nodes of a particle's stencil, S^D.
template <int D>
int stencil_nodes(const Kernel& kernel) {
  int nodes = 1;
  for (int d = 0; d < D; ++d) nodes *= kernel.support();
  return nodes;
}

// ---------------------------------------------------------------------------------
// Against the reference.

// One list for 2D and 3D, densities (particles per cell) times `density`: odd sizes;
// a small mesh where the widest kernels wrap onto themselves and fold on a bounded axis
// of just the cells they need; sparse particles that leave cells empty.
template <int D>
std::vector<Scenario<D>> gradient_scenarios(const std::array<std::int64_t, D>& odd,
                                            const std::array<std::int64_t, D>& small,
                                            const std::array<std::int64_t, D>& mid, double density) {
  using B = BoundaryKind;
  using Dist = Distribution;
  const double d = density;
  return {{odd, B::Periodic, Dist::Uniform, d},      {odd, B::Fold, Dist::Faces, 0.5 * d},
          {odd, B::Keep, Dist::Clustered, d},        {odd, B::MixedFold, Dist::Seam, 0.5 * d},
          {odd, B::MixedKeep, Dist::Faces, 0.5 * d}, {small, B::Periodic, Dist::Seam, 20 * d},
          {small, B::Fold, Dist::Uniform, 30 * d},   {mid, B::Keep, Dist::Uniform, 0.05 * d},
          {mid, B::Periodic, Dist::Clustered, 10 * d}};
}

// Five meshes: more than one stencil pass of the CPU backend takes.
constexpr int kMeshes = 5;

template <class T, int D>
void check_scenario(const Variant& bc, const Kernel& kernel, const Scenario<D>& sc, std::mt19937_64& rng) {
  const Grid<D> grid = make_grid<D>(sc.cells, sc.boundary);
  const std::size_t n = particle_count(sc);
  SCOPED_TRACE(describe(sc, n));
  const T nan = std::numeric_limits<T>::quiet_NaN();

  MatrixPlan<T, D> plan(grid, kernel, bc);
  const auto size = static_cast<std::size_t>(plan.mesh_size());
  const Positions<T, D> pos = make_positions<T, D>(grid, sc.distribution, n, rng);
  plan.set_points(views_of<T, D>(pos));
  const auto xd = positions_as_double<T, D>(views_of<T, D>(pos));

  // interp_gradient: mesh 0's components interleaved in one array, the others' separate.
  std::vector<std::vector<T>> fields(kMeshes);
  std::vector<std::vector<double>> fields_d(kMeshes);
  for (int j = 0; j < kMeshes; ++j) {
    fields[j] = random_values<T>(size, rng);
    fields_d[j] = to_double<T>(View<const T>(fields[j]));
  }
  const auto want = reference_gradients<D>(grid, kernel, pointers<D>(xd), n, fields_d);
  std::vector<View<const T>> fv;
  for (auto& f : fields) fv.emplace_back(f);
  std::vector<T> interleaved(D * n, nan);
  std::vector<std::vector<T>> separate(D * (kMeshes - 1), std::vector<T>(n, nan));
  std::vector<View<T>> out = interleaved_views<T, D>(interleaved);
  for (auto& v : separate_views<T>(separate)) out.push_back(v);
  plan.interp_gradient(fv, out);
  for (int k = 0; k < D * kMeshes; ++k)
    EXPECT_LE(rel_l2<T>(View<const T>(out[k]), want[k]), gradient_tolerance<T>())
        << "interp_gradient of mesh " << k / D << ", component " << k % D;

  // Mesh 0 alone into D separate arrays: the interleaved result, to the bit on the CPU
  // (the same sums in the same order).
  {
    std::vector<std::vector<T>> alone(D, std::vector<T>(n, nan));
    std::vector<View<T>> alone_views = separate_views<T>(alone);
    plan.interp_gradient({fv[0]}, alone_views);
    for (int d = 0; d < D; ++d) {
      std::vector<T> component(n);
      for (std::size_t i = 0; i < n; ++i) component[i] = interleaved[D * i + d];
      if (bc.exec.backend == Backend::Cpu)
        EXPECT_TRUE(same_bytes(alone[d], component)) << "interleaved and separate outputs differ, component " << d;
      else
        EXPECT_LE(rel_l2<T>(View<const T>(alone[d]), want[d]), gradient_tolerance<T>()) << "component " << d;
    }
    // The same call into one interleaved array: the same bits on every backend.
    std::vector<T> packed(D * n, nan);
    plan.interp_gradient({fv[0]}, interleaved_views<T, D>(packed));
    for (int d = 0; d < D; ++d) {
      std::vector<T> component(n);
      for (std::size_t i = 0; i < n; ++i) component[i] = packed[D * i + d];
      EXPECT_TRUE(same_bytes(alone[d], component)) << "one mesh, interleaved and separate outputs differ, component " << d;
    }
  }

  // spread_gradient, Overwrite onto meshes of NaN: mesh 0's vectors interleaved.
  std::vector<T> vec_interleaved = random_values<T>(D * n, rng);
  std::vector<std::vector<T>> vec_separate(D * (kMeshes - 1));
  for (auto& v : vec_separate) v = random_values<T>(n, rng);
  std::vector<View<T>> vectors = interleaved_views<T, D>(vec_interleaved);
  for (auto& v : separate_views<T>(vec_separate)) vectors.push_back(v);
  const auto spread_want = reference_gradient_spread<D>(grid, kernel, pointers<D>(xd), n, to_double_all(vectors));
  std::vector<std::vector<T>> meshes(kMeshes, std::vector<T>(size, nan));
  plan.spread_gradient(const_views(vectors), separate_views<T>(meshes), Accumulate::Overwrite);
  for (int j = 0; j < kMeshes; ++j)
    EXPECT_LE(rel_l2<T>(View<const T>(meshes[j]), spread_want[j]), gradient_tolerance<T>())
        << "spread_gradient (Overwrite) of mesh " << j;

  // Add, one mesh, onto values already there.
  {
    std::vector<T> mesh = random_values<T>(size, rng);
    std::vector<double> sum = to_double<T>(View<const T>(mesh));
    for (std::size_t i = 0; i < size; ++i) sum[i] += spread_want[kMeshes - 1][i];
    const std::vector<View<const T>> last(vectors.end() - D, vectors.end());
    plan.spread_gradient(last, {View<T>(mesh)}, Accumulate::Add);
    EXPECT_LE(rel_l2<T>(View<const T>(mesh), sum), gradient_tolerance<T>()) << "spread_gradient (Add)";
  }
}

class GradientTest : public KernelCaseTest {};

TEST_P(GradientTest, InterpAndSpreadGradientMatchReference) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    for (const auto& sc : gradient_scenarios<2>({45, 31}, {4, 7}, {16, 13}, 1.0))
      check_scenario<T, 2>(bc_, kernel_, sc, rng_);
    for (const auto& sc : gradient_scenarios<3>({21, 18, 15}, {5, 4, 6}, {9, 12, 7}, 0.1))
      check_scenario<T, 3>(bc_, kernel_, sc, rng_);
  });
}

// ---------------------------------------------------------------------------------
// Adjointness: <spread_gradient(v), f> = <v, interp_gradient(f)>, both sides summed in
// double, to rounding relative to the sums of the terms' magnitudes. Ghosts fold onto
// their mirrors in spread_gradient exactly as interp_gradient reads them.

template <class T, int D>
void check_adjoint(const Variant& bc, const Kernel& kernel, BoundaryKind boundary,
                   const std::array<std::int64_t, D>& cells, Distribution dist, std::size_t n, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D, " + name(boundary) + ", " + name(dist) + ", " + std::to_string(n) +
               " particles");
  PlanAndField<T, D> setup(bc, kernel, boundary, cells, rng);
  const std::vector<T>& f = setup.field;
  const std::size_t size = f.size();
  const Positions<T, D> pos = make_positions<T, D>(setup.grid, dist, n, rng);
  setup.plan.set_points(views_of<T, D>(pos));

  std::vector<std::vector<T>> v(D), g(D, std::vector<T>(n));
  for (auto& c : v) c = random_values<T>(n, rng);
  std::vector<T> m(size);
  setup.plan.spread_gradient(const_views(separate_views<T>(v)), {View<T>(m)});
  setup.plan.interp_gradient({View<const T>(f)}, separate_views<T>(g));

  double mesh_side = 0, mesh_scale = 0, particle_side = 0, particle_scale = 0;
  for (std::size_t i = 0; i < size; ++i) {
    mesh_side += double(m[i]) * double(f[i]);
    mesh_scale += std::fabs(double(m[i]) * double(f[i]));
  }
  for (int d = 0; d < D; ++d)
    for (std::size_t i = 0; i < n; ++i) {
      particle_side += double(v[d][i]) * double(g[d][i]);
      particle_scale += std::fabs(double(v[d][i]) * double(g[d][i]));
    }
  EXPECT_LE(std::fabs(mesh_side - particle_side), gradient_tolerance<T>() * (mesh_scale + particle_scale))
      << "<spread_gradient(v), f> = " << mesh_side << ", <v, interp_gradient(f)> = " << particle_side;
}

TEST_P(GradientTest, SpreadGradientIsTheAdjointOfInterpGradient) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    for (BoundaryKind b : all_boundaries()) {
      check_adjoint<T, 2>(bc_, kernel_, b, {11, 9}, Distribution::Faces, 400, rng_);
      check_adjoint<T, 2>(bc_, kernel_, b, {5, 4}, Distribution::Seam, 300, rng_);
      check_adjoint<T, 3>(bc_, kernel_, b, {7, 6, 5}, Distribution::Clustered, 300, rng_);
    }
  });
}

// ---------------------------------------------------------------------------------
// Exactness on linear fields: every kernel reproduces linear functions (its weights
// sum to one and their first moment is the particle's position), so the gradient of a
// linear field is exact wherever the stencil reads the field itself: on bounded axes
// with Keep ghosts holding the linear function, and along periodic axes where the field
// is constant. The error bound is rounding: per component eps times the sum over the
// stencil of |dW/dx_d| |f|, at most 2 S^D max|f| / h_d.

template <class T, int D>
void check_linear_field(const Variant& bc, const Kernel& kernel, BoundaryKind boundary,
                        const std::array<std::int64_t, D>& cells, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D, " + name(boundary));
  const Grid<D> grid = make_grid<D>(cells, boundary);
  MatrixPlan<T, D> plan(grid, kernel, bc);
  const auto shape = plan.mesh_shape();
  const auto size = static_cast<std::size_t>(plan.mesh_size());
  const int ghost = kernel.ghost_width();
  std::uniform_real_distribution<double> coefficient(-2.0, 2.0);
  double slope[D], centre[D];
  for (int d = 0; d < D; ++d) {
    const bool periodic = grid.boundary[d] == Boundary::Periodic;
    slope[d] = periodic ? 0.0 : coefficient(rng);
    centre[d] = grid.origin[d] + 0.5 * box_length(grid, d);
  }
  const double offset = coefficient(rng);
  // f at every stored node, ghosts included, at the node's logical position.
  std::vector<T> f(size);
  double largest = 0;
  for (std::size_t i = 0; i < size; ++i) {
    std::size_t rest = i;
    double value = offset;
    for (int d = 0; d < D; ++d) {
      const auto index = static_cast<std::int64_t>(rest % static_cast<std::size_t>(shape[d]));
      rest /= static_cast<std::size_t>(shape[d]);
      const bool periodic = grid.boundary[d] == Boundary::Periodic;
      const double x = grid.origin[d] + static_cast<double>(periodic ? index : index - ghost) * grid.spacing[d];
      value += slope[d] * (x - centre[d]);
    }
    f[i] = static_cast<T>(value);
    largest = std::max(largest, std::fabs(double(f[i])));
  }
  const std::size_t n = 600;
  for (Distribution dist : {Distribution::Uniform, Distribution::Faces, Distribution::Seam}) {
    SCOPED_TRACE(name(dist));
    const Positions<T, D> pos = make_positions<T, D>(grid, dist, n, rng);
    plan.set_points(views_of<T, D>(pos));
    std::vector<std::vector<T>> g(D, std::vector<T>(n));
    plan.interp_gradient({View<const T>(f)}, separate_views<T>(g));
    for (int d = 0; d < D; ++d) {
      const double bound =
          2.0 * stencil_nodes<D>(kernel) * std::numeric_limits<T>::epsilon() * largest / grid.spacing[d];
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(g[d][i]) - slope[d]));
      EXPECT_LE(worst, bound) << "component " << d << " of the gradient of a linear field of slope " << slope[d];
    }
  }
}

TEST_P(GradientTest, GradientOfALinearFieldIsExact) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    for (BoundaryKind b : {BoundaryKind::Keep, BoundaryKind::MixedKeep, BoundaryKind::Periodic}) {
      check_linear_field<T, 2>(bc_, kernel_, b, {9, 7}, rng_);
      check_linear_field<T, 3>(bc_, kernel_, b, {6, 5, 7}, rng_);
    }
  });
}

// ---------------------------------------------------------------------------------
// A folding face: the folded interpolant is even about the face, so a particle on the
// face has a zero gradient across it (to rounding; the other components are not zero).
// The linear kernel's interpolant has a kink there instead: its derivative from above
// (the backends' and the reference's convention at a node) is checked against the
// reference in InterpAndSpreadGradientMatchReference.

template <class T, int D>
void check_fold_face(const Variant& bc, const Kernel& kernel, BoundaryKind boundary,
                     const std::array<std::int64_t, D>& cells, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D, " + name(boundary));
  PlanAndField<T, D> setup(bc, kernel, boundary, cells, rng);
  const Grid<D>& grid = setup.grid;
  const std::size_t n = 200;
  for (int axis = 0; axis < D; ++axis) {
    if (grid.boundary[axis] == Boundary::Periodic) continue;
    Positions<T, D> pos = make_positions<T, D>(grid, Distribution::Uniform, n, rng);
    for (std::size_t i = 0; i < n; ++i)  // half on the lower face, half on the upper
      pos[axis][i] = static_cast<T>(grid.origin[axis] + (i % 2 == 0 ? 0.0 : box_length(grid, axis)));
    setup.plan.set_points(views_of<T, D>(pos));
    std::vector<std::vector<T>> g(D, std::vector<T>(n));
    setup.plan.interp_gradient({View<const T>(setup.field)}, separate_views<T>(g));
    // Rounding: the field's values lie in [-1, 1].
    const double bound = 2.0 * stencil_nodes<D>(kernel) * std::numeric_limits<T>::epsilon() / grid.spacing[axis];
    double worst = 0, tangential = 0;
    for (std::size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(double(g[axis][i])));
      for (int d = 0; d < D; ++d)
        if (d != axis) tangential = std::max(tangential, std::fabs(double(g[d][i])));
    }
    EXPECT_LE(worst, bound) << "the gradient across folding face " << axis << " is not zero";
    EXPECT_GT(tangential, 100 * bound) << "the gradient along face " << axis << " vanishes too";
  }
}

TEST_P(GradientTest, FoldingFaceHasZeroNormalGradient) {
  if (kernel_.support() == 2) GTEST_SKIP() << "the linear kernel's folded interpolant has a kink on the face";
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    for (BoundaryKind b : {BoundaryKind::Fold, BoundaryKind::MixedFold}) {
      check_fold_face<T, 2>(bc_, kernel_, b, {10, 8}, rng_);
      check_fold_face<T, 3>(bc_, kernel_, b, {6, 7, 5}, rng_);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllKernels, GradientTest, all_kernel_cases(), kernel_case_name);

// ---------------------------------------------------------------------------------
// Tests over every backend and kernel (CUDA's deterministic mode too), in double but for
// SpreadGradientIsReproducible, which takes float and double.
class GradientDoubleTest : public KernelCaseTest {};

// interp_gradient against central differences of interp in the particle position, on
// every boundary kind, particles in every cell including those whose stencils reach the
// ghosts (a folded ghost's sign is checked here). Particles stay 1e-3 cells off the
// nodes, where the linear kernel's derivative jumps, and off the faces, so that x +- delta
// is a valid position; delta = 1e-6 cells leaves a difference error near 1e-9 relative.
template <int D>
void check_finite_differences(const Variant& bc, const Kernel& kernel, BoundaryKind boundary,
                              const std::array<std::int64_t, D>& cells, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D, " + name(boundary));
  PlanAndField<double, D> setup(bc, kernel, boundary, cells, rng);
  const Grid<D>& grid = setup.grid;
  MatrixPlan<double, D>& plan = setup.plan;
  const std::vector<double>& f = setup.field;
  const std::size_t n = 500;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Positions<double, D> pos;
  for (int d = 0; d < D; ++d) {
    pos[d].resize(n);
    for (auto& x : pos[d]) {
      const double cell = std::floor(unit(rng) * static_cast<double>(grid.cells[d]));
      x = grid.origin[d] + (cell + 1e-3 + 0.998 * unit(rng)) * grid.spacing[d];
    }
  }
  plan.set_points(views_of<double, D>(pos));
  std::vector<std::vector<double>> g(D, std::vector<double>(n));
  plan.interp_gradient({View<const double>(f)}, separate_views<double>(g));
  for (int d = 0; d < D; ++d) {
    const double delta = 1e-6 * grid.spacing[d];
    std::vector<double> up(n), down(n), fd(n);
    for (const double sign : {1.0, -1.0}) {
      Positions<double, D> moved = pos;
      for (auto& x : moved[d]) x += sign * delta;
      plan.set_points(views_of<double, D>(moved));
      plan.interp({View<const double>(f)}, {View<double>(sign > 0 ? up : down)});
    }
    for (std::size_t i = 0; i < n; ++i) fd[i] = (up[i] - down[i]) / (2 * delta);
    EXPECT_LE(rel_l2<double>(View<const double>(g[d]), fd), 1e-7) << "component " << d;
  }
}

TEST_P(GradientDoubleTest, InterpGradientIsTheDerivativeOfInterp) {
  SCOPED_TRACE(seed_note(seed_));
  for (BoundaryKind b : all_boundaries()) {
    check_finite_differences<2>(bc_, kernel_, b, {13, 10}, rng_);
    check_finite_differences<3>(bc_, kernel_, b, {7, 6, 5}, rng_);
  }
}

// Convergence of the gradient of the interpolant of mesh samples f(x_n) to f's gradient,
// f = sin(2 pi x + a) cos(2 pi y + b) on the periodic unit square, at 4000 random
// positions and 32, 64, 128 and 256 cells per side. With M_k(u) = sum_n (n - u)^k W(u - n)
// the kernel's moments (periodic in u), the Taylor expansion of the samples gives
//   d/dx (I f) - f' = sum_{k >= 2} [h^k M_k(u) f^(k+1) / k! + h^(k-1) M_k'(u) f^(k) / k!],
// M_1 being zero for every kernel (all reproduce linear functions). So:
//  - linear (B-spline 2): M_2(u) = s (1 - s) varies with u, M_2' = 1 - 2s: order 1 at
//    random positions (the gradient is the slope of the cell, second order only at cell
//    centres);
//  - B-splines of order p >= 3 (TSC included): sum_n n^k W(u - n) is a polynomial of
//    degree k for k < p, so M_2 is a constant (p / 12) and M_2' = 0; the h^2 terms of
//    k = 2 and 3 remain: order 2, the order of their interpolation;
//  - M'4: reproduces quadratics (M_2 = 0) but not cubics, so M_3 varies with u (it is
//    zero at the nodes, where M'4 interpolates, and not everywhere) and h^2 M_3' f''' / 6
//    remains: order 2, one less than its interpolation's 3.
int gradient_order(const Kernel& kernel) { return kernel.support() == 2 ? 1 : 2; }

TEST_P(GradientDoubleTest, GradientConvergesAtTheOrderTheoryGives) {
  SCOPED_TRACE(seed_note(seed_));
  constexpr double kTwoPi = 6.283185307179586;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double a = kTwoPi * unit(rng_), b = kTwoPi * unit(rng_);
  const std::size_t n = 4000;
  std::vector<double> x(n), y(n), exact_x(n), exact_y(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = unit(rng_);
    y[i] = unit(rng_);
    exact_x[i] = kTwoPi * std::cos(kTwoPi * x[i] + a) * std::cos(kTwoPi * y[i] + b);
    exact_y[i] = -kTwoPi * std::sin(kTwoPi * x[i] + a) * std::sin(kTwoPi * y[i] + b);
  }
  std::vector<double> log_h, log_error;
  for (std::int64_t cells : {32, 64, 128, 256}) {
    const double h = 1.0 / static_cast<double>(cells);
    MatrixPlan<double, 2> plan(Grid<2>::periodic({cells, cells}, h), kernel_, bc_);
    std::vector<double> f(static_cast<std::size_t>(plan.mesh_size()));
    for (std::int64_t j = 0; j < cells; ++j)
      for (std::int64_t i = 0; i < cells; ++i)
        f[static_cast<std::size_t>(j * cells + i)] = std::sin(kTwoPi * i * h + a) * std::cos(kTwoPi * j * h + b);
    plan.set_points({View<const double>(x), View<const double>(y)});
    std::vector<double> gx(n), gy(n);
    plan.interp_gradient({View<const double>(f)}, {View<double>(gx), View<double>(gy)});
    double e2 = 0, w2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      e2 += (gx[i] - exact_x[i]) * (gx[i] - exact_x[i]) + (gy[i] - exact_y[i]) * (gy[i] - exact_y[i]);
      w2 += exact_x[i] * exact_x[i] + exact_y[i] * exact_y[i];
    }
    log_h.push_back(std::log(h));
    log_error.push_back(0.5 * std::log(e2 / w2));
  }
  // The least-squares slope of log(error) against log(h).
  double mh = 0, me = 0;
  for (std::size_t k = 0; k < log_h.size(); ++k) {
    mh += log_h[k] / log_h.size();
    me += log_error[k] / log_h.size();
  }
  double sxy = 0, sxx = 0;
  for (std::size_t k = 0; k < log_h.size(); ++k) {
    sxy += (log_h[k] - mh) * (log_error[k] - me);
    sxx += (log_h[k] - mh) * (log_h[k] - mh);
  }
  const double order = sxy / sxx;
  std::ostringstream errors;
  for (double e : log_error) errors << " " << std::exp(e);
  EXPECT_NEAR(order, gradient_order(kernel_), 0.25)
      << "measured order " << order << "; relative L2 errors at 32..256 cells:" << errors.str();
}

// spread_gradient gives the same bits on every run with the same thread count (CUDA: in
// deterministic mode), on dense clustered particles where many reach each node.
TEST_P(GradientDoubleTest, SpreadGradientIsReproducible) {
  SCOPED_TRACE(seed_note(seed_));
  if (bc_.exec.backend == Backend::Cuda && !bc_.deterministic) GTEST_SKIP() << "CUDA's fast mode sums in any order";
  const Grid<3> grid = make_grid<3>({12, 10, 9}, BoundaryKind::MixedFold);
  for (Precision p : {Precision::Float, Precision::Double})
    with_precision(p, [&](auto tag) {
      using T = decltype(tag);
      SCOPED_TRACE(name(p));
      MatrixPlan<T, 3> plan(grid, kernel_, bc_);
      const std::size_t n = 20000;
      const Positions<T, 3> pos = make_positions<T, 3>(grid, Distribution::Clustered, n, rng_);
      plan.set_points(views_of<T, 3>(pos));
      std::vector<T> v = random_values<T>(3 * n, rng_);
      const auto vectors = const_views(interleaved_views<T, 3>(v));
      const auto size = static_cast<std::size_t>(plan.mesh_size());
      std::vector<T> first(size), second(size);
      plan.spread_gradient(vectors, {View<T>(first)});
      plan.spread_gradient(vectors, {View<T>(second)});
      EXPECT_TRUE(same_bytes(first, second)) << "two spread_gradient calls differ";
      MatrixPlan<T, 3> other(grid, kernel_, bc_);
      other.set_points(views_of<T, 3>(pos));
      other.spread_gradient(vectors, {View<T>(second)});
      EXPECT_TRUE(same_bytes(first, second)) << "a second plan's spread_gradient differs";
      const auto xd = positions_as_double<T, 3>(views_of<T, 3>(pos));
      std::vector<View<T>> views = interleaved_views<T, 3>(v);
      const auto want = reference_gradient_spread<3>(grid, kernel_, pointers<3>(xd), n, to_double_all(views));
      EXPECT_LE(rel_l2<T>(View<const T>(first), want[0]), gradient_tolerance<T>());
    });
}

INSTANTIATE_TEST_SUITE_P(AllKernels, GradientDoubleTest,
                         ::testing::Combine(variant_values<Options>(),
                                            ::testing::ValuesIn(all_kernels()), ::testing::Values(Precision::Double)),
                         kernel_case_name);

}  // namespace
}  // namespace pmkit::test
