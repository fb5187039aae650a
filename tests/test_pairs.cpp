// Cutoff pair interactions on cell lists (CPU): against an O(N^2) float64 brute force on
// fresh random inputs, both shells; an energy-conserving Lennard-Jones run; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "pmkit/pairs.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

// Brute force in double over every unordered pair, minimum image on periodic axes.
template <int D, class Kernel>
std::vector<std::vector<double>> brute_force(const Box<D>& box, double cutoff, const Kernel& kernel,
                                             const std::array<std::vector<double>, D>& x,
                                             const std::vector<std::vector<double>>& in) {
  const std::size_t n = x[0].size();
  std::vector<std::vector<double>> out(Kernel::outputs, std::vector<double>(n, 0.0));
  double in_i[Kernel::inputs + 1] = {}, in_j[Kernel::inputs + 1] = {};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      double r[D], r2 = 0;
      for (int d = 0; d < D; ++d) {
        double v = x[d][i] - x[d][j];
        if (box.boundary[d] == Boundary::Periodic) v -= box.length[d] * std::round(v / box.length[d]);
        r[d] = v;
        r2 += v * v;
      }
      if (r2 >= cutoff * cutoff) continue;
      for (int k = 0; k < Kernel::inputs; ++k) {
        in_i[k] = in[k][i];
        in_j[k] = in[k][j];
      }
      double oi[Kernel::outputs] = {}, oj[Kernel::outputs] = {};
      kernel(r, r2, in_i, in_j, oi, oj);
      for (int k = 0; k < Kernel::outputs; ++k) {
        out[k][i] += oi[k];
        out[k][j] += oj[k];
      }
    }
  return out;
}

template <class T>
double rel_err(const std::vector<T>& got, const std::vector<double>& want) {
  double e = 0, w = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    w += want[i] * want[i];
  }
  return w > 0 ? std::sqrt(e / w) : std::sqrt(e);
}

enum class Layout { Uniform, Clustered, Lattice };

template <class T, int D, class Kernel>
void check_case(const Box<D>& box, double cutoff, const Kernel& kernel, std::size_t n, Layout layout,
                bool half_shell, int threads) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed) + ", n = " + std::to_string(n) + (half_shell ? ", half shell" : ", full shell"));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::array<std::vector<T>, D> x;
  std::array<std::vector<double>, D> xd;
  for (int d = 0; d < D; ++d) {
    x[d].resize(n);
    xd[d].resize(n);
  }
  for (std::size_t i = 0; i < n; ++i)
    for (int d = 0; d < D; ++d) {
      double u = unit(rng);
      if (layout == Layout::Clustered && i % 10 != 0) u = 0.3 + 0.05 * u;  // 90% in a small region
      if (layout == Layout::Lattice) u = std::floor(u * 8) / 8;            // pairs exactly at the cutoff
      x[d][i] = static_cast<T>(box.origin[d] + u * box.length[d]);
      xd[d][i] = x[d][i];
    }
  std::vector<std::vector<double>> in(Kernel::inputs, std::vector<double>(n));
  std::vector<std::vector<T>> in_t(Kernel::inputs, std::vector<T>(n));
  for (int k = 0; k < Kernel::inputs; ++k)
    for (std::size_t i = 0; i < n; ++i) in[k][i] = in_t[k][i] = static_cast<T>(unit(rng));

  PairOptions opt;
  opt.half_shell = half_shell;
  opt.num_threads = threads;
  PairPlan<T, D> plan(box, cutoff, opt);
  typename PairPlan<T, D>::Positions views;
  for (int d = 0; d < D; ++d) views[d] = x[d];
  plan.set_points(views);
  std::vector<std::vector<T>> out(Kernel::outputs, std::vector<T>(n, T(-7)));
  std::vector<View<const T>> in_views(in_t.begin(), in_t.end());
  std::vector<View<T>> out_views(out.begin(), out.end());
  plan.compute(kernel, in_views, out_views);

  const auto want = brute_force<D>(box, cutoff, kernel, xd, in);
  const double tol = std::is_same<T, float>::value ? 1e-4 : 1e-12;
  for (int k = 0; k < Kernel::outputs; ++k) EXPECT_LE(rel_err(out[k], want[k]), tol) << "output " << k;
}

TEST(Pairs, LennardJonesAgainstBruteForce) {
  pair_kernels::LennardJones<3> lj3{1.0, 0.3, 0.8, 0.05};
  pair_kernels::LennardJones<2> lj2{1.0, 0.3, 0.8, 0.05};
  for (bool half : {true, false})
    for (int threads : {1, 3}) {
      for (double ppc : {0.5, 10.0, 60.0}) {
        const std::size_t n3 = static_cast<std::size_t>(ppc * 5 * 4 * 6);
        check_case<double, 3>(Box<3>::periodic({4.0, 3.2, 4.8}), 0.8, lj3, n3, Layout::Uniform, half, threads);
        check_case<double, 2>(Box<2>::bounded({4.0, 2.4}), 0.8, lj2, static_cast<std::size_t>(ppc * 15),
                              Layout::Uniform, half, threads);
      }
      check_case<double, 3>(Box<3>::periodic({4.0, 4.0, 4.0}), 0.8, lj3, 400, Layout::Clustered, half, threads);
      check_case<float, 3>(Box<3>::bounded({3.2, 3.2, 3.2}), 0.8, lj3, 300, Layout::Uniform, half, threads);
    }
}

TEST(Pairs, SyntheticKernelsMixedBoundariesAndSmallBoxes) {
  pair_kernels::CheapSynthetic cheap{0.5};
  pair_kernels::ExpensiveSynthetic expensive{0.5};
  Box<3> mixed = Box<3>::periodic({1.2, 2.0, 1.6});  // 2 cells in x: neighbours wrap onto each other
  mixed.boundary[2] = Boundary::Bounded;
  for (bool half : {true, false}) {
    check_case<double, 3>(mixed, 0.5, cheap, 500, Layout::Uniform, half, 2);
    check_case<double, 3>(mixed, 0.5, expensive, 500, Layout::Clustered, half, 2);
    // Lattice spacing 1/8 of the box: many pairs exactly at the cutoff (excluded); the
    // expensive kernel is non-zero there, so including them would show.
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, expensive, 300, Layout::Lattice, half, 2);
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, cheap, 1, Layout::Uniform, half, 2);  // alone
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, cheap, 0, Layout::Uniform, half, 2);  // empty
  }
}

// Velocity Verlet with Lennard-Jones in reduced units: the total energy stays bounded.
TEST(Pairs, LennardJonesVerletConservesEnergy) {
  constexpr int k = 5;  // 5^3 = 125 particles on a cubic lattice, density ~0.6
  const double spacing = 1.2, length = k * spacing, cutoff = 2.5, dt = 0.002;
  pair_kernels::LennardJones<3> lj{1.0, 1.0, cutoff, 0.0};
  PairPlan<double, 3> plan(Box<3>::periodic({length, length, length}), cutoff);
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<double> gauss(0.0, 0.5);
  const std::size_t n = k * k * k;
  std::array<std::vector<double>, 3> x, v, f;
  for (int d = 0; d < 3; ++d) {
    x[d].resize(n);
    v[d].resize(n);
    f[d].resize(n);
  }
  for (std::size_t i = 0; i < n; ++i) {
    x[0][i] = spacing * (i % k);
    x[1][i] = spacing * ((i / k) % k);
    x[2][i] = spacing * (i / (k * k));
    for (int d = 0; d < 3; ++d) v[d][i] = gauss(rng);
  }
  std::vector<double> u(n);
  auto forces = [&] {
    plan.set_points({x[0], x[1], x[2]});
    plan.compute(lj, {}, {f[0], f[1], f[2], u});
    double e = 0;
    for (std::size_t i = 0; i < n; ++i) e += u[i] + 0.5 * (v[0][i] * v[0][i] + v[1][i] * v[1][i] + v[2][i] * v[2][i]);
    return e;
  };
  const double e0 = forces();
  double worst = 0;
  for (int step = 0; step < 300; ++step) {
    for (int d = 0; d < 3; ++d)
      for (std::size_t i = 0; i < n; ++i) {
        v[d][i] += 0.5 * dt * f[d][i];
        x[d][i] += dt * v[d][i];
      }
    forces();  // new forces at the new positions (energy uses the half-step velocities: recomputed below)
    for (int d = 0; d < 3; ++d)
      for (std::size_t i = 0; i < n; ++i) v[d][i] += 0.5 * dt * f[d][i];
    double e = 0;
    for (std::size_t i = 0; i < n; ++i) e += u[i] + 0.5 * (v[0][i] * v[0][i] + v[1][i] * v[1][i] + v[2][i] * v[2][i]);
    worst = std::max(worst, std::fabs(e - e0));
  }
  std::cout << "LJ Verlet: E0 = " << e0 << ", largest |E - E0| over 300 steps = " << worst << "\n";
  EXPECT_LT(worst, 1e-3 * std::fabs(e0) + 0.05);
}

TEST(Pairs, BadInput) {
  auto expect_code = [](ErrorCode code, auto&& f) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
    }
  };
  const Box<3> box = Box<3>::periodic({2.0, 2.0, 2.0});
  expect_code(ErrorCode::InvalidArgument, [&] { PairPlan<double, 3>(box, 0.0); });
  expect_code(ErrorCode::InvalidArgument, [&] { PairPlan<double, 3>(box, -1.0); });
  expect_code(ErrorCode::InvalidArgument, [&] { PairPlan<double, 3>(box, 1.01); });  // > half the box
  PairPlan<double, 3> plan(box, 0.5);
  std::vector<double> x = {0.1, 0.2}, y = {0.3, 0.4}, z = {0.5, std::nan("")}, out(2, 5.0), short_x = {0.1};
  pair_kernels::CheapSynthetic cheap{0.5};
  expect_code(ErrorCode::NotReady, [&] { plan.compute(cheap, {}, {out}); });
  expect_code(ErrorCode::NonFinitePosition, [&] { plan.set_points({x, y, z}); });
  expect_code(ErrorCode::SizeMismatch, [&] { plan.set_points({short_x, y, y}); });
  plan.set_points({x, y, y});
  std::vector<double> wrong(3, 5.0);
  expect_code(ErrorCode::SizeMismatch, [&] { plan.compute(cheap, {}, {wrong}); });
  expect_code(ErrorCode::SizeMismatch, [&] { plan.compute(cheap, {}, {out, out}); });
  EXPECT_EQ(out, std::vector<double>(2, 5.0));  // nothing written on error
  expect_code(ErrorCode::OutOfBounds, [&] {
    PairPlan<double, 3> bounded(Box<3>::bounded({2.0, 2.0, 2.0}), 0.5);
    std::vector<double> far = {0.1, 2.5};
    bounded.set_points({x, y, far});
  });
}

}  // namespace
}  // namespace pmkit::test
