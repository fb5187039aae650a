// CUDA white box: the fixed-point accumulation of the fast and deterministic spreads.
// Sparse float blocks keep float's accuracy, a full block at one node fits its word,
// double properties near both ends of double's range, and the peak weight and gradient
// bounds the scales come from.
#include <cmath>

#include "cuda/plan/peak_weight.hpp"
#include "cuda/tuning/method_choice.hpp"
#include "cuda_cases.hpp"

namespace pmkit::test {
namespace {

// The float fast mode's rounding on sparse input: blocks of a few particles take their
// fixed-point scale from their own sum of |q| (31 bits of it), so a lone particle's small
// outer weights keep float's accuracy. A scale bounded by max |q| at 21 bits loses that
// accuracy on such input by more than an order of magnitude: the tolerance sits between
// the two, at a tenth of the general float tolerance.
TEST(Cuda, SparseFloatSpreadKeepsFloatAccuracy) {
  PMKIT_REQUIRE_GPU();
  constexpr double kSparseTolerance = 1e-6;
  for (const Kernel& k : {Kernel::mp4(), Kernel::linear(), Kernel::bspline(6)})
    for (double per_cell : {0.01, 0.05}) {
      check_against_reference<float, 3>(cuda_method(SpreadMethod::CudaSharedTiles), k, {64, 48, 56},
                                        BoundaryKind::Periodic, per_cell, Distribution::Uniform, 1, 0, 1.0,
                                        kSparseTolerance);
      check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaSharedTiles), k, {300, 260},
                                        BoundaryKind::Periodic, per_cell, Distribution::Uniform, 1, 0, 1.0,
                                        kSparseTolerance);
    }
}

// A full block (1024 particles) at one position, where one node takes the kernel's peak
// weight from each: that node's sum is the largest that the fast mode's one 32-bit word
// holds (one_word_scale), with charges of one sign and of the other. Every kernel, 2D and
// 3D, on a node and half a cell off (the peak of even and of odd supports). A sum past
// 2^31 wraps, and its node comes out wrong by its own size; within the word, the float
// tolerance holds (the particles' roundings are all alike here, so they do not average).
template <int D>
void check_full_block_on_one_position(const Kernel& kernel, double offset, float charge) {
  SCOPED_TRACE(testing::Message() << kernel.name() << ", " << D << "D, offset " << offset << ", q " << charge);
  std::array<std::int64_t, D> cells;
  cells.fill(16);
  const Grid<D> grid = Grid<D>::periodic(cells, 1.0);
  const std::size_t n = cuda::tuning::kChunkParticles;
  Positions<float, D> pos;
  for (auto& p : pos) p.assign(n, static_cast<float>(5 + offset));
  Options opt = cuda_options();
  opt.host_arrays = true;
  opt.spread_method = SpreadMethod::CudaSharedTiles;
  Plan<float, D> plan(grid, kernel, opt);
  plan.set_points(views_of<float, D>(pos));
  const std::vector<float> q(n, charge);
  std::vector<float> mesh(static_cast<std::size_t>(plan.mesh_size()));
  plan.spread({View<const float>(q)}, {View<float>(mesh)});
  const auto xd = positions_as_double<float, D>(views_of<float, D>(pos));
  const std::vector<double> want = reference_spread<D>(grid, kernel, pointers<D>(xd), std::vector<double>(n, charge));
  EXPECT_LE(rel_l2<float>(View<const float>(mesh), want), tolerance<float>());
}

TEST(Cuda, FullBlockAtThePeakFitsOneWord) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels())
    for (double offset : {0.0, 0.5})
      for (float charge : {1.0f, -1.0f}) {
        check_full_block_on_one_position<2>(k, offset, charge);
        check_full_block_on_one_position<3>(k, offset, charge);
      }
}

// Every spread method (and the deterministic tiles) on M'4 double properties of about
// `scale`, against the float64 reference.
void check_double_properties(double scale, Distribution dist, double spread_tolerance) {
  for (auto method : {SpreadMethod::CudaSharedTiles, SpreadMethod::CudaGlobalAtomics, SpreadMethod::CudaCellMoments})
    for (bool deterministic : {false, true}) {
      if (deterministic && method != SpreadMethod::CudaSharedTiles) continue;  // refused in deterministic mode
      check_against_reference<double, 3>(cuda_method(method, deterministic), Kernel::mp4(), {20, 17, 24},
                                         BoundaryKind::Periodic, 4.0, dist, 1, 0, scale, spread_tolerance);
    }
}

// Double properties near the bottom of double's range. The fixed-point scale of a block
// (or, deterministic, of the whole spread) would have to pass 2^1023 there; it is capped
// at 2^1023 (fixed_point.cuh, pow2_scale), so such values keep fewer bits the smaller
// they are: a value q gets ~1023 + log2(q) of them, ~27 at 1e-300 and ~20 at 1e-302
// (node errors near 1e-7 and 1e-5 relative, by a count of the roundings), not zeros, as
// an unbounded scale would give. From ~1e-280 up, the usual precision. Cell moments run
// the same cases: a bound of theirs summed in float would be 0 there (a scale of 1, and
// zeros).
TEST(Cuda, DoublePropertiesNearTheBottomOfTheRange) {
  PMKIT_REQUIRE_GPU();
  for (double scale : {1e-300, 1e-302}) check_double_properties(scale, Distribution::Uniform, 1e-4);
}

// Double properties near the top of double's range, clustered so that blocks hold a
// full chunk of 1024 particles: the fast mode's block sum of |q| (~1024 x 2e305) would
// pass DBL_MAX and spread NaN over the block's window (as would cell moments' sums in
// float, from 3.4e38); the sums are taken in units of 2^11 or 2^13 (AbsSum). The node
// sums themselves stay near 1e307 (random signs), so the float64 reference stays finite.
TEST(Cuda, DoublePropertiesNearTheTopOfTheRange) {
  PMKIT_REQUIRE_GPU();
  check_double_properties(4e305, Distribution::Clustered, tolerance<double>());
}

// The peak weight that bounds the fixed-point accumulation comes from the kernels' own
// weights (kernels::weights_1d), not from the float64 reference: both agree to rounding.
TEST(Cuda, PeakWeightFromTheKernelsOwnWeights) {
  for (const Kernel& kernel : all_kernels())
    for (int dims : {2, 3}) {
      const double want = std::pow(reference::weight(kernel, 0.0), dims);
      EXPECT_NEAR(cuda::peak_weight(kernel, dims), want, 1e-15 * want) << kernel.name() << ", " << dims << "D";
    }
}

// The bound on spread_gradient's contributions holds the largest derivative the
// float64 reference finds on a fine sweep, and is within 1% of it.
TEST(Cuda, PeakGradientBoundsTheDerivatives) {
  for (const Kernel& kernel : all_kernels())
    for (int dims : {2, 3}) {
      double largest = 0;
      for (int i = -40000; i <= 40000; ++i)
        largest = std::max(largest, std::fabs(reference::weight_derivative(kernel, i * 1e-4)));
      const double want = largest * std::pow(reference::weight(kernel, 0.0), dims - 1);
      const double bound = cuda::peak_gradient(kernel, dims);
      EXPECT_GE(bound, want * (1 - 1e-12)) << kernel.name() << ", " << dims << "D";
      EXPECT_LE(bound, want * 1.01) << kernel.name() << ", " << dims << "D";
    }
}

}  // namespace
}  // namespace pmkit::test
