// The Ewald real-space pair kernel (pair_kernels::EwaldRealSpace) on the pair plan, CPU
// (both shells) and CUDA (every method), float and double, against the float64 sum of
// src/verify/ewald.hpp on fresh random charges; and the Ewald reference itself.
#include <cmath>
#include <random>

#include "verify/ewald.hpp"
#include "pair_cases.hpp"

namespace pmkit::test {
namespace {

using namespace verify;  // the float64 Ewald sum and its systems

// Random charges in a periodic box: uniform, or 90% of them in a small region.
ChargeSystem random_charges(std::mt19937_64& rng, std::array<double, 3> box, std::size_t n, bool clustered) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  ChargeSystem s;
  s.box = box;
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      double u = unit(rng);
      if (clustered && i % 10 != 0) u = 0.4 + 0.05 * u;
      s.x[d].push_back(u * box[d]);
    }
    s.q.push_back(2 * unit(rng) - 1);
  }
  return s;
}

template <class T>
void check_real_space(const PairOptions& options, std::size_t n, bool clustered) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed) + ", n = " + std::to_string(n));
  std::mt19937_64 rng(seed);
  const std::array<double, 3> box = {3.0, 2.5, 3.5};
  const double cutoff = 1.2, alpha = 2.5;
  ChargeSystem s = random_charges(rng, box, n, clustered);
  // The plan computes in T: the reference takes the positions and charges as rounded.
  std::array<std::vector<T>, 3> x;
  std::vector<T> q(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      x[d].push_back(static_cast<T>(s.x[d][i]));
      s.x[d][i] = x[d].back();
    }
    q[i] = static_cast<T>(s.q[i]);
    s.q[i] = q[i];
  }
  CoulombResult want = zero_result(n);
  real_space_sum(s, alpha, cutoff, 0, want);
  PairPlan<T, 3> plan(Box<3>::periodic(box), cutoff, options);
  const auto got = run_pairs(plan, pair_kernels::EwaldRealSpace<3>{alpha}, x, {q});
  // The kernel is not zero at the cutoff: in float a pair within rounding of it may count
  // or not; erfc(3) / 1.2 ~ 2e-5 a pair, within the float tolerance of the sums.
  const double tol = std::is_same<T, float>::value ? 2e-5 : 1e-12;
  for (int d = 0; d < 3; ++d) EXPECT_LE(rel_err(got[d], want.force[d]), tol) << "force " << d;
  EXPECT_LE(rel_err(got[3], want.potential), tol) << "potential";
}

TEST(EwaldPairs, RealSpaceAgainstFloat64Sum) {
  for (bool half : {true, false}) {
    check_real_space<double>(cpu_options(half, 2), 700, false);
    check_real_space<double>(cpu_options(half, 2), 400, true);
    check_real_space<float>(cpu_options(half, 2), 700, false);
  }
  check_real_space<double>(cpu_options(true, 1), 1, false);  // alone: no pairs
}

#if defined(PMKIT_WITH_CUDA)
TEST(CudaEwaldPairs, RealSpaceAgainstFloat64SumInEveryMethod) {
  PMKIT_REQUIRE_GPU();
  for (PairMethod method : kCudaMethods) {
    SCOPED_TRACE(to_string(method));
    check_real_space<double>(cuda_options(method), 700, false);
    check_real_space<float>(cuda_options(method), 700, false);
    check_real_space<float>(cuda_options(method), 400, true);
  }
}
#endif

// The reference's own check: the Madelung constant of rock salt, -2 E / N at unit
// nearest-neighbour distance, is 1.747564594633...; one conventional cell (8 ions) and
// two per axis (64) must both give it, and its forces vanish by symmetry.
TEST(EwaldReference, RockSaltMadelungConstant) {
  for (int cells : {1, 2}) {
    const ChargeSystem s = rock_salt(cells);
    const CoulombResult r = ewald_sum(s);
    EXPECT_NEAR(-2 * r.energy / double(s.size()), verify::kRockSaltMadelung, 1e-12) << cells << " cells";
    for (int d = 0; d < 3; ++d)
      for (double f : r.force[d]) EXPECT_NEAR(f, 0.0, 1e-12);
  }
}

// The reference's forces and potentials are its energy's derivatives (central
// differences on a small random system, net charge included).
TEST(EwaldReference, ForcesAndPotentialsAreDerivatives) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  ChargeSystem s = random_charges(rng, {1.0, 1.3, 1.1}, 12, false);
  const CoulombResult r = ewald_sum(s);
  const double h = 1e-5;
  for (std::size_t i : {std::size_t(0), std::size_t(7)}) {
    for (int d = 0; d < 3; ++d) {
      ChargeSystem a = s, b = s;
      a.x[d][i] += h;
      b.x[d][i] -= h;
      const double numeric = -(ewald_sum(a).energy - ewald_sum(b).energy) / (2 * h);
      EXPECT_NEAR(r.force[d][i], numeric, 1e-6 * (1 + std::abs(numeric))) << "particle " << i << ", axis " << d;
    }
    ChargeSystem a = s, b = s;
    a.q[i] += h;
    b.q[i] -= h;
    const double numeric = (ewald_sum(a).energy - ewald_sum(b).energy) / (2 * h);
    EXPECT_NEAR(r.potential[i], numeric, 1e-6 * (1 + std::abs(numeric))) << "particle " << i;
  }
}

}  // namespace
}  // namespace pmkit::test
