// The distributed plan against the single-rank plan on the same particles, run under
// mpirun with 2, 3 and 4 ranks (tests/CMakeLists.txt). Every rank builds the same global
// particles and the single-rank results from a seed of rank 0's; each rank then starts
// with every size-th particle, wherever it lies, and migrate takes them to their owners.
// A check that fails on one rank does not stop the others: every collective call is made
// on all ranks, and the process exits non-zero if any rank failed.
#include <mpi.h>

#include <numeric>
#include <set>

#include "pmkit/distributed.hpp"
#include "test_support.hpp"
#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
#endif

namespace pmkit::test {
namespace {

int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// One fresh seed for all ranks.
std::uint64_t shared_seed() {
  std::uint64_t s = fresh_seed();
  MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return s;
}

long long sum_over_ranks(long long v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

// The values of a single-rank mesh (shape `shape`) in a rank's block.
template <class T, int D>
std::vector<T> cut_block(const std::vector<T>& mesh, const std::array<std::int64_t, D>& shape, const Block<D>& b) {
  std::int64_t size = 1;
  for (auto e : b.shape) size *= e;
  std::vector<T> out(static_cast<std::size_t>(size));
  for (std::int64_t k = 0; k < size; ++k) {
    std::int64_t rest = k, index = 0, stride = 1;
    for (int d = 0; d < D; ++d) {
      index += (b.first_node[d] + rest % b.shape[d]) * stride;
      rest /= b.shape[d];
      stride *= shape[d];
    }
    out[k] = mesh[index];
  }
  return out;
}

// Largest |a - b| over the entries, and the largest |b|.
template <class T>
std::pair<double, double> max_difference(const std::vector<T>& a, const std::vector<T>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return {diff, scale};
}

// migrate's layout of the staying particles, from the ids before (`before`) and after
// (the first `count` of `after`): a particle that stays keeps its slot, except that those
// past the kept count fill, in their order, the slots the leaving ones left below it.
template <class T>
void expect_kept_layout(const std::vector<T>& before, const std::vector<T>& after, std::size_t count) {
  const std::set<T> present(after.begin(), after.begin() + count);
  std::vector<bool> stays(before.size());
  std::size_t kept = 0;
  for (std::size_t i = 0; i < before.size(); ++i) kept += stays[i] = present.count(before[i]) > 0;
  std::vector<T> expected(kept);
  std::size_t from = kept;
  for (std::size_t i = 0; i < kept; ++i) {
    if (stays[i]) {
      expected[i] = before[i];
      continue;
    }
    while (!stays[from]) ++from;
    expected[i] = before[from++];
  }
  EXPECT_EQ(std::vector<T>(after.begin(), after.begin() + kept), expected)
      << "the staying particles' slots after migrate, rank " << world_rank();
}

// A rank's particles: positions, charge and the global index, in arrays of `capacity` slots.
template <class T, int D>
struct Share {
  Positions<T, D> x;
  std::vector<T> q, id;
  std::size_t count = 0;

  Share(std::size_t capacity) : q(capacity), id(capacity) {
    for (auto& c : x) c.resize(capacity);
  }
  std::size_t migrate(DistributedPlan<T, D>& plan) {
    std::array<View<T>, D> positions;
    for (int d = 0; d < D; ++d) positions[d] = View<T>(x[d]);
    const std::vector<T> before(id.begin(), id.begin() + count);
    count = plan.migrate(positions, {View<T>(q), View<T>(id)}, count);
    expect_kept_layout(before, id, count);
    return count;
  }
  std::array<View<const T>, D> positions() const {
    std::array<View<const T>, D> p;
    for (int d = 0; d < D; ++d) p[d] = View<const T>(x[d].data(), count);
    return p;
  }
};

// Every particle: the share of a rank that holds them all.
template <class T, int D>
Share<T, D> all_particles(const Positions<T, D>& x, const std::vector<T>& q) {
  Share<T, D> s(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    for (int d = 0; d < D; ++d) s.x[d][i] = x[d][i];
    s.q[i] = q[i];
    s.id[i] = static_cast<T>(i);
  }
  s.count = q.size();
  return s;
}

// The entries whose bits differ.
template <class T>
std::size_t differing_bits(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return count;
}

// The code of the pmkit::Error that f throws, Ok if none.
template <class F>
ErrorCode error_code_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::Ok;
}

// Every size-th particle from this rank's number: a start that ignores the blocks.
template <class T, int D>
Share<T, D> deal(const Positions<T, D>& x, const std::vector<T>& q, std::size_t capacity) {
  Share<T, D> s(capacity);
  for (std::size_t i = world_rank(); i < q.size(); i += world_size()) {
    for (int d = 0; d < D; ++d) s.x[d][s.count] = x[d][i];
    s.q[s.count] = q[i];
    s.id[s.count] = static_cast<T>(i);
    ++s.count;
  }
  return s;
}

// Particles of every kind the single-rank tests use: uniform, clustered, on faces and
// nodes, on the ends and the periodic seam, wrapped from far away.
template <class T, int D>
Positions<T, D> mixed_positions(const Grid<D>& grid, std::size_t n, std::mt19937_64& rng) {
  Positions<T, D> x;
  const Distribution kinds[] = {Distribution::Uniform, Distribution::Clustered, Distribution::Faces, Distribution::Seam};
  for (int k = 0; k < 4; ++k) {
    const Positions<T, D> part = make_positions<T, D>(grid, kinds[k], n / 4 + (k == 0 ? n % 4 : 0), rng);
    for (int d = 0; d < D; ++d) x[d].insert(x[d].end(), part[d].begin(), part[d].end());
  }
  return x;
}

template <class T>
double tolerance_of() {
  return std::is_same<T, float>::value ? 2e-5 : 1e-12;
}

// The single-rank plan's results on particles x, random charges q, vectors v and a random
// mesh f: the spread rho, interp's phi, interp_gradient's grad and spread_gradient's div.
template <class T, int D>
struct SingleRank {
  std::vector<T> q, rho, f, phi, div;
  std::vector<std::vector<T>> grad, v;
  std::array<std::int64_t, D> shape;

  SingleRank(const Grid<D>& grid, const Kernel& kernel, const Positions<T, D>& x, std::mt19937_64& rng) {
    const std::size_t n = x[0].size();
    q = random_values<T>(n, rng);
    Plan<T, D> plan(grid, kernel);
    std::array<View<const T>, D> all;
    for (int d = 0; d < D; ++d) all[d] = View<const T>(x[d]);
    plan.set_points(all);
    shape = plan.mesh_shape();
    rho.resize(plan.mesh_size());
    f = random_values<T>(plan.mesh_size(), rng);
    phi.resize(n);
    grad.assign(D, std::vector<T>(n));
    plan.spread({View<const T>(q)}, {View<T>(rho)});
    plan.interp({View<const T>(f)}, {View<T>(phi)});
    std::vector<View<T>> grad_views(grad.begin(), grad.end());
    plan.interp_gradient({View<const T>(f)}, grad_views);
    for (int d = 0; d < D; ++d) v.push_back(random_values<T>(n, rng));
    div.resize(plan.mesh_size());
    plan.spread_gradient(std::vector<View<const T>>(v.begin(), v.end()), {View<T>(div)});
  }
};

// spread, interp and interp_gradient of the distributed plan against the single-rank plan
// on the same particles x; returns this rank's particle count.
template <class T, int D>
std::size_t check_against_single_rank(const Grid<D>& grid, const Kernel& kernel, const Positions<T, D>& x,
                                      std::mt19937_64& rng, const RankGrid<D>& split = {}) {
  const std::size_t n = x[0].size();
  const SingleRank<T, D> single(grid, kernel, x, rng);
  const std::vector<T>& q = single.q;

  DistributedPlan<T, D> plan(MPI_COMM_WORLD, grid, kernel, {}, split);
  Share<T, D> share = deal<T, D>(x, q, n);
  share.migrate(plan);
  EXPECT_EQ(sum_over_ranks(static_cast<long long>(share.count)), static_cast<long long>(n));
  plan.set_points(share.positions());
  const std::size_t m = share.count;
  std::vector<T> block(plan.block_size());
  plan.spread({View<const T>(share.q.data(), m)}, {View<T>(block)});
  const auto [spread_diff, spread_scale] = max_difference(block, cut_block<T, D>(single.rho, single.shape, plan.block()));
  EXPECT_LE(spread_diff, tolerance_of<T>() * std::max(1.0, spread_scale)) << "spread, rank " << world_rank();

  // spread_gradient of the vectors, carried through migrate by the particles' ids.
  std::vector<std::vector<T>> vectors(D, std::vector<T>(m));
  for (int d = 0; d < D; ++d)
    for (std::size_t i = 0; i < m; ++i) vectors[d][i] = single.v[d][static_cast<std::size_t>(share.id[i])];
  std::vector<T> div_block(plan.block_size());
  plan.spread_gradient(std::vector<View<const T>>(vectors.begin(), vectors.end()), {View<T>(div_block)});
  const auto [div_diff, div_scale] = max_difference(div_block, cut_block<T, D>(single.div, single.shape, plan.block()));
  if (!(kernel == Kernel::linear())) {  // its derivative jumps at the nodes (interp_gradient's note below)
    EXPECT_LE(div_diff, 10 * tolerance_of<T>() * std::max(1.0, div_scale)) << "spread_gradient, rank " << world_rank();
  }

  const std::vector<T> f_block = cut_block<T, D>(single.f, single.shape, plan.block());
  std::vector<T> values(m), expected(m);
  plan.interp({View<const T>(f_block)}, {View<T>(values)});
  for (std::size_t i = 0; i < m; ++i) expected[i] = single.phi[static_cast<std::size_t>(share.id[i])];
  const auto [interp_diff, interp_scale] = max_difference(values, expected);
  EXPECT_LE(interp_diff, tolerance_of<T>() * std::max(1.0, interp_scale)) << "interp, rank " << world_rank();

  std::vector<std::vector<T>> gradients(D, std::vector<T>(m));
  std::vector<View<T>> gradient_views(gradients.begin(), gradients.end());
  plan.interp_gradient({View<const T>(f_block)}, gradient_views);
  for (int d = 0; d < D; ++d) {
    for (std::size_t i = 0; i < m; ++i) expected[i] = single.grad[d][static_cast<std::size_t>(share.id[i])];
    const auto [diff, scale] = max_difference(gradients[d], expected);
    // A particle on a node of the linear kernel takes the slope of the cell above it:
    // a coordinate a rounding off the node (wrapped by migrate) may take the other one.
    if (kernel == Kernel::linear()) continue;
    EXPECT_LE(diff, 10 * tolerance_of<T>() * std::max(1.0, scale)) << "interp_gradient " << d << ", rank "
                                                                     << world_rank();
  }
  return m;
}

template <int D>
std::array<std::int64_t, D> cells_of(std::array<std::int64_t, 2> c2, std::array<std::int64_t, 3> c3) {
  if constexpr (D == 2) return c2;
  else return c3;
}

// Calls f(kernel, boundary, rng) for every kernel and boundary, with one fresh seed.
template <class F>
void for_every_kernel_and_boundary(F&& f) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const Kernel& kernel : all_kernels())
    for (BoundaryKind kind : all_boundaries()) {
      SCOPED_TRACE(kernel.name() + " " + name(kind));
      f(kernel, kind, rng);
    }
}

template <class T, int D>
void every_kernel_and_boundary(std::array<std::int64_t, 2> c2, std::array<std::int64_t, 3> c3, std::size_t n) {
  for_every_kernel_and_boundary([&](const Kernel& kernel, BoundaryKind kind, std::mt19937_64& rng) {
    const Grid<D> grid = make_grid<D>(cells_of<D>(c2, c3), kind);
    check_against_single_rank<T, D>(grid, kernel, mixed_positions<T, D>(grid, n, rng), rng);
  });
}

TEST(Distributed, EveryKernelAndBoundary2D) { every_kernel_and_boundary<double, 2>({13, 10}, {}, 400); }
TEST(Distributed, EveryKernelAndBoundary3D) { every_kernel_and_boundary<double, 3>({}, {9, 7, 6}, 500); }
TEST(Distributed, EveryKernelAndBoundaryFloat3D) { every_kernel_and_boundary<float, 3>({}, {8, 9, 7}, 500); }

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
TEST(Distributed, ThinAndUnevenBlocks) {
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
  for (const Kernel& kernel : {Kernel::linear(), Kernel::tsc(), Kernel::bspline(8)})
    for (BoundaryKind kind : all_boundaries()) {
      SCOPED_TRACE(kernel.name() + " " + name(kind));
      const Grid<3> grid_thin = make_grid<3>({p + 3, 5, 4}, kind);
      if (folds_onto_itself(grid_thin, kernel)) continue;
      check_against_single_rank<double, 3>(grid_thin, kernel, mixed_positions<double, 3>(grid_thin, 300, rng), rng,
                                           thin);
      const Grid<3> grid_uneven = make_grid<3>({6, 5, p * p + 2}, kind);
      check_against_single_rank<double, 3>(grid_uneven, kernel, mixed_positions<double, 3>(grid_uneven, 300, rng), rng,
                                           uneven);
    }
}

// All particles in one cell: the other ranks hold none.
TEST(Distributed, RanksWithoutParticles) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<2> grid = make_grid<2>({12, 11}, BoundaryKind::MixedFold);
  Positions<double, 2> x;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < 200; ++i) x[d].push_back(grid.origin[d] + (5 + unit(rng)) * grid.spacing[d]);
  const std::size_t mine = check_against_single_rank<double, 2>(grid, Kernel::mp4(), x, rng);
  long long holders = mine > 0 ? 1 : 0;
  EXPECT_EQ(sum_over_ranks(holders), 1);
}

// Particles that cross several blocks, and the periodic seam several times, in one move.
TEST(Distributed, MovesAcrossSeveralBlocks) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const int p = world_size();
  const Grid<3> grid = make_grid<3>({2 * p + 1, 7, 6}, BoundaryKind::Periodic);
  RankGrid<3> along_x;
  along_x.ranks = {p, 1, 1};
  DistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::tsc(), {}, along_x);
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
  EXPECT_GT(crossing, 0);
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
  check_against_single_rank<double, 3>(grid, Kernel::tsc(), {moved_x, moved_y, moved_z}, rng, along_x);
}

// The deterministic spread: the same bits at this rank count, with even and uneven cuts,
// as on one rank; within a rounding of the float64 reference.
template <class T, int D>
void check_deterministic(const Grid<D>& grid, const Kernel& kernel, std::size_t n, std::mt19937_64& rng) {
  const Positions<T, D> x = mixed_positions<T, D>(grid, n, rng);
  const std::vector<T> q = random_values<T>(n, rng);
  Options options;
  options.deterministic = true;
  // One rank: every particle, the whole mesh.
  DistributedPlan<T, D> one(MPI_COMM_SELF, grid, kernel, options);
  Share<T, D> everything = all_particles<T, D>(x, q);
  everything.migrate(one);
  one.set_points(everything.positions());
  std::vector<T> whole(one.block_size());
  one.spread({View<const T>(everything.q)}, {View<T>(whole)});

  // The float64 reference on the wrapped positions.
  std::array<std::vector<double>, D> xd;
  for (int d = 0; d < D; ++d) xd[d].assign(everything.x[d].begin(), everything.x[d].end());
  const std::vector<double> qd(everything.q.begin(), everything.q.end());
  std::vector<double> exact(whole.size());
  std::array<const double*, D> xp;
  for (int d = 0; d < D; ++d) xp[d] = xd[d].data();
  const double* qp = qd.data();
  double* ep = exact.data();
  reference::spread<D>(grid, kernel, n, xp, 1, &qp, &ep);
  const std::vector<double> whole_d(whole.begin(), whole.end());
  const auto [ref_diff, ref_scale] = max_difference(whole_d, exact);
  EXPECT_LE(ref_diff, tolerance_of<T>() * std::max(1.0, ref_scale)) << "against the float64 reference";

  RankGrid<D> even, uneven;
  uneven.ranks.fill(1);
  uneven.ranks[D - 1] = world_size();
  uneven.cuts[D - 1] = {0};
  for (int c = 1; c < world_size(); ++c) uneven.cuts[D - 1].push_back(c);
  uneven.cuts[D - 1].push_back(grid.cells[D - 1]);
  for (const RankGrid<D>& split : {even, uneven}) {
    DistributedPlan<T, D> plan(MPI_COMM_WORLD, grid, kernel, options, split);
    Share<T, D> share = deal<T, D>(x, q, n);
    share.migrate(plan);
    plan.set_points(share.positions());
    std::vector<T> block(plan.block_size());
    plan.spread({View<const T>(share.q.data(), share.count)}, {View<T>(block)});
    const std::vector<T> expected = cut_block<T, D>(whole, one.block_shape(), plan.block());
    EXPECT_EQ(differing_bits(block, expected), 0u) << "nodes whose bits differ from one rank's, rank " << world_rank();
  }
}

TEST(Distributed, DeterministicSpreadIsTheSameBitsAtAnyRankCount) {
  for_every_kernel_and_boundary([&](const Kernel& kernel, BoundaryKind kind, std::mt19937_64& rng) {
    check_deterministic<double, 2>(make_grid<2>({11, 9}, kind), kernel, 300, rng);
    check_deterministic<float, 3>(make_grid<3>({9, 8, 7}, kind), kernel, 300, rng);
  });
}

#if defined(PMKIT_WITH_CUDA)
// The GPUs there are (0 without a driver or a device: the CUDA tests skip).
int visible_gpus() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess) return devices;
  cudaGetLastError();
  return 0;
}

// CUDA ranks (one GPU each, round-robin over the GPUs there are): the same comparison on
// device arrays, through each transport. Skips without a GPU.
template <class T, int D>
void check_cuda_against_single_rank(const Grid<D>& grid, const Kernel& kernel, const Positions<T, D>& x,
                                    std::mt19937_64& rng, Transport transport, int devices) {
  using cuda::DeviceBuffer;
  const std::size_t n = x[0].size();
  const SingleRank<T, D> single(grid, kernel, x, rng);
  const std::vector<T>& q = single.q;

  Options options;
  options.backend = Backend::Cuda;
  options.device = world_rank() % devices;
  cuda::check(cudaSetDevice(options.device), "cudaSetDevice");
  DistributedPlan<T, D> plan(MPI_COMM_WORLD, grid, kernel, options, {}, transport);
  EXPECT_EQ(plan.transport(), transport);
  Share<T, D> share = deal<T, D>(x, q, n);
  std::array<DeviceBuffer<T>, D> dx;
  std::array<View<T>, D> positions;
  for (int d = 0; d < D; ++d) {
    dx[d] = DeviceBuffer<T>(share.x[d]);
    positions[d] = View<T>(dx[d].get(), n);
  }
  DeviceBuffer<T> dq(share.q), did(share.id);
  // The host plan's migrate of the same particles: the device's must give the same arrays.
  DistributedPlan<T, D> host_plan(MPI_COMM_WORLD, grid, kernel, {}, {});
  Share<T, D> host_share = share;
  host_share.migrate(host_plan);
  share.count = plan.migrate(positions, {View<T>(dq.get(), n), View<T>(did.get(), n)}, share.count);
  EXPECT_EQ(sum_over_ranks(static_cast<long long>(share.count)), static_cast<long long>(n));
  ASSERT_EQ(share.count, host_share.count);
  {
    std::vector<T> got = did.download();
    got.resize(share.count);
    EXPECT_EQ(got, std::vector<T>(host_share.id.begin(), host_share.id.begin() + host_share.count))
        << "ids after the device's migrate against the host's, rank " << world_rank();
    for (int d = 0; d < D; ++d) {
      got = dx[d].download();
      got.resize(share.count);
      EXPECT_EQ(got, std::vector<T>(host_share.x[d].begin(), host_share.x[d].begin() + host_share.count))
          << "positions[" << d << "] after the device's migrate against the host's, rank " << world_rank();
    }
  }
  const std::size_t m = share.count;
  std::array<View<const T>, D> mine;
  for (int d = 0; d < D; ++d) mine[d] = View<const T>(dx[d].get(), m);
  plan.set_points(mine);
  DeviceBuffer<T> block(std::max<std::int64_t>(1, plan.block_size()));
  plan.spread({View<const T>(dq.get(), m)}, {View<T>(block.get(), plan.block_size())});
  std::vector<T> host_block = block.download();
  host_block.resize(plan.block_size());
  const auto [spread_diff, spread_scale] = max_difference(host_block, cut_block<T, D>(single.rho, single.shape, plan.block()));
  EXPECT_LE(spread_diff, 1e-10 * std::max(1.0, spread_scale)) << "spread, rank " << world_rank();

  DeviceBuffer<T> f_block(cut_block<T, D>(single.f, single.shape, plan.block())), values(std::max<std::size_t>(1, m));
  plan.interp({View<const T>(f_block.get(), plan.block_size())}, {View<T>(values.get(), m)});
  std::vector<T> got = values.download(), ids = did.download(), expected(m);
  got.resize(m);
  for (std::size_t i = 0; i < m; ++i) expected[i] = single.phi[static_cast<std::size_t>(ids[i])];
  const auto [interp_diff, interp_scale] = max_difference(got, expected);
  EXPECT_LE(interp_diff, 1e-10 * std::max(1.0, interp_scale)) << "interp, rank " << world_rank();
}

TEST(DistributedCuda, MatchesSingleRank) {
  const int devices = visible_gpus();
  if (devices == 0) GTEST_SKIP() << "no GPU";
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (Transport transport : {Transport::Nccl, Transport::HostMpi})
    for (const Kernel& kernel : {Kernel::linear(), Kernel::mp4(), Kernel::bspline(6)})
      for (BoundaryKind kind : all_boundaries()) {
        SCOPED_TRACE(kernel.name() + " " + name(kind) + (transport == Transport::Nccl ? " nccl" : " host-mpi"));
        const Grid<3> grid = make_grid<3>({12, 9, 10}, kind);
        check_cuda_against_single_rank<double, 3>(grid, kernel, mixed_positions<double, 3>(grid, 3000, rng), rng,
                                                  transport, devices);
      }
}

// The deterministic spread of two properties (q, and `other` by particle id, of another
// magnitude) by `plan` of the particles `share`, migrated by the plan, on the host or, for
// a CUDA plan, on the device, added onto blocks that start at a pattern of their own;
// returns this rank's two blocks.
template <class T, int D>
std::array<std::vector<T>, 2> exact_blocks(DistributedPlan<T, D>& plan, Share<T, D> share, const std::vector<T>& other) {
  using cuda::DeviceBuffer;
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
  auto second_property = [&] {
    std::vector<T> p(share.count);
    for (std::size_t i = 0; i < share.count; ++i) p[i] = other[static_cast<std::size_t>(share.id[i])];
    return p;
  };
  if (plan.options().backend != Backend::Cuda) {
    share.migrate(plan);
    const std::vector<T> p = second_property();
    plan.set_points(share.positions());
    plan.spread({View<const T>(share.q.data(), share.count), View<const T>(p)},
                {View<T>(blocks[0]), View<T>(blocks[1])}, Accumulate::Add);
    return blocks;
  }
  const std::size_t capacity = share.q.size();
  std::array<DeviceBuffer<T>, D> dx;
  std::array<View<T>, D> positions;
  std::array<View<const T>, D> mine;
  for (int d = 0; d < D; ++d) {
    dx[d] = DeviceBuffer<T>(share.x[d]);
    positions[d] = View<T>(dx[d].get(), capacity);
  }
  DeviceBuffer<T> dq(share.q), did(share.id);
  share.count = plan.migrate(positions, {View<T>(dq.get(), capacity), View<T>(did.get(), capacity)}, share.count);
  share.id = did.download();
  for (int d = 0; d < D; ++d) mine[d] = View<const T>(dx[d].get(), share.count);
  DeviceBuffer<T> dp(std::max<std::size_t>(1, share.count));
  if (share.count > 0) dp.upload(second_property());
  plan.set_points(mine);
  std::array<DeviceBuffer<T>, 2> device_blocks = {DeviceBuffer<T>(blocks[0]), DeviceBuffer<T>(blocks[1])};
  plan.spread({View<const T>(dq.get(), share.count), View<const T>(dp.get(), share.count)},
              {View<T>(device_blocks[0].get(), blocks[0].size()), View<T>(device_blocks[1].get(), blocks[1].size())},
              Accumulate::Add);
  for (int b = 0; b < 2; ++b) {
    blocks[b] = device_blocks[b].download();
    blocks[b].resize(plan.block_size());
  }
  return blocks;
}

// CUDA ranks' deterministic spread against the CPU ranks': the same bits on one rank and
// at this rank count (through `transport`), as the CPU ranks' one-rank result cut to the
// blocks.
template <class T, int D>
void check_cuda_deterministic(const Grid<D>& grid, const Kernel& kernel, std::size_t n, std::mt19937_64& rng,
                              Transport transport, int devices) {
  const Positions<T, D> x = mixed_positions<T, D>(grid, n, rng);
  const std::vector<T> q = random_values<T>(n, rng), other = random_values<T>(n, rng, -1e3, 1e3);
  Options host, device;
  host.deterministic = device.deterministic = true;
  device.backend = Backend::Cuda;
  device.device = world_rank() % devices;
  cuda::check(cudaSetDevice(device.device), "cudaSetDevice");
  Share<T, D> everything = all_particles<T, D>(x, q);
  DistributedPlan<T, D> cpu_one(MPI_COMM_SELF, grid, kernel, host);
  const std::array<std::vector<T>, 2> whole = exact_blocks(cpu_one, everything, other);
  DistributedPlan<T, D> gpu_one(MPI_COMM_SELF, grid, kernel, device);
  const std::array<std::vector<T>, 2> one = exact_blocks(gpu_one, everything, other);
  DistributedPlan<T, D> gpu_all(MPI_COMM_WORLD, grid, kernel, device, {}, transport);
  const std::array<std::vector<T>, 2> all = exact_blocks(gpu_all, deal<T, D>(x, q, n), other);
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(differing_bits(one[b], whole[b]), 0u) << "property " << b << ": one CUDA rank against one CPU rank";
    EXPECT_EQ(differing_bits(all[b], cut_block<T, D>(whole[b], cpu_one.block_shape(), gpu_all.block())), 0u)
        << "property " << b << ": CUDA ranks against one CPU rank, rank " << world_rank();
  }
}

TEST(DistributedCuda, DeterministicSpreadIsTheCpuRanksBits) {
  const int devices = visible_gpus();
  if (devices == 0) GTEST_SKIP() << "no GPU";
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int c = 0;
  for (const Kernel& kernel : {Kernel::linear(), Kernel::tsc(), Kernel::mp4(), Kernel::bspline(8)})
    for (BoundaryKind kind : all_boundaries()) {
      // Each case through both transports: double one way, float the other.
      const Transport first = c++ % 2 == 0 ? Transport::Nccl : Transport::HostMpi;
      const Transport second = first == Transport::Nccl ? Transport::HostMpi : Transport::Nccl;
      SCOPED_TRACE(kernel.name() + " " + name(kind) +
                   (first == Transport::Nccl ? " (nccl: double and 2D; host-mpi: float 3D)"
                                             : " (host-mpi: double and 2D; nccl: float 3D)"));
      check_cuda_deterministic<double, 3>(make_grid<3>({10, 9, 8}, kind), kernel, 1500, rng, first, devices);
      check_cuda_deterministic<float, 3>(make_grid<3>({9, 8, 11}, kind), kernel, 1500, rng, second, devices);
      check_cuda_deterministic<float, 2>(make_grid<2>({13, 11}, kind), kernel, 800, rng, first, devices);
    }
}

// A value that is not finite on one CUDA rank: every rank fails, and no block changes.
TEST(DistributedCuda, DeterministicSpreadRejectsValuesNotFinite) {
  const int devices = visible_gpus();
  if (devices == 0) GTEST_SKIP() << "no GPU";
  using cuda::DeviceBuffer;
  Options options;
  options.deterministic = true;
  options.backend = Backend::Cuda;
  options.device = world_rank() % devices;
  cuda::check(cudaSetDevice(options.device), "cudaSetDevice");
  const Grid<3> grid = make_grid<3>({10, 9, 8}, BoundaryKind::Periodic);
  DistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::mp4(), options);
  // Rank 0 holds one particle, in the middle of its block's first cell, of charge inf.
  const std::size_t m = world_rank() == 0 ? 1 : 0;
  std::array<DeviceBuffer<double>, 3> x;
  std::array<View<const double>, 3> mine;
  for (int d = 0; d < 3; ++d) {
    x[d] = DeviceBuffer<double>(
        std::vector<double>{grid.origin[d] + (plan.block().first_cell[d] + 0.5) * grid.spacing[d]});
    mine[d] = View<const double>(x[d].get(), m);
  }
  plan.set_points(mine);
  const std::vector<double> before(std::max<std::int64_t>(1, plan.block_size()), 0.5);
  DeviceBuffer<double> q(std::vector<double>{std::numeric_limits<double>::infinity()}), block(before);
  EXPECT_EQ(error_code_of([&] {
              plan.spread({View<const double>(q.get(), m)}, {View<double>(block.get(), plan.block_size())});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(block.download(), before) << "rank " << world_rank();
}
#endif

// ---------------------------------------------------------------------------------
// Errors: every rank throws, and nothing the caller owns changes.

TEST(DistributedErrors, MeshTooSmallForTheRanks) {
  EXPECT_EQ(error_code_of([] { DistributedPlan<double, 2>(MPI_COMM_WORLD, Grid<2>::periodic({1, 1}), Kernel::linear()); }),
            ErrorCode::InvalidArgument);
  RankGrid<2> wrong;
  wrong.ranks = {world_size() + 1, 1};
  EXPECT_EQ(error_code_of([&] { DistributedPlan<double, 2>(MPI_COMM_WORLD, Grid<2>::periodic({16, 16}), Kernel::linear(), {}, wrong); }),
            ErrorCode::InvalidArgument);
  RankGrid<2> bad_cuts;
  bad_cuts.ranks = {world_size(), 1};
  bad_cuts.cuts[0].assign(world_size() + 1, 0);
  bad_cuts.cuts[0].back() = 16;
  EXPECT_EQ(error_code_of([&] { DistributedPlan<double, 2>(MPI_COMM_WORLD, Grid<2>::periodic({16, 16}), Kernel::linear(), {}, bad_cuts); }),
            ErrorCode::InvalidArgument);
}

TEST(DistributedErrors, CapacityOverflowMovesNothing) {
  const Grid<2> grid = Grid<2>::bounded({16, 16}, 1.0);
  RankGrid<2> along_x;
  along_x.ranks = {world_size(), 1};
  DistributedPlan<double, 2> plan(MPI_COMM_WORLD, grid, Kernel::linear(), {}, along_x);
  // Every rank holds 10 particles in the first block, in arrays of 12 slots.
  Share<double, 2> share(12);
  for (int i = 0; i < 10; ++i) {
    share.x[0][i] = 0.5 + 0.01 * i;
    share.x[1][i] = 3.0 + i;
    share.q[i] = i;
  }
  share.count = 10;
  const Share<double, 2> before = share;
  EXPECT_EQ(error_code_of([&] { share.migrate(plan); }), ErrorCode::OutOfMemory);
  EXPECT_EQ(share.count, 10u);
  EXPECT_EQ(share.x, before.x);
  EXPECT_EQ(share.q, before.q);
  // With room for all of them they arrive.
  Share<double, 2> roomy(10 * world_size());
  for (int d = 0; d < 2; ++d) std::copy(before.x[d].begin(), before.x[d].begin() + 10, roomy.x[d].begin());
  roomy.count = 10;
  roomy.migrate(plan);
  EXPECT_EQ(roomy.count, plan.rank() == 0 ? static_cast<std::size_t>(10 * world_size()) : 0u);
}

TEST(DistributedErrors, BadPositionsOnOneRankFailEverywhere) {
  const Grid<2> grid = Grid<2>::bounded({16, 16}, 1.0);
  DistributedPlan<double, 2> plan(MPI_COMM_WORLD, grid, Kernel::tsc());
  Share<double, 2> share(4);
  share.x[0] = {1, 2, 3, 4};
  share.x[1] = {1, 2, 3, 4};
  share.count = 4;
  if (plan.rank() == world_size() - 1) share.x[1][2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_code_of([&] { share.migrate(plan); }), ErrorCode::NonFinitePosition);
  share.x[1][2] = 3;
  if (plan.rank() == 0) share.x[0][1] = 17;  // outside the bounded grid
  EXPECT_EQ(error_code_of([&] { share.migrate(plan); }), ErrorCode::OutOfBounds);
  share.x[0][1] = 2;
  // Not migrated: some particles lie in other ranks' blocks.
  Share<double, 2> strangers(1);
  strangers.x[0][0] = plan.rank() == 0 ? 15.5 : 0.5;
  strangers.x[1][0] = plan.rank() == 0 ? 15.5 : 0.5;
  strangers.count = 1;
  EXPECT_EQ(error_code_of([&] { plan.set_points(strangers.positions()); }), ErrorCode::InvalidArgument);
}

TEST(DistributedErrors, MismatchedArrays) {
  const Grid<3> grid = Grid<3>::periodic({8, 8, 8}, 0.125);
  DistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::mp4());
  Share<double, 3> share(0);
  plan.set_points(share.positions());
  std::vector<double> q, wrong(plan.block_size() + (plan.rank() == 0 ? 1 : 0)), right(plan.block_size());
  EXPECT_EQ(error_code_of([&] { plan.spread({View<const double>(q)}, {View<double>(wrong)}); }), ErrorCode::SizeMismatch);
  // A different number of properties on one rank.
  std::vector<View<const double>> props(plan.rank() == 0 ? 2 : 1, View<const double>(q));
  std::vector<View<double>> meshes(props.size(), View<double>(right));
  EXPECT_EQ(error_code_of([&] { plan.spread(props, meshes); }), ErrorCode::SizeMismatch);
  // Positions of different lengths in migrate.
  Share<double, 3> ragged(3);
  ragged.x[2].resize(plan.rank() == 0 ? 2 : 3);
  EXPECT_EQ(error_code_of([&] { ragged.migrate(plan); }), ErrorCode::SizeMismatch);
  // The deterministic spread takes finite values only.
  Options options;
  options.deterministic = true;
  DistributedPlan<double, 3> exact(MPI_COMM_WORLD, grid, Kernel::mp4(), options);
  Share<double, 3> one(1);
  one.count = 0;
  if (exact.rank() == 0) {
    one.x[0][0] = one.x[1][0] = one.x[2][0] = 0.01;
    one.q[0] = std::numeric_limits<double>::infinity();
    one.count = 1;
  }
  exact.set_points(one.positions());
  EXPECT_EQ(error_code_of([&] { exact.spread({View<const double>(one.q.data(), one.count)}, {View<double>(right)}); }),
            ErrorCode::InvalidArgument);
}

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
