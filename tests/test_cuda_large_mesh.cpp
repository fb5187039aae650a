// A mesh past 2^32 nodes on one GPU: periodic 2048^3 in float (2^33 nodes, 32 GiB) with
// 2^30 particles, the cosmology particle-mesh size. The mass on the mesh (summed in
// float64) must match the charges', the spread at 64 sample nodes (the box's corners,
// with the last node at offset 2^33 - 1, the seams, random nodes) the float64 sums of
// the closed-form kernel, and interp at sample particles the float64 sums of the mesh
// values their stencils read. Skips without a GPU with kNeededBytes free: positions and
// charges (16 GiB), the mesh, the plan's binning of 2^30 unsorted particles (records,
// permutation, the run sort's arrays and CUB's scratch: about 63 GiB) and the scratch of
// spread's property move and interp's binned outputs (8 GiB): about 119 GiB in all.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_support.hpp"
#include "large_mesh_cases.hpp"

namespace pmkit::test {
namespace {

using large::kEdge;

constexpr std::size_t kParticles = std::size_t(1) << 30;
constexpr std::size_t kNeededBytes = std::size_t(120) << 30;

float read_one(const float* device, std::int64_t offset) {
  float v = 0;
  EXPECT_EQ(cudaMemcpy(&v, device + offset, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// The sum of a device array in float64, a GiB at a time.
double device_sum(const float* device, std::size_t count) {
  const std::size_t piece = std::size_t(1) << 28;
  std::vector<float> host(piece);
  double total = 0;
  for (std::size_t first = 0; first < count; first += piece) {
    const std::size_t m = std::min(piece, count - first);
    EXPECT_EQ(cudaMemcpy(host.data(), device + first, m * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<double> partial(large::team_size(), 0.0);
    large::in_parallel(m, [&](std::size_t t, std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) partial[t] += host[i];
    });
    for (double s : partial) total += s;
  }
  return total;
}

TEST(CudaLargeMesh, SpreadsTwoToTheThirtyParticlesOn2048Cubed) {
  PMKIT_REQUIRE_GPU();
  if (sanitizing()) GTEST_SKIP() << "2^30 particles on 2048^3: not under compute-sanitizer";
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < kNeededBytes)
    GTEST_SKIP() << "needs " << (kNeededBytes >> 30) << " GiB of free device memory, the device has "
                 << (free_bytes >> 30);
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Kernel kernel = Kernel::tsc();

  const large::Particles p(kParticles, 1 << 16, seed);
  std::array<DeviceBuffer<float>, 3> x{DeviceBuffer<float>(p.x[0]), DeviceBuffer<float>(p.x[1]),
                                       DeviceBuffer<float>(p.x[2])};
  DeviceBuffer<float> q(p.q);
  Options options;
  options.backend = Backend::Cuda;
  Plan<float, 3> plan(large::periodic_grid(), kernel, options);
  ASSERT_EQ(plan.mesh_size(), std::int64_t(1) << 33);
  DeviceBuffer<float> mesh(static_cast<std::size_t>(plan.mesh_size()), "the 2048^3 mesh");
  plan.set_points({device_cview(x[0]), device_cview(x[1]), device_cview(x[2])});
  plan.spread({device_cview(q)}, {device_view(mesh)});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // Mass: the mesh's sum against the charges', both in float64.
  double charge = 0;
  for (float v : p.q) charge += v;
  const double mass = device_sum(mesh.get(), mesh.size());
  EXPECT_NEAR(mass, charge, 1e-5 * charge) << "mass on the mesh against the particles' charge";

  // The sample nodes against float64.
  const auto nodes = large::sample_nodes(50, seed);
  const std::vector<large::NodeSum> want = large::spread_at(p, kernel, nodes);
  // The fast float spread rounds each contribution to a fixed point of its block's sum of
  // |q| (docs/api.md): a node far below the mesh's typical value errs relative to that
  // scale, not to its own, so the bound is relative to the larger of the node's
  // magnitude and the samples' rms magnitude.
  double squares = 0;
  for (const large::NodeSum& w : want) squares += w.magnitude * w.magnitude;
  const double typical = std::sqrt(squares / double(want.size()));
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const std::int64_t offset = large::offset_of(nodes[k]);
    EXPECT_NEAR(read_one(mesh.get(), offset), want[k].value, 1e-5 * std::max(want[k].magnitude, typical) + 1e-30)
        << "node " << nodes[k][0] << ", " << nodes[k][1] << ", " << nodes[k][2] << " at offset " << offset;
  }

  // interp into the charges' buffer (read once more from p.q where needed): sample
  // particles from the corner and the bulk against float64 sums of the mesh values read.
  plan.interp({device_cview(mesh)}, {device_view(q)});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const int reach = kernel.support() / 2 + 1;
  for (std::size_t i : {std::size_t(0), std::size_t(1), std::size_t(4097), std::size_t(65535), std::size_t(65536),
                        kParticles / 3, kParticles / 2 + 12345, kParticles - 1}) {
    double sum = 0, magnitude = 0;
    std::int64_t c[3];
    for (int d = 0; d < 3; ++d) c[d] = static_cast<std::int64_t>(std::floor(p.x[d][i]));
    for (std::int64_t a = -reach; a <= reach; ++a)
      for (std::int64_t b = -reach; b <= reach; ++b)
        for (std::int64_t e = -reach; e <= reach; ++e) {
          const std::array<std::int64_t, 3> m{(c[0] + e + kEdge) % kEdge, (c[1] + b + kEdge) % kEdge,
                                              (c[2] + a + kEdge) % kEdge};
          double w = 1;
          for (int d = 0; d < 3; ++d) w *= reference::weight(kernel, large::periodic_distance(p.x[d][i], m[d]));
          if (w == 0) continue;
          const double v = read_one(mesh.get(), large::offset_of(m));
          sum += w * v;
          magnitude += std::fabs(w * v);
        }
    EXPECT_NEAR(read_one(q.get(), static_cast<std::int64_t>(i)), sum, 1e-5 * magnitude + 1e-30) << "particle " << i;
  }
}

}  // namespace
}  // namespace pmkit::test
