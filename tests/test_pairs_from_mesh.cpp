// PairPlan::set_points(mesh plan): cell lists built from a mesh plan's binned particles
// (Plan::binned_positions and binned_order). The offsets a plan hands out match the
// caller's positions within rounding on every backend, kernel support and boundary; the
// pair results from a mesh plan match the float64 brute force on those offsets, also
// after update_points moved particles out of their tiles; bad combinations fail cleanly
// and leave the pair plan as it was.
#include "../bench/pair_synthetic.hpp"
#include "matrix_plan.hpp"
#include "pair_mesh_cases.hpp"

namespace pmkit::test {
namespace {

const Kernel kSupports[] = {Kernel::linear(), Kernel::tsc(), Kernel::mp4(), Kernel::bspline(5)};

// Offsets from the origin within a few roundings of T of the caller's, modulo the box
// length on periodic axes; binned_order a permutation.
template <class T, int D>
void check_binned_positions(const Variant& bc, const Kernel& kernel, BoundaryKind boundary, Distribution dist,
                            std::size_t n, std::mt19937_64& rng) {
  SCOPED_TRACE(std::string(bc.label) + " " + kernel.name() + " " + name(boundary) + " " + name(dist) +
               " n = " + std::to_string(n) + " D = " + std::to_string(D) + (sizeof(T) == 4 ? " float" : " double"));
  if (!method_refuses(bc, kernel, D).empty()) return;  // the variant's other kernels run
  std::array<std::int64_t, D> cells;
  if constexpr (D == 3) cells = {11, 20, 8};  // odd and even sizes
  else cells = {23, 9};
  const Grid<D> grid = make_grid<D>(cells, boundary);
  MatrixPlan<T, D> plan(grid, kernel, bc);
  const Positions<T, D> pos = make_positions<T, D>(grid, dist, n, rng);
  plan.set_points(views_of<T, D>(pos));
  Positions<T, D> offsets;
  std::array<View<T>, D> out;
  for (int d = 0; d < D; ++d) {
    offsets[d].assign(n, T(-1));
    out[d] = View<T>(offsets[d]);
  }
  plan.binned_positions(out);
  std::vector<std::uint32_t> order(n);
  plan.binned_order(View<std::uint32_t>(order));
  std::vector<bool> seen(n, false);
  for (std::size_t k = 0; k < n; ++k) {
    ASSERT_LT(order[k], n);
    ASSERT_FALSE(seen[order[k]]) << "binned_order repeats " << order[k];
    seen[order[k]] = true;
    for (int d = 0; d < D; ++d) {
      const double length = box_length(grid, d);
      const double got = offsets[d][k];
      ASSERT_GE(got, 0.0);
      ASSERT_LE(got, length);
      double diff = got - (static_cast<double>(pos[d][order[k]]) - grid.origin[d]);
      if (grid.boundary[d] == Boundary::Periodic) diff -= length * std::round(diff / length);
      // The caller's x carries its own rounding to T at |x| up to a few box lengths away
      // (Seam wraps from far away), the offset one more.
      const double scale = std::max(length, std::fabs(static_cast<double>(pos[d][order[k]])));
      ASSERT_LE(std::fabs(diff), 4 * std::numeric_limits<T>::epsilon() * scale)
          << "particle " << order[k] << ", dimension " << d << ": x = " << pos[d][order[k]] << ", offset " << got;
    }
  }
}

class BinnedPositionsTest : public ::testing::TestWithParam<Variant> {};

TEST_P(BinnedPositionsTest, AreTheCallersWithinRounding) {
  PMKIT_REQUIRE_VARIANT(GetParam());
  std::mt19937_64 rng(fresh_seed());
  for (const Kernel& kernel : kSupports)
    for (BoundaryKind boundary : {BoundaryKind::Periodic, BoundaryKind::Fold, BoundaryKind::MixedKeep})
      for (Distribution dist : {Distribution::Uniform, Distribution::Seam, Distribution::Faces}) {
        check_binned_positions<float, 3>(GetParam(), kernel, boundary, dist, 3000, rng);
        check_binned_positions<double, 2>(GetParam(), kernel, boundary, dist, 2000, rng);
      }
}
INSTANTIATE_TEST_SUITE_P(Backends, BinnedPositionsTest, variant_values<Options>(), variant_name);

// A pair plan fed from a mesh plan, both on the variant, in every pair setting it has
// (pair_settings: the CPU's two shells, CUDA's methods), against the brute force: small
// grids at a few particles a pair cell, and larger ones after update_points moved the
// particles up to 3 cells (CUDA: many leave their 8^3 tile, the away list).
class PairsFromMeshTest : public VariantTest {};

TEST_P(PairsFromMeshTest, AgreesWithBruteForce) {
  pair_kernels::LennardJones<3> lj3{1.0, 0.4, kCutoff, 0.05};
  pair_kernels::LennardJones<2> lj2{1.0, 0.4, kCutoff, 0.05};
  bench::ExpensiveSynthetic expensive{kCutoff};
  const Options mesh_options = options_of<Options>(bc_);
  for (const PairOptions& pair_options : pair_settings(bc_))
    for (const Kernel& kernel : {Kernel::tsc(), Kernel::mp4()})
      for (BoundaryKind boundary : {BoundaryKind::Periodic, BoundaryKind::MixedFold, BoundaryKind::Fold}) {
        const Grid<3> grid3 = make_grid<3>({12, 20, 8}, boundary);  // 6 x 5 x 6
        const Grid<2> grid2 = make_grid<2>({12, 40}, boundary);     // 6 x 10
        for (Distribution dist : {Distribution::Uniform, Distribution::Clustered, Distribution::Faces}) {
          check_from_mesh<double, 3>(grid3, kernel, lj3, kCutoff, dist, 1500, mesh_options, pair_options);
          check_from_mesh<float, 2>(grid2, kernel, lj2, kCutoff, dist, 800, mesh_options, pair_options);
        }
        check_from_mesh<double, 3>(grid3, kernel, lj3, kCutoff, Distribution::Uniform, 1, mesh_options, pair_options);
        check_from_mesh<double, 3>(grid3, kernel, lj3, kCutoff, Distribution::Uniform, 0, mesh_options, pair_options);
        // 12 x 10 x 12 pair cells, tiles of 8^3 mesh cells; ~5 particles a pair cell in 3D.
        const Grid<3> large3 = make_grid<3>({24, 40, 16}, boundary);
        const Grid<2> large2 = make_grid<2>({40, 80}, boundary);
        check_from_mesh<float, 3>(large3, kernel, lj3, kCutoff, Distribution::Uniform, scaled(6000), mesh_options,
                                  pair_options, 3.0);
        check_from_mesh<double, 2>(large2, kernel, lj2, kCutoff, Distribution::Uniform, scaled(3000), mesh_options,
                                   pair_options, 3.0);
        // The seam puts particles a few roundings of T apart (lo and just below it, wrapped):
        // a softened LJ force there is its huge core slope times rounding noise, in the
        // brute force as much as here, so the seam runs the smooth synthetic kernel; a
        // kernel of the caller's runs on CUDA from a file nvcc compiles
        // (test_pairs_user_kernel.cu), so these run on the CPU here.
        if (on_cuda(bc_)) continue;
        check_from_mesh<double, 3>(grid3, kernel, expensive, kCutoff, Distribution::Seam, 1500, mesh_options,
                                   pair_options);
        check_from_mesh<float, 2>(grid2, kernel, expensive, kCutoff, Distribution::Seam, 800, mesh_options,
                                  pair_options);
        check_from_mesh<double, 3>(grid3, kernel, expensive, kCutoff, Distribution::Uniform, 6000, mesh_options,
                                   pair_options);  // ~30 a cell
      }
}

INSTANTIATE_TEST_SUITE_P(Backends, PairsFromMeshTest, variant_values<PairOptions>(), variant_name);

// Pair plans used alone still validate what the caller passes; from a mesh plan they
// refuse what cannot be the same particles and box, and keep their previous points.
TEST(PairsFromMesh, BadInput) {
  const Grid<3> grid = make_grid<3>({12, 20, 8}, BoundaryKind::Periodic);
  const Box<3> box = Box<3>::of(grid);
  Plan<double, 3> mesh(grid, Kernel::mp4());
  // The full shell sums each particle's pairs in a fixed order: equal bits from equal points.
  PairPlan<double, 3> pairs(box, kCutoff, cpu_options(false, 2));
  expect_pmkit_error(ErrorCode::NotReady, "no points", [&] { pairs.set_points(mesh); });
  EXPECT_FALSE(pairs.has_points());

  std::mt19937_64 rng(fresh_seed());
  const Positions<double, 3> pos = make_positions<double, 3>(grid, Distribution::Uniform, 500, rng);
  mesh.set_points(views_of<double, 3>(pos));
  pairs.set_points(views_of<double, 3>(pos));
  bench::CheapSynthetic cheap{kCutoff};
  std::vector<double> before(500), after(500);
  pairs.compute(cheap, {}, {View<double>(before)});

  Box<3> longer = box, shifted = box, bounded = box;
  longer.length[1] += 0.5;
  shifted.origin[2] += 1e-3;
  bounded.boundary[0] = Boundary::Bounded;
  for (const Box<3>& other : {longer, shifted, bounded}) {
    PairPlan<double, 3> mismatched(other, kCutoff);
    expect_pmkit_error(ErrorCode::InvalidArgument, "same box", [&] { mismatched.set_points(mesh); });
    EXPECT_FALSE(mismatched.has_points());
  }
  Plan<double, 3> smaller(make_grid<3>({12, 20, 6}, BoundaryKind::Periodic), Kernel::mp4());
  smaller.set_points(views_of<double, 3>(make_positions<double, 3>(smaller.grid(), Distribution::Uniform, 70, rng)));
  expect_pmkit_error(ErrorCode::InvalidArgument, "same box", [&] { pairs.set_points(smaller); });
  // The failed calls kept the previous points.
  ASSERT_EQ(pairs.num_points(), 500u);
  pairs.compute(cheap, {}, {View<double>(after)});
  EXPECT_EQ(before, after);

  // A mesh plan of zero particles gives a pair plan of zero particles.
  Plan<double, 3> empty(grid, Kernel::mp4());
  const std::vector<double> none;
  empty.set_points({View<const double>(none), View<const double>(none), View<const double>(none)});
  pairs.set_points(empty);
  EXPECT_EQ(pairs.num_points(), 0u);
  std::vector<double> nothing;
  pairs.compute(cheap, {}, {View<double>(nothing)});

  // binned_positions checks its arrays like binned_order.
  std::vector<double> short_x(499), y(500), z(500);
  expect_pmkit_error(ErrorCode::SizeMismatch, "", [&] {
    mesh.binned_positions({View<double>(short_x), View<double>(y), View<double>(z)});
  });
  Plan<double, 3> unset(grid, Kernel::mp4());
  expect_pmkit_error(ErrorCode::NotReady, "", [&] { unset.binned_positions({View<double>(y), View<double>(y), View<double>(z)}); });
}

#if defined(PMKIT_WITH_CUDA)
TEST(CudaPairsFromMesh, BadInput) {
  PMKIT_REQUIRE_GPU();
  const Grid<3> grid = make_grid<3>({12, 20, 8}, BoundaryKind::Periodic);
  std::mt19937_64 rng(fresh_seed());
  const Positions<float, 3> pos = make_positions<float, 3>(grid, Distribution::Uniform, 300, rng);
  Options on_host;
  on_host.backend = Backend::Cuda;
  on_host.host_arrays = true;
  Plan<float, 3> host_mesh(grid, Kernel::mp4(), on_host);
  host_mesh.set_points(views_of<float, 3>(pos));
  PairOptions cuda_pairs;
  cuda_pairs.backend = Backend::Cuda;
  PairPlan<float, 3> pairs(Box<3>::of(grid), kCutoff, cuda_pairs);
  expect_pmkit_error(ErrorCode::Unsupported, "host_arrays", [&] { pairs.set_points(host_mesh); });
  PairPlan<float, 3> cpu_pairs(Box<3>::of(grid), kCutoff);
  expect_pmkit_error(ErrorCode::InvalidArgument, "backend", [&] { cpu_pairs.set_points(host_mesh); });
  Plan<float, 3> cpu_mesh(grid, Kernel::mp4());
  cpu_mesh.set_points(views_of<float, 3>(pos));
  expect_pmkit_error(ErrorCode::InvalidArgument, "backend", [&] { pairs.set_points(cpu_mesh); });
  EXPECT_FALSE(pairs.has_points());
}
#endif

}  // namespace
}  // namespace pmkit::test
