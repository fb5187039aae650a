// The compile-time piece tables against the closed forms of pmkit::reference:
// partition of unity, agreement at random points, nothing outside the stencil; the same
// for the derivative weights.
#include "test_support.hpp"

namespace pmkit::test {
namespace {

class KernelTest : public ::testing::TestWithParam<Kernel> {};

// Checks kernel functor K (chosen by kernels::dispatch) at random grid coordinates.
template <class K>
void check_pieces(const Kernel& kernel, std::mt19937_64& rng) {
  constexpr int S = K::support;
  ASSERT_EQ(S, kernel.support());
  // The table itself: sum_k c[k][0] = 1 and sum_k c[k][j] = 0 for j > 0.
  constexpr kernels::PieceTable<S> tab = K::pieces();
  for (int j = 0; j < S; ++j) {
    double sum = 0;
    for (int k = 0; k < S; ++k) sum += tab.c[k][j];
    EXPECT_NEAR(sum, j == 0 ? 1.0 : 0.0, 1e-13) << "column " << j << " of the piece table";
  }

  std::uniform_real_distribution<double> coord(-50.0, 50.0), unit(0.0, 1.0);
  std::vector<double> samples = {0.0, 0.5, 1.0, -1.0, 3.25, std::nextafter(2.0, 0.0), std::nextafter(1.5, 0.0)};
  for (int i = 0; i < 2000; ++i) samples.push_back(coord(rng));
  for (double u : samples) {
    int base;
    double s;
    kernels::locate<K>(u, base, s);
    ASSERT_GE(s, 0.0) << "u = " << u;
    ASSERT_LT(s, 1.0) << "u = " << u;
    double w[S];
    kernels::weights_1d<K>(s, w);
    double sum = 0;
    for (int k = 0; k < S; ++k) {
      sum += w[k];
      EXPECT_NEAR(w[k], reference::weight(kernel, u - (base + k)), 1e-13)
          << "u = " << u << ", node base+" << k;
    }
    EXPECT_NEAR(sum, 1.0, 1e-14) << "partition of unity at u = " << u;
    // The stencil holds every node of non-zero weight.
    EXPECT_EQ(reference::weight(kernel, u - (base - 1)), 0.0) << "u = " << u << ": node base-1";
    EXPECT_EQ(reference::weight(kernel, u - (base + S)), 0.0) << "u = " << u << ": node base+S";
  }
  // Float weights: the same tables, to float rounding.
  for (int i = 0; i < 200; ++i) {
    const float s = static_cast<float>(unit(rng));
    float wf[S];
    double wd[S];
    kernels::weights_1d<K>(s, wf);
    kernels::weights_1d<K>(static_cast<double>(s), wd);
    float sum = 0;
    for (int k = 0; k < S; ++k) {
      EXPECT_NEAR(wf[k], wd[k], 2e-6) << "s = " << s;
      sum += wf[k];
    }
    EXPECT_NEAR(sum, 1.0f, 2e-6f);
  }
}

TEST_P(KernelTest, PiecesMatchClosedForm) {
  const Kernel kernel = GetParam();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  kernels::dispatch(kernel, [&](auto k) { check_pieces<decltype(k)>(kernel, rng); });
}

// The pieces rewritten in t = s - 1/2 (the CUDA cell moments sum powers of t): the same
// polynomials, at random s and at both ends of the cell.
TEST_P(KernelTest, CenteredPiecesAreTheSamePolynomials) {
  const Kernel kernel = GetParam();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  kernels::dispatch(kernel, [&](auto k) {
    using K = decltype(k);
    constexpr int S = K::support;
    constexpr kernels::PieceTable<S> tab = K::pieces();
    constexpr kernels::PieceTable<S> centered = kernels::centered_pieces(tab);
    std::vector<double> samples = {0.0, 0.5, std::nextafter(1.0, 0.0)};
    for (int i = 0; i < 200; ++i) samples.push_back(unit(rng));
    for (double s : samples)
      for (int node = 0; node < S; ++node) {
        double in_s = 0, in_t = 0;
        for (int j = S - 1; j >= 0; --j) {
          in_s = in_s * s + tab.c[node][j];
          in_t = in_t * (s - 0.5) + centered.c[node][j];
        }
        EXPECT_NEAR(in_t, in_s, 1e-14) << "node " << node << ", s = " << s;
      }
  });
}

// The closed forms themselves: symmetric, unit integral, the support the kernel claims.
TEST_P(KernelTest, ClosedFormIsANormalisedSymmetricKernel) {
  const Kernel kernel = GetParam();
  const double half = 0.5 * kernel.support();
  const int steps = 20000;
  double integral = 0;
  for (int i = 0; i < steps; ++i) {
    const double r = -half + (i + 0.5) * (2 * half / steps);  // midpoint rule
    integral += reference::weight(kernel, r) * (2 * half / steps);
    EXPECT_DOUBLE_EQ(reference::weight(kernel, r), reference::weight(kernel, -r));
  }
  EXPECT_NEAR(integral, 1.0, 1e-7);
  EXPECT_EQ(reference::weight(kernel, half), 0.0);
  EXPECT_EQ(reference::weight(kernel, -half - 0.25), 0.0);
  EXPECT_NE(reference::weight(kernel, half - 0.01), 0.0);  // M'4 is negative there
}

// The derivative weights (the pieces differentiated) against the closed-form derivative
// of the reference, and that against its own central differences; the derivatives of a
// stencil sum to zero; float agrees with double.
TEST_P(KernelTest, DerivativeWeightsMatchClosedForm) {
  const Kernel kernel = GetParam();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coord(-50.0, 50.0), unit(0.0, 1.0);
  kernels::dispatch(kernel, [&](auto k) {
    using K = decltype(k);
    constexpr int S = K::support;
    constexpr kernels::PieceTable<S> d = kernels::derivative_pieces<S>(K::pieces());
    for (int j = 0; j < S; ++j) {
      double sum = 0;
      for (int node = 0; node < S; ++node) sum += d.c[node][j];
      EXPECT_NEAR(sum, 0.0, 1e-12) << "column " << j << " of the derivative table";
    }
    for (int i = 0; i < 2000; ++i) {
      const double u = coord(rng);
      int base;
      double s;
      kernels::locate<K>(u, base, s);
      double dw[S];
      kernels::weight_derivatives_1d<K>(s, dw);
      double sum = 0;
      for (int node = 0; node < S; ++node) {
        sum += dw[node];
        EXPECT_NEAR(dw[node], reference::weight_derivative(kernel, u - (base + node)), 1e-12)
            << "u = " << u << ", node base+" << node;
      }
      EXPECT_NEAR(sum, 0.0, 1e-12) << "u = " << u;
    }
    // The closed-form derivative against central differences of the closed form, away
    // from the knots (integers and half-integers), where the lowest orders have kinks.
    const double h = 1e-5, half = 0.5 * S;
    for (int i = 0; i < 2000; ++i) {
      const double r = (2 * unit(rng) - 1) * (half + 0.5);
      if (std::fabs(2 * r - std::round(2 * r)) < 4 * h) continue;
      const double fd = (reference::weight(kernel, r + h) - reference::weight(kernel, r - h)) / (2 * h);
      EXPECT_NEAR(reference::weight_derivative(kernel, r), fd, 1e-8) << "r = " << r;
    }
    // On the knots: the central difference of the linear kernel is the mean of its two
    // slopes, exactly what weight_derivative takes there; every other kernel is C^1, its
    // second derivative's jump putting the central difference O(h) off.
    for (int twice = -S - 1; twice <= S + 1; ++twice) {
      const double r = 0.5 * twice;
      const double fd = (reference::weight(kernel, r + h) - reference::weight(kernel, r - h)) / (2 * h);
      EXPECT_NEAR(reference::weight_derivative(kernel, r), fd, S == 2 ? 1e-9 : 1e-4) << "knot r = " << r;
    }
    // Float derivatives: the same tables, to float rounding.
    for (int i = 0; i < 200; ++i) {
      const float sf = static_cast<float>(unit(rng));
      float df[S];
      double dd[S];
      kernels::weight_derivatives_1d<K>(sf, df);
      kernels::weight_derivatives_1d<K>(static_cast<double>(sf), dd);
      for (int node = 0; node < S; ++node) EXPECT_NEAR(df[node], dd[node], 1e-5) << "s = " << sf;
    }
  });
}

TEST_P(KernelTest, NameRoundTrips) {
  const Kernel kernel = GetParam();
  EXPECT_EQ(Kernel::from_name(kernel.name()), kernel);
  EXPECT_EQ(kernel.ghost_width(), kernel.support() / 2);
  EXPECT_EQ(kernel.accuracy_order(), kernel.family() == KernelFamily::MP4 ? 3 : 2);
}

INSTANTIATE_TEST_SUITE_P(AllKernels, KernelTest, ::testing::ValuesIn(all_kernels()),
                         [](const ::testing::TestParamInfo<Kernel>& info) { return info.param.name(); });

TEST(KernelNames, AliasesAndOrders) {
  EXPECT_EQ(Kernel::from_name("CIC"), Kernel::linear());
  EXPECT_EQ(Kernel::from_name("bspline2"), Kernel::linear());
  EXPECT_EQ(Kernel::from_name("bspline3"), Kernel::tsc());
  EXPECT_EQ(Kernel::from_name("M4'"), Kernel::mp4());
  EXPECT_FALSE(Kernel::bspline(4) == Kernel::mp4());  // same support, other family
  for (int order = 2; order <= 8; ++order) EXPECT_EQ(Kernel::bspline(order).support(), order);
}

}  // namespace
}  // namespace pmkit::test
