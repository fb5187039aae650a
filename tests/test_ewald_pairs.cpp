// The Ewald real-space pair kernel (pair_kernels::EwaldRealSpace) on the pair plan, CPU
// (both shells) and CUDA (every method), float and double, against the float64 sum of
// src/verify/ewald.hpp on fresh random charges; and the Ewald reference itself.
#include <cmath>
#include <random>
#include <string>

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

// `s` with its positions and charges rounded to T: the float64 sum then takes what a plan
// in T sees.
template <class T>
ChargeSystem rounded_to(ChargeSystem s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    for (int d = 0; d < 3; ++d) s.x[d][i] = static_cast<T>(s.x[d][i]);
    s.q[i] = static_cast<T>(s.q[i]);
  }
  return s;
}

CoulombResult real_space_of(const ChargeSystem& s, double cutoff, double alpha) {
  CoulombResult want = zero_result(s.size());
  real_space_sum(s, alpha, cutoff, 0, want);
  return want;
}

// The pair plan's Ewald real space of `s` (values of T) in T, against `want` (its float64
// sum). Returns the plan's outputs.
template <class T>
std::vector<std::vector<T>> expect_real_space(const PairOptions& options, const ChargeSystem& s, double cutoff,
                                              double alpha, const CoulombResult& want) {
  const std::size_t n = s.size();
  std::array<std::vector<T>, 3> x;
  std::vector<T> q(s.q.begin(), s.q.end());
  for (int d = 0; d < 3; ++d) x[d].assign(s.x[d].begin(), s.x[d].end());
  PairPlan<T, 3> plan(Box<3>::periodic(s.box), cutoff, options);
  const auto got = run_pairs(plan, pair_kernels::EwaldRealSpace<3>{alpha}, x, {q});
  // The kernel is not zero at the cutoff: in float a pair within rounding of it may count
  // or not; erfc(3) / 1.2 ~ 2e-5 a pair, within the float tolerance of the sums.
  const double tol = std::is_same<T, float>::value ? 2e-5 : 1e-12;
  for (int d = 0; d < 3; ++d) EXPECT_LE(rel_err(got[d], want.force[d]), tol) << "force " << d << ", n = " << n;
  EXPECT_LE(rel_err(got[3], want.potential), tol) << "potential";
  return got;
}

template <class T>
void check_real_space(const PairOptions& options, std::size_t n, bool clustered) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed) + ", n = " + std::to_string(n));
  std::mt19937_64 rng(seed);
  const ChargeSystem s = rounded_to<T>(random_charges(rng, {3.0, 2.5, 3.5}, n, clustered));
  expect_real_space<T>(options, s, 1.2, 2.5, real_space_of(s, 1.2, 2.5));
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

// The geometries where the compacted methods' chunks, masks and row split meet their
// edges, against the float64 sum (float and double) and, in float, deterministic: about
// 100 charges a cell (every chunk full, the x-sorted windows cut), about one charge in
// two cells (chunks mostly empty, rows of one piece), a third of the charges on the
// periodic faces (coordinate 0, or the last float below the box length), and a cutoff of
// half the box (two cells an axis: a row's cells cx-1 and cx+1 are one cell, seen through
// two images).
TEST(CudaEwaldPairs, CompactedMethodsAtTheirEdges) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  struct Case {
    const char* name;
    std::array<double, 3> box;
    std::size_t n;
    double cutoff, alpha;
    bool seam;
  };
  const Case cases[] = {{"dense", {3.0, 3.0, 3.3}, 2970, 1.0, 3.0, false},
                        {"sparse", {6.0, 5.0, 7.0}, 100, 1.0, 3.0, false},
                        {"seam", {3.0, 3.0, 3.0}, 900, 1.0, 3.0, true},
                        {"half box", {2.0, 2.2, 2.4}, 400, 1.0, 3.0, false},
                        {"near half box", {2.0, 2.2, 2.4}, 400, 0.999, 3.0, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ChargeSystem s = random_charges(rng, c.box, c.n, false);
    if (c.seam)
      for (std::size_t i = 0; i < c.n; i += 3) {
        const int d = static_cast<int>(i / 3 % 3);
        s.x[d][i] = i % 2 ? 0.0 : std::nextafter(static_cast<float>(c.box[d]), 0.0f);
      }
    const ChargeSystem in_float = rounded_to<float>(s);
    const CoulombResult want = real_space_of(s, c.cutoff, c.alpha), want_float = real_space_of(in_float, c.cutoff, c.alpha);
    for (PairMethod method : {PairMethod::CudaCompactPencil, PairMethod::CudaRowSplit}) {
      SCOPED_TRACE(to_string(method));
      expect_real_space<double>(cuda_options(method), s, c.cutoff, c.alpha, want);
      const auto once = expect_real_space<float>(cuda_options(method), in_float, c.cutoff, c.alpha, want_float);
      const auto again = expect_real_space<float>(cuda_options(method), in_float, c.cutoff, c.alpha, want_float);
      EXPECT_EQ(once, again) << "the same bits in a second run";
    }
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
