// Dense inputs: many particles per mesh node, where a float spread that rounds every
// contribution into the mesh loses mass. Up to 2^20 particles in one cell (every kernel,
// 2D and 3D), the error against the float64 reference at 2^12, 2^16 and 2^20 per cell,
// and clustered particles at high density on bounded and mixed grids. Each test body
// runs on the CPU methods at one and several threads and on CUDA (skipped without a GPU).
#include "matrix_plan.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

// The CPU methods at one and several threads; CUDA's deterministic mode (its integer
// sums span the whole call) and its fast mode: a tile of many blocks (2^20 particles in
// one cell: 1024) sums them in a double window and rounds each node into the float mesh
// once (flush_heavy), so its error does not grow with the particles per node. A block
// rounds each contribution to 31 bits of its own sum of |q| (one 32-bit word a node): for
// charges of either sign, whose sums cancel, check_clustered holds its error relative to
// the spread of |q|. Not the global atomics, which round every contribution into the mesh.
std::vector<Variant> dense_variants() {
  return variants_named<Options>({"Cpu1", "Cpu2", "Cpu3Slabs", "Cpu3PrivateMeshes", "CudaHostArrays", "CudaDevice",
                                  "CudaDeterministic", "CudaSharedTiles"});
}

// A float mesh against the float64 reference: relative L2 error of a few roundings per
// node, and the mass error of the whole mesh, at any number of particles per node.
constexpr double kDenseL2 = 4e-7;
constexpr double kDenseMass = 1e-6;
// The error at 2^20 particles per cell stays within kGrowth times the larger of the
// error at 2^12 and one float rounding (2^-24).
constexpr double kGrowth = 4.0;
constexpr double kRounding = 0x1p-24;

class DenseTest : public KernelCaseTest {};
class DenseClusteredTest : public KernelCaseTest {};

struct SpreadError {
  double l2, mass;
};

// Spreads unit charges at `pos` in float; its error against the float64 mesh `want`.
template <int D>
SpreadError unit_spread_error(const Variant& bc, const Grid<D>& grid, const Kernel& kernel,
                              const Positions<float, D>& pos, const std::vector<double>& want) {
  MatrixPlan<float, D> plan(grid, kernel, bc);
  plan.set_points(views_of<float, D>(pos));
  const std::size_t n = pos[0].size();
  const std::vector<float> q(n, 1.0f);
  std::vector<float> mesh(want.size(), std::numeric_limits<float>::quiet_NaN());
  plan.spread({View<const float>(q)}, {View<float>(mesh)});
  double total = 0;
  for (float m : mesh) total += m;
  return {rel_l2<float>(View<const float>(mesh), want), std::fabs(total - static_cast<double>(n)) / n};
}

// The float64 reference of unit charges at coordinates xs along an axis of `cells` cells
// of width h, summed over the other axis: per node the sum of the weights it receives
// (the weights of one particle sum to one across the other axis).
std::vector<double> profile(const Kernel& kernel, std::int64_t cells, double h, const std::vector<double>& xs) {
  const Grid<2> line = Grid<2>::periodic({cells, 8}, h);
  const std::vector<double> y(xs.size(), 2.5 * h), q(xs.size(), 1.0);
  const std::vector<double> mesh = reference_spread<2>(line, kernel, {xs.data(), y.data()}, q);
  std::vector<double> p(static_cast<std::size_t>(cells), 0.0);
  for (std::size_t i = 0; i < mesh.size(); ++i) p[i % p.size()] += mesh[i];
  return p;
}

// Particles on every combination of per[d] random coordinates inside one random cell per
// dimension; the reference mesh of unit charges is the outer product of one profile per
// dimension, so it costs nothing next to the spread of per[0] x ... x per[D-1] particles.
template <int D>
struct TensorCell {
  Positions<float, D> pos;
  std::vector<double> reference;
};

template <int D>
TensorCell<D> tensor_cell(const Grid<D>& grid, const Kernel& kernel, const std::array<std::size_t, D>& per,
                          std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::array<std::vector<float>, D> axis;
  std::array<std::vector<double>, D> prof;
  std::size_t n = 1;
  for (int d = 0; d < D; ++d) {
    const double h = grid.spacing[d];
    const auto cell = static_cast<std::int64_t>(unit(rng) * static_cast<double>(grid.cells[d]));
    std::vector<double> xs(per[d]);
    for (std::size_t i = 0; i < per[d]; ++i) {
      axis[d].push_back(static_cast<float>(grid.origin[d] + (static_cast<double>(cell) + unit(rng)) * h));
      xs[i] = axis[d].back();
    }
    prof[d] = profile(kernel, grid.cells[d], h, xs);
    n *= per[d];
  }
  TensorCell<D> t;
  for (auto& p : t.pos) p.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t rest = i;
    for (int d = 0; d < D; ++d) {
      t.pos[d][i] = axis[d][rest % per[d]];
      rest /= per[d];
    }
  }
  t.reference.resize(static_cast<std::size_t>(mesh_size(grid, kernel.ghost_width())));
  for (std::size_t i = 0; i < t.reference.size(); ++i) {
    std::size_t rest = i;
    double v = 1.0;
    for (int d = 0; d < D; ++d) {
      v *= prof[d][rest % prof[d].size()];
      rest /= prof[d].size();
    }
    t.reference[i] = v;
  }
  return t;
}

// Particles per dimension of the tensor cells: 2^12, 2^16 and 2^20 in all.
template <int D>
std::array<std::array<std::size_t, D>, 3> tensor_sizes() {
  if constexpr (D == 2)
    return {{{64, 64}, {256, 256}, {1024, 1024}}};
  else
    return {{{16, 16, 16}, {64, 32, 32}, {128, 128, 64}}};
}

// 2^12, 2^16 and 2^20 unit charges in one cell of a periodic unit box of 16^D cells.
template <int D>
void check_density_growth(const Variant& bc, const Kernel& kernel, std::mt19937_64& rng) {
  std::array<std::int64_t, D> cells;
  cells.fill(16);
  const Grid<D> grid = Grid<D>::periodic(cells, 1.0 / 16);
  const auto sizes = tensor_sizes<D>();
  double sparse = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const TensorCell<D> cell = tensor_cell<D>(grid, kernel, sizes[k], rng);
    const std::size_t n = cell.pos[0].size();
    SCOPED_TRACE(std::to_string(D) + "D, " + std::to_string(n) + " particles in one cell");
    if (k == 0) {  // the outer product against the reference spread of every particle
      const auto xd = positions_as_double<float, D>(views_of<float, D>(cell.pos));
      const std::vector<double> direct =
          reference_spread<D>(grid, kernel, pointers<D>(xd), std::vector<double>(n, 1.0));
      EXPECT_LE(rel_l2<double>(View<const double>(cell.reference), direct), 1e-13) << "tensor reference";
    }
    const SpreadError e = unit_spread_error<D>(bc, grid, kernel, cell.pos, cell.reference);
    // The errors, for --gtest_output=xml (how far below the bounds a backend stays).
    const std::string key = std::to_string(D) + "d_" + std::to_string(n);
    ::testing::Test::RecordProperty("l2_" + key, ::testing::PrintToString(e.l2));
    ::testing::Test::RecordProperty("mass_" + key, ::testing::PrintToString(e.mass));
    EXPECT_LE(e.l2, kDenseL2) << "relative L2";
    EXPECT_LE(e.mass, kDenseMass) << "mass";
    if (k == 0) sparse = e.l2;
    if (k + 1 == sizes.size()) {
      EXPECT_LE(e.l2, kGrowth * std::max(sparse, kRounding))
          << "relative L2 grows with the particles per node: " << sparse << " at the fewest";
    }
  }
}

TEST_P(DenseTest, ErrorDoesNotGrowWithParticlesPerNode) {
  SCOPED_TRACE(seed_note(seed_));
  check_density_growth<2>(bc_, kernel_, rng_);
  check_density_growth<3>(bc_, kernel_, rng_);
}

// 2^19 unit charges in one cell (512 blocks of one tile on CUDA), two properties (1 and
// 0.75 a particle) in one pass, spread twice into the same meshes, the second time
// adding: each spread adds the tile's sums once, whatever the meshes held before (a sum
// added twice, or left in a window for the next spread, is off by a third or more). The
// general float tolerance: this checks that the sums are added once; the accuracy at
// density is ErrorDoesNotGrowWithParticlesPerNode's.
TEST_P(DenseTest, RepeatedSpreadsAddOnce) {
  SCOPED_TRACE(seed_note(seed_));
  const Grid<3> grid = Grid<3>::periodic({16, 16, 16}, 1.0 / 16);
  const TensorCell<3> cell = tensor_cell<3>(grid, kernel_, {128, 64, 64}, rng_);
  MatrixPlan<float, 3> plan(grid, kernel_, bc_);
  plan.set_points(views_of<float, 3>(cell.pos));
  const std::size_t n = cell.pos[0].size();
  const std::vector<float> ones(n, 1.0f), three_quarters(n, 0.75f);
  std::array<std::vector<float>, 2> mesh;
  for (auto& m : mesh) m.assign(cell.reference.size(), std::numeric_limits<float>::quiet_NaN());
  const std::vector<View<const float>> props = {View<const float>(ones), View<const float>(three_quarters)};
  const std::vector<View<float>> meshes = {View<float>(mesh[0]), View<float>(mesh[1])};
  plan.spread(props, meshes);
  plan.spread(props, meshes, Accumulate::Add);
  const double per_spread[2] = {1.0, 0.75};
  for (int j = 0; j < 2; ++j) {
    std::vector<double> want(cell.reference);
    for (double& w : want) w *= 2 * per_spread[j];
    EXPECT_LE(rel_l2<float>(View<const float>(mesh[j]), want), tolerance<float>()) << "property " << j;
  }
}

// Clustered particles (90% in three cells) at tens of thousands per cell, two
// properties (positive, and of either sign) at once, against the float64 reference.
template <int D>
void check_clustered(const Variant& bc, const Kernel& kernel, const std::array<std::int64_t, D>& cells,
                     BoundaryKind boundary, std::mt19937_64& rng) {
  SCOPED_TRACE(std::to_string(D) + "D " + name(boundary));
  const Grid<D> grid = make_grid<D>(cells, boundary);
  const std::size_t n = std::size_t(1) << 16;
  const Positions<float, D> pos = make_positions<float, D>(grid, Distribution::Clustered, n, rng);
  MatrixPlan<float, D> plan(grid, kernel, bc);
  plan.set_points(views_of<float, D>(pos));
  const std::array<std::vector<float>, 2> q = {random_values<float>(n, rng, 0.5, 1.5), random_values<float>(n, rng)};
  std::array<std::vector<float>, 2> mesh;
  for (auto& m : mesh) m.assign(static_cast<std::size_t>(plan.mesh_size()), std::numeric_limits<float>::quiet_NaN());
  plan.spread({View<const float>(q[0]), View<const float>(q[1])}, {View<float>(mesh[0]), View<float>(mesh[1])});

  const auto xd = positions_as_double<float, D>(views_of<float, D>(pos));
  std::array<std::vector<double>, 2> qd, want;
  const double* qp[2];
  double* wp[2];
  for (int j = 0; j < 2; ++j) {
    qd[j] = to_double<float>(View<const float>(q[j]));
    want[j].assign(mesh[j].size(), 0.0);
    qp[j] = qd[j].data();
    wp[j] = want[j].data();
  }
  reference::spread<D>(grid, kernel, n, pointers<D>(xd), 2, qp, wp);
  EXPECT_LE(rel_l2<float>(View<const float>(mesh[0]), want[0]), kDenseL2) << "positive charges";
  if (bc.exec.backend == Backend::Cuda && !bc.deterministic) {
    // The fast mode rounds each contribution relative to its block's sum of |q|: for
    // charges of either sign its error is bounded relative to the spread of |q| (whose
    // sums do not cancel), not to the spread of q.
    std::vector<double> magnitude(n), spread_of_magnitude(mesh[1].size(), 0.0);
    for (std::size_t i = 0; i < n; ++i) magnitude[i] = std::fabs(qd[1][i]);
    const double* mp[1] = {magnitude.data()};
    double* sp[1] = {spread_of_magnitude.data()};
    reference::spread<D>(grid, kernel, n, pointers<D>(xd), 1, mp, sp);
    double error = 0, norm = 0;
    for (std::size_t i = 0; i < mesh[1].size(); ++i) {
      error += (mesh[1][i] - want[1][i]) * (mesh[1][i] - want[1][i]);
      norm += spread_of_magnitude[i] * spread_of_magnitude[i];
    }
    EXPECT_LE(std::sqrt(error / norm), kDenseL2) << "charges of either sign, relative to the spread of |q|";
  } else {
    EXPECT_LE(rel_l2<float>(View<const float>(mesh[1]), want[1]), kDenseL2) << "charges of either sign";
  }
  double mass = 0, total = 0;
  for (float m : mesh[0]) mass += m;
  for (double v : qd[0]) total += v;
  EXPECT_LE(std::fabs(mass - total) / total, kDenseMass) << "mass";
}

TEST_P(DenseClusteredTest, ClusteredAtHighDensity) {
  SCOPED_TRACE(seed_note(seed_));
  check_clustered<2>(bc_, kernel_, {23, 17}, BoundaryKind::Keep, rng_);
  check_clustered<3>(bc_, kernel_, {11, 9, 13}, BoundaryKind::MixedFold, rng_);
}

auto every_kernel_in_float() {
  return ::testing::Combine(::testing::ValuesIn(dense_variants()), ::testing::ValuesIn(all_kernels()),
                            ::testing::Values(Precision::Float));
}
INSTANTIATE_TEST_SUITE_P(AllKernels, DenseTest, every_kernel_in_float(), kernel_case_name);
INSTANTIATE_TEST_SUITE_P(AllKernels, DenseClusteredTest, every_kernel_in_float(), kernel_case_name);

}  // namespace
}  // namespace pmkit::test
