// CUDA-only behaviour: device pointers in and out, every spread method against the
// float64 reference, the deterministic mode's bitwise reproducibility (repeated runs,
// permuted input, properties in one pass or apart), errors raised from device data.
// The backend-generic tests (test_reference, test_invariants, test_errors) also run on
// CUDA through host arrays. Everything skips cleanly where no GPU is found.
#include "test_support.hpp"

#if defined(PMKIT_WITH_CUDA)
#include "cuda_support.hpp"
#include "core/layout.hpp"
#include "cuda/plan/peak_weight.hpp"
#include "cuda/tuning/method_choice.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

namespace pmkit::test {
namespace {

Options cuda_options() {
  Options opt;
  opt.backend = Backend::Cuda;
  return opt;
}

// The caller's arrays put in the plan's binned order (binned_order after a set_points
// on them): input that set_points' probe sends to the one-pass scatter.
template <class T, int D>
void put_in_binned_order(Plan<T, D>& plan, const std::array<std::vector<T>*, D>& arrays) {
  const std::size_t n = arrays[0]->size();
  std::vector<std::unique_ptr<DeviceBuffer<T>>> device;
  typename Plan<T, D>::Positions views;
  for (int d = 0; d < D; ++d) {
    device.emplace_back(new DeviceBuffer<T>(*arrays[d]));
    views[d] = device_cview(*device.back());
  }
  plan.set_points(views);
  DeviceBuffer<std::uint32_t> dorder(n);
  plan.binned_order(device_view(dorder));
  const auto order = dorder.download();
  for (int d = 0; d < D; ++d) {
    std::vector<T> sorted(n);
    for (std::size_t k = 0; k < n; ++k) sorted[k] = (*arrays[d])[order[k]];
    arrays[d]->swap(sorted);
  }
}

// After a rejected set_points: the plan still holds its n valid points, so spreading
// q = 1 conserves their mass.
void expect_points_kept(Plan<float, 3>& plan, std::size_t n, double tolerance) {
  std::vector<float> ones(n, 1.0f);
  DeviceBuffer<float> dq(ones), dmesh(static_cast<std::size_t>(plan.mesh_size()));
  plan.spread({device_cview(dq)}, {device_view(dmesh)});
  const auto mesh = dmesh.download();
  EXPECT_NEAR(std::accumulate(mesh.begin(), mesh.end(), 0.0), static_cast<double>(n), tolerance);
}

// One case: fresh random particles (uniform or clustered) spread and interpolated with
// device pointers by the given method, against the float64 reference. At least
// `min_particles` of them, also under PMKIT_TEST_SMALL (a path chosen by size).
template <class T, int D>
void check_against_reference(const Kernel& kernel, std::array<std::int64_t, D> cells, BoundaryKind boundary,
                             double per_cell, Distribution dist, SpreadMethod method, bool deterministic,
                             int nprops, std::size_t min_particles = 0, double prop_scale = 1.0,
                             double spread_tolerance = tolerance<T>()) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<D> grid = make_grid<D>(cells, boundary);
  double volume_cells = 1;
  for (int d = 0; d < D; ++d) volume_cells *= static_cast<double>(cells[d]);
  const std::size_t n = std::max(min_particles, scaled(static_cast<std::size_t>(per_cell * volume_cells) + 1));
  const auto pos = make_positions<T, D>(grid, dist, n, rng);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);

  Options opt = cuda_options();
  opt.spread_method = method;
  opt.deterministic = deterministic;
  Plan<T, D> plan(grid, kernel, opt);
  std::vector<std::unique_ptr<DeviceBuffer<T>>> dpos, dprops, dmeshes;
  typename Plan<T, D>::Positions views;
  for (int d = 0; d < D; ++d) {
    dpos.emplace_back(new DeviceBuffer<T>(pos[d]));
    views[d] = device_cview(*dpos.back());
  }
  plan.set_points(views);

  std::vector<std::vector<double>> props_d(nprops, std::vector<double>(n));
  std::vector<View<const T>> prop_views;
  std::vector<View<T>> mesh_views;
  for (int j = 0; j < nprops; ++j) {
    std::vector<T> q(n);
    for (std::size_t i = 0; i < n; ++i) props_d[j][i] = q[i] = static_cast<T>(prop_scale * unit(rng));
    dprops.emplace_back(new DeviceBuffer<T>(q));
    dmeshes.emplace_back(new DeviceBuffer<T>(static_cast<std::size_t>(plan.mesh_size())));
    prop_views.push_back(device_cview(*dprops.back()));
    mesh_views.push_back(device_view(*dmeshes.back()));
  }
  plan.spread(prop_views, mesh_views);

  std::array<std::vector<double>, D> posd;
  std::array<const double*, D> posp;
  for (int d = 0; d < D; ++d) {
    posd[d].assign(pos[d].begin(), pos[d].end());
    posp[d] = posd[d].data();
  }
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
  std::vector<std::vector<double>> ref(nprops, std::vector<double>(size));
  std::vector<const double*> qp;
  std::vector<double*> mp;
  for (int j = 0; j < nprops; ++j) {
    qp.push_back(props_d[j].data());
    mp.push_back(ref[j].data());
  }
  reference::spread<D>(grid, kernel, n, posp, nprops, qp.data(), mp.data());
  for (int j = 0; j < nprops; ++j)
    EXPECT_LE(rel_l2<T>(View<const T>(dmeshes[j]->download()), ref[j]), spread_tolerance)
        << "spread, property " << j << ", " << plan.spread_method_name() << ", " << kernel.name() << ", "
        << name(boundary) << ", " << name(dist) << ", n = " << n;

  // Interp of each property's reference mesh (as T) back to the particles, all in one
  // call, as the spread took them (several properties a pass: the tile interp kernel is
  // compiled per property count, the one-thread one reads the count at run time).
  std::vector<std::vector<T>> fields(nprops, std::vector<T>(size));
  std::vector<std::unique_ptr<DeviceBuffer<T>>> dfields, dvalues;
  std::vector<View<const T>> field_views;
  std::vector<View<T>> value_views;
  for (int j = 0; j < nprops; ++j) {
    for (std::size_t i = 0; i < size; ++i) fields[j][i] = static_cast<T>(ref[j][i]);
    dfields.emplace_back(new DeviceBuffer<T>(fields[j]));
    dvalues.emplace_back(new DeviceBuffer<T>(n));
    field_views.push_back(device_cview(*dfields.back()));
    value_views.push_back(device_view(*dvalues.back()));
  }
  plan.interp(field_views, value_views);
  for (int j = 0; j < nprops; ++j) {
    const std::vector<double> want =
        reference_interp<D>(grid, kernel, posp, n, std::vector<double>(fields[j].begin(), fields[j].end()));
    EXPECT_LE(rel_l2<T>(View<const T>(dvalues[j]->download()), want), tolerance<T>())
        << "interp, property " << j << ", " << kernel.name() << ", n = " << n;
  }
}

// Densities from nearly empty to `densest` a cell, uniform, clustered and on the periodic
// seam, periodic and mixed boundaries: M'4 in 3D and linear in 2D, spread by `method`.
void check_densities(SpreadMethod method, double densest) {
  for (double per_cell : {0.01, 1.0, 20.0, densest})
    for (auto dist : {Distribution::Uniform, Distribution::Clustered, Distribution::Seam})
      for (auto boundary : {BoundaryKind::Periodic, BoundaryKind::MixedKeep}) {
        check_against_reference<float, 3>(Kernel::mp4(), {16, 9, 13}, boundary, per_cell, dist, method, false, 1);
        check_against_reference<float, 2>(Kernel::linear(), {40, 37}, boundary, per_cell, dist, method, false, 1);
      }
}

// Several properties at once by `method`: 3 (one pass) and 5 (two passes), in a float
// M'4 and a clustered double TSC case.
void check_several_properties(SpreadMethod method, bool deterministic) {
  for (int nprops : {3, 5}) {
    check_against_reference<float, 3>(Kernel::mp4(), {24, 24, 24}, BoundaryKind::Periodic, 8.0,
                                      Distribution::Uniform, method, deterministic, nprops);
    check_against_reference<double, 3>(Kernel::tsc(), {12, 20, 16}, BoundaryKind::Fold, 30.0,
                                       Distribution::Clustered, method, deterministic, nprops);
  }
}

TEST(Cuda, EveryKernelAgainstReference3D) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels())
    for (auto method : {SpreadMethod::CudaSharedTiles, SpreadMethod::CudaGlobalAtomics}) {
      check_against_reference<float, 3>(k, {37, 50, 29}, BoundaryKind::Periodic, 2.0, Distribution::Uniform, method,
                                        false, 1);
      check_against_reference<double, 3>(k, {19, 12, 23}, BoundaryKind::Fold, 4.0, Distribution::Uniform, method,
                                         false, 1);
    }
}

TEST(Cuda, EveryKernelAgainstReference2D) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels())
    for (auto method : {SpreadMethod::CudaSharedTiles, SpreadMethod::CudaGlobalAtomics}) {
      check_against_reference<float, 2>(k, {45, 31}, BoundaryKind::Keep, 8.0, Distribution::Uniform, method,
                                        false, 1);
      check_against_reference<double, 2>(k, {70, 33}, BoundaryKind::MixedFold, 3.0, Distribution::Faces, method,
                                         false, 1);
    }
}

// Tiles forced where blocks hold at most one warp's particles (0.03 a cell: ~15 a tile),
// whose order interleave_kernel writes as the arrival order, without its level sort
// (tiles.cuh, kMinInterleavedChunk), next to full ones (clustered), for a kernel that
// interleaves (M'4, 3D) and one that does not (linear).
TEST(Cuda, SparseTilesTakeSmallBlocksInArrivalOrder) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : {Kernel::mp4(), Kernel::linear()})
    for (auto dist : {Distribution::Uniform, Distribution::Clustered}) {
      check_against_reference<float, 3>(k, {40, 33, 48}, BoundaryKind::Periodic, 0.03, dist,
                                        SpreadMethod::CudaSharedTiles, false, 1);
      check_against_reference<double, 3>(k, {24, 17, 30}, BoundaryKind::Fold, 0.03, dist,
                                         SpreadMethod::CudaSharedTiles, true, 2);
    }
}

// The one-thread spread adds a stencil's x-row as 8-byte float pairs (cuda/kernels/mesh_rows.cuh),
// one node at a time across a periodic seam or a fold. Sparse input (spread forced to
// atomics; interp then takes its one-thread kernel too) on odd sizes, so that rows start
// at every alignment, for every kernel and boundary, uniform and on the seam and faces,
// float and double, one to three properties.
TEST(Cuda, OneThreadKernelsAddRowsAtEveryAlignment) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels())
    for (auto boundary : {BoundaryKind::Periodic, BoundaryKind::Fold, BoundaryKind::Keep, BoundaryKind::MixedFold})
      for (auto dist : {Distribution::Uniform, Distribution::Seam, Distribution::Faces}) {
        check_against_reference<float, 2>(k, {203, 131}, boundary, 0.05, dist, SpreadMethod::CudaGlobalAtomics,
                                          false, 1);
        check_against_reference<float, 3>(k, {61, 50, 47}, boundary, 0.03, dist, SpreadMethod::CudaGlobalAtomics,
                                          false, 2);
        check_against_reference<double, 2>(k, {97, 66}, boundary, 0.05, dist, SpreadMethod::CudaGlobalAtomics,
                                           false, 3);
      }
}

// The float fast mode's rounding on sparse input: blocks of a few particles take their
// fixed-point scale from their own sum of |q| (31 bits of it), so a lone particle's small
// outer weights keep float's accuracy. A scale bounded by max |q| at 21 bits loses that
// accuracy on such input by more than an order of magnitude: the tolerance sits between
// the two, at a tenth of the general float tolerance.
TEST(Cuda, SparseFloatSpreadKeepsFloatAccuracy) {
  PMKIT_REQUIRE_GPU();
  constexpr double kSparseTolerance = 1e-6;
  for (const Kernel& k : {Kernel::mp4(), Kernel::linear(), Kernel::bspline(6)})
    for (double per_cell : {0.01, 0.05}) {
      check_against_reference<float, 3>(k, {64, 48, 56}, BoundaryKind::Periodic, per_cell, Distribution::Uniform,
                                        SpreadMethod::CudaSharedTiles, false, 1, 0, 1.0, kSparseTolerance);
      check_against_reference<float, 2>(k, {300, 260}, BoundaryKind::Periodic, per_cell, Distribution::Uniform,
                                        SpreadMethod::CudaSharedTiles, false, 1, 0, 1.0, kSparseTolerance);
    }
}

// A full block (1024 particles) at one position, where one node takes the kernel's peak
// weight from each: that node's sum is the largest that the fast mode's one 32-bit word
// holds (one_word_scale), with charges of one sign and of the other. Every kernel, 2D and
// 3D, on a node and half a cell off (the peak of even and of odd supports). A sum past
// 2^31 wraps, and its node comes out wrong by its own size; within the word, the float
// tolerance holds (the particles' roundings are all alike here, so they do not average).
template <int D>
void check_full_block_on_one_position(const Kernel& kernel, double offset, float charge) {
  SCOPED_TRACE(testing::Message() << kernel.name() << ", " << D << "D, offset " << offset << ", q " << charge);
  std::array<std::int64_t, D> cells;
  cells.fill(16);
  const Grid<D> grid = Grid<D>::periodic(cells, 1.0);
  const std::size_t n = cuda::tuning::kChunkParticles;
  Positions<float, D> pos;
  for (auto& p : pos) p.assign(n, static_cast<float>(5 + offset));
  Options opt = cuda_options();
  opt.host_arrays = true;
  opt.spread_method = SpreadMethod::CudaSharedTiles;
  Plan<float, D> plan(grid, kernel, opt);
  plan.set_points(views_of<float, D>(pos));
  const std::vector<float> q(n, charge);
  std::vector<float> mesh(static_cast<std::size_t>(plan.mesh_size()));
  plan.spread({View<const float>(q)}, {View<float>(mesh)});
  const auto xd = positions_as_double<float, D>(views_of<float, D>(pos));
  const std::vector<double> want = reference_spread<D>(grid, kernel, pointers<D>(xd), std::vector<double>(n, charge));
  EXPECT_LE(rel_l2<float>(View<const float>(mesh), want), tolerance<float>());
}

TEST(Cuda, FullBlockAtThePeakFitsOneWord) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels())
    for (double offset : {0.0, 0.5})
      for (float charge : {1.0f, -1.0f}) {
        check_full_block_on_one_position<2>(k, offset, charge);
        check_full_block_on_one_position<3>(k, offset, charge);
      }
}

// Interp writes straight to the caller's order where its outputs and mesh fit in L2
// (every other test here but the next); on a mesh beyond L2, with the caller's particles
// not in binned order, it writes binned slots and unbins. Both sizes below take that
// second path on any device of up to 80 MB of L2 (checked).
TEST(Cuda, InterpThroughTheUnbinPassBeyondL2) {
  PMKIT_REQUIRE_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const double l2 = static_cast<double>(prop.l2CacheSize);
  for (const double mesh_bytes : {4096.0 * 4096.0 * 4, 256.0 * 256.0 * 256.0 * 4})
    ASSERT_FALSE(cuda::tuning::interp_direct_pays(0, mesh_bytes, l2, false)) << "L2 of " << l2 << " bytes";
  for (const Kernel& k : {Kernel::linear(), Kernel::mp4()}) {
    check_against_reference<float, 2>(k, {4096, 4096}, BoundaryKind::Periodic, 0.01, Distribution::Uniform,
                                      SpreadMethod::CudaSharedTiles, false, 1);
    check_against_reference<float, 3>(k, {256, 256, 256}, BoundaryKind::Periodic, 0.01, Distribution::Clustered,
                                      SpreadMethod::CudaGlobalAtomics, false, 1);
  }
}

// Where set_points' probe finds the caller's particles in binned order, interp writes
// straight to the caller's order at any size (tuning::interp_direct_pays: the stores run
// along perm). A mesh beyond L2 (checked), particles first put in the plan's binned_order,
// enough of them for the probe to run (tuning::kPartitionMinParticles); then again after
// update_points, whose away particles store through their own slots.
TEST(Cuda, InterpOnBinnedInputBeyondL2) {
  PMKIT_REQUIRE_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const std::array<std::int64_t, 2> cells{4096, 4096};
  ASSERT_FALSE(cuda::tuning::interp_direct_pays(0, 4096.0 * 4096.0 * 4, prop.l2CacheSize, false))
      << "L2 of " << prop.l2CacheSize << " bytes";
  const Grid<2> grid = make_grid<2>(cells, BoundaryKind::Periodic);
  const std::size_t n = cuda::tuning::kPartitionMinParticles + 40000;
  for (const Kernel& k : {Kernel::linear(), Kernel::mp4()})
    for (const Distribution dist : {Distribution::Uniform, Distribution::Clustered}) {
      if (sanitizing() && (k.support() != 2 || dist != Distribution::Uniform)) continue;
      const std::uint64_t seed = fresh_seed();
      SCOPED_TRACE(seed_note(seed) + " " + k.name() + " " + name(dist));
      std::mt19937_64 rng(seed);
      Positions<float, 2> pos = make_positions<float, 2>(grid, dist, n, rng);
      Plan<float, 2> plan(grid, k, cuda_options());
      put_in_binned_order<float, 2>(plan, {&pos[0], &pos[1]});
      const std::vector<float> mesh = random_values<float>(static_cast<std::size_t>(plan.mesh_size()), rng);
      const std::vector<double> mesh_d(mesh.begin(), mesh.end());
      DeviceBuffer<float> dmesh(mesh);
      std::uniform_real_distribution<double> step(-0.02, 0.02);
      for (const bool moved : {false, true}) {
        if (moved)  // a small step each, so that update_points keeps the binning
          for (int d = 0; d < 2; ++d)
            for (float& x : pos[d]) x = static_cast<float>(x + step(rng) * grid.spacing[d]);
        DeviceBuffer<float> dx(pos[0]), dy(pos[1]);
        if (moved) {
          plan.update_points({device_cview(dx), device_cview(dy)});
          EXPECT_GT(plan.num_away(), 0u) << "no particle left its tile";
        } else {
          plan.set_points({device_cview(dx), device_cview(dy)});
        }
        DeviceBuffer<float> dvalues(n);
        plan.interp({device_cview(dmesh)}, {device_view(dvalues)});
        const std::array<std::vector<double>, 2> posd{std::vector<double>(pos[0].begin(), pos[0].end()),
                                                      std::vector<double>(pos[1].begin(), pos[1].end())};
        const std::vector<double> want = reference_interp<2>(grid, k, pointers<2>(posd), n, mesh_d);
        EXPECT_LE(rel_l2<float>(View<const float>(dvalues.download()), want), tolerance<float>())
            << (moved ? "after update_points" : "after set_points");
      }
    }
}

// Float property arrays larger than L2 are moved into binned order before the tile
// spread, by the partition's own moves (tuning::props_by_moves): two levels (4096^2,
// 16384 tiles; linear, and M'4 with three properties a pass) and one (512^2, 256 tiles).
// The deterministic cases beside them read through perm (no moves in that mode). n is
// sized from the device's L2 so that the path is taken (checked against the rule).
TEST(Cuda, PropertiesMovedToBinnedOrderBeyondL2) {
  PMKIT_REQUIRE_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const std::size_t n = static_cast<std::size_t>(prop.l2CacheSize) / sizeof(float) + (std::size_t(1) << 20);
  const double bytes = double(n) * sizeof(float), l2 = prop.l2CacheSize;
  ASSERT_TRUE(cuda::tuning::props_by_moves(sizeof(float), bytes, l2, 2, 2, 1));
  ASSERT_TRUE(cuda::tuning::props_by_moves(sizeof(float), bytes, l2, 2, 4, 3));
  ASSERT_TRUE(cuda::tuning::props_by_moves(sizeof(float), bytes, l2, 1, 4, 1));
  check_against_reference<float, 2>(Kernel::linear(), {4096, 4096}, BoundaryKind::Periodic, 0.0, Distribution::Uniform,
                                    SpreadMethod::CudaSharedTiles, false, 1, n);
  if (sanitizing()) return;
  check_against_reference<float, 2>(Kernel::mp4(), {4096, 4096}, BoundaryKind::Periodic, 0.0, Distribution::Clustered,
                                    SpreadMethod::CudaSharedTiles, false, 3, n);
  check_against_reference<float, 2>(Kernel::linear(), {4096, 4096}, BoundaryKind::Periodic, 0.0, Distribution::Uniform,
                                    SpreadMethod::CudaSharedTiles, true, 2, n);
  check_against_reference<float, 2>(Kernel::mp4(), {512, 512}, BoundaryKind::MixedFold, 0.0, Distribution::Uniform,
                                    SpreadMethod::CudaSharedTiles, false, 2, n);
  check_against_reference<float, 2>(Kernel::linear(), {512, 512}, BoundaryKind::Periodic, 0.0, Distribution::Uniform,
                                    SpreadMethod::CudaSharedTiles, true, 1, n);
}

// Every spread method (and the deterministic tiles) on M'4 double properties of about
// `scale`, against the float64 reference.
void check_double_properties(double scale, Distribution dist, double spread_tolerance) {
  for (auto method : {SpreadMethod::CudaSharedTiles, SpreadMethod::CudaGlobalAtomics, SpreadMethod::CudaCellMoments})
    for (bool deterministic : {false, true}) {
      if (deterministic && method != SpreadMethod::CudaSharedTiles) continue;  // refused in deterministic mode
      check_against_reference<double, 3>(Kernel::mp4(), {20, 17, 24}, BoundaryKind::Periodic, 4.0, dist, method,
                                         deterministic, 1, 0, scale, spread_tolerance);
    }
}

// Double properties near the bottom of double's range. The fixed-point scale of a block
// (or, deterministic, of the whole spread) would have to pass 2^1023 there; it is capped
// at 2^1023 (fixed_point.cuh, pow2_scale), so such values keep fewer bits the smaller
// they are: a value q gets ~1023 + log2(q) of them, ~27 at 1e-300 and ~20 at 1e-302
// (node errors near 1e-7 and 1e-5 relative, by a count of the roundings), where an
// infinite scale made them zeros. From ~1e-280 up, the usual precision. Cell moments
// summed their bound in float, where such values are 0: a scale of 1, and zeros.
TEST(Cuda, DoublePropertiesNearTheBottomOfTheRange) {
  PMKIT_REQUIRE_GPU();
  for (double scale : {1e-300, 1e-302}) check_double_properties(scale, Distribution::Uniform, 1e-4);
}

// Double properties near the top of double's range, clustered so that blocks hold a
// full chunk of 1024 particles: the fast mode's block sum of |q| (~1024 x 2e305) passed
// DBL_MAX, and the block spread NaN over its window (cell moments summed theirs in float:
// NaN from 3.4e38). The sums are now taken in units of 2^11 or 2^13 (AbsSum). The node
// sums themselves stay near 1e307 (random signs), so the float64 reference stays finite.
TEST(Cuda, DoublePropertiesNearTheTopOfTheRange) {
  PMKIT_REQUIRE_GPU();
  check_double_properties(4e305, Distribution::Clustered, tolerance<double>());
}

// A plan made for one device works while another is current, and leaves the caller's
// device current after each call (one thread driving a plan per GPU). The deterministic
// spread gives the same bits on both devices. Needs two devices (skipped otherwise).
TEST(Cuda, PlansOnTwoDevicesLeaveTheCurrentOneAlone) {
  PMKIT_REQUIRE_GPU();
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "one CUDA device";
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<3> grid = make_grid<3>({16, 16, 16}, BoundaryKind::Periodic);
  const std::size_t n = 5000;
  const auto pos = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> q(n);
  for (auto& v : q) v = unit(rng);
  auto current = [] {
    int d = -1;
    cudaGetDevice(&d);
    return d;
  };
  std::vector<float> meshes[2];
  for (int device : {0, 1}) {
    const int other = 1 - device;
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);  // the arrays live on the plan's device
    DeviceBuffer<float> dx(pos[0]), dy(pos[1]), dz(pos[2]), dq(q),
        dmesh(static_cast<std::size_t>(mesh_size(grid, Kernel::mp4().ghost_width())));
    DeviceBuffer<float> dforces(n * 4);
    ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
    Options opt = cuda_options();
    opt.device = device;
    opt.deterministic = true;
    Plan<float, 3> plan(grid, Kernel::mp4(), opt);
    EXPECT_EQ(current(), other) << "after the plan's construction";
    plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
    EXPECT_EQ(current(), other) << "after set_points";
    plan.spread({device_cview(dq)}, {device_view(dmesh)});
    EXPECT_EQ(current(), other) << "after spread";
    meshes[device] = dmesh.download();
    plan.interp({device_cview(dmesh)}, {device_view(dq)});
    EXPECT_EQ(current(), other) << "after interp";

    PairOptions popt;
    popt.backend = Backend::Cuda;
    popt.device = device;
    PairPlan<float, 3> pairs(Box<3>::periodic({1.0, 1.0, 1.0}), 0.2, popt);
    pairs.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
    EXPECT_EQ(current(), other) << "after the pair plan's set_points";
    const pair_kernels::LennardJones<3> lj{1.0, 0.05, 0.2, 0.01};
    float* f = dforces.get();
    pairs.compute(lj, {}, {View<float>(f, n), View<float>(f + n, n), View<float>(f + 2 * n, n),
                           View<float>(f + 3 * n, n)});
    EXPECT_EQ(current(), other) << "after the pair compute";
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);  // free the arrays where they live
  }
  EXPECT_EQ(meshes[0], meshes[1]) << "the deterministic spread differs between devices";
}

TEST(Cuda, DensitiesDistributionsAndBoundaries) {
  PMKIT_REQUIRE_GPU();
  check_densities(SpreadMethod::Auto, 120.0);
}

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
      check_against_reference<float, 3>(Kernel::mp4(), {96, 80, 72}, BoundaryKind::Periodic, 2.0, dist,
                                        SpreadMethod::Auto, false, 1, partitioned);
    if (sanitizing()) {
      if (!uniform)
        check_against_reference<double, 2>(Kernel::mp4(), {800, 900}, BoundaryKind::Periodic, 0.5, dist,
                                           SpreadMethod::CudaSharedTiles, false, 1, partitioned);
      continue;
    }
    check_against_reference<double, 3>(Kernel::tsc(), {90, 81, 66}, BoundaryKind::MixedFold, 1.0, dist,
                                       SpreadMethod::CudaGlobalAtomics, false, 1, partitioned);
    check_against_reference<float, 2>(Kernel::linear(), {1100, 700}, BoundaryKind::Keep, 1.5, dist,
                                      SpreadMethod::Auto, false, 1, partitioned);
    check_against_reference<double, 2>(Kernel::mp4(), {800, 900}, BoundaryKind::Periodic, 0.5, dist,
                                       SpreadMethod::CudaSharedTiles, false, 1, partitioned);
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
                         [&] { plan.set_points({device_cview(dxb), device_cview(dy), device_cview(dz)}); }, "set_points, two bad");
      // The binning in use is the one before the failed call: the same spread.
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

// Cell moments (SpreadMethod::CudaCellMoments): every kernel it takes (up to 64 nodes a
// particle), float and double, 2D and 3D, periodic and bounded, at densities that give
// one span a tile and several (more than tuning::kCellSpanParticles in a tile).
TEST(Cuda, CellMomentsAgainstReference) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels()) {
    if (pmkit::cuda::tuning::cell_moments_fit(k.support(), 3)) {
      for (double per_cell : {3.0, 40.0})
        check_against_reference<float, 3>(k, {37, 26, 29}, BoundaryKind::Periodic, per_cell, Distribution::Uniform,
                                          SpreadMethod::CudaCellMoments, false, 1);
      check_against_reference<double, 3>(k, {19, 12, 23}, BoundaryKind::Fold, 10.0, Distribution::Seam,
                                         SpreadMethod::CudaCellMoments, false, 1);
    }
    ASSERT_TRUE(pmkit::cuda::tuning::cell_moments_fit(k.support(), 2));
    check_against_reference<float, 2>(k, {45, 31}, BoundaryKind::Keep, 20.0, Distribution::Uniform,
                                      SpreadMethod::CudaCellMoments, false, 1);
    check_against_reference<double, 2>(k, {70, 33}, BoundaryKind::MixedFold, 12.0, Distribution::Faces,
                                       SpreadMethod::CudaCellMoments, false, 1);
  }
}

// Densities from nearly empty to 150 a cell, clustered particles (a cell of thousands,
// split over several spans), particles on the periodic seam; several properties.
TEST(Cuda, CellMomentsDensitiesAndProperties) {
  PMKIT_REQUIRE_GPU();
  check_densities(SpreadMethod::CudaCellMoments, 150.0);
  check_several_properties(SpreadMethod::CudaCellMoments, false);
}

// After update_points the moved particles that stayed in their tile are summed by cell
// from their new records; those that left go by the away list.
TEST(Cuda, CellMomentsAfterUpdatePoints) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<3> grid = make_grid<3>({20, 24, 18}, BoundaryKind::Periodic);
  const std::size_t n = 20 * 24 * 18 * 12;
  auto pos = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
  const std::vector<float> q = random_values<float>(n, rng);
  Options opt = cuda_options();
  opt.spread_method = SpreadMethod::CudaCellMoments;
  opt.max_away_fraction = 0.2;
  Plan<float, 3> plan(grid, Kernel::mp4(), opt);
  DeviceBuffer<float> dx(pos[0]), dy(pos[1]), dz(pos[2]), dq(q), dmesh(static_cast<std::size_t>(plan.mesh_size()));
  plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
  std::uniform_real_distribution<double> step(-0.3, 0.3);
  for (int d = 0; d < 3; ++d)
    for (auto& x : pos[d]) {
      const double len = box_length(grid, d);
      double v = x + step(rng) * grid.spacing[d];
      v = v < grid.origin[d] ? v + len : v >= grid.origin[d] + len ? v - len : v;
      x = static_cast<float>(v);
    }
  dx.upload(pos[0]);
  dy.upload(pos[1]);
  dz.upload(pos[2]);
  plan.update_points({device_cview(dx), device_cview(dy), device_cview(dz)});
  EXPECT_GT(plan.num_away(), 0u) << "no particle left its tile: the away path is not tested";
  plan.spread({device_cview(dq)}, {device_view(dmesh)});
  EXPECT_NE(plan.spread_method_name().find("cell-moments"), std::string::npos) << plan.spread_method_name();
  const auto posd = positions_as_double<float, 3>(views_of<float, 3>(pos));
  const std::vector<double> ref =
      reference_spread<3>(grid, plan.kernel(), pointers<3>(posd), std::vector<double>(q.begin(), q.end()));
  EXPECT_LE(rel_l2<float>(View<const float>(dmesh.download()), ref), tolerance<float>());
}

// Auto does not take cell moments, even at 64 a cell (slower than tiles:
// docs/tuning.md#kcellspanparticles); an explicit request it cannot honour is refused.
TEST(Cuda, CellMomentsChoiceAndRefusals) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const Grid<3> grid = make_grid<3>({32, 32, 32}, BoundaryKind::Periodic);
  {
    const auto pos = make_positions<float, 3>(grid, Distribution::Uniform, std::size_t(64) * 32 * 32 * 32, rng);
    DeviceBuffer<float> dx(pos[0]), dy(pos[1]), dz(pos[2]);
    Plan<float, 3> plan(grid, Kernel::mp4(), cuda_options());
    plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
    EXPECT_EQ(plan.spread_method_name().find("cell-moments"), std::string::npos) << plan.spread_method_name();
  }
  Options opt = cuda_options();
  opt.spread_method = SpreadMethod::CudaCellMoments;
  expect_pmkit_error(ErrorCode::Unsupported, "at most 64", [&] { Plan<float, 3> p(grid, Kernel::bspline(6), opt); },
                     "B-spline 6 in 3D");
  opt.deterministic = true;
  expect_pmkit_error(ErrorCode::Unsupported, "deterministic", [&] { Plan<float, 3> p(grid, Kernel::mp4(), opt); },
                     "deterministic");
}

TEST(Cuda, SeveralPropertiesInOnePass) {
  PMKIT_REQUIRE_GPU();
  for (bool det : {false, true}) check_several_properties(SpreadMethod::Auto, det);
}

TEST(Cuda, DeterministicAccuracy) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : all_kernels()) {
    check_against_reference<float, 3>(k, {20, 17, 23}, BoundaryKind::Periodic, 10.0, Distribution::Clustered,
                                      SpreadMethod::Auto, true, 1);
    check_against_reference<double, 2>(k, {33, 40}, BoundaryKind::Keep, 10.0, Distribution::Uniform,
                                       SpreadMethod::Auto, true, 1);
  }
}

// Deterministic spread: identical bits across repeated runs, a permuted particle order
// (a different binning order and chunking) and one pass of 3 properties against three
// single-property calls (a different launch: other shared memory, other pass widths).
template <class T, int D>
void check_bitwise(std::array<std::int64_t, D> cells, double per_cell, Distribution dist) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<D> grid = make_grid<D>(cells, BoundaryKind::Periodic);
  double volume = 1;
  for (auto c : cells) volume *= static_cast<double>(c);
  const std::size_t n = scaled(static_cast<std::size_t>(per_cell * volume));
  const auto pos = make_positions<T, D>(grid, dist, n, rng);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::array<std::vector<T>, 3> q;
  for (auto& v : q) {
    v.resize(n);
    for (auto& x : v) x = static_cast<T>(unit(rng));
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);

  Options opt = cuda_options();
  opt.deterministic = true;
  opt.host_arrays = true;
  auto run = [&](bool permuted, bool one_pass) {
    Plan<T, D> plan(grid, Kernel::mp4(), opt);
    std::array<std::vector<T>, D> p = pos;
    std::array<std::vector<T>, 3> qq = q;
    if (permuted) {
      for (int d = 0; d < D; ++d)
        for (std::size_t i = 0; i < n; ++i) p[d][i] = pos[d][order[i]];
      for (int j = 0; j < 3; ++j)
        for (std::size_t i = 0; i < n; ++i) qq[j][i] = q[j][order[i]];
    }
    typename Plan<T, D>::Positions views;
    for (int d = 0; d < D; ++d) views[d] = p[d];
    plan.set_points(views);
    std::array<std::vector<T>, 3> meshes;
    for (auto& m : meshes) m.assign(static_cast<std::size_t>(plan.mesh_size()), T(7));
    if (one_pass) {
      plan.spread({qq[0], qq[1], qq[2]}, {meshes[0], meshes[1], meshes[2]});
    } else {
      for (int j = 0; j < 3; ++j) plan.spread({qq[j]}, {meshes[j]});
    }
    return meshes;
  };
  const auto first = run(false, true);
  for (const auto& variant : {run(false, true), run(true, true), run(false, false), run(true, false)})
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(0, std::memcmp(first[j].data(), variant[j].data(), first[j].size() * sizeof(T)))
          << "property " << j << ": deterministic spread differs between runs";
}

TEST(Cuda, DeterministicIsBitwiseReproducible) {
  PMKIT_REQUIRE_GPU();
  check_bitwise<float, 3>({32, 32, 32}, 8.0, Distribution::Uniform);
  check_bitwise<float, 3>({16, 16, 16}, 100.0, Distribution::Clustered);
  check_bitwise<double, 3>({20, 20, 20}, 4.0, Distribution::Uniform);
  check_bitwise<float, 2>({128, 96}, 16.0, Distribution::Clustered);
}

TEST(Cuda, ErrorsFromDeviceData) {
  PMKIT_REQUIRE_GPU();
  const Options opt = cuda_options();
  Plan<float, 3> plan(Grid<3>::bounded({8, 8, 8}), Kernel::mp4(), opt);
  std::vector<float> x(100, 1.5f), y(100, 2.0f), z(100, 3.0f);
  DeviceBuffer<float> dx(x), dy(y), dz(z);
  plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});  // valid points first
  for (auto bad : {std::nanf(""), INFINITY, -0.5f, 8.25f}) {
    std::vector<float> xb = x;
    xb[57] = bad;
    DeviceBuffer<float> dxb(xb);
    expect_pmkit_error(std::isfinite(bad) ? ErrorCode::OutOfBounds : ErrorCode::NonFinitePosition, "positions[0][57]",
                       [&] { plan.set_points({device_cview(dxb), device_cview(dy), device_cview(dz)}); },
                       "set_points with x = " + std::to_string(bad));
  }
  expect_points_kept(plan, 100, 1e-3);

  // Host memory where device memory is expected: a clear error, nothing written.
  const DeviceBuffer<float> dq(std::vector<float>(100, 1.0f));
  std::vector<float> host_mesh(static_cast<std::size_t>(plan.mesh_size()), 3.0f);
  EXPECT_THROW(plan.spread({device_cview(dq)}, {View<float>(host_mesh)}), Error);
  EXPECT_TRUE(std::all_of(host_mesh.begin(), host_mesh.end(), [](float v) { return v == 3.0f; }));

  // A mesh larger than the device: refused at plan creation, naming the size.
  try {
    Plan<double, 3> huge(Grid<3>::periodic({4000, 4000, 4000}), Kernel::linear(), opt);
    ADD_FAILURE() << "no error for a 4000^3 double mesh";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::OutOfMemory || e.code() == ErrorCode::Unsupported) << e.what();
  }
}

// The peak weight that bounds the fixed-point accumulation comes from the kernels' own
// weights (kernels::weights_1d), not from the float64 reference: both agree to rounding.
TEST(Cuda, PeakWeightFromTheKernelsOwnWeights) {
  for (const Kernel& kernel : all_kernels())
    for (int dims : {2, 3}) {
      const double want = std::pow(reference::weight(kernel, 0.0), dims);
      EXPECT_NEAR(cuda::peak_weight(kernel, dims), want, 1e-15 * want) << kernel.name() << ", " << dims << "D";
    }
}

// A non-blocking stream (no implicit order with the legacy default stream), so that work
// a plan ran off its stream would race with the test's own copies and show.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// A case of the stream tests: particles, one property and a field, with what the CPU
// backend makes of them (the spread mesh and the interpolated values, as doubles).
struct StreamCase {
  Grid<3> grid;
  Kernel kernel;
  std::array<std::vector<float>, 3> pos;
  std::vector<float> q, field;
  std::vector<double> cpu_mesh, cpu_values;

  StreamCase(const Kernel& k, std::int64_t cells, std::size_t n, std::mt19937_64& rng)
      : grid(make_grid<3>({cells, cells, cells}, BoundaryKind::Periodic)), kernel(k) {
    pos = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    q.resize(n);
    for (float& v : q) v = unit(rng);
    Plan<float, 3> cpu(grid, kernel);
    cpu.set_points({View<const float>(pos[0]), View<const float>(pos[1]), View<const float>(pos[2])});
    field.resize(static_cast<std::size_t>(cpu.mesh_size()));
    for (float& v : field) v = unit(rng);
    std::vector<float> mesh(field.size()), values(n);
    cpu.spread({View<const float>(q)}, {View<float>(mesh)});
    cpu.interp({View<const float>(field)}, {View<float>(values)});
    cpu_mesh.assign(mesh.begin(), mesh.end());
    cpu_values.assign(values.begin(), values.end());
  }
};

// A case's device arrays, filled by copies queued on `stream` (not waited for).
struct StreamArrays {
  DeviceBuffer<float> x, y, z, q, field, mesh, values;
  StreamArrays(const StreamCase& c, cudaStream_t stream)
      : x(c.q.size()), y(c.q.size()), z(c.q.size()), q(c.q.size()), field(c.field.size()), mesh(c.field.size()),
        values(c.q.size()) {
    const std::pair<DeviceBuffer<float>*, const std::vector<float>*> fills[] = {
        {&x, &c.pos[0]}, {&y, &c.pos[1]}, {&z, &c.pos[2]}, {&q, &c.q}, {&field, &c.field}};
    for (const auto& f : fills)
      EXPECT_EQ(cudaMemcpyAsync(f.first->get(), f.second->data(), f.second->size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream),
                cudaSuccess);
  }
};

// Two plans on two streams: every call of both issued before the test waits for either
// stream; each plan's results (copied back on its stream) against the CPU backend.
TEST(Cuda, TwoPlansOnTwoStreamsAgainstTheCpuBackend) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const std::size_t n = scaled(std::size_t(1) << 20);
  const StreamCase cases[2] = {StreamCase(Kernel::mp4(), 64, n, rng), StreamCase(Kernel::linear(), 48, n / 2, rng)};
  Stream streams[2];
  std::vector<std::unique_ptr<StreamArrays>> arrays;
  std::vector<std::unique_ptr<Plan<float, 3>>> plans;
  for (int p = 0; p < 2; ++p) {
    Options opt = cuda_options();
    opt.stream = cuda::stream_handle(streams[p].s);
    arrays.emplace_back(new StreamArrays(cases[p], streams[p].s));
    plans.emplace_back(new Plan<float, 3>(cases[p].grid, cases[p].kernel, opt));
  }
  std::vector<float> meshes[2], values[2];
  for (int p = 0; p < 2; ++p) {
    StreamArrays& a = *arrays[p];
    plans[p]->set_points({device_cview(a.x), device_cview(a.y), device_cview(a.z)});
    plans[p]->spread({device_cview(a.q)}, {device_view(a.mesh)});
    plans[p]->interp({device_cview(a.field)}, {device_view(a.values)});
    meshes[p].resize(a.mesh.size());
    values[p].resize(a.values.size());
    EXPECT_EQ(cudaMemcpyAsync(meshes[p].data(), a.mesh.get(), a.mesh.size() * sizeof(float), cudaMemcpyDeviceToHost,
                              streams[p].s),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(values[p].data(), a.values.get(), a.values.size() * sizeof(float),
                              cudaMemcpyDeviceToHost, streams[p].s),
              cudaSuccess);
  }
  for (int p = 0; p < 2; ++p) {
    ASSERT_EQ(cudaStreamSynchronize(streams[p].s), cudaSuccess);
    EXPECT_LE(rel_l2<float>(View<const float>(meshes[p]), cases[p].cpu_mesh), 2 * tolerance<float>())
        << "spread, plan " << p << ", " << cases[p].kernel.name();
    EXPECT_LE(rel_l2<float>(View<const float>(values[p]), cases[p].cpu_values), 2 * tolerance<float>())
        << "interp, plan " << p << ", " << cases[p].kernel.name();
  }
}

// Work queued on the plan's stream before a call runs before it: the property array is
// filled by a copy queued behind a long memset, and spread, called at once, must see it.
TEST(Cuda, SpreadFollowsWorkQueuedOnItsStream) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const StreamCase c(Kernel::mp4(), 64, scaled(std::size_t(1) << 20), rng);
  Stream stream;
  Options opt = cuda_options();
  opt.stream = cuda::stream_handle(stream.s);
  Plan<float, 3> plan(c.grid, c.kernel, opt);
  StreamArrays a(c, stream.s);
  plan.set_points({device_cview(a.x), device_cview(a.y), device_cview(a.z)});
  // The property array zeroed, then a long pending memset, then its values copied in.
  const DeviceBuffer<float> q_values(c.q);
  ASSERT_EQ(cudaMemsetAsync(a.q.get(), 0, a.q.size() * sizeof(float), stream.s), cudaSuccess);
  DeviceBuffer<unsigned char> busy(scaled(std::size_t(1) << 30));
  for (int r = 0; r < 8; ++r) ASSERT_EQ(cudaMemsetAsync(busy.get(), r, busy.size(), stream.s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(a.q.get(), q_values.get(), a.q.size() * sizeof(float), cudaMemcpyDeviceToDevice,
                            stream.s),
            cudaSuccess);
  plan.spread({device_cview(a.q)}, {device_view(a.mesh)});
  ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
  EXPECT_LE(rel_l2<float>(View<const float>(a.mesh.download()), c.cpu_mesh), 2 * tolerance<float>());
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

TEST(Cuda, ZeroParticlesAndEmptyMesh) {
  PMKIT_REQUIRE_GPU();
  Options opt = cuda_options();
  for (bool det : {false, true}) {
    opt.deterministic = det;
    Plan<float, 2> plan(Grid<2>::periodic({33, 17}), Kernel::tsc(), opt);
    DeviceBuffer<float> none(0);
    plan.set_points({device_cview(none), device_cview(none)});
    std::vector<float> filled(static_cast<std::size_t>(plan.mesh_size()), 5.0f);
    DeviceBuffer<float> mesh(filled);
    plan.spread({device_cview(none)}, {device_view(mesh)}, Accumulate::Add);
    EXPECT_EQ(mesh.download(), filled);
    plan.spread({device_cview(none)}, {device_view(mesh)});
    const auto zeroed = mesh.download();
    EXPECT_TRUE(std::all_of(zeroed.begin(), zeroed.end(), [](float v) { return v == 0.0f; }));
  }
}

// ---------------------------------------------------------------------------------
// interp_gradient and spread_gradient on device arrays.

// The gradient and its adjoint in float64 from the closed-form kernels
// (reference::weight, reference::weight_derivative), node by node where the layout
// stores it: a folded ghost reads and receives at its mirror, a kept one at its own
// place. The linear kernel's derivative is the one from above (r + 1e-12, where it is
// constant): the backends' pieces hold s in [0, 1), so at its kinks (the nodes) they take
// the right-hand slope. The other kernels' derivatives are continuous: taken at r.
template <int D>
class GradientReference {
 public:
  GradientReference(const Grid<D>& grid, const Kernel& kernel, const std::array<std::vector<double>, D>& pos)
      : layout_(detail::make_layout(grid, kernel.ghost_width())), kernel_(kernel), pos_(pos) {}

  // gradients[d][p]: component d at particle p.
  std::array<std::vector<double>, D> interp(const std::vector<double>& mesh) const {
    std::array<std::vector<double>, D> g;
    for (auto& c : g) c.assign(pos_[0].size(), 0.0);
    for (std::size_t p = 0; p < pos_[0].size(); ++p)
      each_node(p, [&](std::int64_t node, const double (&grad)[D]) {
        for (int d = 0; d < D; ++d) g[d][p] += grad[d] * mesh[static_cast<std::size_t>(node)];
      });
    return g;
  }
  std::vector<double> spread(const std::array<std::vector<double>, D>& v) const {
    std::vector<double> mesh(static_cast<std::size_t>(layout_.size), 0.0);
    for (std::size_t p = 0; p < pos_[0].size(); ++p)
      each_node(p, [&](std::int64_t node, const double (&grad)[D]) {
        for (int d = 0; d < D; ++d) mesh[static_cast<std::size_t>(node)] += v[d][p] * grad[d];
      });
    return mesh;
  }

 private:
  template <class F>
  void each_node(std::size_t p, F&& f) const {
    const int S = kernel_.support();
    const double from_above = kernel_ == Kernel::linear() ? 1e-12 : 0.0;
    double w[D][Kernel::kMaxSupport], dw[D][Kernel::kMaxSupport];
    std::int64_t index[D][Kernel::kMaxSupport];
    for (int d = 0; d < D; ++d) {
      double u, s;
      int base;
      ASSERT_TRUE(layout_.axis[d].coordinate(pos_[d][p], u));
      kernels::locate(S, u, base, s);
      for (int k = 0; k < S; ++k) {
        const double r = u - (base + k);
        w[d][k] = reference::weight(kernel_, r);
        dw[d][k] = reference::weight_derivative(kernel_, r + from_above) / layout_.axis[d].spacing;
        index[d][k] = static_cast<std::int64_t>(layout_.axis[d].node(base + k)) * layout_.stride[d];
      }
    }
    int k[D] = {};
    for (;;) {
      std::int64_t node = 0;
      double grad[D];
      for (int d = 0; d < D; ++d) {
        node += index[d][k[d]];
        grad[d] = 1;
        for (int e = 0; e < D; ++e) grad[d] *= e == d ? dw[e][k[e]] : w[e][k[e]];
      }
      f(node, grad);
      int d = 0;
      while (d < D && ++k[d] == S) k[d++] = 0;
      if (d == D) return;
    }
  }
  detail::Layout<D> layout_;
  Kernel kernel_;
  const std::array<std::vector<double>, D>& pos_;
};

// One plan's particles on the device, the float64 reference on them, and the gradient
// calls of each form checked against it.
template <class T, int D>
struct GradientCase {
  Grid<D> grid;
  std::size_t n;
  Positions<T, D> pos;
  std::array<std::vector<double>, D> posd;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> dpos;
  std::unique_ptr<Plan<T, D>> plan;
  cudaStream_t stream = nullptr;  // the plan's, where it has one: waited for before a read back

  GradientCase(const Grid<D>& g, const Kernel& kernel, Options opt, Distribution dist, std::size_t count,
               std::mt19937_64& rng)
      : grid(g), n(count), pos(make_positions<T, D>(g, dist, count, rng)) {
    plan.reset(new Plan<T, D>(grid, kernel, opt));
    typename Plan<T, D>::Positions views;
    for (int d = 0; d < D; ++d) {
      dpos.emplace_back(new DeviceBuffer<T>(pos[d]));
      views[d] = device_cview(*dpos.back());
    }
    plan->set_points(views);
    refresh_reference();
  }
  void refresh_reference() { posd = positions_as_double<T, D>(views_of<T, D>(pos)); }
  void wait() const {
    if (stream) {
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
  }
  // DeviceBuffer's uploads (cudaMemcpy from pageable memory may return before its copy
  // lands) complete before work on a non-blocking stream of the plan's reads them.
  void uploads_done() const {
    if (stream) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
  std::size_t mesh_size() const { return static_cast<std::size_t>(plan->mesh_size()); }
  GradientReference<D> reference() const { return GradientReference<D>(grid, plan->kernel(), posd); }
  std::string what() const {
    return plan->kernel().name() + ", " + std::to_string(D) + "D, n = " + std::to_string(n) + ", " +
           plan->spread_method_name();
  }
};

// interp_gradient into D arrays and into one interleaved array (the same values, bit for
// bit) against the reference; spread_gradient against it, then added onto itself; and
// the adjointness <spread_gradient(v), f> = <v, interp_gradient(f)> across the two.
template <class T, int D>
void check_gradients(GradientCase<T, D>& c, std::mt19937_64& rng, double tol) {
  SCOPED_TRACE(c.what());
  const std::size_t n = c.n, size = c.mesh_size();
  const GradientReference<D> ref = c.reference();
  const std::vector<T> field = random_values<T>(size, rng);
  const DeviceBuffer<T> dfield(field);
  std::vector<std::unique_ptr<DeviceBuffer<T>>> separate;
  std::vector<View<T>> separate_views, interleaved_views;
  DeviceBuffer<T> interleaved(D * n);
  for (int d = 0; d < D; ++d) {
    separate.emplace_back(new DeviceBuffer<T>(std::vector<T>(n, T(7))));
    separate_views.push_back(device_view(*separate.back()));
    interleaved_views.emplace_back(interleaved.get() + d, n, D);
  }
  c.uploads_done();
  c.plan->interp_gradient({device_cview(dfield)}, separate_views);
  c.plan->interp_gradient({device_cview(dfield)}, interleaved_views);
  c.wait();
  const auto want = ref.interp(std::vector<double>(field.begin(), field.end()));
  const std::vector<T> packed = interleaved.download();
  std::vector<std::vector<T>> got(D);
  for (int d = 0; d < D; ++d) {
    got[d] = separate[d]->download();
    EXPECT_LE(rel_l2<T>(View<const T>(got[d]), want[d]), tol) << "interp_gradient, component " << d;
    std::vector<T> strided(n);
    for (std::size_t p = 0; p < n; ++p) strided[p] = packed[p * D + d];
    EXPECT_TRUE(same_bytes(strided, got[d])) << "interleaved output differs from separate arrays, component " << d;
  }

  std::array<std::vector<double>, D> v;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> dv;
  std::vector<View<const T>> v_views;
  for (int d = 0; d < D; ++d) {
    const std::vector<T> vd = random_values<T>(n, rng);
    v[d].assign(vd.begin(), vd.end());
    dv.emplace_back(new DeviceBuffer<T>(vd));
    v_views.push_back(device_cview(*dv.back()));
  }
  DeviceBuffer<T> dmesh(std::vector<T>(size, T(3)));
  c.uploads_done();
  c.plan->spread_gradient(v_views, {device_view(dmesh)});
  c.wait();
  const std::vector<double> mesh_want = ref.spread(v);
  const std::vector<T> mesh = dmesh.download();
  EXPECT_LE(rel_l2<T>(View<const T>(mesh), mesh_want), tol) << "spread_gradient";
  c.plan->spread_gradient(v_views, {device_view(dmesh)}, Accumulate::Add);
  c.wait();
  std::vector<double> twice(mesh_want);
  for (double& x : twice) x *= 2;
  EXPECT_LE(rel_l2<T>(View<const T>(dmesh.download()), twice), tol) << "spread_gradient, Accumulate::Add";

  double lhs = 0, rhs = 0, scale = 0;
  for (std::size_t i = 0; i < size; ++i) {
    lhs += static_cast<double>(mesh[i]) * field[i];
    scale += std::fabs(static_cast<double>(mesh[i]) * field[i]);
  }
  for (int d = 0; d < D; ++d)
    for (std::size_t p = 0; p < n; ++p) rhs += v[d][p] * static_cast<double>(got[d][p]);
  EXPECT_LE(std::fabs(lhs - rhs), tol * scale) << "adjointness: " << lhs << " against " << rhs;
}

// Every kernel, sparse (one thread a particle) and dense and clustered (the tile kernels,
// several chunks a tile), periodic, folded and kept ghosts, the fast tiles and the
// global atomics.
TEST(Cuda, GradientsAgainstReference3D) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const Kernel& kernel : all_kernels())
    for (BoundaryKind boundary : {BoundaryKind::Periodic, BoundaryKind::Fold, BoundaryKind::Keep})
      for (auto [dist, per_cell] : {std::pair{Distribution::Uniform, 0.02}, std::pair{Distribution::Uniform, 3.0},
                                    std::pair{Distribution::Clustered, 1.0}})
        for (SpreadMethod method : {SpreadMethod::Auto, SpreadMethod::CudaGlobalAtomics}) {
          SCOPED_TRACE(std::string(name(boundary)) + ", " + name(dist) + ", " + std::to_string(per_cell) + " a cell");
          const std::array<std::int64_t, 3> cells = {20, 12, 16};
          Options opt = cuda_options();
          opt.spread_method = method;
          const std::size_t n = scaled(static_cast<std::size_t>(per_cell * 20 * 12 * 16) + 1);
          GradientCase<float, 3> c(make_grid<3>(cells, boundary), kernel, opt, dist, n, rng);
          check_gradients(c, rng, 4 * tolerance<float>());
        }
}

TEST(Cuda, GradientsAgainstReference2DAndDouble) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const Kernel& kernel : {Kernel::linear(), Kernel::mp4(), Kernel::bspline(5)})
    for (BoundaryKind boundary : {BoundaryKind::MixedFold, BoundaryKind::MixedKeep})
      for (double per_cell : {0.05, 4.0}) {
        SCOPED_TRACE(std::string(name(boundary)) + ", " + std::to_string(per_cell) + " a cell");
        // At least 64 particles: a relative L2 over a handful of values, each a sum of
        // terms whose weights cancel, is one value's rounding.
        const std::size_t n2 = std::max<std::size_t>(64, scaled(static_cast<std::size_t>(per_cell * 96 * 80) + 1));
        GradientCase<float, 2> f2(make_grid<2>({96, 80}, boundary), kernel, cuda_options(), Distribution::Uniform, n2,
                                  rng);
        check_gradients(f2, rng, 4 * tolerance<float>());
        GradientCase<double, 2> d2(make_grid<2>({96, 80}, boundary), kernel, cuda_options(), Distribution::Uniform,
                                   n2, rng);
        check_gradients(d2, rng, 4 * tolerance<double>());
        const std::size_t n3 = std::max<std::size_t>(64, scaled(static_cast<std::size_t>(per_cell * 12 * 10 * 14) + 1));
        GradientCase<double, 3> d3(make_grid<3>({12, 10, 14}, boundary), kernel, cuda_options(),
                                   Distribution::Clustered, n3, rng);
        check_gradients(d3, rng, 4 * tolerance<double>());
      }
}

// Outputs past L2 (interp writes binned slots, then unbin_kernel) and vectors moved to
// binned order by the tile spread: a sample of the particles against the reference.
TEST(Cuda, GradientsBeyondL2) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const std::size_t n = scaled(std::size_t(1) << 22);
  GradientCase<float, 3> c(make_grid<3>({64, 64, 64}, BoundaryKind::Periodic), Kernel::mp4(), cuda_options(),
                           Distribution::Uniform, n, rng);
  const std::vector<float> field = random_values<float>(c.mesh_size(), rng);
  const DeviceBuffer<float> dfield(field);
  DeviceBuffer<float> g(3 * n);
  c.plan->interp_gradient({device_cview(dfield)}, {View<float>(g.get(), n, 3), View<float>(g.get() + 1, n, 3),
                                                   View<float>(g.get() + 2, n, 3)});
  const std::vector<float> got = g.download();
  // The reference on every 61st particle.
  Positions<float, 3> sample;
  for (std::size_t p = 0; p < n; p += 61)
    for (int d = 0; d < 3; ++d) sample[d].push_back(c.pos[d][p]);
  const auto sampled = positions_as_double<float, 3>(views_of<float, 3>(sample));
  const auto want = GradientReference<3>(c.grid, c.plan->kernel(), sampled)
                        .interp(std::vector<double>(field.begin(), field.end()));
  for (int d = 0; d < 3; ++d) {
    std::vector<float> mine;
    for (std::size_t p = 0; p < n; p += 61) mine.push_back(got[p * 3 + d]);
    EXPECT_LE(rel_l2<float>(View<const float>(mine), want[d]), 4 * tolerance<float>()) << "component " << d;
  }
  // spread_gradient of every particle against the reference on all of them.
  std::array<std::vector<double>, 3> v;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dv;
  for (int d = 0; d < 3; ++d) {
    const std::vector<float> vd = random_values<float>(n, rng);
    v[d].assign(vd.begin(), vd.end());
    dv.emplace_back(new DeviceBuffer<float>(vd));
  }
  DeviceBuffer<float> mesh(c.mesh_size());
  c.plan->spread_gradient({device_cview(*dv[0]), device_cview(*dv[1]), device_cview(*dv[2])}, {device_view(mesh)});
  EXPECT_LE(rel_l2<float>(View<const float>(mesh.download()), c.reference().spread(v)), 4 * tolerance<float>());
}

// Deterministic spread_gradient: against the reference, and the same bits from a second
// call and from a second plan on the same particles.
TEST(Cuda, DeterministicGradientIsBitwiseReproducible) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Options opt = cuda_options();
  opt.deterministic = true;
  for (const Kernel& kernel : {Kernel::linear(), Kernel::mp4(), Kernel::bspline(6)}) {
    GradientCase<float, 3> c(make_grid<3>({24, 20, 16}, BoundaryKind::Fold), kernel, opt, Distribution::Clustered,
                             scaled(24 * 20 * 16 * 4), rng);
    check_gradients(c, rng, 4 * tolerance<float>());
    std::vector<std::unique_ptr<DeviceBuffer<float>>> dv;
    std::vector<View<const float>> views;
    for (int d = 0; d < 3; ++d) {
      dv.emplace_back(new DeviceBuffer<float>(random_values<float>(c.n, rng)));
      views.push_back(device_cview(*dv.back()));
    }
    DeviceBuffer<float> first(c.mesh_size()), again(c.mesh_size()), other(c.mesh_size());
    c.plan->spread_gradient(views, {device_view(first)});
    c.plan->spread_gradient(views, {device_view(again)});
    Plan<float, 3> second(c.grid, kernel, opt);
    second.set_points({device_cview(*c.dpos[0]), device_cview(*c.dpos[1]), device_cview(*c.dpos[2])});
    second.spread_gradient(views, {device_view(other)});
    const std::vector<float> a = first.download();
    EXPECT_TRUE(same_bytes(a, again.download())) << kernel.name() << ": a second call";
    EXPECT_TRUE(same_bytes(a, other.download())) << kernel.name() << ": a second plan";
  }
}

// After update_points the particles that left their tiles (the away list) are
// included, on a stream of the caller's that other work waits on.
TEST(Cuda, GradientsAfterUpdatePointsOnAStream) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Stream stream;
  for (SpreadMethod method : {SpreadMethod::Auto, SpreadMethod::CudaGlobalAtomics}) {
    Options opt = cuda_options();
    opt.stream = cuda::stream_handle(stream.s);
    opt.max_away_fraction = 0.2;
    opt.spread_method = method;
    GradientCase<float, 3> c(make_grid<3>({20, 24, 18}, BoundaryKind::Periodic), Kernel::mp4(), opt,
                             Distribution::Uniform, scaled(20 * 24 * 18 * 6), rng);
    c.stream = stream.s;
    std::uniform_real_distribution<double> step(-0.3, 0.3);
    typename Plan<float, 3>::Positions moved;
    for (int d = 0; d < 3; ++d) {
      for (auto& x : c.pos[d]) {
        const double len = box_length(c.grid, d);
        double u = x + step(rng) * c.grid.spacing[d];
        u = u < c.grid.origin[d] ? u + len : u >= c.grid.origin[d] + len ? u - len : u;
        x = static_cast<float>(u);
      }
      c.dpos[d]->upload(c.pos[d]);
      moved[d] = device_cview(*c.dpos[d]);
    }
    c.plan->update_points(moved);
    c.refresh_reference();
    EXPECT_GT(c.plan->num_away(), 0u) << "no particle left its tile: the away path is not tested";
    check_gradients(c, rng, 4 * tolerance<float>());
  }
}

// Host memory where device memory is expected: a clear error before anything is written.
TEST(Cuda, GradientErrorsFromHostPointers) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  GradientCase<float, 3> c(make_grid<3>({8, 8, 8}, BoundaryKind::Periodic), Kernel::mp4(), cuda_options(),
                           Distribution::Uniform, 1000, rng);
  const DeviceBuffer<float> field(random_values<float>(c.mesh_size(), rng));
  DeviceBuffer<float> gx(std::vector<float>(c.n, 5.0f)), gy(std::vector<float>(c.n, 5.0f));
  std::vector<float> host(c.n, 5.0f);
  expect_pmkit_error(ErrorCode::InvalidArgument, "gradients",
                     [&] { c.plan->interp_gradient({device_cview(field)}, {device_view(gx), device_view(gy), View<float>(host)}); },
                     "interp_gradient into a host array");
  EXPECT_EQ(gx.download(), std::vector<float>(c.n, 5.0f));
  EXPECT_EQ(host, std::vector<float>(c.n, 5.0f));
  DeviceBuffer<float> mesh(std::vector<float>(c.mesh_size(), 5.0f));
  const DeviceBuffer<float> v(std::vector<float>(c.n, 1.0f));
  expect_pmkit_error(ErrorCode::InvalidArgument, "vectors",
                     [&] { c.plan->spread_gradient({device_cview(v), device_cview(v), View<const float>(host)}, {device_view(mesh)}); },
                     "spread_gradient from a host array");
  EXPECT_EQ(mesh.download(), std::vector<float>(c.mesh_size(), 5.0f));
}

// The bound on spread_gradient's contributions holds the largest derivative the
// float64 reference finds on a fine sweep, and is within 1% of it.
TEST(Cuda, PeakGradientBoundsTheDerivatives) {
  for (const Kernel& kernel : all_kernels())
    for (int dims : {2, 3}) {
      double largest = 0;
      for (int i = -40000; i <= 40000; ++i)
        largest = std::max(largest, std::fabs(reference::weight_derivative(kernel, i * 1e-4)));
      const double want = largest * std::pow(reference::weight(kernel, 0.0), dims - 1);
      const double bound = cuda::peak_gradient(kernel, dims);
      EXPECT_GE(bound, want * (1 - 1e-12)) << kernel.name() << ", " << dims << "D";
      EXPECT_LE(bound, want * 1.01) << kernel.name() << ", " << dims << "D";
    }
}

}  // namespace
}  // namespace pmkit::test

#else
TEST(Cuda, NotBuilt) { GTEST_SKIP() << "this build of pmkit has no CUDA backend"; }
#endif
