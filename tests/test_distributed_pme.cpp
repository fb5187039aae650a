// DistributedPmePlan under mpirun: the energy, forces, potentials and virial of each
// rank's charges against the single-rank PmePlan on all the charges (the same random
// system on every rank), the reciprocal part and the full compute with its ghosts, charges
// that migrate between steps, and the errors. CUDA ranks (one GPU each, round-robin) run
// the same cases where a GPU is found.
#include <random>

#include "distributed_support.hpp"
#include "pmkit/distributed_pme.hpp"
#include "rank_kinds.hpp"

namespace pmkit::test {
namespace {

// Charges in a box: every rank draws the same.
struct System {
  std::array<double, 3> box;
  PmeParameters params;
  std::vector<double> x[3], q;
  std::size_t size() const { return q.size(); }
};

// z_fraction: the charges lie in z < z_fraction box[2] (below 1: ranks without charges).
System make_system(std::uint64_t seed, const std::array<double, 3>& box, const std::array<std::int64_t, 3>& mesh,
                   double cutoff, std::size_t n, double z_fraction = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  System s;
  s.box = box;
  s.params.mesh = mesh;
  s.params.order = 5;
  s.params.cutoff = cutoff;
  s.params.alpha = 3.0 / cutoff;
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) s.x[d].push_back(unit(rng) * box[d] * (d == 2 ? z_fraction : 1.0));
    s.q.push_back(2 * unit(rng) - 1);  // not neutral: the background term counts
  }
  return s;
}

// A compute's results: per charge (by id), the energy and the virial.
struct Results {
  std::vector<double> f[3], phi;
  double energy = 0;
  std::vector<double> virial;
};

Results single_rank(const System& s, bool real_space) {
  PmePlan<double> pme(s.box, s.params);
  const std::size_t n = s.size();
  pme.set_points({View<const double>(s.x[0]), View<const double>(s.x[1]), View<const double>(s.x[2])});
  Results r;
  for (auto& f : r.f) f.resize(n);
  r.phi.resize(n);
  r.virial.resize(6);
  const std::array<View<double>, 3> forces = {View<double>(r.f[0]), View<double>(r.f[1]), View<double>(r.f[2])};
  if (real_space)
    pme.compute(View<const double>(s.q), forces, View<double>(&r.energy, 1), View<double>(r.phi), View<double>(r.virial));
  else
    pme.compute_reciprocal(View<const double>(s.q), forces, View<double>(&r.energy, 1), View<double>(r.phi),
                           View<double>(r.virial));
  return r;
}

class DistributedPmeTest : public ::testing::TestWithParam<RankKind> {
 protected:
  void SetUp() override {
    PMKIT_REQUIRE_FFTW();
    PMKIT_REQUIRE_CPU_RANK_FFT(GetParam().backend);
    if (GetParam().backend == Backend::Cuda && visible_gpus() == 0) GTEST_SKIP() << "no GPU for CUDA ranks";
    seed_ = shared_seed();
  }
  PmeOptions options() const { return rank_kind_options<PmeOptions>(GetParam()); }
  bool on_device() const { return GetParam().backend == Backend::Cuda; }
  DistributedPmePlan<double> plan(const System& s, bool deterministic = false) {
    PmeOptions o = options();
    o.deterministic = deterministic;
    return DistributedPmePlan<double>(MPI_COMM_WORLD, s.box, s.params, o, GetParam().transport);
  }

  // This rank's charges: ids (as doubles), positions and charges, in rank memory.
  struct Share {
    RankArray<double> x[3], q, id;
    std::size_t count;
  };
  Share share(const System& s, const std::vector<std::size_t>& ids, std::size_t capacity) {
    std::vector<double> x[3], q(capacity), id(capacity);
    for (auto& c : x) c.resize(capacity);
    for (std::size_t k = 0; k < ids.size(); ++k) {
      for (int d = 0; d < 3; ++d) x[d][k] = s.x[d][ids[k]];
      q[k] = s.q[ids[k]];
      id[k] = double(ids[k]);
    }
    return Share{{RankArray<double>(x[0], on_device()), RankArray<double>(x[1], on_device()),
                  RankArray<double>(x[2], on_device())},
                 RankArray<double>(q, on_device()),
                 RankArray<double>(id, on_device()),
                 ids.size()};
  }
  static std::array<View<const double>, 3> positions(Share& sh) {
    return {View<const double>(sh.x[0].data(), sh.count), View<const double>(sh.x[1].data(), sh.count),
            View<const double>(sh.x[2].data(), sh.count)};
  }

  // The distributed compute on a share, checked against the single-rank results.
  void compute_and_compare(DistributedPmePlan<double>& pme, Share& sh, const Results& expected, bool real_space) {
    const std::size_t n = sh.count;
    RankArray<double> f[3] = {RankArray<double>(std::vector<double>(n), on_device()),
                              RankArray<double>(std::vector<double>(n), on_device()),
                              RankArray<double>(std::vector<double>(n), on_device())};
    RankArray<double> phi(std::vector<double>(n), on_device()), energy(std::vector<double>(1), on_device()),
        virial(std::vector<double>(6), on_device());
    const std::array<View<double>, 3> forces = {View<double>(f[0].data(), n), View<double>(f[1].data(), n),
                                                View<double>(f[2].data(), n)};
    const View<const double> charges(sh.q.data(), n);
    if (real_space)
      pme.compute(charges, forces, View<double>(energy.data(), 1), View<double>(phi.data(), n),
                  View<double>(virial.data(), 6));
    else
      pme.compute_reciprocal(charges, forces, View<double>(energy.data(), 1), View<double>(phi.data(), n),
                             View<double>(virial.data(), 6));
    const std::vector<double> ids = sh.id.values(), got_phi = phi.values();
    std::vector<double> got_f[3] = {f[0].values(), f[1].values(), f[2].values()};
    double f_scale = 0, phi_scale = 0, w_scale = 0;
    for (int d = 0; d < 3; ++d)
      for (double v : expected.f[d]) f_scale = std::max(f_scale, std::fabs(v));
    for (double v : expected.phi) phi_scale = std::max(phi_scale, std::fabs(v));
    for (double v : expected.virial) w_scale = std::max(w_scale, std::fabs(v));
    double f_error = 0, phi_error = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = static_cast<std::size_t>(ids[k]);
      for (int d = 0; d < 3; ++d) f_error = std::max(f_error, std::fabs(got_f[d][k] - expected.f[d][i]));
      phi_error = std::max(phi_error, std::fabs(got_phi[k] - expected.phi[i]));
    }
    const double tolerance = 1e-10;
    EXPECT_LE(f_error, tolerance * f_scale) << "forces, rank " << world_rank();
    EXPECT_LE(phi_error, tolerance * phi_scale) << "potentials, rank " << world_rank();
    EXPECT_NEAR(energy.values()[0], expected.energy, tolerance * std::fabs(expected.energy)) << "rank " << world_rank();
    const std::vector<double> w = virial.values();
    for (int v = 0; v < 6; ++v)
      EXPECT_NEAR(w[v], expected.virial[v], tolerance * w_scale) << "virial " << v << ", rank " << world_rank();
    // Every charge is some rank's, once.
    EXPECT_EQ(sum_over_ranks(static_cast<long long>(n)), static_cast<long long>(expected.phi.size()));
  }

  // The ids of the charges this rank owns.
  static std::vector<std::size_t> owned(const DistributedPmePlan<double>& pme, const System& s) {
    std::vector<std::size_t> ids;
    for (std::size_t i = 0; i < s.size(); ++i)
      if (pme.owner({s.x[0][i], s.x[1][i], s.x[2][i]}) == world_rank()) ids.push_back(i);
    return ids;
  }

  std::uint64_t seed_ = 0;
};

// Meshes whose z planes do not split evenly over 3 or 4 ranks, odd and even x; the
// deterministic spread.
TEST_P(DistributedPmeTest, ReciprocalMatchesSingleRank) {
  const std::array<std::int64_t, 3> meshes[] = {{10, 12, 14}, {9, 11, 13}};
  for (const auto& mesh : meshes)
    for (const bool deterministic : {false, true}) {
      SCOPED_TRACE("mesh z " + std::to_string(mesh[2]) + (deterministic ? ", deterministic" : "") + ", seed " +
                   std::to_string(seed_));
      const System s = make_system(seed_, {2.0, 2.2, 2.5}, mesh, 0.9, 300);
      auto pme = plan(s, deterministic);
      Share sh = share(s, owned(pme, s), s.size());
      pme.set_points(positions(sh));
      compute_and_compare(pme, sh, single_rank(s, false), false);
    }
}

// Charges in the lowest fifth of the box: the upper ranks own none, but send and receive
// ghosts across the seam and take part in every exchange.
TEST_P(DistributedPmeTest, RanksWithoutChargesTakePart) {
  const System s = make_system(seed_, {2.0, 2.2, 2.5}, {10, 12, 15}, 0.95, 200, 0.2);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto pme = plan(s);
  Share sh = share(s, owned(pme, s), s.size());
  pme.set_points(positions(sh));
  compute_and_compare(pme, sh, single_rank(s, true), true);
  compute_and_compare(pme, sh, single_rank(s, false), false);
}

// The full compute: real space with the ghosts of the neighbouring slabs (a cutoff thicker
// than a slab at 3 and 4 ranks: ghosts from several ranks and across the periodic seam).
TEST_P(DistributedPmeTest, FullComputeMatchesSingleRank) {
  const System s = make_system(seed_, {2.0, 2.2, 2.5}, {10, 12, 15}, 0.95, 400);
  auto pme = plan(s);
  Share sh = share(s, owned(pme, s), s.size());
  pme.set_points(positions(sh));
  SCOPED_TRACE("seed " + std::to_string(seed_));
  compute_and_compare(pme, sh, single_rank(s, true), true);
  if (world_size() > 1) EXPECT_GT(sum_over_ranks(static_cast<long long>(pme.num_ghosts())), 0);
  else EXPECT_EQ(pme.num_ghosts(), 0u);
  // Profiled: the same results, and each phase's time.
  pme.set_profiling(true);
  compute_and_compare(pme, sh, single_rank(s, true), true);
  const DistributedPmeTimings t = pme.last_timings();
  for (double phase : {t.spread_s, t.fft_s, t.convolve_s, t.gather_s, t.ghosts_s, t.real_space_s, t.finish_s})
    EXPECT_GT(phase, 0.0);
}

// A float plan against the double single-rank plan, to float's rounding.
TEST_P(DistributedPmeTest, FloatMatchesSingleRank) {
  const System s = make_system(seed_, {2.0, 2.2, 2.5}, {10, 12, 14}, 0.9, 300);
  const Results expected = single_rank(s, true);
  DistributedPmePlan<float> pme(MPI_COMM_WORLD, s.box, s.params, options(), GetParam().transport);
  std::vector<float> x[3], q;
  std::vector<std::size_t> ids;
  for (std::size_t i = 0; i < s.size(); ++i) {
    // The owner of the float position: rounding may carry a charge onto a neighbour's slab,
    // or onto the box's end, whose periodic image is 0.
    float xf[3];
    for (int d = 0; d < 3; ++d) {
      const float rounded = float(s.x[d][i]);
      xf[d] = double(rounded) < s.box[d] ? rounded : 0.0f;
    }
    if (pme.owner({double(xf[0]), double(xf[1]), double(xf[2])}) != world_rank()) continue;
    ids.push_back(i);
    for (int d = 0; d < 3; ++d) x[d].push_back(xf[d]);
    q.push_back(float(s.q[i]));
  }
  const std::size_t n = ids.size();
  RankArray<float> dx[3] = {RankArray<float>(x[0], on_device()), RankArray<float>(x[1], on_device()),
                            RankArray<float>(x[2], on_device())};
  RankArray<float> dq(q, on_device()), f(std::vector<float>(3 * n), on_device());
  RankArray<double> energy(std::vector<double>(1), on_device());
  pme.set_points({View<const float>(dx[0].data(), n), View<const float>(dx[1].data(), n),
                  View<const float>(dx[2].data(), n)});
  pme.compute(View<const float>(dq.data(), n),
              {View<float>(f.data(), n), View<float>(f.data() + n, n), View<float>(f.data() + 2 * n, n)},
              View<double>(energy.data(), 1));
  const std::vector<float> got = f.values();
  double scale = 0, error = 0;
  for (int d = 0; d < 3; ++d)
    for (std::size_t k = 0; k < n; ++k) {
      scale = std::max(scale, std::fabs(expected.f[d][ids[k]]));
      error = std::max(error, std::fabs(double(got[d * n + k]) - expected.f[d][ids[k]]));
    }
  EXPECT_LE(error, 1e-4 * scale) << "rank " << world_rank() << ", seed " << seed_;
  EXPECT_NEAR(energy.values()[0], expected.energy, 1e-4 * std::fabs(expected.energy));
}

// Charges dealt round-robin migrate to their owners, then move across slabs (and out of
// the box, wrapped by migrate), migrate again and update.
TEST_P(DistributedPmeTest, MigratingChargesMatchSingleRank) {
  System s = make_system(seed_, {2.0, 2.2, 2.5}, {12, 10, 13}, 0.9, 250);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto pme = plan(s);
  std::vector<std::size_t> dealt;
  for (std::size_t i = world_rank(); i < s.size(); i += world_size()) dealt.push_back(i);
  Share sh = share(s, dealt, s.size());
  auto migrate = [&] {
    const std::array<View<double>, 3> x = {View<double>(sh.x[0].data(), s.size()),
                                           View<double>(sh.x[1].data(), s.size()),
                                           View<double>(sh.x[2].data(), s.size())};
    View<double> props[2] = {View<double>(sh.q.data(), s.size()), View<double>(sh.id.data(), s.size())};
    sh.count = pme.migrate(x, Span<View<double>>(props, 2), sh.count);
  };
  migrate();
  pme.set_points(positions(sh));
  compute_and_compare(pme, sh, single_rank(s, true), true);

  std::mt19937_64 rng(seed_ + 1);
  std::uniform_real_distribution<double> step(-0.6, 0.6);
  for (int d = 0; d < 3; ++d)
    for (double& v : s.x[d]) v += step(rng) * s.box[d];
  // Each rank's charges at their moved positions (by id), then to their new owners.
  std::vector<double> ids = sh.id.values(), moved[3];
  for (int d = 0; d < 3; ++d) {
    moved[d] = std::vector<double>(s.size());
    for (std::size_t k = 0; k < sh.count; ++k) moved[d][k] = s.x[d][static_cast<std::size_t>(ids[k])];
    sh.x[d] = RankArray<double>(moved[d], on_device());
  }
  migrate();
  pme.update_points(positions(sh));
  compute_and_compare(pme, sh, single_rank(s, true), true);
  compute_and_compare(pme, sh, single_rank(s, false), false);
}

TEST_P(DistributedPmeTest, BadArgumentsFailOnEveryRank) {
  const System s = make_system(seed_, {2.0, 2.2, 2.5}, {10, 12, 14}, 0.9, 60);
  const PmeOptions o = options();
  const Transport t = GetParam().transport;
  PmeParameters bad = s.params;
  bad.order = 3;
  EXPECT_PMKIT_ERROR((DistributedPmePlan<double>(MPI_COMM_WORLD, s.box, bad, o, t)), ErrorCode::InvalidArgument,
                     "order = 3");
  // The last rank passes another box.
  std::array<double, 3> box = s.box;
  if (world_rank() == world_size() - 1) box[1] = 2.4;
  EXPECT_EQ(error_code_of([&] { DistributedPmePlan<double>(MPI_COMM_WORLD, box, s.params, o, t); }),
            world_size() > 1 ? ErrorCode::InvalidArgument : ErrorCode::Ok);
  // Too few z planes for the ranks: 5 planes over 4 ranks leaves the last none.
  PmeParameters thin = s.params;
  thin.mesh[2] = 5;
  EXPECT_EQ(error_code_of([&] { DistributedPmePlan<double>(MPI_COMM_WORLD, s.box, thin, o, t); }),
            world_size() == 4 ? ErrorCode::InvalidArgument : ErrorCode::Ok);

  auto pme = plan(s);
  Share sh = share(s, owned(pme, s), s.size());
  const std::size_t n = sh.count;
  RankArray<double> f(std::vector<double>(3 * n + 3), on_device());
  const std::array<View<double>, 3> forces = {View<double>(f.data(), n), View<double>(f.data() + n, n),
                                              View<double>(f.data() + 2 * n, n)};
  const View<const double> q(sh.q.data(), n);
  EXPECT_EQ(error_code_of([&] { pme.compute_reciprocal(q, forces); }), ErrorCode::NotReady);
  pme.set_points(positions(sh));
  // Forces one value short on the last rank: every rank fails.
  std::array<View<double>, 3> short_forces = forces;
  if (world_rank() == world_size() - 1) short_forces[2] = View<double>(f.data() + 2 * n, n + 1);
  EXPECT_EQ(error_code_of([&] { pme.compute(q, short_forces); }), ErrorCode::SizeMismatch);
  // Five values of virial.
  EXPECT_PMKIT_ERROR(pme.compute(q, forces, {}, {}, View<double>(f.data(), 5)), ErrorCode::SizeMismatch, "virial");
  // The plan still works after the refused calls.
  compute_and_compare(pme, sh, single_rank(s, true), true);
}

// Each rank chooses its outputs: the energy and the potential on rank 0 only.
TEST_P(DistributedPmeTest, OutputsAskedOnSomeRanks) {
  const System s = make_system(seed_, {2.0, 2.2, 2.5}, {10, 12, 14}, 0.9, 200);
  const Results expected = single_rank(s, true);
  auto pme = plan(s);
  Share sh = share(s, owned(pme, s), s.size());
  pme.set_points(positions(sh));
  const std::size_t n = sh.count;
  RankArray<double> f(std::vector<double>(3 * n), on_device()), phi(std::vector<double>(n), on_device()),
      energy(std::vector<double>(1), on_device());
  const bool first = world_rank() == 0;
  pme.compute(View<const double>(sh.q.data(), n),
              {View<double>(f.data(), n), View<double>(f.data() + n, n), View<double>(f.data() + 2 * n, n)},
              first ? View<double>(energy.data(), 1) : View<double>(),
              first ? View<double>(phi.data(), n) : View<double>());
  if (!first) return;
  EXPECT_NEAR(energy.values()[0], expected.energy, 1e-10 * std::fabs(expected.energy));
  const std::vector<double> ids = sh.id.values(), got = phi.values();
  for (std::size_t k = 0; k < n; ++k)
    EXPECT_NEAR(got[k], expected.phi[static_cast<std::size_t>(ids[k])], 1e-9) << "charge " << ids[k];
}

INSTANTIATE_TEST_SUITE_P(Ranks, DistributedPmeTest, ::testing::ValuesIn(rank_kinds()), rank_kind_label);

}  // namespace
}  // namespace pmkit::test
