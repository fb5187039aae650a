// Over 600 lines: one suite of PmePlan's checks on every backend variant, sharing run_pme.
// Smooth particle-mesh Ewald (PmePlan) against the Ewald sum of src/verify/ewald.hpp
// on fresh random charges: accuracy at order 6, the error's fall with order and mesh
// (measured rates), the Madelung constant of rock salt, the net force, translations,
// float and double, CPU against CUDA, the parameter choice, and bad input.
#include <cmath>
#include <random>

#include "verify/ewald.hpp"
#include "pmkit/pme.hpp"
#include "test_support.hpp"
#if defined(PMKIT_WITH_CUDA)
#include "cuda_support.hpp"
#endif

namespace pmkit::test {
namespace {

using namespace verify;  // the float64 Ewald sum and its systems

// n random charges in the box, neutral unless `net` is set: uniform, with a few on the
// faces x = 0 and on the periodic seam just below x = L, and a tenth in a small cluster.
// Positions and charges are float values, so that float and double plans see the same
// system as the reference (a float rounding of the positions would move the energy of a
// close pair by more than the method's error).
ChargeSystem random_system(std::mt19937_64& rng, std::array<double, 3> box, std::size_t n, double net = 0) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  ChargeSystem s;
  s.box = box;
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      double u = unit(rng);
      if (i % 10 == 3) u = 0.6 + 0.03 * u;   // clustered
      if (i % 50 == 7 && d == 0) u = 0.0;     // on a face
      if (i % 50 == 9 && d == 1) u = 1 - 1e-7;  // at the seam
      s.x[d].push_back(static_cast<float>(u * box[d]));
    }
    s.q.push_back(static_cast<float>(2 * unit(rng) - 1));
    total += s.q.back();
  }
  // The net charge's correction on one particle, which leaves every charge a float value
  // (up to the rounding of that one).
  s.q[0] = static_cast<float>(s.q[0] + net - total);
  return s;
}

// The plan's energy, forces and potentials in double, on either backend. With `from`
// (the same charges elsewhere), the plan first sets those points and computes, then
// moves to s's by update_points.
template <class T>
CoulombResult run_pme(const ChargeSystem& s, const PmeParameters& p, PmeOptions o, bool reciprocal_only = false,
                      const ChargeSystem* from = nullptr, bool with_virial = false) {
  const std::size_t n = s.size();
  std::array<std::vector<T>, 3> x, x0;
  std::vector<T> q(s.q.begin(), s.q.end());
  for (int d = 0; d < 3; ++d) {
    x[d].assign(s.x[d].begin(), s.x[d].end());
    x0[d] = from ? std::vector<T>(from->x[d].begin(), from->x[d].end()) : x[d];
  }
  std::array<std::vector<T>, 3> f;
  std::vector<T> phi(n, T(-7));
  for (auto& v : f) v.assign(n, T(-7));
  double energy = -7;
  std::vector<double> virial(with_virial ? 6 : 0, -7.0);
  PmePlan<T> plan(s.box, p, o);
  auto compute = [&](auto&& pos, auto&& start, View<const T> charges, auto&& forces, View<double> e,
                     View<T> potential, View<double> w) {
    if (from) {
      plan.set_points(start);
      plan.compute(charges, forces);  // bins the cell list at the old positions
      plan.update_points(pos);
    } else {
      plan.set_points(pos);
    }
    if (reciprocal_only)
      plan.compute_reciprocal(charges, forces, e, potential, w);
    else
      plan.compute(charges, forces, e, potential, w);
  };
  if (o.backend == Backend::Cpu) {
    compute(typename PmePlan<T>::Positions{View<const T>(x[0]), View<const T>(x[1]), View<const T>(x[2])},
            typename PmePlan<T>::Positions{View<const T>(x0[0]), View<const T>(x0[1]), View<const T>(x0[2])},
            View<const T>(q), typename PmePlan<T>::Forces{View<T>(f[0]), View<T>(f[1]), View<T>(f[2])},
            View<double>(&energy, 1), View<T>(phi), View<double>(virial));
  } else {
#if defined(PMKIT_WITH_CUDA)
    DeviceBuffer<T> dx(x[0]), dy(x[1]), dz(x[2]), sx(x0[0]), sy(x0[1]), sz(x0[2]), dq(q), fx(f[0]), fy(f[1]),
        fz(f[2]), dphi(phi);
    DeviceBuffer<double> de(std::vector<double>{energy}), dw(std::vector<double>(6, -7.0));
    compute(typename PmePlan<T>::Positions{device_cview(dx), device_cview(dy), device_cview(dz)},
            typename PmePlan<T>::Positions{device_cview(sx), device_cview(sy), device_cview(sz)}, device_cview(dq),
            typename PmePlan<T>::Forces{device_view(fx), device_view(fy), device_view(fz)}, device_view(de),
            device_view(dphi), with_virial ? device_view(dw) : View<double>());
    cuda::check(cudaStreamSynchronize(cuda::to_cuda_stream(o.stream)), "run_pme");
    f = {fx.download(), fy.download(), fz.download()};
    phi = dphi.download();
    energy = de.download()[0];
    if (with_virial) virial = dw.download();
#endif
  }
  CoulombResult r;
  r.energy = energy;
  for (int d = 0; d < 3; ++d) r.force[d].assign(f[d].begin(), f[d].end());
  r.potential.assign(phi.begin(), phi.end());
  for (std::size_t v = 0; v < virial.size(); ++v) r.virial[v] = virial[v];
  return r;
}

double energy_error(const CoulombResult& got, const CoulombResult& want) {
  return std::abs(got.energy - want.energy) / std::abs(want.energy);
}
// The size of the energy's terms, 1/2 sum |q_i phi_i|.
double energy_terms(const CoulombResult& reference, const ChargeSystem& s) {
  double terms = 0;
  for (std::size_t i = 0; i < s.size(); ++i) terms += 0.5 * std::abs(s.q[i] * reference.potential[i]);
  return terms;
}
// The energy's error against the Ewald sum of s, relative to |E|, or to a hundredth of its
// terms' size where |E| is smaller: the total energy of random charges at random places is
// a remainder of terms of both signs, which some draws cancel to near zero, and a
// relative error of such a remainder measures the cancellation rather than the method.
double ewald_energy_error(const CoulombResult& got, const CoulombResult& reference, const ChargeSystem& s) {
  return std::abs(got.energy - reference.energy) / std::max(std::abs(reference.energy), energy_terms(reference, s) / 100);
}
// sqrt(sum |F - F_ref|^2 / sum |F_ref|^2)
double force_error(const CoulombResult& got, const CoulombResult& want) {
  double e = 0, w = 0;
  for (int d = 0; d < 3; ++d)
    for (std::size_t i = 0; i < want.force[d].size(); ++i) {
      e += (got.force[d][i] - want.force[d][i]) * (got.force[d][i] - want.force[d][i]);
      w += want.force[d][i] * want.force[d][i];
    }
  return std::sqrt(e / w);
}
double potential_error(const CoulombResult& got, const CoulombResult& want) {
  double e = 0, w = 0;
  for (std::size_t i = 0; i < want.potential.size(); ++i) {
    e += (got.potential[i] - want.potential[i]) * (got.potential[i] - want.potential[i]);
    w += want.potential[i] * want.potential[i];
  }
  return std::sqrt(e / w);
}

PmeParameters parameters(double alpha, std::int64_t mesh, int order, double cutoff) {
  PmeParameters p;
  p.alpha = alpha;
  p.mesh = {mesh, mesh, mesh};
  p.order = order;
  p.cutoff = cutoff;
  return p;
}

PmeOptions cpu(int threads = 2) {
  PmeOptions o;
  o.num_threads = threads;
  return o;
}

// The shared test system: 1000 random neutral charges in a box of about 2 x 2 x 2 with
// its Ewald sum (about a second to compute, once per run of the suite).
struct Case {
  std::uint64_t seed;
  ChargeSystem system;
  CoulombResult reference;
};
const Case& thousand_charges() {
  static const Case c = [] {
    Case k;
    k.seed = fresh_seed();
    std::mt19937_64 rng(k.seed);
    k.system = random_system(rng, {2.0, 2.2, 1.9}, 1000);
    k.reference = ewald_sum(k.system);
    return k;
  }();
  return c;
}

// The PME bodies run on every variant of PmeOptions; a CPU variant needs FFTW.
class PmeTest : public VariantTest {
 protected:
  void SetUp() override {
    VariantTest::SetUp();
    if (!IsSkipped() && !on_cuda(bc_)) PMKIT_REQUIRE_FFTW();
  }
  PmeOptions options() const { return options_of<PmeOptions>(bc_); }
};

// Real space: cutoff 0.95 (half the shortest box length), erfc(alpha r_c) = erfc(4.2) =
// 3e-9, far below the tolerances; the mesh error then dominates.
constexpr double kCutoff = 0.95, kAlpha = 4.2 / kCutoff;

TEST_P(PmeTest, MatchesEwaldSumAtOrderSix) {
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  const CoulombResult got = run_pme<double>(c.system, parameters(kAlpha, 48, 6, kCutoff), options());
  EXPECT_LE(ewald_energy_error(got, c.reference, c.system), 1e-5) << "energy " << got.energy << " vs " << c.reference.energy;
  EXPECT_LE(force_error(got, c.reference), 1e-4);
  EXPECT_LE(potential_error(got, c.reference), 1e-4);
}

TEST_P(PmeTest, FloatMatchesEwaldSum) {
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  const CoulombResult got = run_pme<float>(c.system, parameters(kAlpha, 48, 6, kCutoff), options());
  EXPECT_LE(ewald_energy_error(got, c.reference, c.system), 1e-5);
  EXPECT_LE(force_error(got, c.reference), 2e-4);
}

// Smooth PME interpolates the structure factor with B-splines of order p (Essmann et al.),
// so the potentials' mesh error falls as h^p; the forces are the splines' derivatives and
// their error falls as h^(p-1). Doubling the mesh from 16^3 to 32^3, where the mesh error
// is far above the real-space truncation, the rates vary from draw to draw (their spread
// over many draws is in docs/pme.md): the potentials' rate is asserted to within 1 of p,
// the forces' to within 1.5 of p - 1. At a fixed mesh a higher order is more accurate.
TEST_P(PmeTest, ErrorFallsWithOrderAndMesh) {
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  std::map<int, double> force_at_16;
  for (int order : {4, 6}) {
    const CoulombResult coarse = run_pme<double>(c.system, parameters(kAlpha, 16, order, kCutoff), options());
    const CoulombResult fine = run_pme<double>(c.system, parameters(kAlpha, 32, order, kCutoff), options());
    const double potential_coarse = potential_error(coarse, c.reference), potential_fine = potential_error(fine, c.reference);
    const double force_coarse = force_error(coarse, c.reference), force_fine = force_error(fine, c.reference);
    EXPECT_GE(std::log2(potential_coarse / potential_fine), order - 1.0)
        << "order " << order << ": potential errors " << potential_coarse << " at 16^3, " << potential_fine << " at 32^3";
    EXPECT_GE(std::log2(force_coarse / force_fine), order - 2.5)
        << "order " << order << ": force errors " << force_coarse << " at 16^3, " << force_fine << " at 32^3";
    force_at_16[order] = force_coarse;
  }
  const double order8 = force_error(run_pme<double>(c.system, parameters(kAlpha, 16, 8, kCutoff), options()), c.reference);
  EXPECT_LT(force_at_16[6], 0.5 * force_at_16[4]);
  EXPECT_LT(order8, 0.7 * force_at_16[6]);
}

// Rock salt, 4^3 ions per box (nearest neighbours at 1): -2 E / N is the Madelung
// constant 1.747565 to 1e-6, and every force vanishes.
TEST_P(PmeTest, RockSaltMadelungConstant) {
  const ChargeSystem s = rock_salt(2);
  for (int order : {6, 8}) {
    const CoulombResult got = run_pme<double>(s, parameters(2.0, 32, order, 2.0), options());
    EXPECT_NEAR(-2 * got.energy / double(s.size()), verify::kRockSaltMadelung, 1e-6) << "order " << order;
    for (int d = 0; d < 3; ++d)
      for (double f : got.force[d]) EXPECT_NEAR(f, 0.0, 1e-6);
  }
}

// Newton's third law holds for the exact Ewald sum and for the real-space pairs; the mesh
// part's forces carry errors that do not cancel, so PME's net force is the sum of its
// force errors. On each axis it stays within four standard deviations of a sum of N
// independent errors of their measured spread: sqrt(N) times their rms about the Ewald
// forces. A systematic error (every force shifted alike) sums to N times its rms and fails.
TEST_P(PmeTest, NetForceNearZero) {
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  const CoulombResult got = run_pme<double>(c.system, parameters(kAlpha, 48, 6, kCutoff), options());
  const double n = double(c.system.size());
  for (int d = 0; d < 3; ++d) {
    double net = 0, squared_error = 0;
    for (std::size_t i = 0; i < c.system.size(); ++i) {
      const double error = got.force[d][i] - c.reference.force[d][i];
      net += error;
      squared_error += error * error;
    }
    EXPECT_LE(std::abs(net), 4 * std::sqrt(n) * std::sqrt(squared_error / n)) << "axis " << d;
  }
}

// A shift of every charge by whole mesh cells leaves the result unchanged to rounding; any
// other shift (here across the periodic seam) changes it only within the method's error.
TEST_P(PmeTest, TranslationInvariance) {
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  const PmeParameters p = parameters(kAlpha, 48, 6, kCutoff);
  const CoulombResult base = run_pme<double>(c.system, p, options());
  ChargeSystem whole = c.system, any = c.system;
  const double cells[3] = {5, 47, 13}, offset[3] = {0.3141, 1.7, 1.0001};
  for (int d = 0; d < 3; ++d)
    for (std::size_t i = 0; i < c.system.size(); ++i) {
      whole.x[d][i] += cells[d] * c.system.box[d] / 48;
      any.x[d][i] += offset[d];
    }
  const CoulombResult shifted = run_pme<double>(whole, p, options());
  // Rounding, relative to the size of the terms it rounds.
  EXPECT_LE(std::abs(shifted.energy - base.energy) / energy_terms(c.reference, c.system), 1e-12);
  EXPECT_LE(force_error(shifted, base), 1e-10);
  const CoulombResult moved = run_pme<double>(any, p, options());
  EXPECT_LE(ewald_energy_error(moved, c.reference, c.system), 1e-5);
  EXPECT_LE(force_error(moved, c.reference), 1e-4);
}

// A net charge gets the neutralising background (and its potential): the reference has
// it too.
TEST_P(PmeTest, NetCharge) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const ChargeSystem s = random_system(rng, {1.6, 1.6, 1.7}, 300, 5.0);
  const CoulombResult want = ewald_sum(s);
  const CoulombResult got = run_pme<double>(s, parameters(4.2 / 0.8, 48, 6, 0.8), options());
  EXPECT_LE(ewald_energy_error(got, want, s), 1e-5);
  EXPECT_LE(force_error(got, want), 1e-4);
  EXPECT_LE(potential_error(got, want), 1e-4);
}

// Every variant against the CPU backend on two threads: in double to rounding (one CPU
// thread against two to 1e-12; CUDA to 1e-10 in the energy, 1e-9 in the forces), in
// float within float's error of the method.
TEST_P(PmeTest, AgreesWithTwoCpuThreads) {
  if (!built_with_fftw()) GTEST_SKIP() << "this build has no FFTW (the CPU backend's PME)";
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  const PmeParameters p = parameters(kAlpha, 48, 6, kCutoff);
  const CoulombResult host = run_pme<double>(c.system, p, cpu(2));
  const CoulombResult got = run_pme<double>(c.system, p, options());
  EXPECT_LE(energy_error(got, host), on_cuda(bc_) ? 1e-10 : 1e-12);
  EXPECT_LE(force_error(got, host), on_cuda(bc_) ? 1e-9 : 1e-12);
  EXPECT_LE(force_error(run_pme<float>(c.system, p, options()), host), 2e-4) << "float";
}

// update_points after a small move gives what set_points at the new positions gives, both
// where the plan keeps its binning (max_away_fraction 1: every charge that left its tile
// goes to the away list; here a few percent do) and where it re-bins in full (0).
void check_update_points(PmeOptions o) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const ChargeSystem s = random_system(rng, {1.6, 1.6, 1.7}, 300);
  const PmeParameters p = parameters(4.0, 32, 5, 0.8);
  ChargeSystem moved = s;
  std::uniform_real_distribution<double> step(-0.01, 0.01);
  for (int d = 0; d < 3; ++d)
    for (double& x : moved.x[d]) x = static_cast<float>(x + step(rng));
  const CoulombResult want = run_pme<double>(moved, p, o);
  for (double fraction : {0.0, 1.0}) {
    o.max_away_fraction = fraction;
    const CoulombResult got = run_pme<double>(moved, p, o, false, &s);
    EXPECT_LE(energy_error(got, want), 1e-12) << "max_away_fraction " << fraction;
    EXPECT_LE(force_error(got, want), 1e-12) << "max_away_fraction " << fraction;
    EXPECT_LE(potential_error(got, want), 1e-12) << "max_away_fraction " << fraction;
  }
}

TEST_P(PmeTest, UpdatePointsIsSetPoints) {
  check_update_points(options());
  if (on_cuda(bc_)) return;  // the errors below take host arrays
  PmePlan<double> plan({2.0, 2.0, 2.0}, parameters(3.0, 16, 5, 0.9), options());
  std::vector<double> x = {0.1, 0.5, 1.9}, shorter = {0.1, 0.5};
  EXPECT_PMKIT_ERROR(plan.update_points({x, x, x}), ErrorCode::NotReady, "set_points");
  plan.set_points({x, x, x});
  EXPECT_PMKIT_ERROR(plan.update_points({shorter, shorter, shorter}), ErrorCode::SizeMismatch, "update_points");
}

// A fresh random system of n charges (net charge `net`) in a 1.6 x 1.6 x 1.7 box, its
// seed for the caller's SCOPED_TRACE, and order 5 on a 32^3 mesh for it.
struct SmallCase {
  std::uint64_t seed = fresh_seed();
  ChargeSystem system;
  PmeParameters params = parameters(4.0, 32, 5, 0.8);
};
SmallCase small_case(std::size_t n, double net) {
  SmallCase c;
  std::mt19937_64 rng(c.seed);
  c.system = random_system(rng, {1.6, 1.6, 1.7}, n, net);
  return c;
}

// The reciprocal part alone plus the real-space pairs, the self term and the background
// is the full result.
TEST_P(PmeTest, ReciprocalPartPlusTheRestIsTheWhole) {
  const SmallCase c = small_case(200, 1.0);
  SCOPED_TRACE(seed_note(c.seed));
  const ChargeSystem& s = c.system;
  const PmeParameters& p = c.params;
  const CoulombResult whole = run_pme<double>(s, p, options());
  const CoulombResult rec = run_pme<double>(s, p, options(), true);
  CoulombResult rest = zero_result(s.size());
  double energy = rec.energy + real_space_sum(s, p.alpha, p.cutoff, 0, rest);
  double total = 0, squares = 0;
  for (double q : s.q) {
    total += q;
    squares += q * q;
  }
  const double pi = 3.14159265358979323846, volume = s.box[0] * s.box[1] * s.box[2];
  energy += -p.alpha / std::sqrt(pi) * squares - pi * total * total / (2 * volume * p.alpha * p.alpha);
  EXPECT_NEAR(whole.energy, energy, 1e-10 * std::abs(energy));
  for (int d = 0; d < 3; ++d)
    for (std::size_t i = 0; i < s.size(); ++i) rest.force[d][i] += rec.force[d][i];
  EXPECT_LE(force_error(whole, rest), 1e-12);
}

// The largest difference of the six virial components over the largest component.
double virial_error(const CoulombResult& got, const CoulombResult& want) {
  double e = 0, w = 0;
  for (int v = 0; v < 6; ++v) {
    e = std::max(e, std::abs(got.virial[v] - want.virial[v]));
    w = std::max(w, std::abs(want.virial[v]));
  }
  return e / w;
}

// The virial, all six components, against the Ewald sum's (real-space pairs r_a F_b, the
// reciprocal sum's strain derivative, the background's); the reciprocal part's alone
// plus the real-space pairs' and the background's is the whole.
TEST_P(PmeTest, VirialMatchesEwaldSum) {
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  const PmeParameters p = parameters(kAlpha, 48, 6, kCutoff);
  const CoulombResult got = run_pme<double>(c.system, p, options(), false, nullptr, true);
  EXPECT_LE(virial_error(got, c.reference), 1e-4);
  const CoulombResult single = run_pme<float>(c.system, p, options(), false, nullptr, true);
  EXPECT_LE(virial_error(single, c.reference), 1e-3);
  const CoulombResult rec = run_pme<double>(c.system, p, options(), true, nullptr, true);
  CoulombResult rest = zero_result(c.system.size());
  real_space_sum(c.system, p.alpha, p.cutoff, 0, rest);
  for (int v = 0; v < 6; ++v) rest.virial[v] += rec.virial[v];
  EXPECT_LE(virial_error(got, rest), 1e-10);
}

// The virial is the energy's strain derivative: stretching axis a of the box and the
// positions with it by (1 +- h) changes the energy by -/+ W_aa h, to O(h^2) (central
// differences in double). PME's mesh part is a smooth function of the box at a fixed
// mesh, so its virial is exact, not within the method's error; with a net charge the
// background's share is in it too. erfc(alpha r_c) = 7e-15: a pair that the strain moves
// across the cutoff changes the energy by far less than the differences resolve.
TEST_P(PmeTest, VirialIsTheStrainDerivative) {
  const SmallCase c = small_case(150, 1.5);
  SCOPED_TRACE(seed_note(c.seed));
  const PmeParameters p = parameters(5.5 / 0.7, 32, 5, 0.7);
  const CoulombResult got = run_pme<double>(c.system, p, options(), false, nullptr, true);
  const double h = 1e-5;
  for (int a = 0; a < 3; ++a) {
    double energy[2];
    for (int side = 0; side < 2; ++side) {
      ChargeSystem strained = c.system;
      const double scale = side ? 1 + h : 1 - h;
      strained.box[a] *= scale;
      for (double& x : strained.x[a]) x *= scale;
      energy[side] = run_pme<double>(strained, p, options()).energy;
    }
    const double derivative = (energy[1] - energy[0]) / (2 * h);
    EXPECT_NEAR(-derivative, got.virial[a], 1e-6 * std::abs(got.virial[a]) + 1e-8) << "axis " << a;
  }
}

// PmePlan::charge_gradient_of_forces on either backend, in double.
std::vector<double> charge_gradient(const ChargeSystem& s, const PmeParameters& p, PmeOptions o,
                                    const std::array<std::vector<double>, 3>& w, bool reciprocal_only) {
  const std::size_t n = s.size();
  std::vector<double> out(n, -7.0);
  PmePlan<double> plan(s.box, p, o);
  if (o.backend == Backend::Cpu) {
    plan.set_points({s.x[0], s.x[1], s.x[2]});
    plan.charge_gradient_of_forces(s.q, {w[0], w[1], w[2]}, out, reciprocal_only);
  } else {
#if defined(PMKIT_WITH_CUDA)
    DeviceBuffer<double> dx(s.x[0]), dy(s.x[1]), dz(s.x[2]), dq(s.q), wx(w[0]), wy(w[1]), wz(w[2]), dout(out);
    plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
    plan.charge_gradient_of_forces(device_cview(dq), {device_cview(wx), device_cview(wy), device_cview(wz)},
                                   device_view(dout), reciprocal_only);
    plan.synchronize();
    out = dout.download();
#endif
  }
  return out;
}

// The forces are quadratic in the charges, so a central difference of sum_j w_j . F_j
// along any change of the charges is exact but for rounding, at any step: the charge
// gradient of the forces against it, for the whole interaction and its reciprocal part.
TEST_P(PmeTest, ChargeGradientOfForcesIsExact) {
  const SmallCase c = small_case(120, 0.5);
  SCOPED_TRACE(seed_note(c.seed));
  std::mt19937_64 rng(c.seed + 1);
  std::normal_distribution<double> normal;
  std::array<std::vector<double>, 3> w;
  std::vector<double> direction(c.system.size());
  for (auto& component : w)
    for (std::size_t i = 0; i < c.system.size(); ++i) component.push_back(normal(rng));
  for (double& d : direction) d = normal(rng);
  for (bool reciprocal_only : {false, true}) {
    const std::vector<double> gradient = charge_gradient(c.system, c.params, options(), w, reciprocal_only);
    double along = 0;
    for (std::size_t i = 0; i < direction.size(); ++i) along += direction[i] * gradient[i];
    double weighted[2], scale = 0;
    for (int side = 0; side < 2; ++side) {
      ChargeSystem changed = c.system;
      for (std::size_t i = 0; i < direction.size(); ++i) changed.q[i] += (side ? 0.5 : -0.5) * direction[i];
      const CoulombResult r = run_pme<double>(changed, c.params, options(), reciprocal_only);
      weighted[side] = 0;
      for (int d = 0; d < 3; ++d)
        for (std::size_t i = 0; i < direction.size(); ++i) {
          weighted[side] += w[d][i] * r.force[d][i];
          scale += std::abs(w[d][i] * r.force[d][i]);
        }
    }
    EXPECT_NEAR(weighted[1] - weighted[0], along, 1e-11 * scale) << "reciprocal only: " << reciprocal_only;
  }
}

// The choice from a tolerance: OpenMM's meshes for its water-density cases (81^3 for a
// 10 nm box, 175^3 for 21.54 nm, cutoff 1 nm, tolerance 5e-4), alpha = sqrt(-ln(2 tol)) / r_c;
// on the test system the relative RMS force error at order 5 stays below the tolerance
// (OpenMM's estimate is conservative for random charges: their close pairs' large
// real-space forces dominate the norm) and falls with it.
TEST_P(PmeTest, ParametersFromTolerance) {
  const PmeParameters small = PmeParameters::choose({10.0, 10.0, 10.0}, 1.0, 5e-4);
  EXPECT_EQ(small.mesh[0], 81);
  EXPECT_NEAR(small.alpha, std::sqrt(-std::log(1e-3)), 1e-12);
  const double l = std::cbrt(1e4);
  EXPECT_EQ(PmeParameters::choose({l, l, l}, 1.0, 5e-4).mesh[2], 175);
  EXPECT_EQ(small.order, 5);
  const Case& c = thousand_charges();
  SCOPED_TRACE(seed_note(c.seed));
  double previous = 1;
  for (double tolerance : {1e-3, 1e-4}) {
    const PmeParameters p = PmeParameters::choose(c.system.box, kCutoff, tolerance);
    const double error = force_error(run_pme<double>(c.system, p, options()), c.reference);
    EXPECT_LE(error, tolerance) << "mesh " << p.mesh[0];
    EXPECT_LT(error, 0.3 * previous) << "tolerance " << tolerance << ": the error does not fall with it";
    previous = error;
  }
}

TEST(Pme, BadInput) {
  PMKIT_REQUIRE_FFTW();
  const std::array<double, 3> box = {2.0, 2.0, 2.0};
  const PmeParameters good = parameters(3.0, 16, 5, 0.9);
  auto with = [&](auto change) {
    PmeParameters p = good;
    change(p);
    return p;
  };
  EXPECT_PMKIT_ERROR(PmePlan<double>(box, with([](auto& p) { p.alpha = 0; })), ErrorCode::InvalidArgument, "alpha");
  EXPECT_PMKIT_ERROR(PmePlan<double>(box, with([](auto& p) { p.alpha = -1; })), ErrorCode::InvalidArgument, "alpha");
  EXPECT_PMKIT_ERROR(PmePlan<double>(box, with([](auto& p) { p.order = 3; })), ErrorCode::InvalidArgument, "order");
  EXPECT_PMKIT_ERROR(PmePlan<double>(box, with([](auto& p) { p.order = 9; })), ErrorCode::InvalidArgument, "order");
  EXPECT_PMKIT_ERROR(PmePlan<double>(box, with([](auto& p) { p.mesh[1] = 4; })), ErrorCode::InvalidArgument, "mesh[1]");
  EXPECT_PMKIT_ERROR(PmePlan<double>(box, with([](auto& p) { p.cutoff = 1.1; })), ErrorCode::InvalidArgument, "cutoff");
  EXPECT_PMKIT_ERROR(PmePlan<double>({2.0, -1.0, 2.0}, good), ErrorCode::InvalidArgument, "box[1]");
  for (double fraction : {-0.1, 1.5, std::nan("")}) {
    PmeOptions o = cpu();
    o.max_away_fraction = fraction;
    EXPECT_PMKIT_ERROR(PmePlan<double>(box, good, o), ErrorCode::InvalidArgument, "max_away_fraction");
  }
  EXPECT_PMKIT_ERROR(PmeParameters::choose(box, 0.9, 0.0), ErrorCode::InvalidArgument, "tolerance");
  EXPECT_PMKIT_ERROR(PmeParameters::choose(box, 1.5, 1e-3), ErrorCode::InvalidArgument, "cutoff");

  PmePlan<double> plan(box, good, cpu());
  std::vector<double> x = {0.1, 0.5, 1.9}, y = {0.2, 0.4, 1.0}, z = {0.3, 0.3, 1.5}, q = {1, -1, 0.5};
  std::vector<double> fx(3, 7.0), fy(3, 7.0), fz(3, 7.0), phi(2);
  double energy = 7.0;
  EXPECT_PMKIT_ERROR(plan.compute(q, {fx, fy, fz}), ErrorCode::NotReady, "set_points");
  std::vector<double> bad_x = x;
  bad_x[1] = std::nan("");
  EXPECT_PMKIT_ERROR(plan.set_points({bad_x, y, z}), ErrorCode::NonFinitePosition, "");
  plan.set_points({x, y, z});
  std::vector<double> short_q = {1, -1};
  EXPECT_PMKIT_ERROR(plan.compute(short_q, {fx, fy, fz}), ErrorCode::SizeMismatch, "charges");
  EXPECT_PMKIT_ERROR(plan.compute(q, {fx, fy, fz}, {}, phi), ErrorCode::SizeMismatch, "potential");
  std::vector<double> two(2);
  EXPECT_PMKIT_ERROR(plan.compute(q, {fx, fy, fz}, two), ErrorCode::SizeMismatch, "energy");
  std::vector<double> five(5);
  EXPECT_PMKIT_ERROR(plan.compute(q, {fx, fy, fz}, {}, {}, five), ErrorCode::SizeMismatch, "virial");
  EXPECT_PMKIT_ERROR(plan.charge_gradient_of_forces(q, {fx, fy, short_q}, phi), ErrorCode::SizeMismatch, "weights");
  for (double v : fx) EXPECT_EQ(v, 7.0);  // nothing written by a failed call
  plan.compute(q, {fx, fy, fz}, View<double>(&energy, 1));
  EXPECT_NE(energy, 7.0);
  // No charges: zero energy, nothing to write.
  const std::vector<double> none;
  std::vector<double> empty_f;
  plan.set_points({none, none, none});
  plan.compute(none, {empty_f, empty_f, empty_f}, View<double>(&energy, 1), empty_f);
  EXPECT_EQ(energy, 0.0);
}

#if defined(PMKIT_WITH_CUDA)
PmeOptions cuda_pme() {
  PmeOptions o;
  o.backend = Backend::Cuda;
  return o;
}

// Computes in a row on one plan (with and without the potential, the reciprocal part
// alone, after a refused call, with no charges) each give their own energy: the energy's
// sums start from zero every time.
TEST(CudaPme, RepeatedComputesAgree) {
  PMKIT_REQUIRE_GPU();
  const SmallCase c = small_case(300, 2.0);
  SCOPED_TRACE(seed_note(c.seed));
  const ChargeSystem& s = c.system;
  const CoulombResult want = run_pme<double>(s, c.params, cuda_pme());
  PmePlan<double> plan(s.box, c.params, cuda_pme());
  const std::size_t n = s.size();
  DeviceBuffer<double> x(s.x[0]), y(s.x[1]), z(s.x[2]), q(s.q), fx(n), fy(n), fz(n), phi(n), energy(1);
  plan.set_points({device_cview(x), device_cview(y), device_cview(z)});
  const PmePlan<double>::Forces forces = {device_view(fx), device_view(fy), device_view(fz)};
  auto energy_now = [&] { return energy.download()[0]; };
  for (int rep = 0; rep < 2; ++rep) {
    plan.compute(device_cview(q), forces, device_view(energy), device_view(phi));
    EXPECT_NEAR(energy_now(), want.energy, 1e-12 * std::abs(want.energy)) << "with the potential, compute " << rep;
  }
  plan.compute_reciprocal(device_cview(q), forces, device_view(energy));
  plan.compute(device_cview(q), forces, device_view(energy));
  EXPECT_NEAR(energy_now(), want.energy, 1e-12 * std::abs(want.energy)) << "after the reciprocal part";
  std::vector<double> host_f(n);
  EXPECT_PMKIT_ERROR(plan.compute(device_cview(q), {View<double>(host_f), device_view(fy), device_view(fz)},
                                  device_view(energy)),
                     ErrorCode::InvalidArgument, "device memory");
  plan.compute(device_cview(q), forces, device_view(energy));
  EXPECT_NEAR(energy_now(), want.energy, 1e-12 * std::abs(want.energy)) << "after a refused compute";
  DeviceBuffer<double> none(0);
  plan.set_points({device_cview(none), device_cview(none), device_cview(none)});
  plan.compute(device_cview(none), {device_view(none), device_view(none), device_view(none)}, device_view(energy));
  EXPECT_EQ(energy_now(), 0.0);
}

TEST(CudaPme, HostArraysAreRefused) {
  PMKIT_REQUIRE_GPU();
  PmePlan<float> plan({2.0, 2.0, 2.0}, parameters(3.0, 16, 5, 0.9), cuda_pme());
  DeviceBuffer<float> x(std::vector<float>{0.1f, 0.5f}), y(std::vector<float>{0.2f, 1.5f}),
      z(std::vector<float>{0.3f, 0.7f}), q(std::vector<float>{1, -1});
  plan.set_points({device_cview(x), device_cview(y), device_cview(z)});
  std::vector<float> host_f(2);
  DeviceBuffer<float> fy(2), fz(2);
  EXPECT_PMKIT_ERROR(plan.compute(device_cview(q), {View<float>(host_f), device_view(fy), device_view(fz)}),
                     ErrorCode::InvalidArgument, "device memory");
}
#endif

INSTANTIATE_TEST_SUITE_P(Backends, PmeTest, variant_values<PmeOptions>(), variant_name);

}  // namespace
}  // namespace pmkit::test
