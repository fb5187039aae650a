// `pmkit pic` across MPI ranks (apps/pic/distributed.hpp) under mpirun: the deposit of
// the deterministic mode against one rank's bit for bit and against the single-rank
// simulation's Plan to rounding, the energies and momentum of a run against the
// single-rank simulation's to rounding, Landau damping and the two-stream growth at 4
// ranks against theory, and the errors of configurations that cannot run across ranks.
// CUDA ranks (GPU rank mod the GPUs there are, shared where there are fewer) run the
// comparisons where a GPU is found.
#include <cmath>
#include <cstring>
#include <string>

#include "distributed.hpp"
#include "distributed_support.hpp"
#include "pic.hpp"
#include "rank_kinds.hpp"

namespace pmkit::test {
namespace {

class PicRanksTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    PMKIT_REQUIRE_FFTW();  // CPU ranks' field solve, and the single-rank run's
    PMKIT_REQUIRE_CPU_RANK_FFT(GetParam());
    if (GetParam() == Backend::Cuda && visible_gpus() == 0) GTEST_SKIP() << "no GPU for CUDA ranks";
  }
  // A configuration on this test's ranks: every axis's last cells split over 1 to 4
  // ranks (8 planes), the arrays not sorted unless a test asks.
  pic::Config config() const {
    pic::Config c;
    c.backend = GetParam();
    if (c.backend == Backend::Cuda) c.device = pic::rank_device(MPI_COMM_WORLD);
    c.num_threads = 1;
    c.sort_every = 0;
    c.graph = false;
    return c;
  }
  // 3D thermal electrons, 8 a cell.
  pic::Config thermal() const {
    pic::Config c = config();
    c.problem = pic::Problem::Thermal;
    c.dim = 3;
    c.cells = {12, 10, 8};
    c.particles = 12 * 10 * 8 * 8;
    c.seed = shared_seed();
    return c;
  }
  // 2D Landau, 64 a cell.
  pic::Config landau() const {
    pic::Config c = config();
    c.cells = {32, 8, 1};
    c.particles = 32 * 8 * 64;
    return c;
  }
};

std::string describe(const pic::Config& c) {
  return std::string(c.dim == 3 ? "3D thermal" : "2D Landau") + (c.double_precision ? ", double" : ", float") +
         (c.field == pic::FieldMethod::Mesh ? ", E on the mesh" : "") + ", seed " + std::to_string(c.seed);
}

// The deterministic deposit of the initial electrons: the same bits on these ranks as on
// one, and within rounding of the single-rank simulation's Plan.
TEST_P(PicRanksTest, DeterministicDepositIsOneRanksBits) {
  for (pic::Config c : {thermal(), landau()}) {
    for (bool double_precision : {false, true}) {
      c.double_precision = double_precision;
      c.deterministic = true;
      SCOPED_TRACE(describe(c));
      const std::vector<double> ranks = pic::initial_density(MPI_COMM_WORLD, c);
      if (world_rank() != 0) continue;
      const std::vector<double> one = pic::initial_density(MPI_COMM_SELF, c);
      ASSERT_EQ(ranks.size(), one.size());
      for (std::size_t i = 0; i < one.size(); ++i) ASSERT_EQ(ranks[i], one[i]) << "node " << i;
      pic::Config single = c;
      single.backend = Backend::Cpu;
      const std::vector<double> plan = pic::initial_density(single);
      const auto [diff, scale] = max_difference(ranks, plan);
      EXPECT_GT(scale, 0);
      EXPECT_LE(diff, (double_precision ? 1e-13 : 1e-5) * scale);
    }
  }
}

// The whole run against the single-rank simulation on the same electrons, in double: the
// field energy, kinetic energy and momentum of every step to rounding's growth.
void expect_same_history(const pic::Result& ranks, const pic::Result& single, double tolerance) {
  ASSERT_EQ(ranks.history.size(), single.history.size());
  const double energy = single.history.front().total;
  const double momentum = std::sqrt(2 * energy);  // the scale of the momenta's sums
  for (std::size_t i = 0; i < single.history.size(); ++i) {
    const pic::Diagnostics &a = ranks.history[i], &b = single.history[i];
    ASSERT_NEAR(a.field, b.field, tolerance * energy) << "step " << i;
    ASSERT_NEAR(a.kinetic, b.kinetic, tolerance * energy) << "step " << i;
    for (int d = 0; d < 3; ++d) ASSERT_NEAR(a.momentum[d], b.momentum[d], tolerance * momentum) << "step " << i;
  }
}

TEST_P(PicRanksTest, EnergiesAndMomentumMatchTheSingleRankRun) {
  for (pic::Config c : {thermal(), landau()}) {
    for (pic::FieldMethod field : {pic::FieldMethod::Gradient, pic::FieldMethod::Mesh}) {
      c.double_precision = true;
      c.field = field;
      c.steps = 25;
      SCOPED_TRACE(describe(c));
      const pic::Result ranks = pic::simulate(MPI_COMM_WORLD, c);
      pic::Config single = c;
      single.backend = Backend::Cpu;
      const pic::Result one = pic::simulate(single);
      expect_same_history(ranks, one, 1e-12);
      EXPECT_GT(ranks.history.back().field, 1e-6 * ranks.history.back().total);  // a live field
    }
  }
}

// Sorted every step or every third (the arrays put in each rank's binned order before the
// migrate), in double: the same history as the single-rank run sorted alike, to rounding.
TEST_P(PicRanksTest, SortedRunsMatchTheSingleRankRun) {
  for (int sort_every : {1, 3}) {
    pic::Config c = thermal();
    c.double_precision = true;
    c.steps = 25;
    c.sort_every = sort_every;
    SCOPED_TRACE(describe(c) + ", sorted every " + std::to_string(sort_every));
    const pic::Result ranks = pic::simulate(MPI_COMM_WORLD, c);
    pic::Config single = c;
    single.backend = Backend::Cpu;
    expect_same_history(ranks, pic::simulate(single), 1e-12);
  }
}

// With E on the mesh the total force vanishes across ranks as on one: the momentum holds
// to rounding over a run long enough for the gradient field's drift to show (below).
TEST_P(PicRanksTest, MomentumToRoundingWithTheMeshField) {
  pic::Config c = thermal();
  c.double_precision = true;
  c.steps = 60;
  SCOPED_TRACE(describe(c));
  double drift[2] = {0, 0};
  for (pic::FieldMethod field : {pic::FieldMethod::Mesh, pic::FieldMethod::Gradient}) {
    c.field = field;
    const pic::Result r = pic::simulate(MPI_COMM_WORLD, c);
    for (const pic::Diagnostics& row : r.history)
      for (int d = 0; d < 3; ++d)
        drift[field == pic::FieldMethod::Gradient] =
            std::max(drift[field == pic::FieldMethod::Gradient], std::abs(row.momentum[d] - r.history[0].momentum[d]));
  }
  const double scale = std::sqrt(2 * double(c.particles) * 1.5);  // sqrt(2 m K), K about 3/2 per unit mass
  EXPECT_LT(drift[0], 1e-12 * scale);
  EXPECT_GT(drift[1], 1e-9 * scale);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PicRanksTest, ::testing::Values(Backend::Cpu
#if defined(PMKIT_WITH_CUDA)
                                                                 ,
                                                                 Backend::Cuda
#endif
                                                                 ),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return std::string(info.param == Backend::Cpu ? "CpuRanks" : "CudaRanks");
                         });

// Landau damping of the k = 0.5 mode (omega = 1.4156 - 0.1533 i) and the two-stream
// growth at k v0 = 0.5 (0.3406) on 4 CPU ranks, fitted from the whole plasma's field
// energy as on one rank.
class PicFourRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    PMKIT_REQUIRE_FFTW();
    PMKIT_REQUIRE_CPU_RANK_FFT(Backend::Cpu);
    if (world_size() != 4) GTEST_SKIP() << "the validations run on 4 ranks";
  }
};

TEST_F(PicFourRanks, LandauDampingRateAndFrequency) {
  pic::Config c;
  c.cells = {64, 4, 1};
  c.particles = 64 * 2 * 1024;
  c.sort_every = 0;
  c.num_threads = 1;
  const pic::Result r = pic::simulate(MPI_COMM_WORLD, c);
  ASSERT_EQ(r.history.size(), std::size_t(c.steps));
  const pic::RateFit fit = pic::fit_damping(r.history, 0.5, 1.4156);
  EXPECT_GE(fit.points, 4);
  EXPECT_NEAR(fit.gamma, -0.1533, 0.03 * 0.1533);
  EXPECT_NEAR(fit.omega, 1.4156, 0.01 * 1.4156);
}

TEST_F(PicFourRanks, TwoStreamGrowthRate) {
  pic::Config c;
  c.problem = pic::Problem::TwoStream;
  c.cells = {32, 4, 1};
  c.particles = 32 * 2 * 256;
  c.amplitude = 1e-4;
  c.steps = 340;
  c.sort_every = 0;
  c.num_threads = 1;
  const pic::Result r = pic::simulate(MPI_COMM_WORLD, c);
  const pic::RateFit growth = pic::fit_growth(r.history);
  ASSERT_TRUE(growth.fitted());
  EXPECT_NEAR(growth.gamma, pic::two_stream_growth_rate(0.5), 0.05 * 0.3406);
}

// The message of an error, the same on every rank.
void expect_same_message_on_every_rank(const std::string& message) {
  int length = static_cast<int>(message.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string first(length, ' ');
  if (world_rank() == 0) first = message;
  MPI_Bcast(&first[0], length, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(message, first);
}

std::string error_of(const pic::Config& c) {
  try {
    pic::simulate(MPI_COMM_WORLD, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A rank count that leaves a rank without a plane of the FFT's slabs (3 cells over 4 ranks
// as over 2; 5 over 4: slabs of 2, 2 and 1) fails on every rank alike, naming the
// field, before any work.
TEST(PicRanks, ConfigurationsThatCannotRunAcrossRanks) {
  PMKIT_REQUIRE_FFTW();
  const int size = world_size();
  pic::Config c;
  c.sort_every = 0;
  c.num_threads = 1;
  c.steps = 2;
  c.particles = 1024;
  if (size > 1) {
    c.cells = {16, size - 1, 1};
    EXPECT_PMKIT_ERROR(pic::simulate(MPI_COMM_WORLD, c), ErrorCode::InvalidArgument,
                       "cells[1] = " + std::to_string(size - 1) + " over " + std::to_string(size) + " ranks");
    expect_same_message_on_every_rank(error_of(c));
  }
  if (size == 4) {
    c.dim = 3;
    c.cells = {8, 8, 5};
    EXPECT_PMKIT_ERROR(pic::simulate(MPI_COMM_WORLD, c), ErrorCode::InvalidArgument,
                       "cells[2] = 5 over 4 ranks: the field solve cuts axis 2 into slabs of ceil(5 / 4) = 2 planes, "
                       "which leaves rank 3 none; at most 3 ranks");
    c.dim = 2;
  }
  c.cells = {16, 8, 1};
  // A configuration that one rank alone gets wrong: every rank throws, that rank its own
  // error, the others one that names it.
  if (size > 1 && world_rank() == 1) c.dt = -1;
  const std::string message = error_of(c);
  if (size > 1) {
    EXPECT_NE(message.find(world_rank() == 1 ? "dt = -1" : "failed on rank 1"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace pmkit::test
