// The distributed plan's update_points under mpirun: the step between migrates gives what
// set_points gives on the same moved particles, and refuses what set_points refuses.
#include <algorithm>
#include <map>

#include "distributed_support.hpp"

namespace pmkit::test {
namespace {

class DistributedUpdateTest : public RankVariantTest {};

// Every particle moved by up to `reach` cells per axis, the move undone where it would
// leave the rank's block (by plan.owner) or cross a periodic end: the moves a simulation
// makes between migrates.
template <class T, int D>
void move_within_block(Share<T, D>& share, const MatrixDistributedPlan<T, D>& plan, const Grid<D>& grid, double reach,
                       std::mt19937_64& rng) {
  std::uniform_real_distribution<double> step(-reach, reach);
  for (std::size_t i = 0; i < share.count; ++i) {
    std::array<double, D> moved;
    std::array<T, D> placed;
    bool inside = true;
    for (int d = 0; d < D; ++d) {
      placed[d] = static_cast<T>(share.x[d][i] + step(rng) * grid.spacing[d]);
      moved[d] = static_cast<double>(placed[d]);
      const double u = (moved[d] - grid.origin[d]) / grid.spacing[d];
      inside = inside && u >= 0 && u < grid.cells[d];
    }
    if (!inside || plan.owner(moved) != plan.rank()) continue;
    for (int d = 0; d < D; ++d) share.x[d][i] = placed[d];
  }
}

// Positions on a bounded axis pulled back inside it (a simulation's walls).
template <class T, int D>
void clamp_to_bounded_axes(Share<T, D>& share, const Grid<D>& grid) {
  for (int d = 0; d < D; ++d) {
    if (grid.boundary[d] != Boundary::Bounded) continue;
    const double lo = grid.origin[d], hi = grid.origin[d] + grid.cells[d] * grid.spacing[d];
    for (std::size_t i = 0; i < share.count; ++i)
      share.x[d][i] = static_cast<T>(std::min(hi, std::max(lo, static_cast<double>(share.x[d][i]))));
  }
}

// Four steps of small moves: `updated` takes each by update_points, a fresh plan by
// set_points; spread, interp and interp_gradient agree to the variant's rounding. The
// odd steps move the particles anywhere and migrate them first, the even ones keep them
// in their blocks.
template <class T, int D>
void check_update_against_set_points(const Options& options, const Grid<D>& grid, const Kernel& kernel, std::size_t n,
                                     std::mt19937_64& rng) {
  const Positions<T, D> x = mixed_positions<T, D>(grid, n, rng);
  const std::vector<T> q = random_values<T>(n, rng);
  MatrixDistributedPlan<T, D> updated(MPI_COMM_WORLD, grid, kernel, options);
  Share<T, D> share = deal<T, D>(x, q, n);
  share.migrate(updated);
  updated.set_points(share.positions());
  std::mt19937_64 rank_rng(rng() + static_cast<std::uint64_t>(world_rank()));
  const double tol = std::is_same<T, float>::value ? 2e-5 : 1e-10;
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (step % 2 == 0) {
      move_within_block<T, D>(share, updated, grid, 0.4, rank_rng);
    } else {
      std::uniform_real_distribution<double> shift(-1.5, 1.5);
      for (std::size_t i = 0; i < share.count; ++i)
        for (int d = 0; d < D; ++d) share.x[d][i] += static_cast<T>(shift(rank_rng) * grid.spacing[d]);
      clamp_to_bounded_axes<T, D>(share, grid);
      share.migrate(updated);
    }
    updated.update_points(share.positions());
    MatrixDistributedPlan<T, D> fresh(MPI_COMM_WORLD, grid, kernel, options);
    fresh.set_points(share.positions());
    const std::size_t m = share.count;
    const View<const T> charges(share.q.data(), m);
    std::vector<T> by_update(updated.block_size()), by_set(fresh.block_size());
    updated.spread({charges}, {View<T>(by_update)});
    fresh.spread({charges}, {View<T>(by_set)});
    const auto [spread_diff, spread_scale] = max_difference(by_update, by_set);
    EXPECT_LE(spread_diff, tol * std::max(1.0, spread_scale)) << "spread, rank " << world_rank();
    const std::vector<T> f = random_values<T>(by_set.size(), rng);
    std::vector<T> values(m), expected(m);
    updated.interp({View<const T>(f)}, {View<T>(values)});
    fresh.interp({View<const T>(f)}, {View<T>(expected)});
    const auto [interp_diff, interp_scale] = max_difference(values, expected);
    EXPECT_LE(interp_diff, tol * std::max(1.0, interp_scale)) << "interp, rank " << world_rank();
    std::vector<std::vector<T>> gradients(D, std::vector<T>(m)), expected_gradients(D, std::vector<T>(m));
    std::vector<View<T>> g(gradients.begin(), gradients.end()), e(expected_gradients.begin(), expected_gradients.end());
    updated.interp_gradient({View<const T>(f)}, g);
    fresh.interp_gradient({View<const T>(f)}, e);
    for (int d = 0; d < D; ++d) {
      const auto [diff, scale] = max_difference(gradients[d], expected_gradients[d]);
      EXPECT_LE(diff, 10 * tol * std::max(1.0, scale)) << "interp_gradient " << d << ", rank " << world_rank();
    }
  }
}

TEST_P(DistributedUpdateTest, UpdatePointsGivesWhatSetPointsGives) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  check_update_against_set_points<double, 3>(options(), make_grid<3>({10, 9, 8}, BoundaryKind::Periodic),
                                             Kernel::mp4(), 2000, rng);
  check_update_against_set_points<float, 3>(options(), make_grid<3>({9, 10, 8}, BoundaryKind::MixedFold),
                                            Kernel::tsc(), 2000, rng);
  check_update_against_set_points<double, 2>(options(), make_grid<2>({13, 11}, BoundaryKind::Keep),
                                             Kernel::bspline(6), 800, rng);
}

// permute_to_binned: each rank's particles (positions, charges, ids) reordered as a whole,
// none lost or changed; set_points on them gives the spread of the particles before
// (bitwise in deterministic mode, else to rounding). NotReady for update_points after
// it, and for permute_to_binned after a migrate that changed a rank's particles.
TEST_P(DistributedUpdateTest, PermuteToBinnedKeepsEveryParticleAndTheSpread) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<3> grid = make_grid<3>({10, 9, 8}, BoundaryKind::Periodic);
  MatrixDistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::mp4(), options());
  const std::size_t n = 3000;
  Share<double, 3> share = deal<double, 3>(mixed_positions<double, 3>(grid, n, rng), random_values<double>(n, rng), n);
  share.migrate(plan);
  plan.set_points(share.positions());
  const std::size_t m = share.count;
  std::vector<double> before(plan.block_size()), after(plan.block_size());
  plan.spread({View<const double>(share.q.data(), m)}, {View<double>(before)});

  Share<double, 3> sorted(n);
  sorted.count = m;
  std::vector<View<const double>> from;
  std::vector<View<double>> to;
  for (int d = 0; d < 3; ++d) {
    from.emplace_back(share.x[d].data(), m);
    to.emplace_back(sorted.x[d].data(), m);
  }
  from.emplace_back(share.q.data(), m);
  to.emplace_back(sorted.q.data(), m);
  from.emplace_back(share.id.data(), m);
  to.emplace_back(sorted.id.data(), m);
  plan.permute_to_binned(from, to);
  std::map<double, std::size_t> slot_of_id;
  for (std::size_t i = 0; i < m; ++i) slot_of_id[share.id[i]] = i;
  ASSERT_EQ(slot_of_id.size(), m);
  std::size_t moved = 0;
  for (std::size_t k = 0; k < m; ++k) {
    const auto found = slot_of_id.find(sorted.id[k]);
    ASSERT_NE(found, slot_of_id.end()) << "binned slot " << k << " holds an id this rank never had";
    const std::size_t i = found->second;
    slot_of_id.erase(found);
    moved += i != k;
    for (int d = 0; d < 3; ++d) ASSERT_EQ(sorted.x[d][k], share.x[d][i]) << "slot " << k << ", axis " << d;
    ASSERT_EQ(sorted.q[k], share.q[i]) << "slot " << k;
  }
  EXPECT_TRUE(slot_of_id.empty());
  if (m > 100) {
    EXPECT_GT(moved, 0u) << "mixed positions come in no binned order";
  }

  EXPECT_PMKIT_ERROR(plan.update_points(sorted.positions()), ErrorCode::NotReady, "before set_points");
  plan.set_points(sorted.positions());
  plan.spread({View<const double>(sorted.q.data(), m)}, {View<double>(after)});
  if (options().deterministic) {
    EXPECT_EQ(differing_bits(before, after), 0u);
  } else {
    const auto [diff, scale] = max_difference(before, after);
    EXPECT_LE(diff, 1e-12 * std::max(1.0, scale));
  }

  // Half the box along every axis: on several ranks every rank's particles change owners.
  if (world_size() > 1) {
    const std::size_t count_before = sorted.count;
    const std::vector<double> ids_before(sorted.id.begin(), sorted.id.begin() + count_before);
    for (int d = 0; d < 3; ++d)
      for (std::size_t i = 0; i < sorted.count; ++i) sorted.x[d][i] += 0.5 * grid.cells[d] * grid.spacing[d];
    sorted.migrate(plan);
    const bool changed = sorted.count != count_before ||
                         !std::equal(ids_before.begin(), ids_before.end(), sorted.id.begin());
    std::vector<View<const double>> ids_in = {View<const double>(sorted.id.data(), sorted.count)};
    std::vector<double> ids_out(sorted.count);
    std::vector<View<double>> ids_to = {View<double>(ids_out)};
    if (changed) {
      EXPECT_PMKIT_ERROR(plan.permute_to_binned(ids_in, ids_to), ErrorCode::NotReady, "call update_points first");
    }
    plan.update_points(sorted.positions());
    plan.permute_to_binned(ids_in, ids_to);
  }
}

// Before set_points, with another count on one rank, and with a particle outside the
// block on one rank: every rank throws; afterwards migrate and set_points go on.
TEST_P(DistributedUpdateTest, UpdatePointsRefusesWhatSetPointsRefuses) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<3> grid = make_grid<3>({10, 9, 8}, BoundaryKind::Periodic);
  MatrixDistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::mp4(), options());
  const std::size_t n = 300;
  Share<double, 3> share = deal<double, 3>(make_positions<double, 3>(grid, Distribution::Uniform, n, rng),
                                           random_values<double>(n, rng), n);
  share.migrate(plan);
  EXPECT_PMKIT_ERROR(plan.update_points(share.positions()), ErrorCode::NotReady, "before set_points");
  plan.set_points(share.positions());

  // Rank 0 passes one particle fewer.
  Share<double, 3> fewer = share;
  if (world_rank() == 0 && fewer.count > 0) --fewer.count;
  const long long someone = sum_over_ranks(world_rank() == 0 && share.count > 0 ? 1 : 0);
  if (someone > 0) {
    EXPECT_PMKIT_ERROR(plan.update_points(fewer.positions()), ErrorCode::SizeMismatch, "set_points");
  }

  // The last rank with particles moves one out of its block: past the periodic end on
  // one rank (set_points' domain), into another rank's block on several.
  long long holder = share.count > 0 ? world_rank() : -1;
  MPI_Allreduce(MPI_IN_PLACE, &holder, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  ASSERT_GE(holder, 0);
  Share<double, 3> strayed = share;
  const double length = grid.cells[0] * grid.spacing[0];
  if (world_rank() == holder) {
    if (world_size() == 1) {
      strayed.x[0][0] = grid.origin[0] + length + 0.5 * grid.spacing[0];
    } else {
      // Half a domain along every split axis: another rank's block.
      for (int d = 0; d < 3; ++d)
        if (plan.block().ranks[d] > 1) {
          strayed.x[d][0] += 0.5 * grid.cells[d] * grid.spacing[d];
          if (strayed.x[d][0] >= grid.origin[d] + grid.cells[d] * grid.spacing[d])
            strayed.x[d][0] -= grid.cells[d] * grid.spacing[d];
        }
      EXPECT_NE(plan.owner({strayed.x[0][0], strayed.x[1][0], strayed.x[2][0]}), plan.rank());
    }
  }
  if (world_size() == 1 && on_cuda(bc_) && !bc_.deterministic) {
    // One CUDA rank: update_points leaves the check to the local plan's binning (no
    // wait), which wraps a periodic coordinate as Plan does.
    EXPECT_EQ(error_code_of([&] {
                plan.update_points(strayed.positions());
                plan.synchronize();
              }),
              ErrorCode::Ok);
  } else {
    const ErrorCode expected = world_size() == 1 ? ErrorCode::OutOfBounds : ErrorCode::InvalidArgument;
    EXPECT_PMKIT_ERROR(plan.update_points(strayed.positions()), expected, "migrate");
  }

  // migrate takes the stray particle home, and set_points then update_points go on.
  strayed.migrate(plan);
  plan.set_points(strayed.positions());
  EXPECT_EQ(error_code_of([&] { plan.update_points(strayed.positions()); }), ErrorCode::Ok);
  EXPECT_EQ(sum_over_ranks(static_cast<long long>(strayed.count)), static_cast<long long>(n));
}

INSTANTIATE_TEST_SUITE_P(Backends, DistributedUpdateTest, ::testing::ValuesIn(rank_variants()), variant_name);

}  // namespace
}  // namespace pmkit::test
