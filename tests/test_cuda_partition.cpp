// CUDA white box: set_points' binning. The partition into groups of tiles (one and two
// levels) against the reference, its report of the first bad particle, the stable and
// reproducible order of the partition and of the one-pass scatter, and permute_to_binned
// beyond L2 and in more launches than one takes.
#include <numeric>

#include "cuda/tuning/method_choice.hpp"
#include "cuda_cases.hpp"

namespace pmkit::test {
namespace {

// set_points' partition (binning.cuh, "Partition") with two levels (more than
// tuning::kPartitionGroups tiles: groups of several tiles, pass 2 sorting inside each)
// and groups split over many pieces of pass 2 (clustered: 90% in three cells, ~250
// pieces in one group), in float and double, 3D and 2D, periodic and bounded. Enough
// particles for the partition (tuning::kPartitionMinParticles) also under the sanitizers,
// which then take one case of each distribution (every case has 2^19 particles or more).
TEST(Cuda, PartitionIntoGroupsOfTiles) {
  PMKIT_REQUIRE_GPU();
  const std::size_t partitioned = pmkit::cuda::tuning::kPartitionMinParticles + 4096;
  for (auto dist : {Distribution::Uniform, Distribution::Clustered}) {
    const bool uniform = dist == Distribution::Uniform;
    if (uniform || !sanitizing())
      check_against_reference<float, 3>(cuda_method(SpreadMethod::Auto), Kernel::mp4(), {96, 80, 72},
                                        BoundaryKind::Periodic, 2.0, dist, 1, partitioned);
    if (sanitizing()) {
      if (!uniform)
        check_against_reference<double, 2>(cuda_method(SpreadMethod::CudaSharedTiles), Kernel::mp4(), {800, 900},
                                           BoundaryKind::Periodic, 0.5, dist, 1, partitioned);
      continue;
    }
    check_against_reference<double, 3>(cuda_method(SpreadMethod::CudaGlobalAtomics), Kernel::tsc(), {90, 81, 66},
                                       BoundaryKind::MixedFold, 1.0, dist, 1, partitioned);
    check_against_reference<float, 2>(cuda_method(SpreadMethod::Auto), Kernel::linear(), {1100, 700},
                                      BoundaryKind::Keep, 1.5, dist, 1, partitioned);
    check_against_reference<double, 2>(cuda_method(SpreadMethod::CudaSharedTiles), Kernel::mp4(), {800, 900},
                                       BoundaryKind::Periodic, 0.5, dist, 1, partitioned);
  }
}

// The partition's count reports the first bad particle in the caller's order, as the
// one-pass scatter does, and a rejected set_points keeps the previous points.
// set_points reports a rejected particle only after its last kernel (one wait for the
// device), so every pass after the count must leave the particle out and the binning in
// use must stay as it was. Both forms of the partition (one level: 216 tiles; two levels:
// 2197; the sanitizers take the first, the stable-order test below the second) and the
// one-pass scatter (binned input).
TEST(Cuda, PartitionReportsTheFirstBadParticle) {
  PMKIT_REQUIRE_GPU();
  for (const std::int64_t cells : {40, 100}) {
    if (sanitizing() && cells == 100) continue;
    for (const bool binned_input : {false, true}) {
      SCOPED_TRACE(std::to_string(cells) + "^3 cells, " + (binned_input ? "binned" : "random") + " input");
      Plan<float, 3> plan(Grid<3>::bounded({cells, cells, cells}), Kernel::mp4(),
                          cuda_options());
      const std::size_t n = std::max<std::size_t>(50000, pmkit::cuda::tuning::kPartitionMinParticles + 50000);
      std::mt19937_64 rng(fresh_seed());
      std::uniform_real_distribution<float> inside(4.0f, float(cells) - 4.0f);
      std::vector<float> x(n), y(n), z(n);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = inside(rng);
        y[i] = inside(rng);
        z[i] = inside(rng);
      }
      if (binned_input) put_in_binned_order<float, 3>(plan, {&x, &y, &z});
      DeviceBuffer<float> dx(x), dy(y), dz(z);
      plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
      std::vector<float> q(n);
      std::uniform_real_distribution<float> charge(0.5f, 1.5f);
      for (auto& v : q) v = charge(rng);
      DeviceBuffer<float> dq(q), dmesh(static_cast<std::size_t>(plan.mesh_size()));
      plan.spread({device_cview(dq)}, {device_view(dmesh)});
      const auto before = dmesh.download();
      std::vector<float> xb = x;
      xb[40000] = std::nanf("");
      xb[30001] = float(cells) + 0.5f;
      DeviceBuffer<float> dxb(xb);
      expect_pmkit_error(ErrorCode::OutOfBounds, "positions[0][30001]",
                         [&] {
                           plan.set_points({device_cview(dxb), device_cview(dy), device_cview(dz)});
                           plan.synchronize();  // the device's check comes back
                         },
                         "set_points, two bad");
      // The plan needs set_points again; the same positions give the same spread.
      EXPECT_FALSE(plan.has_points());
      plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
      plan.spread({device_cview(dq)}, {device_view(dmesh)});
      const auto after = dmesh.download();
      double worst = 0, peak = 0;
      for (std::size_t k = 0; k < after.size(); ++k) {
        worst = std::max(worst, std::abs(double(after[k]) - double(before[k])));
        peak = std::max(peak, std::abs(double(before[k])));
      }
      EXPECT_LE(worst, 1e-6 * peak);
      expect_points_kept(plan, n, 1e-3 * n);
    }
  }
}

// The binned order of three runs of one input: the same each run; returned.
std::vector<std::uint32_t> reproducible_binned_order(const Grid<3>& grid, const std::array<std::vector<float>, 3>& pos) {
  const std::size_t n = pos[0].size();
  DeviceBuffer<float> dx(pos[0]), dy(pos[1]), dz(pos[2]);
  std::vector<std::uint32_t> first;
  for (int run = 0; run < 3; ++run) {
    Plan<float, 3> plan(grid, Kernel::mp4(), cuda_options());
    plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
    DeviceBuffer<std::uint32_t> dorder(n);
    plan.binned_order(device_view(dorder));
    std::vector<std::uint32_t> order = dorder.download();
    if (run == 0)
      first = std::move(order);
    else
      EXPECT_EQ(order, first) << "binned order differs between runs (run " << run << ")";
  }
  return first;
}

// Places k of `order` where the caller's index falls: one only where a tile's particles
// end and the next tile's begin, for an order stable by tile.
std::size_t descents(const std::vector<std::uint32_t>& order) {
  std::size_t count = 0;
  for (std::size_t k = 1; k < order.size(); ++k) count += order[k] < order[k - 1];
  return count;
}

std::array<std::vector<float>, 3> gathered(const std::array<std::vector<float>, 3>& pos,
                                           const std::vector<std::uint32_t>& order) {
  std::array<std::vector<float>, 3> out;
  for (int d = 0; d < 3; ++d)
    for (std::uint32_t k : order) out[d].push_back(pos[d][k]);
  return out;
}

// set_points' partition is a stable sort by tile: the binned order is the caller's order
// inside each tile, the same in every run. Both of its forms: one level (the groups are
// the tiles, at most tuning::kPartitionGroups of them) and two (groups of tiles, then
// tiles; the sanitizers take this one).
TEST(Cuda, PartitionOrderIsStableAndReproducible) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const auto& cells : {std::array<std::int64_t, 3>{64, 56, 60}, std::array<std::int64_t, 3>{128, 120, 112}}) {
    if (sanitizing() && cells[0] == 64) continue;
    const Grid<3> grid = make_grid<3>(cells, BoundaryKind::Periodic);
    const std::int64_t edge = pmkit::cuda::tuning::tile_edge(3);
    const std::size_t tiles = std::size_t((cells[0] + edge - 1) / edge) * ((cells[1] + edge - 1) / edge) *
                              ((cells[2] + edge - 1) / edge);
    SCOPED_TRACE(std::to_string(tiles) + " tiles");
    const auto pos = make_positions<float, 3>(grid, Distribution::Uniform,
                                               pmkit::cuda::tuning::kPartitionMinParticles + 300000, rng);
    EXPECT_LT(descents(reproducible_binned_order(grid, pos)), tiles)
        << "the binned order is not the caller's inside each tile";
  }
}

// set_points' one-pass scatter (input in binned order, or fewer particles than the
// partition takes) is a stable sort by tile as well: the caller's order inside each
// tile, the same in every run.
// - Input already sorted by tile (another plan's binned order of random positions)
//   keeps its order: the binned order is the identity.
// - The same with 3% of the particles moved anywhere (a PIC step's leavers): the
//   particles that stayed keep their relative order.
// - Random input below the partition's minimum: ascending inside each tile.
TEST(Cuda, OnePassOrderIsStable) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<3> grid = make_grid<3>({72, 64, 60}, BoundaryKind::Periodic);
  const std::int64_t edge = pmkit::cuda::tuning::tile_edge(3);
  const std::size_t tiles = std::size_t((72 + edge - 1) / edge) * (64 / edge) * ((60 + edge - 1) / edge);

  const std::size_t small = pmkit::cuda::tuning::kPartitionMinParticles / 3;
  const auto random_small = make_positions<float, 3>(grid, Distribution::Uniform, small, rng);
  EXPECT_LT(descents(reproducible_binned_order(grid, random_small)), tiles)
      << "the one-pass order of random input is not the caller's inside each tile";

  const std::size_t n = pmkit::cuda::tuning::kPartitionMinParticles + 200000;
  const auto random = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
  const auto sorted = gathered(random, reproducible_binned_order(grid, random));
  const std::vector<std::uint32_t> order_sorted = reproducible_binned_order(grid, sorted);
  std::vector<std::uint32_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_EQ(order_sorted, identity) << "input sorted by tile does not keep its order";

  auto moved = sorted;
  const auto elsewhere = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
  std::vector<bool> stayed(n, true);
  std::bernoulli_distribution leaves(0.03);
  for (std::size_t i = 0; i < n; ++i)
    if (leaves(rng)) {
      stayed[i] = false;
      for (int d = 0; d < 3; ++d) moved[d][i] = elsewhere[d][i];
    }
  const std::vector<std::uint32_t> order_moved = reproducible_binned_order(grid, moved);
  std::vector<std::uint32_t> stayers;
  for (std::uint32_t k : order_moved)
    if (stayed[k]) stayers.push_back(k);
  EXPECT_TRUE(std::is_sorted(stayers.begin(), stayers.end())) << "the particles that stayed lost their order";
  std::vector<std::uint32_t> all = order_moved;
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, identity) << "the binned order is not a permutation";
}

// permute_to_binned on device arrays, beyond L2, one of them strided (an array of
// structures' component), on a stream of its own: every array in binned_order's order.
TEST(Cuda, PermuteToBinnedOnDeviceArrays) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const std::size_t n = scaled(std::size_t(1) << 22);
  const Grid<3> grid = Grid<3>::periodic({64, 64, 64});
  const auto pos = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
  Stream stream;
  Options opt = cuda_options();
  opt.stream = cuda::stream_handle(stream.s);
  Plan<float, 3> plan(grid, Kernel::linear(), opt);
  DeviceBuffer<float> x(pos[0]), y(pos[1]), z(pos[2]);
  plan.set_points({device_cview(x), device_cview(y), device_cview(z)});
  std::vector<float> pairs(2 * n);  // (q, w) interleaved
  for (float& v : pairs) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  DeviceBuffer<float> qw(pairs);
  DeviceBuffer<std::uint32_t> order(n);
  plan.binned_order(device_view(order));
  plan.permute_to_binned({device_view(x), View<float>(qw.get(), n, 2), View<float>(qw.get() + 1, n, 2)});
  ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
  const std::vector<std::uint32_t> o = order.download();
  const std::vector<float> x2 = x.download(), qw2 = qw.download(), y2 = y.download();
  for (std::size_t k = 0; k < n; ++k) {
    ASSERT_EQ(x2[k], pos[0][o[k]]) << k;
    ASSERT_EQ(qw2[2 * k], pairs[2 * o[k]]) << k;
    ASSERT_EQ(qw2[2 * k + 1], pairs[2 * o[k] + 1]) << k;
    ASSERT_EQ(y2[k], pos[1][k]) << "an array not passed changed";
  }
}

// permute_to_binned on device arrays, more than one launch takes
// (tuning::kPermuteArrays), in one call: out of place contiguous, out of place between
// strided views (a component of an array of structures of three into one of two), in
// place contiguous and in place strided. Every output in binned_order's order, every
// out-of-place input as it was.
template <class T>
void check_permute_batches(std::size_t n, std::mt19937_64& rng) {
  const Grid<3> grid = Grid<3>::periodic({24, 20, 28});
  const auto pos = make_positions<T, 3>(grid, Distribution::Clustered, n, rng);
  Plan<T, 3> plan(grid, Kernel::tsc(), cuda_options());
  DeviceBuffer<T> x(pos[0]), y(pos[1]), z(pos[2]);
  plan.set_points({device_cview(x), device_cview(y), device_cview(z)});
  DeviceBuffer<std::uint32_t> order(n);
  plan.binned_order(device_view(order));

  constexpr int kOutOfPlace = 2 * cuda::tuning::kPermuteArrays + 1, kInPlace = 2;
  auto values = [&](std::size_t count) {
    std::vector<T> v(count);
    for (T& e : v) e = std::uniform_real_distribution<T>(-1, 1)(rng);
    return v;
  };
  std::vector<std::vector<T>> in_host;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> in, out;
  std::vector<View<const T>> from;
  std::vector<View<T>> to;
  for (int a = 0; a < kOutOfPlace + kInPlace; ++a) {
    in_host.push_back(values(n));
    in.emplace_back(new DeviceBuffer<T>(in_host.back()));
    from.push_back(View<const T>(in.back()->get(), n));
    if (a < kOutOfPlace) {
      out.emplace_back(new DeviceBuffer<T>(n));
      to.push_back(View<T>(out.back()->get(), n));
    } else {
      to.push_back(View<T>(in.back()->get(), n));
    }
  }
  const std::vector<T> triples = values(3 * n), pairs = values(2 * n);  // strided: out of place, then in place
  DeviceBuffer<T> triples_in(triples), pairs_out(2 * n), pairs_inout(pairs);
  for (int c = 0; c < 2; ++c) {
    from.push_back(View<const T>(triples_in.get() + c, n, 3));
    to.push_back(View<T>(pairs_out.get() + c, n, 2));
  }
  from.push_back(View<const T>(pairs_inout.get() + 1, n, 2));
  to.push_back(View<T>(pairs_inout.get() + 1, n, 2));
  plan.permute_to_binned(Span<View<const T>>(from), Span<View<T>>(to));

  const std::vector<std::uint32_t> o = order.download();
  for (int a = 0; a < kOutOfPlace + kInPlace; ++a) {
    const std::vector<T> moved = a < kOutOfPlace ? out[a]->download() : in[a]->download();
    for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(moved[k], in_host[a][o[k]]) << "array " << a << ", slot " << k;
    if (a < kOutOfPlace) {
      ASSERT_EQ(in[a]->download(), in_host[a]) << "input " << a << " changed";
    }
  }
  const std::vector<T> triples2 = triples_in.download(), pairs2 = pairs_out.download(), inout = pairs_inout.download();
  ASSERT_EQ(triples2, triples) << "the strided input changed";
  for (std::size_t k = 0; k < n; ++k) {
    for (int c = 0; c < 2; ++c) ASSERT_EQ(pairs2[2 * k + c], triples[3 * o[k] + c]) << "component " << c << ", slot " << k;
    ASSERT_EQ(inout[2 * k + 1], pairs[2 * o[k] + 1]) << k;
    ASSERT_EQ(inout[2 * k], pairs[2 * k]) << "the unlisted component changed";
  }
}

TEST(Cuda, PermuteToBinnedInBatches) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  check_permute_batches<float>(scaled(std::size_t(1) << 18), rng);
  check_permute_batches<double>(scaled(std::size_t(3) << 15) + 7, rng);
}

}  // namespace
}  // namespace pmkit::test
