// The distributed plan against the single-rank plan on the same particles, run under
// mpirun with 2, 3 and 4 ranks (tests/CMakeLists.txt). Every rank builds the same global
// particles and the single-rank results from a seed of rank 0's; each rank then starts
// with every size-th particle, wherever it lies, and migrate takes them to their owners.
// A check that fails on one rank does not stop the others: every collective call is made
// on all ranks, and the process exits non-zero if any rank failed.
#include "distributed/decomposition.hpp"
#include "distributed/halo.hpp"
#include "distributed_support.hpp"

namespace pmkit::test {
namespace {

// The distributed bodies on every rank variant.
class DistributedTest : public RankVariantTest {
 protected:
  // Whether the variant's method takes the kernel in D dimensions.
  bool takes(const Kernel& kernel, int dims) const { return method_refuses(bc_, kernel, dims).empty(); }
};

// The tolerance of a rank variant against the single-rank CPU plan: CUDA ranks in double
// to 1e-10, relative to the largest value.
template <class T>
double rank_tolerance(const Options& o) {
  return o.backend == Backend::Cuda && std::is_same<T, double>::value ? 1e-10 : tolerance_of<T>();
}

// spread, spread_gradient, interp and interp_gradient of the distributed plan (options,
// transport) against the single-rank CPU plan on the same particles x, after a migrate
// that must leave every rank's arrays as the CPU ranks' migrate does; returns this rank's
// particle count. (No spread_gradient in deterministic mode.)
template <class T, int D>
std::size_t check_against_single_rank(const Options& options, const Grid<D>& grid, const Kernel& kernel,
                                      const Positions<T, D>& x, std::mt19937_64& rng, const RankGrid<D>& split = {},
                                      Transport transport = Transport::Auto) {
  const std::size_t n = x[0].size();
  const SingleRank<T, D> single(grid, kernel, x, rng);
  const std::vector<T>& q = single.q;
  const double tol = rank_tolerance<T>(options);

  MatrixDistributedPlan<T, D> plan(MPI_COMM_WORLD, grid, kernel, options, split, transport);
  if (transport != Transport::Auto) {
    EXPECT_EQ(plan.transport(), transport);
  } else if (options.backend == Backend::Cuda && ranks_share_gpus()) {
    EXPECT_EQ(plan.transport(), Transport::HostMpi) << "ranks that share a GPU";
  }
  Share<T, D> share = deal<T, D>(x, q, n);
  Share<T, D> host_share = share;
  share.migrate(plan);
  EXPECT_EQ(sum_over_ranks(static_cast<long long>(share.count)), static_cast<long long>(n));
  if (options.backend != Backend::Cpu) {
    DistributedPlan<T, D> host_plan(MPI_COMM_WORLD, grid, kernel, {}, split);
    host_share.migrate(host_plan);
    EXPECT_EQ(share.count, host_share.count) << "rank " << world_rank();
    auto in_use = [](const std::vector<T>& a, std::size_t count) { return std::vector<T>(a.begin(), a.begin() + count); };
    EXPECT_EQ(in_use(share.id, share.count), in_use(host_share.id, host_share.count))
        << "ids after migrate against the CPU ranks', rank " << world_rank();
    for (int d = 0; d < D; ++d)
      EXPECT_EQ(in_use(share.x[d], share.count), in_use(host_share.x[d], host_share.count))
          << "positions[" << d << "] after migrate against the CPU ranks', rank " << world_rank();
  }
  plan.set_points(share.positions());
  const std::size_t m = share.count;
  std::vector<T> block(plan.block_size());
  plan.spread({View<const T>(share.q.data(), m)}, {View<T>(block)});
  const auto [spread_diff, spread_scale] = max_difference(block, cut_block<T, D>(single.rho, single.shape, plan.block()));
  EXPECT_LE(spread_diff, tol * std::max(1.0, spread_scale)) << "spread, rank " << world_rank();

  // spread_gradient of the vectors, carried through migrate by the particles' ids.
  std::vector<std::vector<T>> vectors(D, std::vector<T>(m));
  for (int d = 0; d < D; ++d)
    for (std::size_t i = 0; i < m; ++i) vectors[d][i] = single.v[d][static_cast<std::size_t>(share.id[i])];
  std::vector<T> div_block(plan.block_size());
  if (!options.deterministic) {
    plan.spread_gradient(std::vector<View<const T>>(vectors.begin(), vectors.end()), {View<T>(div_block)});
    const auto [div_diff, div_scale] =
        max_difference(div_block, cut_block<T, D>(single.div, single.shape, plan.block()));
    if (!(kernel == Kernel::linear())) {  // its derivative jumps at the nodes (interp_gradient's note below)
      EXPECT_LE(div_diff, 10 * tol * std::max(1.0, div_scale)) << "spread_gradient, rank " << world_rank();
    }
  }

  const std::vector<T> f_block = cut_block<T, D>(single.f, single.shape, plan.block());
  std::vector<T> values(m), expected(m);
  plan.interp({View<const T>(f_block)}, {View<T>(values)});
  for (std::size_t i = 0; i < m; ++i) expected[i] = single.phi[static_cast<std::size_t>(share.id[i])];
  const auto [interp_diff, interp_scale] = max_difference(values, expected);
  EXPECT_LE(interp_diff, tol * std::max(1.0, interp_scale)) << "interp, rank " << world_rank();

  std::vector<std::vector<T>> gradients(D, std::vector<T>(m));
  std::vector<View<T>> gradient_views(gradients.begin(), gradients.end());
  plan.interp_gradient({View<const T>(f_block)}, gradient_views);
  for (int d = 0; d < D; ++d) {
    for (std::size_t i = 0; i < m; ++i) expected[i] = single.grad[d][static_cast<std::size_t>(share.id[i])];
    const auto [diff, scale] = max_difference(gradients[d], expected);
    // A particle on a node of the linear kernel takes the slope of the cell above it:
    // a coordinate a rounding off the node (wrapped by migrate) may take the other one.
    if (kernel == Kernel::linear()) continue;
    EXPECT_LE(diff, 10 * tol * std::max(1.0, scale)) << "interp_gradient " << d << ", rank " << world_rank();
  }
  return m;
}

template <int D>
std::array<std::int64_t, D> cells_of(std::array<std::int64_t, 2> c2, std::array<std::int64_t, 3> c3) {
  if constexpr (D == 2) return c2;
  else return c3;
}

// Calls f(kernel, boundary, case number, rng) for every kernel and boundary, with one
// fresh seed.
template <class F>
void for_every_kernel_and_boundary(F&& f) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int case_number = 0;
  for (const Kernel& kernel : all_kernels())
    for (BoundaryKind kind : all_boundaries()) {
      SCOPED_TRACE(kernel.name() + " " + name(kind));
      f(kernel, kind, case_number++, rng);
    }
}

template <class T, int D>
void every_kernel_and_boundary(const Variant& v, std::array<std::int64_t, 2> c2, std::array<std::int64_t, 3> c3,
                               std::size_t n) {
  for_every_kernel_and_boundary([&](const Kernel& kernel, BoundaryKind kind, int c, std::mt19937_64& rng) {
    if (!method_refuses(v, kernel, D).empty()) return;
    const Grid<D> grid = make_grid<D>(cells_of<D>(c2, c3), kind);
    check_against_single_rank<T, D>(rank_options(v), grid, kernel, mixed_positions<T, D>(grid, n, rng), rng, {},
                                    transport_for(v, c));
  });
}

TEST_P(DistributedTest, EveryKernelAndBoundary2D) { every_kernel_and_boundary<double, 2>(bc_, {13, 10}, {}, 400); }
TEST_P(DistributedTest, EveryKernelAndBoundary3D) { every_kernel_and_boundary<double, 3>(bc_, {}, {9, 7, 6}, 500); }
TEST_P(DistributedTest, EveryKernelAndBoundaryFloat3D) { every_kernel_and_boundary<float, 3>(bc_, {}, {8, 9, 7}, 500); }

// A bounded Ghosts::Fold axis with fewer cells than the kernel's ghost width: no plan
// takes it (validate), single-rank or distributed.
template <int D>
bool folds_onto_itself(const Grid<D>& grid, const Kernel& kernel) {
  for (int d = 0; d < D; ++d)
    if (grid.boundary[d] == Boundary::Bounded && grid.ghosts == Ghosts::Fold && grid.cells[d] < kernel.ghost_width())
      return true;
  return false;
}

// The caller's rank grid and cuts: blocks of one cell along x, thinner than the ghost
// layers of every kernel (B-spline 8 reaches 4 nodes past them), and uneven ones.
TEST_P(DistributedTest, ThinAndUnevenBlocks) {
  if (world_size() == 1) GTEST_SKIP() << "one rank: one block";
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const int p = world_size();
  RankGrid<3> thin;
  thin.ranks = {p, 1, 1};
  for (int c = 0; c < p; ++c) thin.cuts[0].push_back(c);
  thin.cuts[0].push_back(p + 3);
  RankGrid<3> uneven;
  uneven.ranks = {1, 1, p};
  uneven.cuts[2] = {0};
  for (int c = 1; c < p; ++c) uneven.cuts[2].push_back(c * c + 1);
  uneven.cuts[2].push_back(p * p + 2);
  int c = 0;
  for (const Kernel& kernel : {Kernel::linear(), Kernel::tsc(), Kernel::bspline(8)})
    for (BoundaryKind kind : all_boundaries()) {
      SCOPED_TRACE(kernel.name() + " " + name(kind));
      if (!takes(kernel, 3)) continue;
      const Grid<3> grid_thin = make_grid<3>({p + 3, 5, 4}, kind);
      if (folds_onto_itself(grid_thin, kernel)) continue;
      check_against_single_rank<double, 3>(options(), grid_thin, kernel, mixed_positions<double, 3>(grid_thin, 300, rng),
                                           rng, thin, transport_for(bc_, c++));
      const Grid<3> grid_uneven = make_grid<3>({6, 5, p * p + 2}, kind);
      check_against_single_rank<double, 3>(options(), grid_uneven, kernel,
                                           mixed_positions<double, 3>(grid_uneven, 300, rng), rng, uneven,
                                           transport_for(bc_, c++));
    }
}

// All particles in one cell: the other ranks hold none.
TEST_P(DistributedTest, RanksWithoutParticles) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<2> grid = make_grid<2>({12, 11}, BoundaryKind::MixedFold);
  Positions<double, 2> x;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < 200; ++i) x[d].push_back(grid.origin[d] + (5 + unit(rng)) * grid.spacing[d]);
  const std::size_t mine = check_against_single_rank<double, 2>(options(), grid, Kernel::mp4(), x, rng);
  long long holders = mine > 0 ? 1 : 0;
  EXPECT_EQ(sum_over_ranks(holders), 1);
}

// Particles that cross several blocks, and the periodic seam several times, in one move.
TEST_P(DistributedTest, MovesAcrossSeveralBlocks) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const int p = world_size();
  const Grid<3> grid = make_grid<3>({2 * p + 1, 7, 6}, BoundaryKind::Periodic);
  RankGrid<3> along_x;
  along_x.ranks = {p, 1, 1};
  MatrixDistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::tsc(), options(), along_x);
  const Positions<double, 3> x = make_positions<double, 3>(grid, Distribution::Uniform, 600, rng);
  const std::vector<double> q = random_values<double>(600, rng);
  Share<double, 3> share = deal<double, 3>(x, q, 600);
  share.migrate(plan);
  // Every particle moves by 1.5 to 3.5 domain lengths along x, and some along y.
  const double length = grid.cells[0] * grid.spacing[0];
  std::uniform_real_distribution<double> shift(1.5 * length, 3.5 * length);
  std::mt19937_64 rank_rng(seed + plan.rank());  // the shared rng stays the same on every rank
  long long far = 0;
  const int before = plan.rank();
  std::vector<double> moved_x(600), moved_y(600), moved_z(600);
  for (std::size_t i = 0; i < share.count; ++i) {
    share.x[0][i] += (i % 2 ? 1 : -1) * shift(rank_rng);
    share.x[1][i] += 13 * grid.spacing[1];
    far += plan.owner({share.x[0][i], share.x[1][i], share.x[2][i]}) != before;
  }
  const long long crossing = sum_over_ranks(far);
  if (world_size() > 1) {
    EXPECT_GT(crossing, 0);
  }
  share.migrate(plan);
  EXPECT_EQ(sum_over_ranks(static_cast<long long>(share.count)), 600);
  for (std::size_t i = 0; i < share.count; ++i) {
    EXPECT_EQ(plan.owner({share.x[0][i], share.x[1][i], share.x[2][i]}), plan.rank());
    moved_x[static_cast<std::size_t>(share.id[i])] = share.x[0][i];
    moved_y[static_cast<std::size_t>(share.id[i])] = share.x[1][i];
    moved_z[static_cast<std::size_t>(share.id[i])] = share.x[2][i];
  }
  // The moved positions of all particles on every rank, then the usual comparison.
  MPI_Allreduce(MPI_IN_PLACE, moved_x.data(), 600, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, moved_y.data(), 600, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, moved_z.data(), 600, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  check_against_single_rank<double, 3>(options(), grid, Kernel::tsc(), {moved_x, moved_y, moved_z}, rng, along_x);
}

// Where each of `n` global particles (ids 0 .. n-1) lies now: the rank that holds it, or -1.
template <class T, int D>
std::vector<int> holders(const Share<T, D>& share, std::size_t n, int rank) {
  std::vector<int> where(n, -1);
  for (std::size_t i = 0; i < share.count; ++i) where[static_cast<std::size_t>(share.id[i])] = rank;
  MPI_Allreduce(MPI_IN_PLACE, where.data(), static_cast<int>(n), MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return where;
}

// One rule for owner, migrate and set_points at the periodic seam, the ranks split along
// x: every rank holds particles at origin + L, origin, a step below origin and above
// origin + L, a step below origin + L, a billionth of L below origin (whose wrap rounds
// onto origin + L in float) and three lengths on, and one on y's seam. Each goes to the
// rank that owner() names, strictly inside [origin, origin + L) (the seam's at origin),
// where set_points takes it; set_points refuses origin + L, which migrate has not wrapped.
template <class T>
void check_seam(const Options& options, const Grid<3>& grid) {
  RankGrid<3> along_x;
  along_x.ranks = {world_size(), 1, 1};
  MatrixDistributedPlan<T, 3> plan(MPI_COMM_WORLD, grid, Kernel::tsc(), options, along_x);
  std::array<double, 3> length;
  for (int d = 0; d < 3; ++d) length[d] = grid.cells[d] * grid.spacing[d];
  const double origin = grid.origin[0];
  const T lo = static_cast<T>(origin), hi = static_cast<T>(origin + length[0]);
  const std::vector<T> seam = {hi,
                               lo,
                               std::nextafter(lo, T(-INFINITY)),
                               std::nextafter(hi, T(INFINITY)),
                               std::nextafter(hi, lo),
                               static_cast<T>(origin - 1e-9 * length[0]),
                               static_cast<T>(origin + 3 * length[0])};
  const std::size_t per_rank = seam.size() + 1, n = per_rank * world_size();
  Share<T, 3> share(n);
  std::vector<int> expected(n, -1);
  for (std::size_t k = 0; k < per_rank; ++k) {
    const std::size_t id = world_rank() * per_rank + k;
    share.x[0][k] = k < seam.size() ? seam[k] : static_cast<T>(origin + 0.5 * length[0]);
    share.x[1][k] = static_cast<T>(grid.origin[1] + (k < seam.size() ? 0.5 : 1.0) * length[1]);
    share.x[2][k] = static_cast<T>(grid.origin[2] + 0.25 * length[2]);
    share.id[k] = static_cast<T>(id);
    expected[id] = plan.owner({static_cast<double>(share.x[0][k]), static_cast<double>(share.x[1][k]),
                               static_cast<double>(share.x[2][k])});
  }
  share.count = per_rank;
  MPI_Allreduce(MPI_IN_PLACE, expected.data(), static_cast<int>(n), MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(expected[0], 0) << "owner(origin + L)";
  Share<T, 3> unwrapped = share;
  share.migrate(plan);
  EXPECT_EQ(holders(share, n, plan.rank()), expected) << "the ranks migrate sent the particles to, by owner()";
  for (std::size_t i = 0; i < share.count; ++i) {
    const std::array<double, 3> x = {share.x[0][i], share.x[1][i], share.x[2][i]};
    EXPECT_EQ(plan.owner(x), plan.rank()) << "particle " << share.id[i] << " at x = " << x[0];
    for (int d = 0; d < 3; ++d) {
      const double u = (x[d] - grid.origin[d]) / grid.spacing[d];
      EXPECT_TRUE(u >= 0 && u < grid.cells[d]) << "particle " << share.id[i] << ": positions[" << d << "] = " << x[d];
    }
    if (share.id[i] == 0) {  // origin + L (rounded to T) wraps onto the origin
      EXPECT_NEAR(x[0], origin, 1e-6 * length[0]);
    }
  }
  EXPECT_EQ(error_code_of([&] { plan.set_points(share.positions()); }), ErrorCode::Ok);
  unwrapped.count = 1;  // origin + L, on every rank
  EXPECT_PMKIT_ERROR(plan.set_points(unwrapped.positions()), ErrorCode::OutOfBounds, "call migrate");
}

TEST_P(DistributedTest, OwnerMigrateAndSetPointsAgreeAtTheSeam) {
  for (const Grid<3>& grid : {Grid<3>::periodic({8, 8, 8}, 1.0), Grid<3>::periodic({37, 8, 8}, 0.1, -0.5)}) {
    SCOPED_TRACE("origin " + std::to_string(grid.origin[0]));
    check_seam<double>(options(), grid);
    check_seam<float>(options(), grid);
  }
}

// Periodic coordinates so far from the domain that subtracting whole periods in T would
// lose them: migrate wraps them as the mesh plan does, so that the ranks' results are
// the single-rank plan's on the same positions, each coordinate on the axes x (split)
// and y.
template <class T>
void check_far_coordinates(const Options& options, const std::vector<T>& far, std::mt19937_64& rng) {
  const Grid<3> grid = Grid<3>::periodic({37, 8, 8}, 0.1, -0.5);
  RankGrid<3> along_x;
  along_x.ranks = {world_size(), 1, 1};
  Positions<T, 3> x = make_positions<T, 3>(grid, Distribution::Uniform, 300, rng);
  for (std::size_t k = 0; k < far.size(); ++k) {
    x[0][5 * k] = far[k];
    x[1][5 * k + 2] = far[k];
  }
  check_against_single_rank<T, 3>(options, grid, Kernel::tsc(), x, rng, along_x);
}

TEST_P(DistributedTest, FarPeriodicCoordinatesWrapAsThePlanWraps) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  check_far_coordinates<double>(options(), {1e17, -1e17, 3e16, -3.1e16, 1e15 + 0.3, 7.3e15, 1e20, -1e300}, rng);
  check_far_coordinates<float>(options(), {1e20f, -1e20f, 1e13f, -1.3e13f, 3e15f, 3e38f}, rng);
}

// A coordinate whose distance from the origin in cells overflows a double: the mesh
// plan's error, on every rank, and no array changed.
TEST_P(DistributedTest, CoordinatesTooFarToWrapAreNamed) {
  const Grid<3> grid = Grid<3>::periodic({37, 8, 8}, 0.1, -0.5);
  MatrixDistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::tsc(), options());
  Share<double, 3> share(3 * world_size());  // room for every rank's particles
  for (int d = 0; d < 3; ++d)
    for (int i = 0; i < 3; ++i) share.x[d][i] = 0.1 * (i + 1);
  share.count = 3;
  if (world_rank() == 0) share.x[1][2] = 1e308;
  const Share<double, 3> before = share;
  // synchronize: where migrate queues its check (one CUDA rank), the error comes from there.
  const auto migrate = [&] {
    plan.migrate({View<double>(share.x[0]), View<double>(share.x[1]), View<double>(share.x[2])},
                 {View<double>(share.q)}, share.count);
    plan.synchronize();
  };
  EXPECT_PMKIT_ERROR(migrate(), ErrorCode::OutOfBounds, "too far from the periodic grid's origin");
  EXPECT_EQ(share.x, before.x);
  EXPECT_EQ(plan.owner({0.1, 1e308, 0.3}), -1);
}

// Ranks that share a GPU (more ranks than GPUs) take the host-staged transport by
// themselves, and an explicit NCCL request fails naming the option, not NCCL's message.
TEST_P(DistributedTest, RanksSharingAGpuTakeTheHostStagedTransport) {
  const Grid<3> grid = Grid<3>::periodic({8, 8, 8}, 1.0);
  MatrixDistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::tsc(), options());
  if (!on_cuda(bc_)) {
    EXPECT_EQ(plan.transport(), Transport::HostMpi);
    return;
  }
  if (!ranks_share_gpus()) GTEST_SKIP() << "every rank has a GPU of its own";
  EXPECT_EQ(plan.transport(), Transport::HostMpi);
  using Plan3 = MatrixDistributedPlan<double, 3>;
  EXPECT_PMKIT_ERROR(Plan3(MPI_COMM_WORLD, grid, Kernel::tsc(), options(), {}, Transport::Nccl), ErrorCode::Unsupported,
                     "Transport::Nccl");
  // The plan still works: a spread over the host-staged transport.
  Share<double, 3> share(1);
  share.count = world_rank() == 0 ? 1 : 0;
  for (int d = 0; d < 3; ++d) share.x[d][0] = 0.5;
  share.q[0] = 2.0;
  plan.set_points(share.positions());
  std::vector<double> block(plan.block_size());
  plan.spread({View<const double>(share.q.data(), share.count)}, {View<double>(block)});
  double total = 0;
  for (double v : block) total += v;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_NEAR(total, 2.0, 1e-12);
}

// The deterministic spread of two properties (q, and `other` by particle id, of another
// magnitude) by `plan` of the particles `share`, migrated by the plan, added onto blocks
// that start at a pattern of their own; returns this rank's two blocks.
template <class T, int D>
std::array<std::vector<T>, 2> exact_blocks(MatrixDistributedPlan<T, D>& plan, Share<T, D> share,
                                           const std::vector<T>& other) {
  // The starting pattern, a function of the node's global index, so that the blocks of
  // all ranks cut the one-rank mesh's pattern.
  std::array<std::vector<T>, 2> blocks;
  const Block<D>& block = plan.block();
  for (int b = 0; b < 2; ++b) {
    blocks[b].resize(plan.block_size());
    for (std::size_t k = 0; k < blocks[b].size(); ++k) {
      std::int64_t rest = static_cast<std::int64_t>(k), key = b;
      for (int d = 0; d < D; ++d) {
        key += (d + 1) * (block.first_node[d] + rest % block.shape[d]);
        rest /= block.shape[d];
      }
      blocks[b][k] = static_cast<T>(0.25 * (key % 7));
    }
  }
  share.migrate(plan);
  std::vector<T> p(share.count);
  for (std::size_t i = 0; i < share.count; ++i) p[i] = other[static_cast<std::size_t>(share.id[i])];
  plan.set_points(share.positions());
  plan.spread({View<const T>(share.q.data(), share.count), View<const T>(p)}, {View<T>(blocks[0]), View<T>(blocks[1])},
              Accumulate::Add);
  return blocks;
}

// The deterministic spread (options with deterministic set) against one CPU rank's: the
// same bits on one rank of the variant and at this rank count, with even and uneven cuts
// (through `transport`); one CPU rank within a rounding of the float64 reference.
template <class T, int D>
void check_deterministic(const Options& options, const Grid<D>& grid, const Kernel& kernel, std::size_t n,
                         std::mt19937_64& rng, Transport transport) {
  const Positions<T, D> x = mixed_positions<T, D>(grid, n, rng);
  const std::vector<T> q = random_values<T>(n, rng), other = random_values<T>(n, rng, -1e3, 1e3);
  Options host;
  host.deterministic = true;
  // One CPU rank: every particle, the whole mesh.
  MatrixDistributedPlan<T, D> cpu_one(MPI_COMM_SELF, grid, kernel, host);
  Share<T, D> everything = all_particles<T, D>(x, q);
  const std::array<std::vector<T>, 2> whole = exact_blocks(cpu_one, everything, other);
  {
    everything.migrate(cpu_one);
    cpu_one.set_points(everything.positions());
    std::vector<T> alone(cpu_one.block_size());
    cpu_one.spread({View<const T>(everything.q)}, {View<T>(alone)});
    // The float64 reference on the wrapped positions.
    std::array<std::vector<double>, D> xd;
    for (int d = 0; d < D; ++d) xd[d].assign(everything.x[d].begin(), everything.x[d].end());
    const std::vector<double> qd(everything.q.begin(), everything.q.end());
    const std::vector<double> exact = reference_spread<D>(grid, kernel, pointers<D>(xd), qd);
    const auto [ref_diff, ref_scale] = max_difference(std::vector<double>(alone.begin(), alone.end()), exact);
    EXPECT_LE(ref_diff, tolerance_of<T>() * std::max(1.0, ref_scale)) << "against the float64 reference";
  }
  MatrixDistributedPlan<T, D> one(MPI_COMM_SELF, grid, kernel, options);
  const std::array<std::vector<T>, 2> mine = exact_blocks(one, all_particles<T, D>(x, q), other);
  for (int b = 0; b < 2; ++b)
    EXPECT_EQ(differing_bits(mine[b], whole[b]), 0u) << "property " << b << ": one rank against one CPU rank";

  RankGrid<D> even, uneven;
  uneven.ranks.fill(1);
  uneven.ranks[D - 1] = world_size();
  uneven.cuts[D - 1] = {0};
  for (int c = 1; c < world_size(); ++c) uneven.cuts[D - 1].push_back(c);
  uneven.cuts[D - 1].push_back(grid.cells[D - 1]);
  for (const RankGrid<D>& split : {even, uneven}) {
    MatrixDistributedPlan<T, D> plan(MPI_COMM_WORLD, grid, kernel, options, split, transport);
    const std::array<std::vector<T>, 2> all = exact_blocks(plan, deal<T, D>(x, q, n), other);
    for (int b = 0; b < 2; ++b)
      EXPECT_EQ(differing_bits(all[b], cut_block<T, D>(whole[b], cpu_one.block_shape(), plan.block())), 0u)
          << "property " << b << ": nodes whose bits differ from one CPU rank's, rank " << world_rank();
  }
}

// The variant in deterministic mode (CUDA: where its method has one).
class DistributedDeterministicTest : public DistributedTest {
 protected:
  void SetUp() override {
    DistributedTest::SetUp();
    if (!IsSkipped() && !refuses_deterministic(bc_).empty()) GTEST_SKIP() << refuses_deterministic(bc_);
  }
  Options options() const {
    Options o = DistributedTest::options();
    o.deterministic = true;
    return o;
  }
};

TEST_P(DistributedDeterministicTest, SpreadIsOneCpuRanksBitsAtAnyRankCount) {
  for_every_kernel_and_boundary([&](const Kernel& kernel, BoundaryKind kind, int c, std::mt19937_64& rng) {
    // Each case through both transports on CUDA ranks: 3D double one way, float the other.
    if (takes(kernel, 3)) {
      check_deterministic<double, 3>(options(), make_grid<3>({10, 9, 8}, kind), kernel, 1500, rng, transport_for(bc_, c));
      check_deterministic<float, 3>(options(), make_grid<3>({9, 8, 11}, kind), kernel, 1500, rng,
                                    transport_for(bc_, c + 1));
    }
    check_deterministic<double, 2>(options(), make_grid<2>({11, 9}, kind), kernel, 300, rng, transport_for(bc_, c));
    check_deterministic<float, 2>(options(), make_grid<2>({13, 11}, kind), kernel, 800, rng, transport_for(bc_, c));
  });
}

// A value that is not finite on one rank: every rank fails, and no block changes.
TEST_P(DistributedDeterministicTest, SpreadRejectsValuesNotFinite) {
  const Grid<3> grid = make_grid<3>({10, 9, 8}, BoundaryKind::Periodic);
  MatrixDistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::mp4(), options());
  // Rank 0 holds one particle, in the middle of its block's first cell, of charge inf.
  Share<double, 3> one(1);
  for (int d = 0; d < 3; ++d) one.x[d][0] = grid.origin[d] + (plan.block().first_cell[d] + 0.5) * grid.spacing[d];
  one.q[0] = std::numeric_limits<double>::infinity();
  one.count = world_rank() == 0 ? 1 : 0;
  plan.set_points(one.positions());
  const std::vector<double> before(plan.block_size(), 0.5);
  std::vector<double> block = before;
  EXPECT_EQ(error_code_of([&] { plan.spread({View<const double>(one.q.data(), one.count)}, {View<double>(block)}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(block, before) << "rank " << world_rank();
}

// A periodic axis that one rank holds whole stays periodic in the local meshes (its cells,
// no ghost layer) and adds no ghost node to exchange; the ranks split x only.
TEST(DistributedDecomposition, PeriodicAxesOfOneRankHaveNoGhostLayers) {
  const int p = world_size(), ghost = Kernel::mp4().ghost_width();
  const Grid<3> grid = Grid<3>::periodic({4 * p, 8, 6}, 1.0);
  RankGrid<3> along_x;
  along_x.ranks = {p, 1, 1};
  const distributed::Decomposition<3> kept(grid, ghost, along_x, p, true), bounded(grid, ghost, along_x, p, false);
  for (int d = 0; d < 3; ++d) {
    const bool whole = d > 0 || p == 1;
    EXPECT_EQ(kept.axis(d).whole, whole) << "axis " << d;
    EXPECT_FALSE(bounded.axis(d).whole) << "axis " << d;
    const Grid<3> local = kept.local_grid(grid, world_rank());
    EXPECT_EQ(local.boundary[d] == Boundary::Periodic, whole) << "axis " << d;
    EXPECT_EQ(kept.axis(d).local_nodes(0), whole ? grid.cells[d] : 4 + 3 + 2 * ghost) << "axis " << d;
  }
  // The ghost nodes: the planes of x past the block (but the first and last stored), of
  // the whole y and z rows; none on one rank.
  const distributed::Halo halo(kept, world_rank(), MPI_COMM_WORLD);
  const std::size_t x_planes = p == 1 ? 0 : static_cast<std::size_t>(4 + 3 + 2 * ghost - 2 - 4);
  EXPECT_EQ(halo.ghost_nodes(), x_planes * 8 * 6);
  const distributed::Halo everywhere(bounded, world_rank(), MPI_COMM_WORLD);
  EXPECT_GT(everywhere.ghost_nodes(), halo.ghost_nodes());
}

INSTANTIATE_TEST_SUITE_P(Backends, DistributedTest, ::testing::ValuesIn(rank_variants()), variant_name);
INSTANTIATE_TEST_SUITE_P(Backends, DistributedDeterministicTest, ::testing::ValuesIn(rank_variants()), variant_name);

}  // namespace
}  // namespace pmkit::test

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
