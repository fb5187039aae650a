// CUDA white box: the pair plan's calls without host waits. set_points (from positions and
// from a mesh plan) and compute return while their stream is held, and a step of
// set_points and compute captured into a CUDA graph replays as the same calls made
// eagerly, the positions moved in place between replays.
#include <chrono>
#include <thread>

#include "cuda_cases.hpp"
#include "pair_cases.hpp"

namespace pmkit::test {
namespace {

constexpr double kHoldSeconds = 0.3;
// Holds a stream (a host function on it): work queued after it waits kHoldSeconds.
void CUDART_CB hold_stream_a_while(void*) {
  std::this_thread::sleep_for(std::chrono::duration<double>(kHoldSeconds));
}

// Uniform random positions in a cube of side `length`, on the host and in device arrays
// that move() rewrites in place.
struct MovingPositions {
  std::array<std::vector<double>, 3> x;
  std::array<std::unique_ptr<DeviceBuffer<double>>, 3> device;
  MovingPositions(std::size_t n, double length, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> unit(0.0, length);
    for (int d = 0; d < 3; ++d) {
      for (std::size_t i = 0; i < n; ++i) x[d].push_back(unit(rng));
      device[d] = std::make_unique<DeviceBuffer<double>>(x[d]);
    }
  }
  std::array<View<const double>, 3> views() const {
    return {device_cview(*device[0]), device_cview(*device[1]), device_cview(*device[2])};
  }
  // Every particle by up to `step` along each axis (the periodic plans wrap).
  void move(double step, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> shift(-step, step);
    for (int d = 0; d < 3; ++d) {
      for (double& v : x[d]) v += shift(rng);
      device[d]->upload(x[d]);
    }
  }
};

// The x-pencil (its sums in a fixed order: the same bits every run) on the test's stream.
PairOptions pencil_options(const Stream& stream) {
  PairOptions o = cuda_options(PairMethod::CudaXPencil);
  o.stream = cuda::stream_handle(stream.s);
  return o;
}

// Lennard-Jones of sigma a third of the cutoff, softened: finite for any random pair.
pair_kernels::LennardJones<3> softened_lj(double cutoff) { return {1.0, cutoff / 3, cutoff, 0.01}; }

struct PairOutputs {
  std::array<std::unique_ptr<DeviceBuffer<double>>, 4> out;  // Lennard-Jones: force x, y, z and energy
  explicit PairOutputs(std::size_t n) {
    for (auto& o : out) o = std::make_unique<DeviceBuffer<double>>(n, "outputs");
  }
  std::vector<View<double>> views() {
    std::vector<View<double>> v;
    for (auto& o : out) v.push_back(device_view(*o));
    return v;
  }
  std::vector<std::vector<double>> download() const {
    std::vector<std::vector<double>> host;
    for (const auto& o : out) host.push_back(o->download());
    return host;
  }
};

// set_points and compute queue their work and return: with the stream held for
// kHoldSeconds, the calls take a small part of it, and give the results of the same
// calls made on a free stream (the x-pencil's bits repeat from run to run).
TEST(CudaPairs, SetPointsAndComputeDoNotWait) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const Grid<3> grid = Grid<3>::periodic({16, 16, 16}, 1.0 / 16);  // the unit cube
  const std::size_t n = scaled(20000);
  MovingPositions positions(n, 1.0, rng);
  Stream stream;
  PairPlan<double, 3> pairs(grid, 0.2, pencil_options(stream));
  const auto lj = softened_lj(pairs.cutoff());
  Options mesh_options;
  mesh_options.backend = Backend::Cuda;
  mesh_options.stream = cuda::stream_handle(stream.s);
  Plan<double, 3> mesh(grid, Kernel::mp4(), mesh_options);
  mesh.set_points(positions.views());
  PairOutputs from_positions(n), from_mesh(n);
  // The calls once on a free stream: they size every buffer, and give the expected results.
  pairs.set_points(positions.views());
  pairs.compute(lj, {}, from_positions.views());
  pairs.synchronize();  // the download below runs on another stream
  const auto want = from_positions.download();
  pairs.set_points(mesh);
  pairs.compute(lj, {}, from_mesh.views());
  pairs.synchronize();
  const auto want_from_mesh = from_mesh.download();

  cuda::check(cudaLaunchHostFunc(stream.s, hold_stream_a_while, nullptr), "cudaLaunchHostFunc");
  const auto start = std::chrono::steady_clock::now();
  pairs.set_points(positions.views());
  pairs.compute(lj, {}, from_positions.views());
  pairs.set_points(mesh);
  pairs.compute(lj, {}, from_mesh.views());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, kHoldSeconds / 3) << "the calls waited for the held stream";
  pairs.synchronize();
  EXPECT_EQ(from_positions.download(), want);
  EXPECT_EQ(from_mesh.download(), want_from_mesh);
}

// A step of set_points and compute, captured once after an eager step, replays as the
// same calls on a plan of its own, step after step, the positions moved in place between
// replays (by up to a cell in some steps). The x-pencil sums in a fixed order: the same
// bits.
TEST(CudaPairs, CapturedStepReplaysAsEagerCalls) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Box<3> box = Box<3>::periodic({2.0, 2.0, 2.0});
  const std::size_t n = scaled(30000);
  MovingPositions positions(n, 2.0, rng);
  Stream stream;
  PairPlan<double, 3> captured(box, 0.25, pencil_options(stream)), eager(box, 0.25, pencil_options(stream));
  const auto lj = softened_lj(captured.cutoff());
  PairOutputs replayed_out(n), eager_out(n);
  captured.set_points(positions.views());
  captured.compute(lj, {}, replayed_out.views());
  const cuda::CapturedGraph graph(stream.s, [&] {
    captured.set_points(positions.views());
    captured.compute(lj, {}, replayed_out.views());
  });
  for (int step = 1; step <= 12; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    positions.move(step % 4 == 0 ? 0.25 : 0.01, rng);
    graph.launch();
    eager.set_points(positions.views());
    eager.compute(lj, {}, eager_out.views());
    captured.synchronize();
    eager.synchronize();
    ASSERT_EQ(replayed_out.download(), eager_out.download());
  }
}

}  // namespace
}  // namespace pmkit::test
