// Plan::binned_order: a permutation of the particles, and reordering every particle
// array by it changes nothing but the order of interp's results; Plan::permute_to_binned
// does that reordering.
#include "matrix_plan.hpp"
#include "test_support.hpp"

#include <algorithm>

namespace pmkit::test {
namespace {

class BinnedOrderTest : public VariantTest {};

template <class T, int D>
void check_reordering(const Variant& bc, std::array<std::int64_t, D> cells, BoundaryKind boundary,
                      Distribution dist, std::size_t n, std::mt19937_64& rng) {
  const Grid<D> grid = make_grid<D>(cells, boundary);
  const Options opt = options_of<Options>(bc);
  MatrixPlan<T, D> plan(grid, Kernel::mp4(), opt);
  const Positions<T, D> pos = make_positions<T, D>(grid, dist, n, rng);
  const std::vector<T> q = random_values<T>(n, rng);
  plan.set_points(views_of<T, D>(pos));

  std::vector<std::uint32_t> order(n);
  plan.binned_order(View<std::uint32_t>(order));
  std::vector<std::uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(sorted[k], k) << "binned_order is not a permutation";

  // Every array reordered: x'[k] = x[order[k]].
  Positions<T, D> pos2;
  std::vector<T> q2(n);
  for (int d = 0; d < D; ++d) pos2[d].resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    for (int d = 0; d < D; ++d) pos2[d][k] = pos[d][order[k]];
    q2[k] = q[order[k]];
  }
  MatrixPlan<T, D> plan2(grid, Kernel::mp4(), opt);
  plan2.set_points(views_of<T, D>(pos2));
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
  std::vector<T> mesh(size), mesh2(size);
  plan.spread({View<const T>(q)}, {View<T>(mesh)});
  plan2.spread({View<const T>(q2)}, {View<T>(mesh2)});
  EXPECT_LE(rel_l2<T>(View<const T>(mesh2), to_double<T>(View<const T>(mesh))), tolerance<T>());

  std::vector<T> values(n), values2(n);
  plan.interp({View<const T>(mesh)}, {View<T>(values)});
  plan2.interp({View<const T>(mesh)}, {View<T>(values2)});
  std::vector<double> want(n);
  for (std::size_t k = 0; k < n; ++k) want[k] = values[order[k]];
  EXPECT_LE(rel_l2<T>(View<const T>(values2), want), tolerance<T>());
}

TEST_P(BinnedOrderTest, IsAPermutationThatKeepsResults) {
  SCOPED_TRACE(seed_note(seed_));
  check_reordering<float, 3>(GetParam(), {24, 16, 20}, BoundaryKind::Periodic, Distribution::Uniform, 30000, rng_);
  check_reordering<double, 3>(GetParam(), {12, 9, 14}, BoundaryKind::MixedFold, Distribution::Clustered, 20000, rng_);
  check_reordering<float, 2>(GetParam(), {70, 41}, BoundaryKind::Keep, Distribution::Seam, 9000, rng_);
}

TEST_P(BinnedOrderTest, Errors) {
  MatrixPlan<float, 2> plan(Grid<2>::periodic({16, 16}), Kernel::linear(), GetParam());
  std::vector<std::uint32_t> order(10);
  EXPECT_PMKIT_ERROR(plan.binned_order(View<std::uint32_t>(order)), ErrorCode::NotReady, "before set_points");
  const Positions<float, 2> pos = make_positions<float, 2>(plan.grid(), Distribution::Uniform, 12, rng_);
  plan.set_points(views_of<float, 2>(pos));
  EXPECT_PMKIT_ERROR(plan.binned_order(View<std::uint32_t>(order)), ErrorCode::SizeMismatch, "order[0].size = 10");
}

// permute_to_binned on positions (two of them interleaved, stride 2), a charge and a
// velocity: each becomes the old array in binned_order's order, and set_points of the
// permuted positions gives the same spread. After update_points the permutation is that
// of the last full binning.
template <class T, int D>
void check_permute(const Variant& bc, std::array<std::int64_t, D> cells, Distribution dist, std::size_t n,
                   std::mt19937_64& rng) {
  const Grid<D> grid = make_grid<D>(cells, BoundaryKind::Periodic);
  MatrixPlan<T, D> plan(grid, Kernel::tsc(), bc);
  Positions<T, D> pos = make_positions<T, D>(grid, dist, n, rng);
  plan.set_points(views_of<T, D>(pos));
  for (int d = 0; d < D; ++d)
    for (std::size_t p = 0; p < n; p += 7) pos[d][p] += static_cast<T>(0.3 * grid.spacing[d]);
  plan.update_points(views_of<T, D>(pos));
  const std::vector<T> q = random_values<T>(n, rng), v = random_values<T>(n, rng);
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
  std::vector<T> mesh(size), mesh2(size);
  plan.spread({View<const T>(q)}, {View<T>(mesh)});
  std::vector<std::uint32_t> order(n);
  plan.binned_order(View<std::uint32_t>(order));

  std::vector<T> xy(2 * n), q2 = q, v2 = v;  // x and y interleaved
  for (std::size_t p = 0; p < n; ++p) {
    xy[2 * p] = pos[0][p];
    xy[2 * p + 1] = pos[1][p];
  }
  std::vector<View<T>> arrays{View<T>(xy.data(), n, 2), View<T>(xy.data() + 1, n, 2), View<T>(q2), View<T>(v2)};
  Positions<T, D> pos2 = pos;  // its last axis permuted as an array of its own
  arrays.push_back(View<T>(pos2[D - 1]));
  // v out of place into v_out (v as it was), the rest in place, in one call.
  std::vector<T> v_out(n);
  std::vector<View<const T>> from(arrays.begin(), arrays.end());
  from.push_back(View<const T>(v));
  arrays.push_back(View<T>(v_out));
  plan.permute_to_binned(Span<View<const T>>(from), Span<View<T>>(arrays));
  for (std::size_t k = 0; k < n; ++k) {
    ASSERT_EQ(v_out[k], v[order[k]]) << k;
    const std::uint32_t p = order[k];
    ASSERT_EQ(xy[2 * k], pos[0][p]) << k;
    ASSERT_EQ(xy[2 * k + 1], pos[1][p]) << k;
    ASSERT_EQ(q2[k], q[p]) << k;
    ASSERT_EQ(v2[k], v[p]) << k;
    ASSERT_EQ(pos2[D - 1][k], pos[D - 1][p]) << k;
  }
  EXPECT_PMKIT_ERROR(plan.spread({View<const T>(q2)}, {View<T>(mesh2)}), ErrorCode::NotReady, "before set_points");

  for (std::size_t k = 0; k < n; ++k) {
    pos2[0][k] = xy[2 * k];
    pos2[1][k] = xy[2 * k + 1];
  }
  plan.set_points(views_of<T, D>(pos2));
  plan.spread({View<const T>(q2)}, {View<T>(mesh2)});
  EXPECT_LE(rel_l2<T>(View<const T>(mesh2), to_double<T>(View<const T>(mesh))), tolerance<T>());
  if (bc.exec.backend == Backend::Cpu) {
    // Stable: the counting sort keeps the permuted (binned) order.
    plan.binned_order(View<std::uint32_t>(order));
    for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(order[k], k);
  }
}

TEST_P(BinnedOrderTest, PermuteToBinnedMovesEveryArrayByTheBinnedOrder) {
  SCOPED_TRACE(seed_note(seed_));
  check_permute<float, 3>(GetParam(), {16, 12, 20}, Distribution::Clustered, 25000, rng_);
  check_permute<double, 2>(GetParam(), {40, 33}, Distribution::Seam, 9000, rng_);
}

// Rejected calls write nothing: not one of the arrays, the valid ones before a bad one
// included.
TEST_P(BinnedOrderTest, PermuteToBinnedErrors) {
  MatrixPlan<float, 2> plan(Grid<2>::periodic({16, 16}), Kernel::linear(), GetParam());
  std::vector<float> a(12), b(12), shorter(11);
  for (std::size_t p = 0; p < 12; ++p) a[p] = b[p] = float(p);
  EXPECT_PMKIT_ERROR(plan.permute_to_binned({View<float>(a)}), ErrorCode::NotReady, "before set_points");
  const Positions<float, 2> pos = make_positions<float, 2>(plan.grid(), Distribution::Uniform, 12, rng_);
  plan.set_points(views_of<float, 2>(pos));
  EXPECT_PMKIT_ERROR(plan.permute_to_binned({View<float>(a), View<float>(shorter)}), ErrorCode::SizeMismatch,
                     "arrays[1].size = 11");
  EXPECT_PMKIT_ERROR(plan.permute_to_binned({View<float>(a), View<float>(nullptr, 12)}), ErrorCode::InvalidArgument,
                     "arrays[1].data is null");
  EXPECT_PMKIT_ERROR(plan.permute_to_binned({View<float>(a), View<float>(b), View<float>(a)}),
                     ErrorCode::InvalidArgument, "arrays[2] and arrays[0]");
  std::vector<float> c(12);
  EXPECT_PMKIT_ERROR(plan.permute_to_binned({View<const float>(a), View<const float>(b)}, {View<float>(c), View<float>(a)}),
                     ErrorCode::InvalidArgument, "arrays[1] starts where from[0] does");
  EXPECT_PMKIT_ERROR(plan.permute_to_binned({View<const float>(a)}, {View<float>(c), View<float>(b)}),
                     ErrorCode::SizeMismatch, "1 arrays to read and 2 to write");
  for (std::size_t p = 0; p < 12; ++p) {
    EXPECT_EQ(a[p], float(p));
    EXPECT_EQ(b[p], float(p));
  }
  plan.permute_to_binned({});  // nothing to move; the plan still needs set_points
  EXPECT_PMKIT_ERROR(plan.binned_order(View<std::uint32_t>(nullptr, 12)), ErrorCode::NotReady, "before set_points");
}

INSTANTIATE_TEST_SUITE_P(Backends, BinnedOrderTest, variant_values<Options>(),
                         variant_name);

// last_timings() reports the last call's computation on the CPU backend: each call's own
// time, so a spread of 64 properties takes longer than the interp of one that follows it.
class TimingsTest : public VariantTest {};

TEST_P(TimingsTest, LastCallsComputationOnTheCpu) {
  if (on_cuda(bc_)) GTEST_SKIP() << "a CPU backend's report (CUDA: the copies and the computation of host_arrays)";
  const Grid<3> grid = make_grid<3>({32, 32, 32}, BoundaryKind::Periodic);
  Plan<double, 3> plan(grid, Kernel::mp4(), options_of<Options>(bc_));
  const std::size_t n = 100000;
  const Positions<double, 3> pos = make_positions<double, 3>(grid, Distribution::Uniform, n, rng_);
  plan.set_points(views_of<double, 3>(pos));
  EXPECT_GT(plan.last_timings().compute_s, 0.0) << "set_points";
  const std::vector<double> q = random_values<double>(n, rng_);
  std::vector<std::vector<double>> meshes(64, std::vector<double>(static_cast<std::size_t>(plan.mesh_size())));
  std::vector<View<const double>> props(64, View<const double>(q));
  std::vector<View<double>> out;
  for (auto& m : meshes) out.emplace_back(m);
  plan.spread(props, out);
  const double spread_s = plan.last_timings().compute_s;
  EXPECT_GT(spread_s, 0.0) << "spread";
  std::vector<double> values(n);
  plan.interp({View<const double>(meshes[0])}, {View<double>(values)});
  const double interp_s = plan.last_timings().compute_s;
  EXPECT_GT(interp_s, 0.0) << "interp";
  EXPECT_LT(interp_s, spread_s) << "interp of one mesh against the spread of 64 properties";
  EXPECT_EQ(plan.last_timings().transfer_s, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Backends, TimingsTest, variant_values<Options>(), variant_name);

}  // namespace
}  // namespace pmkit::test
