// Meshes past 2^32 nodes on the CPU backend: a periodic 2048^3 float mesh (2^33 nodes,
// 32 GiB) reserved as address space only (Linux, MAP_NORESERVE), of which the test
// touches the few planes its particles reach. The particles sit in the box's last
// cells, so their stencils write the last node offsets (up to 2^33 - 1) and wrap every
// seam; spread (Accumulate::Add on the zero pages) and interp must match float64.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "large_mesh_cases.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

using large::kEdge;

// Address space for `count` values of T, zero where never written; null where the
// system refuses it.
template <class T>
class SparseMesh {
 public:
  explicit SparseMesh(std::size_t count) : bytes_(count * sizeof(T)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<T*>(p);
  }
  ~SparseMesh() {
    if (data_) munmap(data_, bytes_);
  }
  SparseMesh(const SparseMesh&) = delete;
  SparseMesh& operator=(const SparseMesh&) = delete;
  T* data() const { return data_; }

 private:
  std::size_t bytes_;
  T* data_;
};

TEST(LargeMesh, CpuIndexesPastTwoToTheThirtyTwoNodes) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const Kernel kernel = Kernel::tsc();
  Options options;
  options.backend = Backend::Cpu;
  options.num_threads = 2;
  Plan<float, 3> plan(large::periodic_grid(), kernel, options);
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
  ASSERT_EQ(size, std::size_t(1) << 33);
  SparseMesh<float> mesh(size);
  if (!mesh.data()) GTEST_SKIP() << "the system reserves no 32 GiB of address space";

  // Every particle in the last cells: z in [2046, 2047.4), so that the home planes (and
  // the slab spread's windows) stay on the last planes; x and y wrap past the seam.
  const std::size_t n = 2000;
  large::Particles p(n, n, seed);
  for (std::size_t i = 0; i < n; ++i) p.x[2][i] = std::fmod(p.x[2][i], 1.4f) + float(kEdge - 2);
  plan.set_points({View<const float>(p.x[0]), View<const float>(p.x[1]), View<const float>(p.x[2])});
  plan.spread({View<const float>(p.q)}, {View<float>(mesh.data(), size)}, Accumulate::Add);

  // Every node the particles reach: the corner box of 5 nodes an axis, past the seams.
  std::vector<std::array<std::int64_t, 3>> nodes;
  for (std::int64_t z : {kEdge - 3, kEdge - 2, kEdge - 1, std::int64_t(0)})
    for (std::int64_t y : {kEdge - 3, kEdge - 2, kEdge - 1, std::int64_t(0), std::int64_t(1)})
      for (std::int64_t x : {kEdge - 3, kEdge - 2, kEdge - 1, std::int64_t(0), std::int64_t(1)}) nodes.push_back({x, y, z});
  const std::vector<large::NodeSum> want = large::spread_at(p, kernel, nodes);
  double total = 0, charge = 0;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const double got = mesh.data()[large::offset_of(nodes[k])];
    total += got;
    EXPECT_NEAR(got, want[k].value, 1e-5 * want[k].magnitude + 1e-30)
        << "node " << nodes[k][0] << ", " << nodes[k][1] << ", " << nodes[k][2] << " at offset " << large::offset_of(nodes[k]);
  }
  for (float q : p.q) charge += q;
  EXPECT_NEAR(total, charge, 1e-5 * charge) << "the corner box holds every particle's charge";
  EXPECT_GT(mesh.data()[size - 1], 0.0f) << "the last node, offset 2^33 - 1, receives charge";

  // interp reads the same nodes back: against float64 sums of the mesh's float values.
  std::vector<float> values(n);
  plan.interp({View<const float>(mesh.data(), size)}, {View<float>(values)});
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0, magnitude = 0;
    for (const auto& m : nodes) {
      double w = 1;
      for (int d = 0; d < 3; ++d) w *= reference::weight(kernel, large::periodic_distance(p.x[d][i], m[d]));
      sum += w * mesh.data()[large::offset_of(m)];
      magnitude += std::fabs(w * mesh.data()[large::offset_of(m)]);
    }
    ASSERT_NEAR(values[i], sum, 1e-5 * magnitude + 1e-30) << "particle " << i;
  }
}

}  // namespace
}  // namespace pmkit::test
