// One CUDA rank: the DistributedPlan's step (migrate, update_points, spread, interp)
// queues its work without waiting for the device, captures into a CUDA graph and replays
// over many steps of moving particles, some crossing the periodic seam each step, with
// the wraps, the block and the values of the same steps made eagerly by a second plan;
// and a position that migrate cannot place is reported by synchronize, with no array
// changed.
#ifdef PMKIT_WITH_CUDA
#include <cmath>
#include <limits>

#include "cuda_support.hpp"
#include "distributed_support.hpp"
#include "pmkit/cuda/runtime.hpp"

namespace pmkit::test {
namespace {

// Device arrays of one plan's particles (positions that migrate wraps in place, charges,
// values) and block, and the host copies the test moves.
struct RankParticles {
  std::array<DeviceBuffer<float>, 3> x;
  DeviceBuffer<float> q, values, block;
  RankParticles(std::size_t n, std::int64_t block_size) : q(n), values(n), block(block_size) {
    for (auto& c : x) c.reserve(n, "positions");
  }
  std::array<View<float>, 3> positions() { return {device_view(x[0]), device_view(x[1]), device_view(x[2])}; }
  std::array<View<const float>, 3> const_positions() const {
    return {device_cview(x[0]), device_cview(x[1]), device_cview(x[2])};
  }
  void upload(const std::array<std::vector<float>, 3>& host, cudaStream_t stream) {
    for (int d = 0; d < 3; ++d)
      ASSERT_EQ(cudaMemcpyAsync(x[d].get(), host[d].data(), host[d].size() * sizeof(float), cudaMemcpyHostToDevice,
                                stream),
                cudaSuccess);
  }
  // The step a simulation makes, as the test captures it.
  void step(DistributedPlan<float, 3>& plan, const DeviceBuffer<float>& field, std::size_t n) {
    plan.migrate(positions(), {device_view(q)}, n);
    plan.update_points(const_positions());
    plan.spread({device_cview(q)}, {device_view(block)});
    plan.interp({device_cview(field)}, {device_view(values)});
  }
  std::vector<float> read(const DeviceBuffer<float>& b) const {
    std::vector<float> h(b.size());
    EXPECT_EQ(cudaMemcpy(h.data(), b.get(), h.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

Options own_stream_options(const Stream& stream) {
  Options o;
  o.backend = Backend::Cuda;
  o.stream = cuda::stream_handle(stream.s);
  return o;
}

TEST(DistributedGraph, OneRankStepReplaysFromAGraph) {
  PMKIT_REQUIRE_GPU();
  if (world_size() != 1) GTEST_SKIP() << "one rank's step";
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<3> grid = Grid<3>::periodic({24, 24, 24}, 1.0 / 24);
  const std::size_t n = 20000;
  Stream stream;
  const Options options = own_stream_options(stream);
  DistributedPlan<float, 3> graphed(MPI_COMM_WORLD, grid, Kernel::mp4(), options);
  DistributedPlan<float, 3> eager(MPI_COMM_WORLD, grid, Kernel::mp4(), options);
  RankParticles a(n, graphed.block_size()), b(n, eager.block_size());
  std::array<std::vector<float>, 3> pos = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
  const std::vector<float> q = random_values<float>(n, rng);
  DeviceBuffer<float> field(random_values<float>(static_cast<std::size_t>(graphed.block_size()), rng));
  a.q.upload(q);
  b.q.upload(q);
  for (RankParticles* p : {&a, &b}) p->upload(pos, stream.s);
  graphed.set_points(a.const_positions());
  eager.set_points(b.const_positions());
  std::uniform_real_distribution<double> step(-0.3, 0.3);
  std::unique_ptr<cuda::CapturedGraph> graph;
  for (int s = 0; s < 24; ++s) {
    // Moves of up to 0.3 cells, not wrapped: particles near the faces leave the domain
    // and migrate wraps them back.
    for (int d = 0; d < 3; ++d)
      for (float& v : pos[d]) v = static_cast<float>(v + step(rng) * grid.spacing[d]);
    for (RankParticles* p : {&a, &b}) p->upload(pos, stream.s);
    if (s < 2) {
      a.step(graphed, field, n);  // eager steps of the same sizes first
    } else {
      if (!graph) graph = std::make_unique<cuda::CapturedGraph>(stream.s, [&] { a.step(graphed, field, n); });
      graph->launch();
    }
    b.step(eager, field, n);
    graphed.synchronize();
    eager.synchronize();
    // The wrapped positions, as the test's own copy keeps them from now on.
    for (int d = 0; d < 3; ++d) {
      const std::vector<float> wa = a.read(a.x[d]), wb = b.read(b.x[d]);
      ASSERT_EQ(wa, wb) << "step " << s << ": the wrapped positions[" << d << "]";
      for (std::size_t i = 0; i < n; ++i) {
        const double u = (wa[i] - grid.origin[d]) / grid.spacing[d];
        ASSERT_TRUE(u >= 0 && u < grid.cells[d]) << "step " << s << ": positions[" << d << "][" << i << "]";
      }
      pos[d] = wa;
    }
    const auto [block_error, block_scale] = max_difference(a.read(a.block), b.read(b.block));
    EXPECT_LE(block_error, 1e-5 * block_scale) << "step " << s << ": the block";
    const auto [value_error, value_scale] = max_difference(a.read(a.values), b.read(b.values));
    EXPECT_LE(value_error, 1e-5 * value_scale) << "step " << s << ": interp";
  }
  ASSERT_TRUE(graph != nullptr);
}

TEST(DistributedGraph, OneRankMigrateReportsABadPositionAtSynchronize) {
  PMKIT_REQUIRE_GPU();
  if (world_size() != 1) GTEST_SKIP() << "one rank's migrate";
  const Grid<3> grid = Grid<3>::periodic({8, 8, 8}, 0.125);
  Stream stream;
  DistributedPlan<float, 3> plan(MPI_COMM_WORLD, grid, Kernel::tsc(), own_stream_options(stream));
  const std::size_t n = 1000;
  RankParticles p(n, plan.block_size());
  std::array<std::vector<float>, 3> pos;
  for (int d = 0; d < 3; ++d) {
    pos[d].resize(n);
    for (std::size_t i = 0; i < n; ++i) pos[d][i] = static_cast<float>(0.001 * i + (d == 0 ? 1.0 : 0.0));  // past L
  }
  pos[2][700] = std::numeric_limits<float>::quiet_NaN();
  p.upload(pos, stream.s);
  plan.migrate(p.positions(), {device_view(p.q)}, n);
  EXPECT_PMKIT_ERROR(plan.synchronize(), ErrorCode::NonFinitePosition, "[700]");
  for (int d = 0; d < 3; ++d) {
    const std::vector<float> after = p.read(p.x[d]);
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isnan(pos[d][i])) continue;
      ASSERT_EQ(after[i], pos[d][i]) << "positions[" << d << "][" << i << "] changed";
    }
  }
  // Placeable again: migrate wraps the first axis' coordinates into [0, 1).
  pos[2][700] = 0.5f;
  p.upload(pos, stream.s);
  plan.migrate(p.positions(), {device_view(p.q)}, n);
  EXPECT_NO_THROW(plan.synchronize());
  const std::vector<float> wrapped = p.read(p.x[0]);
  for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(wrapped[i] >= 0.0f && wrapped[i] < 1.0f) << "particle " << i;
}

}  // namespace
}  // namespace pmkit::test
#endif
