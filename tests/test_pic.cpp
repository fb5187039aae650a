// The PIC example's physics (apps/pic): linear Landau damping, the two-stream
// instability's growth, energy and momentum conservation of a thermal plasma, and the
// same field-energy history on every backend variant. Rates are fitted from the simulated
// field energy and compared with theory; nothing here is tuned to the answer.
#include <cmath>
#include <complex>
#include <optional>

#include "loading.hpp"
#include "pic.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

// Landau damping of the k lambda_D = 0.5 mode: the root of the Vlasov-Poisson dispersion
// relation, omega = 1.4156 - 0.1533 i (in plasma frequencies).
constexpr double kLandauGamma = -0.1533, kLandauOmega = 1.4156;
constexpr double kLandauK = 0.5;

// A variant's backend and threads on a configuration. The runs take a few thousand
// small steps, where a shared machine's descheduled OpenMP thread costs more than a
// second thread gains: the matrix's one-thread variant is the quick one.
pic::Config on(const Variant& v, pic::Config c = {}) {
  static_cast<ExecutionOptions&>(c) = v.exec;
  return c;
}

// The physics on every variant that applies to the application (CPU threads, CUDA).
class PicTest : public VariantTest {
 protected:
  void SetUp() override {
    VariantTest::SetUp();
    if (!IsSkipped()) PMKIT_REQUIRE_FFTW();
  }
  pic::Config landau() const { return on(bc_); }  // the defaults: k = 0.5, 1%, TSC, 2D
  pic::Config thermal(Kernel kernel) const;
};

TEST_P(PicTest, LandauDampingRateAndFrequency) {
  const pic::Config c = landau();
  const pic::Result r = pic::simulate(c);
  ASSERT_EQ(r.history.size(), std::size_t(c.steps));
  // The window the fit chooses: after the initial transient, before the noise floor.
  const pic::RateFit fit = pic::fit_damping(r.history, kLandauK, kLandauOmega);
  EXPECT_GE(fit.points, 4);
  EXPECT_NEAR(fit.gamma, kLandauGamma, 0.03 * std::abs(kLandauGamma));
  EXPECT_NEAR(fit.omega, kLandauOmega, 0.01 * kLandauOmega);
}

// Values of the Faddeeva function: w(0) = 1, w(i) = erfcx(1), w(1) = exp(-1) + 2i/sqrt(pi)
// Dawson(1), and the lower half-plane's continuation w(-z) = 2 exp(-z^2) - w(z).
TEST(Pic, FaddeevaFunction) {
  using C = std::complex<double>;
  const auto near = [](C got, C want, double tol) { return std::abs(got - want) <= tol * std::abs(want); };
  EXPECT_TRUE(near(pic::faddeeva(C(0, 0)), C(1, 0), 1e-12));
  EXPECT_TRUE(near(pic::faddeeva(C(0, 1)), C(0.42758357615580705, 0), 1e-12));
  EXPECT_TRUE(near(pic::faddeeva(C(1, 0)), C(0.36787944117144233, 0.60715770584139372), 1e-12));
  // Large |z|: w ~ i / (sqrt(pi) z) (1 + 1 / (2 z^2) + 3 / (4 z^4)).
  const C z(30, 2), series = C(0, 1) / (std::sqrt(std::acos(-1.0)) * z) * (1.0 + 0.5 / (z * z) + 0.75 / (z * z * z * z));
  EXPECT_TRUE(near(pic::faddeeva(z), series, 1e-6));
  for (const C x : {C(0.7, 0.4), C(2.5, 1.5), C(-1.2, 0.3)})
    EXPECT_TRUE(near(pic::faddeeva(-x), 2.0 * std::exp(-x * x) - pic::faddeeva(x), 1e-12)) << x;
  EXPECT_TRUE(near(pic::plasma_dispersion(C(0, 0)), C(0, std::sqrt(std::acos(-1.0))), 1e-12));
}

// The Landau roots of a Maxwellian at k lambda_D = 0.5, 0.4, 0.3 (the tabulated values
// to four places), and a root of the dispersion relation wherever it is found.
TEST(Pic, LandauRoots) {
  struct Root {
    double k, omega, gamma;
  };
  for (const Root& want : {Root{0.5, 1.4156, -0.1533}, Root{0.4, 1.2850, -0.0661}, Root{0.3, 1.1598, -0.0126}}) {
    const std::optional<std::complex<double>> got = pic::landau_root(want.k);
    ASSERT_TRUE(got) << want.k;
    EXPECT_NEAR(got->real(), want.omega, 1.5e-4) << want.k;
    EXPECT_NEAR(got->imag(), want.gamma, 1.5e-4) << want.k;
  }
  for (double k : {0.1, 0.8, 1.5}) {
    const std::optional<std::complex<double>> omega = pic::landau_root(k);
    ASSERT_TRUE(omega) << k;
    const std::complex<double> zeta = *omega / (std::sqrt(2.0) * k);
    EXPECT_LT(std::abs(k * k + 1.0 + zeta * pic::plasma_dispersion(zeta)), 1e-9) << k;
  }
  EXPECT_FALSE(pic::landau_root(0.0));
}

// Cold symmetric beams at +-v0: (omega^2 - (k v0)^2)^2 = omega^2 + (k v0)^2, with
// omega^2 = -gamma^2 for the growing root.
TEST(Pic, TwoBeamTheory) {
  for (double a : {0.2, 0.5, std::sqrt(3.0 / 8.0), 0.9}) {
    const double g = pic::two_stream_growth_rate(a), w2 = -g * g;
    EXPECT_GT(g, 0);
    EXPECT_NEAR((w2 - a * a) * (w2 - a * a), w2 + a * a, 1e-12) << a;
  }
  EXPECT_NEAR(pic::two_stream_growth_rate(std::sqrt(3.0 / 8.0)), 1 / std::sqrt(8.0), 1e-12);  // the fastest
  EXPECT_EQ(pic::two_stream_growth_rate(1.2), 0.0);  // k v0 > 1: stable
  EXPECT_NEAR(pic::two_stream_growth_rate(0.5), 0.340625, 1e-6);
}

TEST_P(PicTest, TwoStreamGrowthRate) {
  pic::Config c = on(bc_);
  c.problem = pic::Problem::TwoStream;
  c.cells = {32, 2, 2};
  c.particles = 32 * 2 * 256;
  c.amplitude = 1e-4;
  c.steps = 340;
  const pic::Result r = pic::simulate(c);
  // The linear phase the fit chooses: above the seed's start, below saturation.
  const pic::RateFit growth = pic::fit_growth(r.history);
  const double theory = pic::two_stream_growth_rate(c.k * c.beam_speed);  // 0.3406 at k v0 = 0.5
  ASSERT_TRUE(growth.fitted());
  EXPECT_NEAR(growth.gamma, theory, 0.05 * theory);
}

// A thermal plasma (random loading, h = lambda_D) keeps its total energy with TSC and
// M'4; with E on the mesh and interp by the deposit's kernel the total force on the
// particles vanishes, so the momentum holds to rounding.
pic::Config PicTest::thermal(Kernel kernel) const {
  pic::Config c = on(bc_);
  c.problem = pic::Problem::Thermal;
  c.dim = 3;
  c.cells = {12, 12, 12};
  c.particles = 12 * 12 * 12 * 16;
  c.steps = 100;
  c.kernel = kernel;
  c.seed = fresh_seed();
  return c;
}

TEST_P(PicTest, ThermalPlasmaConservesEnergy) {
  for (Kernel k : {Kernel::tsc(), Kernel::mp4()}) {
    pic::Config c = thermal(k);
    SCOPED_TRACE(k.name() + ", " + seed_note(c.seed));
    const pic::Result r = pic::simulate(c);
    const double e0 = r.history.front().total;
    double worst = 0;
    for (const pic::Diagnostics& row : r.history) worst = std::max(worst, std::abs(row.total - e0) / e0);
    EXPECT_LT(worst, 0.01);
    EXPECT_GT(r.history.back().field, 0);  // the field is live: fluctuations of the thermal plasma
  }
}

TEST_P(PicTest, MomentumToRoundingWithTheMeshField) {
  pic::Config c = thermal(Kernel::tsc());
  SCOPED_TRACE(seed_note(c.seed));
  c.double_precision = true;
  c.field = pic::FieldMethod::Mesh;
  const pic::Result r = pic::simulate(c);
  // The scale of the momenta summed: sqrt(2 m K), m = 1 * volume the electrons' mass.
  const double volume = std::pow(12.0, 3.0), scale = std::sqrt(2 * volume * r.history.front().kinetic);
  for (const pic::Diagnostics& row : r.history)
    for (int d = 0; d < 3; ++d)
      ASSERT_NEAR(row.momentum[d], r.history.front().momentum[d], 1e-12 * scale) << "t = " << row.t << ", axis " << d;
}

// The gradient of phi at the particles does not cancel the self-force exactly: the same
// check fails there, so the one above is not vacuous.
TEST_P(PicTest, MomentumDriftsWithTheGradientField) {
  pic::Config c = thermal(Kernel::tsc());
  SCOPED_TRACE(seed_note(c.seed));
  c.double_precision = true;
  const pic::Result r = pic::simulate(c);
  const double volume = std::pow(12.0, 3.0), scale = std::sqrt(2 * volume * r.history.front().kinetic);
  double drift = 0;
  for (const pic::Diagnostics& row : r.history)
    for (int d = 0; d < 3; ++d) drift = std::max(drift, std::abs(row.momentum[d] - r.history.front().momentum[d]));
  EXPECT_GT(drift, 1e-9 * scale);
}

TEST(Pic, QuietStartQuantiles) {
  EXPECT_NEAR(pic::normal_quantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(pic::normal_quantile(1e-6), -4.753424308822899, 1e-10);
  EXPECT_DOUBLE_EQ(pic::radical_inverse(2, 6), 0.375);  // 110 -> 0.011
  EXPECT_DOUBLE_EQ(pic::radical_inverse(3, 5), 7.0 / 9.0);  // 12 -> 0.21
}

TEST(Pic, BadConfigurations) {
  pic::Config c;
  c.dt = -1;
  EXPECT_PMKIT_ERROR(pic::simulate(c), ErrorCode::InvalidArgument, "dt = -1");
  c.dt = 2;  // leapfrog is unstable from dt = 2 over the plasma frequency
  EXPECT_PMKIT_ERROR(pic::simulate(c), ErrorCode::InvalidArgument, "dt = 2: in (0, 1]");
  c = pic::Config{};
  c.sort_every = -2;
  EXPECT_PMKIT_ERROR(pic::simulate(c), ErrorCode::InvalidArgument, "sort_every = -2");
  c = pic::Config{};
  int stream = 0;  // any handle: the simulation makes its own stream
  c.stream = &stream;
  EXPECT_PMKIT_ERROR(pic::simulate(c), ErrorCode::InvalidArgument, "stream: null");
}

// The CPU runs every step eagerly, whatever Config::graph says, and says nothing of it.
TEST(Pic, CpuIgnoresTheGraph) {
  PMKIT_REQUIRE_FFTW();
  pic::Config c;
  c.cells = {16, 2, 2};
  c.particles = 4096;
  c.steps = 12;
  c.num_threads = 1;
  c.graph = false;
  const pic::Result eager = pic::simulate(c);
  c.graph = true;
  const pic::Result asked = pic::simulate(c);
  EXPECT_EQ(asked.replayed_steps, 0);
  EXPECT_EQ(asked.graph_note, "");
  ASSERT_EQ(asked.history.size(), std::size_t(c.steps));
  for (std::size_t i = 0; i < eager.history.size(); ++i) EXPECT_EQ(asked.history[i].total, eager.history[i].total) << i;
}

// Sorting the arrays every few steps changes the order of the sums only.
TEST_P(PicTest, SortEveryKeepsTheHistory) {
  pic::Config c = on(bc_);
  c.particle_step = false;  // the separate calls, whose arrays sort_every sorts
  c.particles = 16384;
  c.steps = 40;
  c.sort_every = 0;
  const pic::Result plain = pic::simulate(c);
  c.sort_every = 7;
  const pic::Result sorted = pic::simulate(c);
  for (std::size_t i = 0; i < plain.history.size(); ++i)
    ASSERT_NEAR(sorted.history[i].field, plain.history[i].field, 1e-3 * plain.history[0].field) << i;
}

// The steps through pmkit's particle step (the gather, push, re-bin and deposit in one
// call) against the separate calls, in double over many steps, both field methods: the
// same history to rounding (the particles' order differs between them, so the sums'
// order does). Where the step's deposit or gather were off by a step or a kernel, the
// field energy would differ at the percent level from the first steps on.
TEST_P(PicTest, ParticleStepKeepsTheHistory) {
  for (pic::FieldMethod field : {pic::FieldMethod::Gradient, pic::FieldMethod::Mesh}) {
    pic::Config c = landau();
    c.double_precision = true;
    c.field = field;
    c.particles = 16384;
    c.steps = 120;
    SCOPED_TRACE(field == pic::FieldMethod::Mesh ? "mesh field" : "gradient field");
    c.particle_step = false;
    const pic::Result separate = pic::simulate(c);
    c.particle_step = true;
    const pic::Result fused = pic::simulate(c);
    EXPECT_FALSE(separate.particle_step);
    EXPECT_TRUE(fused.particle_step);
    ASSERT_EQ(fused.history.size(), separate.history.size());
    const pic::Diagnostics& first = separate.history.front();
    for (std::size_t i = 0; i < separate.history.size(); ++i) {
      const pic::Diagnostics &a = separate.history[i], &b = fused.history[i];
      ASSERT_NEAR(b.field, a.field, 1e-9 * first.field) << "step " << i;
      ASSERT_NEAR(b.kinetic, a.kinetic, 1e-12 * first.kinetic) << "step " << i;
      ASSERT_NEAR(b.total, a.total, 1e-12 * first.total) << "step " << i;
      for (int d = 0; d < 3; ++d)
        ASSERT_NEAR(b.momentum[d], a.momentum[d], 1e-12 * std::sqrt(first.kinetic)) << "step " << i << ", axis " << d;
    }
  }
}

// The same initial particles on one CPU thread and on the variant: the same field-energy
// history within float rounding's growth, and the same fitted damping.
TEST_P(PicTest, SameFieldEnergyHistoryAsOneCpuThread) {
  pic::Config c = landau();
  c.backend = Backend::Cpu;
  c.num_threads = 1;
  const pic::Result cpu = pic::simulate(c);
  const pic::Result other = pic::simulate(landau());
  ASSERT_EQ(cpu.history.size(), other.history.size());
  for (std::size_t i = 0; i < cpu.history.size() && cpu.history[i].t <= 12; ++i)
    EXPECT_NEAR(other.history[i].field, cpu.history[i].field, 0.02 * cpu.history[i].field + 1e-3 * cpu.history[0].field)
        << i;
  const pic::RateFit a = pic::fit_damping(cpu.history, kLandauK, kLandauOmega);
  const pic::RateFit b = pic::fit_damping(other.history, kLandauK, kLandauOmega);
  EXPECT_NEAR(b.gamma, a.gamma, 0.01 * std::abs(a.gamma));
  EXPECT_NEAR(b.omega, a.omega, 0.002 * a.omega);
}

// The steps replayed from a CUDA graph against the same steps run eagerly, from the same
// particles: with the deterministic spread the same history bit for bit, over cycles of
// 1, 2 and 6 steps (sort_every 0, 1, 3), each run ending with steps short of a cycle
// that run eagerly; with the default spread (the atomics' order varies) the same history
// to float rounding's growth, where the captured update_points keeps its binning.
pic::Config cuda_run() {
  pic::Config c;
  c.backend = Backend::Cuda;
  c.particle_step = false;  // the separate calls, which a graph replays
  return c;
}

void expect_same_bits(const pic::Result& a, const pic::Result& b) {
  ASSERT_EQ(a.history.size(), b.history.size());
  for (std::size_t i = 0; i < a.history.size(); ++i) {
    const pic::Diagnostics &x = a.history[i], &y = b.history[i];
    ASSERT_EQ(x.field, y.field) << "step " << i;
    ASSERT_EQ(x.kinetic, y.kinetic) << "step " << i;
    for (int d = 0; d < 3; ++d) ASSERT_EQ(x.momentum[d], y.momentum[d]) << "step " << i << ", axis " << d;
  }
}

// A small 3D thermal plasma on CUDA, deterministic, from a fresh seed.
pic::Config cuda_deterministic_run(int steps) {
  pic::Config c = cuda_run();
  c.problem = pic::Problem::Thermal;
  c.dim = 3;
  c.cells = {16, 16, 16};
  c.particles = 16 * 16 * 16 * 8;
  c.steps = steps;
  c.seed = fresh_seed();
  c.deterministic = true;
  return c;
}

TEST(PicCuda, GraphReplaysTheEagerStepsBitForBit) {
  PMKIT_REQUIRE_VARIANT((Variant{"CudaDevice", execution(Backend::Cuda), Memory::Device}));
  for (int sort_every : {0, 1, 3}) {
    pic::Config c = cuda_deterministic_run(41);
    c.sort_every = sort_every;
    SCOPED_TRACE("sort_every " + std::to_string(sort_every) + ", " + seed_note(c.seed));
    c.graph = false;
    const pic::Result eager = pic::simulate(c);
    c.graph = true;
    const pic::Result replayed = pic::simulate(c);
    EXPECT_EQ(eager.replayed_steps, 0);
    // One cycle of eager steps before the capture, and the steps short of a last cycle.
    const int cycle = pic::graph_cycle(c);
    EXPECT_EQ(replayed.replayed_steps, (c.steps - cycle) / cycle * cycle) << replayed.graph_note;
    EXPECT_EQ(replayed.history.size(), std::size_t(c.steps));
    expect_same_bits(eager, replayed);
  }
}

TEST(PicCuda, GraphKeepsTheLandauHistory) {
  PMKIT_REQUIRE_VARIANT((Variant{"CudaDevice", execution(Backend::Cuda), Memory::Device}));
  for (int sort_every : {0, 1}) {
    pic::Config c = cuda_run();
    c.sort_every = sort_every;
    SCOPED_TRACE("sort_every " + std::to_string(sort_every));
    c.graph = false;
    const pic::Result eager = pic::simulate(c);
    c.graph = true;
    const pic::Result replayed = pic::simulate(c);
    EXPECT_GT(replayed.replayed_steps, c.steps / 2) << replayed.graph_note;
    ASSERT_EQ(replayed.history.size(), eager.history.size());
    for (std::size_t i = 0; i < eager.history.size() && eager.history[i].t <= 12; ++i)
      EXPECT_NEAR(replayed.history[i].field, eager.history[i].field,
                  0.02 * eager.history[i].field + 1e-3 * eager.history[0].field)
          << i;
  }
}

// The particle step on CUDA runs eagerly, saying why where a graph was asked for; in
// deterministic mode its history is the same bits in every run.
TEST(PicCuda, ParticleStepRunsEagerlyAndRepeatsInDeterministicMode) {
  PMKIT_REQUIRE_VARIANT((Variant{"CudaDevice", execution(Backend::Cuda), Memory::Device}));
  pic::Config c = cuda_deterministic_run(21);
  c.particle_step = true;
  c.graph = true;
  SCOPED_TRACE(seed_note(c.seed));
  const pic::Result first = pic::simulate(c);
  EXPECT_EQ(first.replayed_steps, 0);
  EXPECT_NE(first.graph_note.find("particle step"), std::string::npos) << first.graph_note;
  const pic::Result again = pic::simulate(c);
  expect_same_bits(first, again);
}

INSTANTIATE_TEST_SUITE_P(Backends, PicTest, ::testing::ValuesIn(variants_for<pic::Config>()), variant_name);

}  // namespace
}  // namespace pmkit::test
