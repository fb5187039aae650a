// Plan::binned_order: a permutation of the particles, and reordering every particle
// array by it changes nothing but the order of interp's results.
#include "test_support.hpp"

#include <algorithm>

namespace pmkit::test {
namespace {

class BinnedOrderTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    PMKIT_REQUIRE_BACKEND(GetParam());
    seed_ = fresh_seed();
    rng_.seed(seed_);
  }
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

template <class T, int D>
void check_reordering(const BackendCase& bc, std::array<std::int64_t, D> cells, BoundaryKind boundary,
                      Distribution dist, std::size_t n, std::mt19937_64& rng) {
  const Grid<D> grid = make_grid<D>(cells, boundary);
  const Options opt = options_for(bc);
  Plan<T, D> plan(grid, Kernel::mp4(), opt);
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
  Plan<T, D> plan2(grid, Kernel::mp4(), opt);
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
  Plan<float, 2> plan(Grid<2>::periodic({16, 16}), Kernel::linear(), options_for(GetParam()));
  std::vector<std::uint32_t> order(10);
  EXPECT_PMKIT_ERROR(plan.binned_order(View<std::uint32_t>(order)), ErrorCode::NotReady, "before set_points");
  const Positions<float, 2> pos = make_positions<float, 2>(plan.grid(), Distribution::Uniform, 12, rng_);
  plan.set_points(views_of<float, 2>(pos));
  EXPECT_PMKIT_ERROR(plan.binned_order(View<std::uint32_t>(order)), ErrorCode::SizeMismatch, "order[0].size = 10");
}

INSTANTIATE_TEST_SUITE_P(Backends, BinnedOrderTest, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.label; });

}  // namespace
}  // namespace pmkit::test
