// CUDA white box: the cell moments spread (SpreadMethod::CudaCellMoments) on every kernel
// it takes, in 2D too, at densities of one span a tile and several; Auto's choice and the
// refusals. The matrix's CudaCellMoments variant runs the generic bodies.
#include "cuda/tuning/method_choice.hpp"
#include "cuda_cases.hpp"

namespace pmkit::test {
namespace {

// Cell moments (SpreadMethod::CudaCellMoments): every kernel it takes (up to 64 nodes a
// particle), float and double, 2D and 3D, periodic and bounded, at densities that give
// one span a tile and several (more than tuning::kCellSpanParticles in a tile).
TEST(Cuda, CellMomentsAgainstReference) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels()) {
    if (pmkit::cuda::tuning::cell_moments_fit(k.support(), 3)) {
      for (double per_cell : {3.0, 40.0})
        check_against_reference<float, 3>(cuda_method(SpreadMethod::CudaCellMoments), k, {37, 26, 29},
                                          BoundaryKind::Periodic, per_cell, Distribution::Uniform, 1);
      check_against_reference<double, 3>(cuda_method(SpreadMethod::CudaCellMoments), k, {19, 12, 23},
                                         BoundaryKind::Fold, 10.0, Distribution::Seam, 1);
    }
    ASSERT_TRUE(pmkit::cuda::tuning::cell_moments_fit(k.support(), 2));
    check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaCellMoments), k, {45, 31}, BoundaryKind::Keep, 20.0,
                                      Distribution::Uniform, 1);
    check_against_reference<double, 2>(cuda_method(SpreadMethod::CudaCellMoments), k, {70, 33}, BoundaryKind::MixedFold,
                                       12.0, Distribution::Faces, 1);
  }
}

// Auto does not take cell moments, even at 64 a cell (slower than tiles:
// docs/tuning.md#kcellspanparticles); an explicit request it cannot honour is refused.
TEST(Cuda, CellMomentsChoiceAndRefusals) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const Grid<3> grid = make_grid<3>({32, 32, 32}, BoundaryKind::Periodic);
  {
    const auto pos = make_positions<float, 3>(grid, Distribution::Uniform, std::size_t(64) * 32 * 32 * 32, rng);
    DeviceBuffer<float> dx(pos[0]), dy(pos[1]), dz(pos[2]);
    Plan<float, 3> plan(grid, Kernel::mp4(), cuda_options());
    plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
    EXPECT_EQ(plan.spread_method_name().find("cell-moments"), std::string::npos) << plan.spread_method_name();
  }
  Options opt = cuda_options();
  opt.spread_method = SpreadMethod::CudaCellMoments;
  expect_pmkit_error(ErrorCode::Unsupported, "at most 64", [&] { Plan<float, 3> p(grid, Kernel::bspline(6), opt); },
                     "B-spline 6 in 3D");
  opt.deterministic = true;
  expect_pmkit_error(ErrorCode::Unsupported, "deterministic", [&] { Plan<float, 3> p(grid, Kernel::mp4(), opt); },
                     "deterministic");
}

}  // namespace
}  // namespace pmkit::test
