// CUDA white box: the spread and interp paths that the sizes, densities and particle
// orders pick (small tile blocks, the one-thread kernels' rows, interp through the unbin
// pass and straight to the caller's order beyond L2, properties moved to binned order),
// each against the float64 reference with device pointers.
#include "cuda/tuning/method_choice.hpp"
#include "cuda_cases.hpp"

namespace pmkit::test {
namespace {

// Tiles forced where blocks hold at most one warp's particles (0.03 a cell: ~15 a tile),
// whose order interleave_kernel writes as the arrival order, without its level sort
// (tiles.cuh, kMinInterleavedChunk), next to full ones (clustered), for a kernel that
// interleaves (M'4, 3D) and one that does not (linear).
TEST(Cuda, SparseTilesTakeSmallBlocksInArrivalOrder) {
  PMKIT_REQUIRE_GPU();
  for (const Kernel& k : {Kernel::mp4(), Kernel::linear()})
    for (auto dist : {Distribution::Uniform, Distribution::Clustered}) {
      check_against_reference<float, 3>(cuda_method(SpreadMethod::CudaSharedTiles), k, {40, 33, 48},
                                        BoundaryKind::Periodic, 0.03, dist, 1);
      check_against_reference<double, 3>(cuda_method(SpreadMethod::CudaSharedTiles, true), k, {24, 17, 30},
                                         BoundaryKind::Fold, 0.03, dist, 2);
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
        check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaGlobalAtomics), k, {203, 131}, boundary, 0.05,
                                          dist, 1);
        check_against_reference<float, 3>(cuda_method(SpreadMethod::CudaGlobalAtomics), k, {61, 50, 47}, boundary, 0.03,
                                          dist, 2);
        check_against_reference<double, 2>(cuda_method(SpreadMethod::CudaGlobalAtomics), k, {97, 66}, boundary, 0.05,
                                           dist, 3);
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
    check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaSharedTiles), k, {4096, 4096},
                                      BoundaryKind::Periodic, 0.01, Distribution::Uniform, 1);
    check_against_reference<float, 3>(cuda_method(SpreadMethod::CudaGlobalAtomics), k, {256, 256, 256},
                                      BoundaryKind::Periodic, 0.01, Distribution::Clustered, 1);
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
  check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaSharedTiles), Kernel::linear(), {4096, 4096},
                                    BoundaryKind::Periodic, 0.0, Distribution::Uniform, 1, n);
  if (sanitizing()) return;
  check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaSharedTiles), Kernel::mp4(), {4096, 4096},
                                    BoundaryKind::Periodic, 0.0, Distribution::Clustered, 3, n);
  check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaSharedTiles, true), Kernel::linear(), {4096, 4096},
                                    BoundaryKind::Periodic, 0.0, Distribution::Uniform, 2, n);
  check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaSharedTiles), Kernel::mp4(), {512, 512},
                                    BoundaryKind::MixedFold, 0.0, Distribution::Uniform, 2, n);
  check_against_reference<float, 2>(cuda_method(SpreadMethod::CudaSharedTiles, true), Kernel::linear(), {512, 512},
                                    BoundaryKind::Periodic, 0.0, Distribution::Uniform, 1, n);
}

}  // namespace
}  // namespace pmkit::test
