// DistributedRealFft under mpirun: each rank's slabs of the forward and inverse
// transforms against the single-rank RealFft of the whole mesh (the same random mesh on
// every rank), the round trip, the slabs as a DistributedPlan's blocks, and the errors.
// CUDA ranks (one GPU each, round-robin) run the same cases where a GPU is found.
#include <complex>

#include "distributed_support.hpp"
#include "rank_kinds.hpp"
#include "pmkit/distributed_fft.hpp"
#include "pmkit/fft.hpp"

#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
#endif

namespace pmkit::test {
namespace {

class DistributedFftTest : public ::testing::TestWithParam<RankKind> {
 protected:
  void SetUp() override {
    // The single-rank RealFft of the comparisons, and CPU ranks, run FFTW.
    PMKIT_REQUIRE_FFTW();
    PMKIT_REQUIRE_CPU_RANK_FFT(GetParam().backend);
    if (GetParam().backend == Backend::Cuda && visible_gpus() == 0) GTEST_SKIP() << "no GPU for CUDA ranks";
    if (GetParam().transport == Transport::Nccl && world_size() > visible_gpus())
      GTEST_SKIP() << "ranks share a GPU: NCCL refuses them";
    seed_ = shared_seed();
    rng_.seed(seed_);
  }
  FftOptions options() const { return rank_kind_options<FftOptions>(GetParam()); }
  bool on_device() const { return GetParam().backend == Backend::Cuda; }

  // forward and inverse of a random mesh of `shape` against RealFft's on the whole mesh.
  template <class T, int D>
  void check_against_real_fft(const std::array<std::int64_t, D>& shape) {
    using C = std::complex<T>;
    SCOPED_TRACE(seed_note(seed_));
    std::string shape_text;
    for (int d = 0; d < D; ++d) shape_text += (d ? " x " : "") + std::to_string(shape[d]);
    SCOPED_TRACE("shape " + shape_text + (sizeof(T) == 4 ? ", float" : ", double"));
    RealFft<T, D> whole(shape);
    DistributedRealFft<T, D> fft(MPI_COMM_WORLD, shape, options(), GetParam().transport);
    const std::vector<T> mesh = random_values<T>(static_cast<std::size_t>(whole.real_size()), rng_);
    std::vector<C> spectrum(static_cast<std::size_t>(whole.spectrum_size()));
    whole.forward(mesh.data(), spectrum.data());

    // The slab of the real mesh: planes [first, first + count) of the last axis, contiguous.
    const Block<D>& b = fft.real_block();
    const std::int64_t plane = whole.real_size() / shape[D - 1];
    ASSERT_EQ(fft.real_size(), b.shape[D - 1] * plane);
    const auto from = mesh.begin() + b.first_node[D - 1] * plane;
    RankArray<T> slab(std::vector<T>(from, from + fft.real_size()), on_device());
    RankArray<C> local(std::vector<C>(static_cast<std::size_t>(fft.spectrum_size())), on_device());
    fft.forward(slab.data(), local.data());
    EXPECT_EQ(slab.values(), std::vector<T>(from, from + fft.real_size())) << "forward changed its input";

    // Each value of this rank's spectrum slab against the whole spectrum's.
    const SpectrumSlab<D>& s = fft.spectrum_slab();
    const std::array<std::int64_t, D> half = whole.spectrum_shape();
    const std::vector<C> got = local.values();
    double scale = 0, error = 0;
    for (const C& v : spectrum) scale = std::max(scale, static_cast<double>(std::abs(v)));
    std::int64_t seen = 0;
    std::array<std::int64_t, D> k{};
    for (std::int64_t i = 0; i < s.size(); ++i) {
      std::int64_t rest = i, whole_index = 0, stride = 1;
      for (int d = 0; d < D; ++d) {
        k[d] = s.first[d] + rest % s.shape[d];
        rest /= s.shape[d];
      }
      for (int d = 0; d < D; ++d) whole_index += k[d] * stride, stride *= half[d];
      const std::int64_t at = s.index(k);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, fft.spectrum_size());
      ASSERT_EQ(s.at(at), k) << "at() inverts index()";
      error = std::max(error, static_cast<double>(std::abs(got[at] - spectrum[whole_index])));
      ++seen;
    }
    const double tolerance = (sizeof(T) == 4 ? 2e-6 : 1e-14) * std::log2(double(whole.real_size()) + 2);
    EXPECT_LE(error, tolerance * scale) << "forward, rank " << world_rank();
    EXPECT_EQ(sum_over_ranks(seen), whole.spectrum_size()) << "the spectrum slabs tile the spectrum";

    // inverse of that spectrum: the mesh times its size (the round trip), and RealFft's
    // inverse of the same spectrum.
    fft.inverse(local.data(), slab.data());
    std::vector<T> back(static_cast<std::size_t>(whole.real_size()));
    whole.inverse(spectrum.data(), back.data());
    const std::vector<T> mine = slab.values();
    double round_trip = 0, against = 0;
    for (std::int64_t j = 0; j < fft.real_size(); ++j) {
      const double n = static_cast<double>(whole.real_size());
      round_trip = std::max(round_trip, std::fabs(mine[j] / n - from[j]));
      against = std::max(against, std::fabs(double(mine[j]) - double(back[b.first_node[D - 1] * plane + j])) / n);
    }
    const DistributedFftTimings times = fft.last_timings();
    EXPECT_GT(times.total_s, 0.0);
    EXPECT_GE(times.total_s, times.exchange_s);
    EXPECT_GE(times.exchange_s, 0.0);
    EXPECT_LE(round_trip, tolerance) << "inverse(forward(f)) / n against f, rank " << world_rank();
    EXPECT_LE(against, tolerance) << "inverse against RealFft's, rank " << world_rank();
  }

  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// Odd and even sizes, slowest axes that no rank count of 1 to 4 divides evenly, and
// spectrum axes with fewer values than ranks (ranks without a part of the spectrum).
TEST_P(DistributedFftTest, MatchesRealFftIn3D) {
  for (const auto& shape : std::vector<std::array<std::int64_t, 3>>{{9, 6, 7}, {8, 3, 10}, {5, 11, 13}, {1, 4, 8}}) {
    check_against_real_fft<double, 3>(shape);
    check_against_real_fft<float, 3>(shape);
  }
}

TEST_P(DistributedFftTest, MatchesRealFftIn2D) {
  for (const auto& shape : std::vector<std::array<std::int64_t, 2>>{{9, 7}, {4, 10}, {16, 13}, {2, 11}}) {
    check_against_real_fft<double, 2>(shape);
    check_against_real_fft<float, 2>(shape);
  }
}

// A reciprocal-space convolution, as a Poisson solve makes it: each rank scales its
// spectrum slab by G(k) at the wavenumbers at(i) gives, between forward and inverse;
// against the same convolution of the whole mesh by RealFft.
TEST_P(DistributedFftTest, ConvolutionMatchesRealFft) {
  SCOPED_TRACE(seed_note(seed_));
  using C = std::complex<double>;
  const std::array<std::int64_t, 3> shape = {10, 7, 11};
  // G of the signed wavenumbers (k and k - n), a smooth filter.
  auto green = [&](const std::array<std::int64_t, 3>& k) {
    double k2 = 0;
    for (int d = 0; d < 3; ++d) {
      const double signed_k = static_cast<double>(k[d] <= shape[d] / 2 ? k[d] : k[d] - shape[d]);
      k2 += signed_k * signed_k * (d + 1);
    }
    return 1.0 / (1.0 + k2);
  };
  RealFft<double, 3> whole(shape);
  const std::vector<double> mesh = random_values<double>(static_cast<std::size_t>(whole.real_size()), rng_);
  std::vector<C> spectrum(static_cast<std::size_t>(whole.spectrum_size()));
  std::vector<double> expected(mesh.size());
  whole.forward(mesh.data(), spectrum.data());
  const std::array<std::int64_t, 3> half = whole.spectrum_shape();
  for (std::int64_t i = 0; i < whole.spectrum_size(); ++i)
    spectrum[i] *= green({i % half[0], (i / half[0]) % half[1], i / (half[0] * half[1])});
  whole.inverse(spectrum.data(), expected.data());

  DistributedRealFft<double, 3> fft(MPI_COMM_WORLD, shape, options(), GetParam().transport);
  const std::int64_t first = fft.real_block().first_node[2] * shape[0] * shape[1];
  std::vector<double> slab_values(mesh.begin() + first, mesh.begin() + first + fft.real_size());
  RankArray<double> slab(slab_values, on_device());
  RankArray<C> local(std::vector<C>(static_cast<std::size_t>(fft.spectrum_size())), on_device());
  fft.forward(slab.data(), local.data());
  std::vector<C> scaled = local.values();
  for (std::int64_t i = 0; i < fft.spectrum_size(); ++i) scaled[i] *= green(fft.spectrum_slab().at(i));
  RankArray<C> back(scaled, on_device());
  fft.inverse(back.data(), slab.data());
  const std::vector<double> got = slab.values();
  double error = 0, scale = 0;
  for (std::int64_t j = 0; j < fft.real_size(); ++j) {
    error = std::max(error, std::fabs(got[j] - expected[first + j]));
    scale = std::max(scale, std::fabs(expected[first + j]));
  }
  EXPECT_LE(error, 1e-12 * scale) << "rank " << world_rank();
}

// The slabs are the blocks of a DistributedPlan built with rank_grid().
TEST_P(DistributedFftTest, SlabsAreThePlansBlocks) {
  const std::array<std::int64_t, 3> shape = {6, 5, 11};
  DistributedRealFft<float, 3> fft(MPI_COMM_WORLD, shape, options(), GetParam().transport);
  Options plan_options;
  plan_options.backend = GetParam().backend;
  plan_options.device = options().device;
  DistributedPlan<float, 3> plan(MPI_COMM_WORLD, Grid<3>::periodic(shape), Kernel::mp4(), plan_options,
                                 fft.rank_grid());
  EXPECT_EQ(plan.block().first_node, fft.real_block().first_node);
  EXPECT_EQ(plan.block().shape, fft.real_block().shape);
  EXPECT_EQ(plan.block_size(), fft.real_size());
}

TEST_P(DistributedFftTest, BadArgumentsFailOnEveryRank) {
  const FftOptions o = options();
  const Transport t = GetParam().transport;
  EXPECT_PMKIT_ERROR((DistributedRealFft<double, 3>(MPI_COMM_WORLD, {4, 0, 8}, o, t)), ErrorCode::InvalidArgument,
                     "shape[1] = 0");
  // One rank passes another shape.
  const std::int64_t nx = world_rank() == world_size() - 1 ? 6 : 4;
  EXPECT_EQ(error_code_of([&] { DistributedRealFft<double, 2>(MPI_COMM_WORLD, {nx, 8}, o, t); }),
            world_size() > 1 ? ErrorCode::InvalidArgument : ErrorCode::Ok);
  // Six planes over four ranks: slabs of two leave the last rank none; one plane over several.
  EXPECT_EQ(error_code_of([&] { DistributedRealFft<float, 3>(MPI_COMM_WORLD, {4, 4, 6}, o, t); }),
            world_size() == 4 ? ErrorCode::InvalidArgument : ErrorCode::Ok);
  if (world_size() > 1)
    EXPECT_PMKIT_ERROR((DistributedRealFft<float, 2>(MPI_COMM_WORLD, {8, 1}, o, t)), ErrorCode::InvalidArgument,
                       "without a plane");
  FftOptions bad = o;
  bad.num_threads = -1;
  EXPECT_PMKIT_ERROR((DistributedRealFft<float, 2>(MPI_COMM_WORLD, {8, 8}, bad, t)), ErrorCode::InvalidArgument,
                     "num_threads");
  EXPECT_PMKIT_ERROR((DistributedRealFft<float, 2>(MPI_COMM_WORLD, {8, 8}, o, static_cast<Transport>(7))),
                     ErrorCode::InvalidArgument, "transport");

  // A null slab on the last rank: every rank fails, before any message.
  DistributedRealFft<double, 2> fft(MPI_COMM_WORLD, {8, 8}, o, t);
  RankArray<double> real(std::vector<double>(static_cast<std::size_t>(fft.real_size()), 1.0), on_device());
  RankArray<std::complex<double>> spectrum(std::vector<std::complex<double>>(static_cast<std::size_t>(fft.spectrum_size())),
                                           on_device());
  const bool last = world_rank() == world_size() - 1;
  EXPECT_EQ(error_code_of([&] { fft.forward(last ? nullptr : real.data(), spectrum.data()); }),
            ErrorCode::InvalidArgument);
  // Overlapping slabs on rank 0 (which holds a part of the spectrum).
  double* onto = world_rank() == 0 ? reinterpret_cast<double*>(spectrum.data()) : real.data();
  if (world_rank() == 0) EXPECT_PMKIT_ERROR(fft.inverse(spectrum.data(), onto), ErrorCode::InvalidArgument, "overlap");
  else EXPECT_PMKIT_ERROR(fft.inverse(spectrum.data(), onto), ErrorCode::InvalidArgument, "failed on rank 0");
  // The object still works after the refused calls.
  fft.forward(real.data(), spectrum.data());
  fft.inverse(spectrum.data(), real.data());
  for (double v : real.values()) EXPECT_NEAR(v, 64.0, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Ranks, DistributedFftTest, ::testing::ValuesIn(rank_kinds()), rank_kind_label);

}  // namespace
}  // namespace pmkit::test
