// update_points: the same particles moved a little. Whatever the plan does inside (the
// CUDA backend keeps its binning and handles the particles that left their tile apart;
// the CPU backend re-bins), every spread and interp afterwards must be that of the new
// positions, against the float64 reference; bad input leaves the previous points.
#include "matrix_plan.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <numeric>

namespace pmkit::test {
namespace {

// Moves every particle by a uniform random step in [-step, step] cells per axis; on
// bounded axes the position is reflected back into the box.
template <class T, int D>
Positions<T, D> moved(const Grid<D>& g, const Positions<T, D>& pos, double step, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-step, step);
  Positions<T, D> out = pos;
  for (int d = 0; d < D; ++d) {
    const double lo = g.origin[d], len = box_length(g, d);
    for (auto& x : out[d]) {
      double v = static_cast<double>(x) + u(rng) * g.spacing[d];
      if (g.boundary[d] != Boundary::Periodic) {
        if (v < lo) v = 2 * lo - v;
        if (v > lo + len) v = 2 * (lo + len) - v;
        v = std::min(std::max(v, lo), lo + len);
      }
      x = static_cast<T>(v);
      if (g.boundary[d] != Boundary::Periodic) x = std::min(std::max(x, static_cast<T>(lo)), static_cast<T>(lo + len));
    }
  }
  return out;
}

// spread and interp of the plan's current points against the reference at `pos`.
template <class T, int D>
void expect_matches_reference(MatrixPlan<T, D>& plan, const Positions<T, D>& pos, const std::vector<T>& q,
                              const std::string& what) {
  const Grid<D>& grid = plan.grid();
  const std::size_t n = q.size(), size = static_cast<std::size_t>(plan.mesh_size());
  const auto posd = positions_as_double<T, D>(views_of<T, D>(pos));
  const auto posp = pointers<D>(posd);

  std::vector<T> mesh(size);
  plan.spread({View<const T>(q)}, {View<T>(mesh)});
  const std::vector<double> ref =
      reference_spread<D>(grid, plan.kernel(), posp, std::vector<double>(q.begin(), q.end()));
  const double tol = spread_tolerance<T, D>(plan.options(), plan.kernel(), n, max_abs(q), ref);
  EXPECT_LE(rel_l2<T>(View<const T>(mesh), ref), tol) << "spread, " << what;

  std::vector<T> field(size), values(n);
  for (std::size_t i = 0; i < size; ++i) field[i] = static_cast<T>(ref[i]);
  plan.interp({View<const T>(field)}, {View<T>(values)});
  const std::vector<double> want =
      reference_interp<D>(grid, plan.kernel(), posp, n, std::vector<double>(field.begin(), field.end()));
  EXPECT_LE(rel_l2<T>(View<const T>(values), want), tolerance<T>()) << "interp, " << what;
}

class UpdatePointsTest : public ::testing::TestWithParam<std::tuple<Variant, Precision>> {
 protected:
  void SetUp() override {
    bc_ = std::get<0>(GetParam());
    PMKIT_REQUIRE_VARIANT(bc_);
    seed_ = fresh_seed();
    rng_.seed(seed_);
  }

  // Three updates in a row (away particles accumulate), each checked.
  template <class T, int D>
  void run(std::array<std::int64_t, D> cells, BoundaryKind boundary, Distribution dist, double per_cell, double step,
           double max_away, const Kernel& kernel) {
    SCOPED_TRACE(seed_note(seed_));
    if (!method_refuses(bc_, kernel, D).empty()) return;  // the variant's other cases run
    const Grid<D> grid = make_grid<D>(cells, boundary);
    double volume = 1;
    for (auto c : cells) volume *= static_cast<double>(c);
    const auto n = static_cast<std::size_t>(per_cell * volume) + 1;
    Options opt = options_of<Options>(bc_);
    opt.max_away_fraction = max_away;
    MatrixPlan<T, D> plan(grid, kernel, opt);
    Positions<T, D> pos = make_positions<T, D>(grid, dist, n, rng_);
    const std::vector<T> q = random_values<T>(n, rng_);
    plan.set_points(views_of<T, D>(pos));
    EXPECT_EQ(plan.num_away(), 0u);
    std::size_t most_away = 0, previous_away = 0;
    const auto allowed = static_cast<std::size_t>(max_away * static_cast<double>(n));
    for (int step_no = 1; step_no <= 3; ++step_no) {
      pos = moved<T, D>(grid, pos, step, rng_);
      plan.update_points(views_of<T, D>(pos));
      const std::size_t away = plan.num_away();
      most_away = std::max(most_away, away);
      // More than max_away_fraction away: the next update re-bins in full.
      if (previous_away > allowed) EXPECT_EQ(away, 0u) << "no full binning after " << previous_away << " away";
      previous_away = away;
      expect_matches_reference<T, D>(plan, pos, q,
                                     "update " + std::to_string(step_no) + ", step " + std::to_string(step) + ", " +
                                         name(boundary) + ", " + name(dist) + ", " + kernel.name() + ", away " +
                                         std::to_string(plan.num_away()) + " of " + std::to_string(n));
    }
    if (!keeps_binning()) {
      EXPECT_EQ(most_away, 0u) << "the CPU backend and the deterministic mode re-bin in full";
    }
    last_most_away_ = most_away;
  }

  // Whether update_points keeps the binning and takes the away path (CUDA's fast mode).
  bool keeps_binning() const { return on_cuda(bc_) && !bc_.deterministic; }

  Variant bc_{};
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::size_t last_most_away_ = 0;
};

TEST_P(UpdatePointsTest, SmallMovesKeepTheBinning) {
  with_precision(std::get<1>(GetParam()), [&](auto t) {
    using T = decltype(t);
    // ~0.4% of the particles leave their 8^3 tile per update: the away path on CUDA.
    run<T, 3>({24, 17, 31}, BoundaryKind::Periodic, Distribution::Uniform, 8.0, 0.02, 0.05, Kernel::mp4());
    if (keeps_binning()) {
      EXPECT_GT(last_most_away_, 0u) << "the away path was not exercised";
    }
    run<T, 3>({16, 16, 16}, BoundaryKind::MixedKeep, Distribution::Clustered, 20.0, 0.05, 0.05, Kernel::tsc());
    run<T, 2>({70, 45}, BoundaryKind::Fold, Distribution::Uniform, 4.0, 0.1, 0.05, Kernel::bspline(5));
    // 216 stencil nodes (at least tuning::kAwayWarpMinNodes): CUDA takes the away
    // particles one warp each, here with folds and the periodic seam.
    run<T, 3>({14, 12, 16}, BoundaryKind::MixedFold, Distribution::Seam, 3.0, 0.05, 0.2, Kernel::bspline(6));
    if (keeps_binning()) {
      EXPECT_GT(last_most_away_, 0u) << "the warps' away path was not exercised";
    }
    // 1080 tiles and 552961 particles (at least tuning::kPartitionMinParticles = 2^19):
    // CUDA's set_points bins by its two-level partition (slot composed).
    run<T, 3>({96, 80, 72}, BoundaryKind::Periodic, Distribution::Uniform, 1.0, 0.02, 0.05, Kernel::mp4());
  });
}

TEST_P(UpdatePointsTest, LargeMovesAndThresholds) {
  with_precision(std::get<1>(GetParam()), [&](auto t) {
    using T = decltype(t);
    // Threshold 0: the update after any away particle is a full binning.
    run<T, 3>({20, 20, 20}, BoundaryKind::Periodic, Distribution::Uniform, 4.0, 0.05, 0.0, Kernel::mp4());
    // Threshold 1 and moves of several cells: most particles away, all still right
    // (also across the periodic seam and mirrored at bounded ends).
    run<T, 3>({12, 18, 10}, BoundaryKind::MixedFold, Distribution::Seam, 6.0, 3.0, 1.0, Kernel::linear());
    run<T, 2>({40, 33}, BoundaryKind::Periodic, Distribution::Clustered, 30.0, 5.0, 1.0, Kernel::mp4());
    // The default threshold with moves of a cell: a full binning each time.
    run<T, 3>({16, 16, 16}, BoundaryKind::Keep, Distribution::Uniform, 8.0, 1.0, Options{}.max_away_fraction,
              Kernel::bspline(4));
  });
}

// A far move, then small moves. CUDA keeps the binning through the far move (most
// particles away, all handled apart), re-bins in full at the next update (the status of
// the far one showed too many away), and keeps the binning again after that.
TEST_P(UpdatePointsTest, SmallMovesAfterAFullBinning) {
  with_precision(std::get<1>(GetParam()), [&](auto t) {
    using T = decltype(t);
    SCOPED_TRACE(seed_note(seed_));
    const std::string refused = method_refuses(bc_, Kernel::bspline(5), 3);
    if (!refused.empty()) GTEST_SKIP() << refused;
    const Grid<3> grid = make_grid<3>({24, 17, 31}, BoundaryKind::Periodic);
    Options opt = options_of<Options>(bc_);
    opt.max_away_fraction = 0.05;
    MatrixPlan<T, 3> plan(grid, Kernel::bspline(5), opt);
    Positions<T, 3> pos = make_positions<T, 3>(grid, Distribution::Uniform, 20000, rng_);
    const std::vector<T> q = random_values<T>(pos[0].size(), rng_);
    plan.set_points(views_of<T, 3>(pos));
    pos = moved<T, 3>(grid, pos, 4.0, rng_);  // most particles leave their tile
    plan.update_points(views_of<T, 3>(pos));
    if (keeps_binning()) EXPECT_GT(plan.num_away(), pos[0].size() / 2) << "the far move's particles handled apart";
    expect_matches_reference<T, 3>(plan, pos, q, "after a far move");
    pos = moved<T, 3>(grid, pos, 0.05, rng_);
    plan.update_points(views_of<T, 3>(pos));
    EXPECT_EQ(plan.num_away(), 0u) << "a full binning after the far move";
    expect_matches_reference<T, 3>(plan, pos, q, "after a full binning");
    for (int step_no = 1; step_no <= 2; ++step_no) {
      pos = moved<T, 3>(grid, pos, 0.05, rng_);
      plan.update_points(views_of<T, 3>(pos));
      if (keeps_binning()) {
        EXPECT_GT(plan.num_away(), 0u) << "the binning was not kept";
      }
      expect_matches_reference<T, 3>(plan, pos, q, "small move " + std::to_string(step_no) + " after a full binning");
    }
  });
}

TEST_P(UpdatePointsTest, BadInputKeepsThePreviousPoints) {
  using T = float;
  const Grid<3> grid = Grid<3>::bounded({8, 8, 8});
  MatrixPlan<T, 3> plan(grid, Kernel::mp4(), bc_);
  Positions<T, 3> pos = make_positions<T, 3>(grid, Distribution::Uniform, 500, rng_);
  const std::vector<T> q = random_values<T>(500, rng_);
  EXPECT_PMKIT_ERROR(plan.update_points(views_of<T, 3>(pos)), ErrorCode::NotReady, "before set_points");
  plan.set_points(views_of<T, 3>(pos));
  const Positions<T, 3> small = moved<T, 3>(grid, pos, 0.01, rng_);
  plan.update_points(views_of<T, 3>(small));  // a valid update first (away list, if any)
  for (auto bad : {std::nanf(""), INFINITY, -0.5f, 8.25f}) {
    Positions<T, 3> b = moved<T, 3>(grid, small, 0.01, rng_);
    b[1][123] = bad;
    EXPECT_PMKIT_ERROR(plan.update_points(views_of<T, 3>(b)),
                       std::isfinite(bad) ? ErrorCode::OutOfBounds : ErrorCode::NonFinitePosition,
                       "positions[1][123]");
    // CUDA finds the rejection after the update has replaced the binning's records: the
    // plan needs set_points again (NotReady until then).
    if (bc_.exec.backend == Backend::Cuda) {
      EXPECT_FALSE(plan.has_points());
      plan.set_points(views_of<T, 3>(small));
    }
  }
  Positions<T, 3> shorter = small;
  for (auto& a : shorter) a.pop_back();
  EXPECT_PMKIT_ERROR(plan.update_points(views_of<T, 3>(shorter)), ErrorCode::SizeMismatch, "same particles");
  expect_matches_reference<T, 3>(plan, small, q, "after rejected updates");
}

// Deterministic mode re-bins in full (an away particle would need a float atomic), so an
// updated plan spreads bit for bit what a fresh plan at the new positions spreads.
TEST_P(UpdatePointsTest, DeterministicModeStaysBitwiseReproducible) {
  if (bc_.exec.backend != Backend::Cuda) GTEST_SKIP() << "deterministic mode is a CUDA option";
  if (!refuses_deterministic(bc_).empty()) GTEST_SKIP() << refuses_deterministic(bc_);
  using T = float;
  const Grid<3> grid = Grid<3>::periodic({16, 24, 16});
  Options opt = options_of<Options>(bc_);
  opt.deterministic = true;
  MatrixPlan<T, 3> updated(grid, Kernel::mp4(), opt), fresh(grid, Kernel::mp4(), opt);
  Positions<T, 3> pos = make_positions<T, 3>(grid, Distribution::Clustered, 40000, rng_);
  const std::vector<T> q = random_values<T>(pos[0].size(), rng_);
  updated.set_points(views_of<T, 3>(pos));
  pos = moved<T, 3>(grid, pos, 0.02, rng_);
  updated.update_points(views_of<T, 3>(pos));
  fresh.set_points(views_of<T, 3>(pos));
  EXPECT_EQ(updated.num_away(), 0u);
  std::vector<T> a(static_cast<std::size_t>(grid.cells[0] * grid.cells[1] * grid.cells[2])), b(a.size());
  ASSERT_EQ(static_cast<std::int64_t>(a.size()), updated.mesh_size());
  updated.spread({View<const T>(q)}, {View<T>(a)});
  fresh.spread({View<const T>(q)}, {View<T>(b)});
  EXPECT_TRUE(same_bytes(a, b)) << "deterministic spread after update_points differs from a fresh plan's";
}

INSTANTIATE_TEST_SUITE_P(Backends, UpdatePointsTest,
                         ::testing::Combine(variant_values<Options>(),
                                            ::testing::Values(Precision::Float, Precision::Double)),
                         [](const ::testing::TestParamInfo<std::tuple<Variant, Precision>>& info) {
                           return std::string(std::get<0>(info.param).label) + "_" +
                                  name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace pmkit::test
