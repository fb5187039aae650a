// Orders of convergence of every kernel (src/verify): M2P and P2M of a Gaussian, 2D and
// 3D. Prints the table; the thresholds are those of `pmkit verify`.
#include <iostream>

#include "test_support.hpp"
#include "verify/convergence.hpp"

namespace pmkit::test {
namespace {

class ConvergenceTest : public ::testing::TestWithParam<int> {};

TEST_P(ConvergenceTest, EveryKernelReachesItsOrder) {
  const int dim = GetParam();
  const verify::ConvergenceConfig config = verify::default_config(dim);
  std::vector<verify::ConvergenceResult> results;
  for (const Kernel& k : verify::all_kernels())
    for (verify::Operation op : {verify::Operation::M2P, verify::Operation::P2M})
      results.push_back(verify::convergence(k, op, dim, config));
  std::cout << verify::format_table(results) << std::endl;

  for (const auto& r : results) {
    SCOPED_TRACE(r.kernel.name() + " " + verify::to_string(r.op) + " " + std::to_string(dim) + "D");
    const double need = r.kernel.family() == KernelFamily::MP4 ? 2.9 : 1.9;
    EXPECT_EQ(verify::required_order(r.kernel), need);
    EXPECT_GE(r.order_l2, need);
    EXPECT_GE(r.order_linf, need);
    EXPECT_TRUE(verify::meets_threshold(r));
    ASSERT_EQ(r.rows.size(), config.cells.size());
    for (std::size_t i = 1; i < r.rows.size(); ++i) {
      EXPECT_LT(r.rows[i].l2, r.rows[i - 1].l2) << "the error must fall at every refinement";
      EXPECT_LE(r.rows[i].l2, r.rows[i].linf) << "an L2 norm above the Linf norm";
    }
    // Against the theory: M'4 is third order, the B-splines second (not more).
    if (r.kernel.family() == KernelFamily::BSpline) {
      EXPECT_LT(r.order_l2, 2.2);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, ConvergenceTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param) + "D"; });

// The fit itself, on exact power laws.
TEST(FittedOrder, RecoversExactPowerLaws) {
  const std::vector<double> h = {0.1, 0.05, 0.03, 0.02};
  for (double p : {1.0, 2.0, 3.0, 4.5}) {
    std::vector<double> e;
    for (double x : h) e.push_back(7.0 * std::pow(x, p));
    EXPECT_NEAR(verify::fitted_order(h, e), p, 1e-12);
  }
  EXPECT_THROW(verify::fitted_order({0.1}, {0.2}), Error);
  EXPECT_THROW(verify::fitted_order({0.1, 0.2}, {0.2}), Error);
}

TEST(FittedOrder, ThresholdRejectsLowAndNaNOrders) {
  verify::ConvergenceResult r{Kernel::mp4(), verify::Operation::M2P, 2, {}, 3.0, 2.95};
  EXPECT_TRUE(verify::meets_threshold(r));
  r.order_linf = 2.85;
  EXPECT_FALSE(verify::meets_threshold(r));
  r.order_linf = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(verify::meets_threshold(r));
  r.kernel = Kernel::linear();
  r.order_linf = 1.95;
  EXPECT_TRUE(verify::meets_threshold(r));
}

}  // namespace
}  // namespace pmkit::test
