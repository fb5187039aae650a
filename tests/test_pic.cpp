// The PIC example's physics (apps/pic): linear Landau damping, the two-stream
// instability's growth, energy and momentum conservation of a thermal plasma, and the
// same field-energy history on every backend variant. Rates are fitted from the simulated
// field energy and compared with theory; nothing here is tuned to the answer.
#include <cmath>

#include "loading.hpp"
#include "pic.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

// Landau damping of the k lambda_D = 0.5 mode: the root of the Vlasov-Poisson dispersion
// relation, omega = 1.4156 - 0.1533 i (in plasma frequencies).
constexpr double kLandauGamma = -0.1533, kLandauOmega = 1.4156;

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
  // Peaks from t = 2 (after the initial transient) to 16 (before the noise floor).
  const pic::PeakFit fit = pic::fit_peaks(r.history, 2.0, 16.0, 1.0);
  EXPECT_GE(fit.peaks, 6);
  EXPECT_NEAR(fit.gamma, kLandauGamma, 0.03 * std::abs(kLandauGamma));
  EXPECT_NEAR(fit.omega, kLandauOmega, 0.01 * kLandauOmega);
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
  // The linear phase: field energy from 1e-5 to 1e-2 of its saturated peak.
  const double growth = pic::fit_growth(r.history, 1e-5, 1e-2);
  const double theory = pic::two_stream_growth_rate(c.k * c.beam_speed);  // 0.3406 at k v0 = 0.5
  EXPECT_NEAR(growth, theory, 0.05 * theory);
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
  c = pic::Config{};
  c.sort_every = -2;
  EXPECT_PMKIT_ERROR(pic::simulate(c), ErrorCode::InvalidArgument, "sort_every = -2");
}

// Sorting the arrays every few steps changes the order of the sums only.
TEST_P(PicTest, SortEveryKeepsTheHistory) {
  pic::Config c = on(bc_);
  c.particles = 16384;
  c.steps = 40;
  c.sort_every = 0;
  const pic::Result plain = pic::simulate(c);
  c.sort_every = 7;
  const pic::Result sorted = pic::simulate(c);
  for (std::size_t i = 0; i < plain.history.size(); ++i)
    ASSERT_NEAR(sorted.history[i].field, plain.history[i].field, 1e-3 * plain.history[0].field) << i;
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
  const pic::PeakFit a = pic::fit_peaks(cpu.history, 2.0, 16.0, 1.0), b = pic::fit_peaks(other.history, 2.0, 16.0, 1.0);
  EXPECT_NEAR(b.gamma, a.gamma, 0.01 * std::abs(a.gamma));
  EXPECT_NEAR(b.omega, a.omega, 0.002 * a.omega);
}

INSTANTIATE_TEST_SUITE_P(Backends, PicTest, ::testing::ValuesIn(variants_for<pic::Config>()), variant_name);

}  // namespace
}  // namespace pmkit::test
