// The exchanges overlapped with the interior work (DistributedPlan::set_overlap) against
// the exchanges after the work, on the same particles: interp and interp_gradient bit
// for bit, the deterministic spread bit for bit, spread and spread_gradient to rounding.
// The particles crowd the blocks' faces (where the split puts them on the boundary), lie
// on the periodic seam, fill the interior, and the last of several ranks has none.
#include "distributed_support.hpp"

namespace pmkit::test {
namespace {

class DistributedOverlapTest : public RankVariantTest {};

// This rank's particles, all inside its block: a share in its interior, the rest within
// 1.2 cells of one of its faces (on the face itself among them: the first ranks' blocks
// start at the periodic seam), none on the last of several ranks. A particle that T's
// rounding puts on a neighbour's side of a face, or on a periodic axis' end, is left out.
template <class T, int D>
Share<T, D> face_particles(const MatrixDistributedPlan<T, D>& plan, const Grid<D>& grid, std::size_t n,
                           std::mt19937_64& rng) {
  const Block<D>& block = plan.block();
  Share<T, D> s(n);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    double u[D];  // cells from the block's first cell
    for (int d = 0; d < D; ++d) u[d] = unit(rng) * static_cast<double>(block.cells[d]);
    const int face = static_cast<int>(i % (2 * D + 1));  // 2D faces, then the interior
    if (face < 2 * D) {
      const int d = face / 2;
      const double cells = static_cast<double>(block.cells[d]);
      const double depth = i % 7 == 0 ? 0.0 : std::min(1.2, cells) * unit(rng);
      u[d] = face % 2 == 0 ? depth : (cells - depth) * (1.0 - 1e-5);
    }
    std::array<double, D> x{};
    bool in_domain = true;  // a periodic axis' end, where T rounds a coordinate up to it, is not
    for (int d = 0; d < D; ++d) {
      s.x[d][s.count] =
          static_cast<T>(grid.origin[d] + (static_cast<double>(block.first_cell[d]) + u[d]) * grid.spacing[d]);
      x[d] = static_cast<double>(s.x[d][s.count]);
      if (grid.boundary[d] == Boundary::Periodic && x[d] >= grid.origin[d] + box_length(grid, d)) in_domain = false;
    }
    s.q[s.count] = static_cast<T>(unit(rng) - 0.5);
    if (in_domain && plan.owner(x) == world_rank()) ++s.count;
  }
  if (world_size() > 1 && world_rank() == world_size() - 1) s.count = 0;
  return s;
}

template <class T>
std::size_t count_above(const std::vector<T>& a, const std::vector<T>& b, double tol) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    count += std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])) > tol;
  return count;
}

// Every call of two plans, one overlapping its exchanges and one not, on the same
// particles and inputs.
template <class T, int D>
void check_overlap(const Options& options, const Grid<D>& grid, const Kernel& kernel, std::size_t n,
                   std::mt19937_64& rng) {
  MatrixDistributedPlan<T, D> overlapped(MPI_COMM_WORLD, grid, kernel, options);
  MatrixDistributedPlan<T, D> after(MPI_COMM_WORLD, grid, kernel, options);
  overlapped.set_overlap(Overlap::Always);
  after.set_overlap(Overlap::Never);
  Share<T, D> share = face_particles<T, D>(overlapped, grid, n, rng);
  const std::size_t m = share.count;
  overlapped.set_points(share.positions());
  after.set_points(share.positions());
  const std::int64_t size = overlapped.block_size();
  const std::vector<T> f = random_values<T>(static_cast<std::size_t>(size), rng);
  const int rank = world_rank();

  std::vector<T> rho(size), rho_after(size);
  overlapped.spread({View<const T>(share.q.data(), m)}, {View<T>(rho)});
  after.spread({View<const T>(share.q.data(), m)}, {View<T>(rho_after)});
  const double scale = std::max(1.0, max_difference(rho_after, std::vector<T>(size)).first);
  const double tol = options.deterministic ? 0.0 : tolerance_of<T>() * scale;
  EXPECT_EQ(count_above(rho, rho_after, tol), 0u) << "spread, rank " << rank;
  if (world_size() > 1 && m > 0) {  // the interior part ran between the exchange's halves
    EXPECT_GT(overlapped.last_timings().overlapped_s, 0.0) << "rank " << rank;
  }

  if (!options.deterministic) {
    std::vector<std::vector<T>> v(D);
    for (int d = 0; d < D; ++d) v[d] = random_values<T>(m, rng);
    const std::vector<View<const T>> vectors(v.begin(), v.end());
    std::vector<T> div(size), div_after(size);
    overlapped.spread_gradient(vectors, {View<T>(div)});
    after.spread_gradient(vectors, {View<T>(div_after)});
    const double div_scale = std::max(1.0, max_difference(div_after, std::vector<T>(size)).first);
    EXPECT_EQ(count_above(div, div_after, 10 * tolerance_of<T>() * div_scale), 0u) << "spread_gradient, rank " << rank;
  }

  std::vector<T> phi(m), phi_after(m);
  overlapped.interp({View<const T>(f)}, {View<T>(phi)});
  after.interp({View<const T>(f)}, {View<T>(phi_after)});
  EXPECT_EQ(differing_bits(phi, phi_after), 0u) << "interp, rank " << rank;

  std::vector<std::vector<T>> grad(D, std::vector<T>(m)), grad_after(D, std::vector<T>(m));
  overlapped.interp_gradient({View<const T>(f)}, std::vector<View<T>>(grad.begin(), grad.end()));
  after.interp_gradient({View<const T>(f)}, std::vector<View<T>>(grad_after.begin(), grad_after.end()));
  for (int d = 0; d < D; ++d) EXPECT_EQ(differing_bits(grad[d], grad_after[d]), 0u) << "interp_gradient " << d;
}

template <class F>
void for_each_case(F&& f) {
  const std::uint64_t seed = shared_seed() + static_cast<std::uint64_t>(world_rank());
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const Kernel& kernel : {Kernel::tsc(), Kernel::mp4(), Kernel::bspline(6)})
    for (BoundaryKind kind : {BoundaryKind::Periodic, BoundaryKind::MixedFold, BoundaryKind::MixedKeep}) {
      SCOPED_TRACE(kernel.name() + " " + name(kind));
      f(kernel, kind, rng);
    }
}

TEST_P(DistributedOverlapTest, MatchesTheExchangeAfterTheWork) {
  for_each_case([&](const Kernel& kernel, BoundaryKind kind, std::mt19937_64& rng) {
    if (method_refuses(bc_, kernel, 3).empty())
      check_overlap<double, 3>(options(), make_grid<3>({12, 10, 9}, kind), kernel, 900, rng);
    check_overlap<float, 2>(options(), make_grid<2>({14, 11}, kind), kernel, 500, rng);
  });
}

TEST_P(DistributedOverlapTest, DeterministicSpreadKeepsItsBits) {
  if (!refuses_deterministic(bc_).empty()) GTEST_SKIP() << refuses_deterministic(bc_);
  Options o = options();
  o.deterministic = true;
  for_each_case([&](const Kernel& kernel, BoundaryKind kind, std::mt19937_64& rng) {
    if (method_refuses(bc_, kernel, 3).empty())
      check_overlap<double, 3>(o, make_grid<3>({11, 10, 9}, kind), kernel, 900, rng);
    check_overlap<float, 2>(o, make_grid<2>({13, 12}, kind), kernel, 500, rng);
  });
}

// The option: kept as set, Auto by default; a value outside the enum is named.
TEST_P(DistributedOverlapTest, OptionIsChecked) {
  DistributedPlan<double, 2> plan(MPI_COMM_WORLD, make_grid<2>({8, 8}, BoundaryKind::Periodic), Kernel::mp4(),
                                  options());
  EXPECT_EQ(plan.overlap(), Overlap::Auto);
  plan.set_overlap(Overlap::Never);
  EXPECT_EQ(plan.overlap(), Overlap::Never);
  EXPECT_EQ(error_code_of([&] { plan.set_overlap(static_cast<Overlap>(7)); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(plan.overlap(), Overlap::Never);
}

INSTANTIATE_TEST_SUITE_P(Backends, DistributedOverlapTest, ::testing::ValuesIn(rank_variants()), variant_name);

}  // namespace
}  // namespace pmkit::test
