// P2M and M2P of every backend against the float64 reference (pmkit::reference), on
// fresh random inputs: every kernel, float and double, 2D and 3D, every boundary kind,
// odd mesh sizes, densities from 0.01 to 100 particles per cell, clustered particles,
// particles on cell faces and on the periodic seam, five properties at once (an AoS
// vector of three components plus two scalars), AoS positions, Overwrite and Add.
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "reference_cases.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

// Odd sizes, a small mesh where the widest kernels wrap onto themselves (and where a
// bounded axis has just the cells a folding B-spline of order 8 needs), a mid one.
template <int D>
std::vector<Scenario<D>> scenarios();

template <>
std::vector<Scenario<2>> scenarios<2>() {
  using B = BoundaryKind;
  using Dist = Distribution;
  const std::array<std::int64_t, 2> odd{45, 31}, small{4, 7}, mid{16, 13};
  return {
      {odd, B::Periodic, Dist::Uniform, 0.01}, {odd, B::Periodic, Dist::Uniform, 1.0},
      {odd, B::Fold, Dist::Uniform, 0.3},      {odd, B::Keep, Dist::Clustered, 2.0},
      {odd, B::MixedFold, Dist::Seam, 1.0},    {odd, B::MixedKeep, Dist::Faces, 1.0},
      {odd, B::Periodic, Dist::Seam, 0.5},     {odd, B::Fold, Dist::Faces, 0.5},
      {small, B::Periodic, Dist::Uniform, 100}, {small, B::Fold, Dist::Uniform, 100},
      {small, B::Keep, Dist::Seam, 20},        {small, B::MixedFold, Dist::Clustered, 30},
      {mid, B::Periodic, Dist::Clustered, 10}, {mid, B::Keep, Dist::Uniform, 0.05},
      {mid, B::MixedKeep, Dist::Seam, 3},      {mid, B::Fold, Dist::Seam, 3},
  };
}

template <>
std::vector<Scenario<3>> scenarios<3>() {
  using B = BoundaryKind;
  using Dist = Distribution;
  const std::array<std::int64_t, 3> odd{37, 50, 29}, small{5, 4, 6}, mid{9, 12, 7};
  return {
      {odd, B::Periodic, Dist::Uniform, 0.01}, {odd, B::Periodic, Dist::Uniform, 0.1},
      {odd, B::Fold, Dist::Uniform, 0.02},     {odd, B::Keep, Dist::Clustered, 0.05},
      {odd, B::MixedFold, Dist::Seam, 0.02},   {odd, B::MixedKeep, Dist::Faces, 0.02},
      {odd, B::Periodic, Dist::Seam, 0.02},    {odd, B::Fold, Dist::Faces, 0.01},
      {small, B::Periodic, Dist::Uniform, 100}, {small, B::Fold, Dist::Uniform, 20},
      {small, B::Keep, Dist::Seam, 10},        {small, B::MixedFold, Dist::Clustered, 10},
      {mid, B::Periodic, Dist::Clustered, 3},  {mid, B::Keep, Dist::Uniform, 0.1},
      {mid, B::MixedKeep, Dist::Seam, 1},      {mid, B::Fold, Dist::Faces, 1},
  };
}

constexpr int kProps = 5;  // three AoS components (stride 3) and two contiguous scalars

template <class T, int D>
void check_scenario(const Variant& bc, const Kernel& kernel, const Scenario<D>& sc, bool aos_positions,
                    std::mt19937_64& rng) {
  const Grid<D> grid = make_grid<D>(sc.cells, sc.boundary);
  const std::size_t n = particle_count(sc);
  SCOPED_TRACE(describe(sc, n) + ", positions " + (aos_positions ? "AoS" : "SoA"));

  MatrixPlan<T, D> plan(grid, kernel, bc);
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());

  // Positions, SoA or interleaved (x0 y0 [z0] x1 ...).
  const Positions<T, D> soa = make_positions<T, D>(grid, sc.distribution, n, rng);
  std::vector<T> aos(D * n);
  typename Plan<T, D>::Positions pos = views_of<T, D>(soa);
  if (aos_positions) {
    for (std::size_t i = 0; i < n; ++i)
      for (int d = 0; d < D; ++d) aos[D * i + d] = soa[d][i];
    for (int d = 0; d < D; ++d) pos[d] = View<const T>(aos.data() + d, n, D);
  }
  plan.set_points(pos);
  ASSERT_EQ(plan.num_points(), n);
  const auto xd = positions_as_double<T, D>(pos);

  // Properties: a vector (AoS, stride 3) and two scalars.
  const std::vector<T> vec = random_values<T>(3 * n, rng);
  const std::vector<T> s0 = random_values<T>(n, rng, 0.5, 1.5), s1 = random_values<T>(n, rng);
  std::vector<View<const T>> props = {View<const T>(vec.data(), n, 3), View<const T>(vec.data() + 1, n, 3),
                                      View<const T>(vec.data() + 2, n, 3), View<const T>(s0),
                                      View<const T>(s1)};

  // The reference, on the same (rounded) inputs in double.
  std::vector<std::vector<double>> prop_d(kProps), ref_mesh(kProps, std::vector<double>(size));
  std::vector<const double*> prop_p(kProps);
  std::vector<double*> ref_p(kProps);
  for (int j = 0; j < kProps; ++j) {
    prop_d[j] = to_double<T>(props[j]);
    prop_p[j] = prop_d[j].data();
    ref_p[j] = ref_mesh[j].data();
  }
  reference::spread<D>(grid, kernel, n, pointers<D>(xd), kProps, prop_p.data(), ref_p.data());

  // P2M, Overwrite, all five at once, onto meshes full of NaN.
  {
    std::vector<std::vector<T>> meshes(kProps, std::vector<T>(size, std::numeric_limits<T>::quiet_NaN()));
    std::vector<View<T>> mv;
    for (auto& m : meshes) mv.emplace_back(m);
    plan.spread(props, mv, Accumulate::Overwrite);
    for (int j = 0; j < kProps; ++j)
      EXPECT_LE(rel_l2<T>(View<const T>(meshes[j]), ref_mesh[j]),
                (spread_tolerance<T, D>(plan.options(), kernel, n, max_abs(prop_d[j]), ref_mesh[j])))
          << "spread (Overwrite) of property " << j;
  }
  // P2M, Add, one property onto a mesh that already holds values.
  {
    std::vector<T> mesh = random_values<T>(size, rng);
    std::vector<double> want = to_double<T>(View<const T>(mesh));
    for (std::size_t i = 0; i < size; ++i) want[i] += ref_mesh[4][i];
    plan.spread({props[4]}, {View<T>(mesh)}, Accumulate::Add);
    EXPECT_LE(rel_l2<T>(View<const T>(mesh), want),
              (spread_tolerance<T, D>(plan.options(), kernel, n, max_abs(prop_d[4]), ref_mesh[4])))
        << "spread (Add)";
  }

  // M2P: five random meshes, the first three read into one AoS output (stride 3).
  std::vector<std::vector<T>> fields(kProps);
  std::vector<std::vector<double>> field_d(kProps), ref_val(kProps, std::vector<double>(n));
  std::vector<const double*> field_p(kProps);
  std::vector<View<const T>> fv;
  for (int j = 0; j < kProps; ++j) {
    fields[j] = random_values<T>(size, rng);
    field_d[j] = to_double<T>(View<const T>(fields[j]));
    field_p[j] = field_d[j].data();
    ref_p[j] = ref_val[j].data();
    fv.emplace_back(fields[j]);
  }
  reference::interp<D>(grid, kernel, n, pointers<D>(xd), kProps, field_p.data(), ref_p.data());
  {
    const T nan = std::numeric_limits<T>::quiet_NaN();
    std::vector<T> out_vec(3 * n, nan), out0(n, nan), out1(n, nan);
    std::vector<View<T>> out = {View<T>(out_vec.data(), n, 3), View<T>(out_vec.data() + 1, n, 3),
                                View<T>(out_vec.data() + 2, n, 3), View<T>(out0), View<T>(out1)};
    plan.interp(fv, out);
    for (int j = 0; j < kProps; ++j)
      EXPECT_LE(rel_l2<T>(View<const T>(out[j]), ref_val[j]), tolerance<T>()) << "interp of mesh " << j;
  }
  // M2P, a single mesh.
  {
    std::vector<T> out(n, std::numeric_limits<T>::quiet_NaN());
    plan.interp({fv[3]}, {View<T>(out)});
    EXPECT_LE(rel_l2<T>(View<const T>(out), ref_val[3]), tolerance<T>()) << "interp of one mesh";
  }
}

class ReferenceTest : public KernelCaseTest {};

TEST_P(ReferenceTest, SpreadAndInterpMatchReference) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    int index = 0;
    for (const auto& sc : scenarios<2>()) check_scenario<T, 2>(bc_, kernel_, sc, (index++ % 2) == 1, rng_);
    for (const auto& sc : scenarios<3>()) check_scenario<T, 3>(bc_, kernel_, sc, (index++ % 2) == 1, rng_);
  });
}

// Rebinding: a second set_points replaces the first completely.
TEST_P(ReferenceTest, SecondSetPointsReplacesTheFirst) {
  SCOPED_TRACE(seed_note(seed_));
  with_precision(precision_, [&](auto tag) {
    using T = decltype(tag);
    const Grid<3> grid = make_grid<3>({11, 8, 9}, BoundaryKind::Periodic);
    MatrixPlan<T, 3> plan(grid, kernel_, bc_);
    const auto first = make_positions<T, 3>(grid, Distribution::Clustered, 3000, rng_);
    const auto second = make_positions<T, 3>(grid, Distribution::Uniform, 1700, rng_);
    plan.set_points(views_of<T, 3>(first));
    plan.set_points(views_of<T, 3>(second));
    ASSERT_EQ(plan.num_points(), second[0].size());
    const std::vector<T> q = random_values<T>(second[0].size(), rng_);
    std::vector<T> mesh(static_cast<std::size_t>(plan.mesh_size()));
    plan.spread({View<const T>(q)}, {View<T>(mesh)});

    const auto xd = positions_as_double<T, 3>(views_of<T, 3>(second));
    const std::vector<double> ref = reference_spread<3>(grid, kernel_, pointers<3>(xd), to_double<T>(View<const T>(q)));
    EXPECT_LE(rel_l2<T>(View<const T>(mesh), ref), tolerance<T>());
  });
}

INSTANTIATE_TEST_SUITE_P(AllKernels, ReferenceTest, all_kernel_cases(), kernel_case_name);

class ReferenceCasesTest : public VariantTest {};

// Densities up to 150 a cell on meshes of several CUDA tiles.
TEST_P(ReferenceCasesTest, DensitiesDistributionsAndBoundaries) {
  check_densities(options_of<Options>(bc_), 150.0);
}

TEST_P(ReferenceCasesTest, SeveralPropertiesInOneCall) { check_several_properties(options_of<Options>(bc_)); }

INSTANTIATE_TEST_SUITE_P(Backends, ReferenceCasesTest, variant_values<Options>(), variant_name);

// The reference itself runs on OpenMP threads (each owns a band of the last axis's rows
// and takes every particle in order; interp by particle): its meshes and values must be
// the same bits at any thread count, including more threads than rows, folding ghosts
// (two window nodes onto one) and particles on faces.
TEST(Reference, SameBitsAtAnyThreadCount) {
#if !defined(_OPENMP)
  GTEST_SKIP() << "built without OpenMP";
#else
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const int threads_before = omp_get_max_threads();
  for (BoundaryKind boundary : {BoundaryKind::Fold, BoundaryKind::MixedKeep, BoundaryKind::Periodic})
    for (const Kernel& kernel : {Kernel::linear(), Kernel::mp4(), Kernel::bspline(7)}) {
      const Grid<3> grid = make_grid<3>({9, 5, 3}, boundary);
      const std::size_t n = 20000;
      const auto pos = make_positions<double, 3>(grid, Distribution::Faces, n, rng);
      const std::vector<double> q0 = random_values<double>(n, rng), q1 = random_values<double>(n, rng);
      const std::array<const double*, 3> xp{pos[0].data(), pos[1].data(), pos[2].data()};
      const auto size = static_cast<std::size_t>(mesh_size(grid, kernel.ghost_width()));
      std::vector<std::vector<double>> meshes, values;
      for (int threads : {1, 2, 7}) {
        omp_set_num_threads(threads);
        std::vector<double> m0(size), m1(size), v0(n), v1(n);
        const double* qp[2] = {q0.data(), q1.data()};
        double* mp[2] = {m0.data(), m1.data()};
        reference::spread<3>(grid, kernel, n, xp, 2, qp, mp);
        const double* cp[2] = {m0.data(), m1.data()};
        double* vp[2] = {v0.data(), v1.data()};
        reference::interp<3>(grid, kernel, n, xp, 2, cp, vp);
        meshes.push_back(m0);
        meshes.push_back(m1);
        values.push_back(v0);
        values.push_back(v1);
      }
      omp_set_num_threads(threads_before);
      for (std::size_t k = 2; k < meshes.size(); ++k) {
        EXPECT_TRUE(same_bytes(meshes[k], meshes[k % 2])) << kernel.name() << ", " << name(boundary) << ", run " << k / 2;
        EXPECT_TRUE(same_bytes(values[k], values[k % 2])) << kernel.name() << ", " << name(boundary) << ", run " << k / 2;
      }
    }
#endif
}

}  // namespace
}  // namespace pmkit::test
