// CUDA white box: the plans' streams and devices. Two plans on two streams against the
// CPU backend, a spread ordered after work queued on its stream, and plans on two devices
// that leave the caller's current device alone.
#include <utility>
#include "cuda_cases.hpp"

namespace pmkit::test {
namespace {

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
  // The test moves the current device; the tests after it find it as it was.
  struct RestoreDevice {
    int device;
    ~RestoreDevice() { cudaSetDevice(device); }
  } const restore{current()};
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

}  // namespace
}  // namespace pmkit::test
