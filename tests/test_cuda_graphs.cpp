// CUDA white box: calls that return without waiting for the device, and a step captured
// into a CUDA graph and replayed. Replays against the CPU backend in float64 (the fast
// mode) and against eager calls bit for bit (the deterministic mode), over many steps of
// moving particles, a step where most particles leave their tile among them; a rejected
// position reported by synchronize, from an eager call and from a replay.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "cuda_cases.hpp"

namespace pmkit::test {
namespace {

// Particles on a periodic grid with a property and a field, their device arrays, and the
// moves of a run: small steps (a few percent of a cell), and a far one.
struct MovingCase {
  Grid<3> grid;
  std::size_t n;
  std::array<std::vector<float>, 3> pos;
  std::vector<float> q, field;
  DeviceBuffer<float> x, y, z, dq, dfield, mesh, values;

  MovingCase(std::size_t count, std::mt19937_64& rng, std::int64_t cells = 32)
      : grid(make_grid<3>({cells, cells, cells}, BoundaryKind::Periodic)), n(count), x(count), y(count), z(count), dq(count), dfield(mesh_nodes()), mesh(mesh_nodes()), values(count) {
    pos = make_positions<float, 3>(grid, Distribution::Uniform, n, rng);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    q.resize(n);
    for (float& v : q) v = unit(rng);
    field.resize(mesh_nodes());
    for (float& v : field) v = unit(rng);
    dq.upload(q);
    dfield.upload(field);
  }
  std::size_t mesh_nodes() const {
    return static_cast<std::size_t>(grid.cells[0] * grid.cells[1] * grid.cells[2]);
  }
  // Every particle moved by up to `cells` cells along each axis, wrapped into the box, or
  // (wrap false) left where the move takes it, for the plan to wrap.
  void move(double cells, std::mt19937_64& rng, bool wrap = true) {
    std::uniform_real_distribution<double> step(-cells, cells);
    for (int d = 0; d < 3; ++d) {
      const double length = box_length(grid, d);
      for (float& v : pos[d]) {
        double u = v + step(rng) * grid.spacing[d];
        if (wrap) {
          u -= length * std::floor((u - grid.origin[d]) / length);
          u = std::min(u, std::nextafter(grid.origin[d] + length, grid.origin[d]));
        }
        v = static_cast<float>(u);
      }
    }
  }
  // The particles (positions and properties together) sorted by cell, so that
  // set_points finds them in binned order.
  void sort_by_cell() {
    std::vector<std::size_t> order(n);
    std::vector<std::int64_t> cell(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t k = 0;
      for (int d = 2; d >= 0; --d) {
        const double u = std::floor((pos[d][i] - grid.origin[d]) / grid.spacing[d]);
        k = k * grid.cells[d] + std::clamp<std::int64_t>(static_cast<std::int64_t>(u), 0, grid.cells[d] - 1);
      }
      cell[i] = k;
      order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cell[a] < cell[b]; });
    auto permuted = [&](const std::vector<float>& v) {
      std::vector<float> out(n);
      for (std::size_t i = 0; i < n; ++i) out[i] = v[order[i]];
      return out;
    };
    for (int d = 0; d < 3; ++d) pos[d] = permuted(pos[d]);
    q = permuted(q);
    dq.upload(q);
  }
  // The positions into the device arrays the plan reads, queued on `stream`.
  void copy_positions(cudaStream_t stream) {
    DeviceBuffer<float>* to[3] = {&x, &y, &z};
    for (int d = 0; d < 3; ++d)
      ASSERT_EQ(cudaMemcpyAsync(to[d]->get(), pos[d].data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
                cudaSuccess);
  }
  Plan<float, 3>::Positions device_positions() { return {device_cview(x), device_cview(y), device_cview(z)}; }
  // The step the tests capture: the positions updated (or binned), spread, interp.
  void step(Plan<float, 3>& plan, bool update) {
    if (update) plan.update_points(device_positions());
    else plan.set_points(device_positions());
    plan.spread({device_cview(dq)}, {device_view(mesh)});
    plan.interp({device_cview(dfield)}, {device_view(values)});
  }
  // The CPU backend's spread and interp in float64 at the current positions.
  std::pair<std::vector<double>, std::vector<double>> reference(const Kernel& kernel) const {
    std::array<std::vector<double>, 3> p;
    for (int d = 0; d < 3; ++d) p[d].assign(pos[d].begin(), pos[d].end());
    Plan<double, 3> cpu(grid, kernel);
    cpu.set_points({View<const double>(p[0]), View<const double>(p[1]), View<const double>(p[2])});
    const std::vector<double> qd(q.begin(), q.end()), fd(field.begin(), field.end());
    std::vector<double> m(mesh_nodes()), v(n);
    cpu.spread({View<const double>(qd)}, {View<double>(m)});
    cpu.interp({View<const double>(fd)}, {View<double>(v)});
    return {m, v};
  }
  // The device's mesh and values (the last step's, synchronised) against reference().
  void expect_reference(const Kernel& kernel) {
    const std::vector<float> m = mesh.download(), v = values.download();
    const auto [ref_mesh, ref_values] = reference(kernel);
    EXPECT_LE(rel_l2<float>(View<const float>(m), ref_mesh), 2 * tolerance<float>()) << "spread";
    EXPECT_LE(rel_l2<float>(View<const float>(v), ref_values), 2 * tolerance<float>()) << "interp";
  }
};

// The CUDA plan options of the tests: a stream of the test's own.
Options on_stream(const Stream& stream, bool deterministic = false) {
  Options opt = cuda_options();
  opt.stream = cuda::stream_handle(stream.s);
  opt.deterministic = deterministic;
  return opt;
}

// The calls return while earlier work on their stream is still running: a long memset is
// queued first, and the stream is still busy when set_points, update_points, spread and
// interp have returned.
TEST(CudaGraphs, CallsReturnWithoutWaitingForTheDevice) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  MovingCase c(scaled(std::size_t(1) << 16), rng);
  Stream stream;
  Plan<float, 3> plan(c.grid, Kernel::mp4(), on_stream(stream));
  c.copy_positions(stream.s);
  c.step(plan, false);  // sizes the buffers
  c.step(plan, true);
  ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
  DeviceBuffer<unsigned char> busy(scaled(std::size_t(1) << 30));
  for (int r = 0; r < 8; ++r) ASSERT_EQ(cudaMemsetAsync(busy.get(), r, busy.size(), stream.s), cudaSuccess);
  c.step(plan, false);
  c.step(plan, true);
  EXPECT_EQ(cudaStreamQuery(stream.s), cudaErrorNotReady) << "a call waited for the stream";
  plan.synchronize();
  EXPECT_EQ(cudaStreamQuery(stream.s), cudaSuccess);
}

// An eager call's rejected position: reported by synchronize as the CPU backend reports
// it at once, after which the plan needs set_points.
TEST(CudaGraphs, ARejectedPositionIsReportedBySynchronize) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  MovingCase c(5000, rng);
  Stream stream;
  Plan<float, 3> plan(c.grid, Kernel::mp4(), on_stream(stream));
  c.copy_positions(stream.s);
  c.step(plan, false);
  plan.synchronize();
  c.pos[1][1234] = std::numeric_limits<float>::quiet_NaN();
  c.copy_positions(stream.s);
  plan.update_points(c.device_positions());
  EXPECT_PMKIT_ERROR(plan.synchronize(), ErrorCode::NonFinitePosition, "positions[1][1234]");
  EXPECT_FALSE(plan.has_points());
  EXPECT_PMKIT_ERROR(plan.spread({device_cview(c.dq)}, {device_view(c.mesh)}), ErrorCode::NotReady, "set_points");
  c.pos[1][1234] = 0.5f;
  c.copy_positions(stream.s);
  c.step(plan, false);
  EXPECT_NO_THROW(plan.synchronize());
}

// Fast float mode: update_points, spread and interp captured once and replayed for many
// steps, against the CPU backend in float64 each step. Step 6 moves every particle up to
// three cells, so most leave their tile: the replay keeps the binning and handles them
// apart (num_away), with the same accuracy.
TEST(CudaGraphs, ReplayedStepsMatchTheCpuBackend) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  MovingCase c(scaled(std::size_t(1) << 17), rng);
  Stream stream;
  const Kernel kernel = Kernel::mp4();
  Plan<float, 3> plan(c.grid, kernel, on_stream(stream));
  c.copy_positions(stream.s);
  c.step(plan, false);
  c.step(plan, true);  // the update's buffers
  plan.synchronize();
  const cuda::CapturedGraph graph(stream.s, [&] { c.step(plan, true); });
  for (int s = 0; s < 12; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    c.move(s == 6 ? 3.0 : 0.05, rng);
    c.copy_positions(stream.s);
    graph.launch();
    plan.synchronize();
    c.expect_reference(kernel);
    if (s == 6) {
      EXPECT_GT(plan.num_away(), c.n / 4) << "the replay re-binned";
    }
  }
}

// A graph of set_points, spread and interp captured with many particles (the partition)
// stays valid across an eager set_points that reads the one-pass sort's runs back (the
// particles in binned order): that sort grows only buffers of its own. Replays against the
// CPU backend in float64 before and after.
TEST(CudaGraphs, AGraphStaysValidAcrossAnEagerRebinThatReadsRunsBack) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  MovingCase c(std::size_t(1) << 21, rng);  // not scaled: the runs are read back from 2^20
  Stream stream;
  const Kernel kernel = Kernel::mp4();
  Plan<float, 3> plan(c.grid, kernel, on_stream(stream));
  c.copy_positions(stream.s);
  c.step(plan, false);
  plan.synchronize();
  const cuda::CapturedGraph graph(stream.s, [&] { c.step(plan, false); });
  auto replay_and_check = [&](const char* when) {
    SCOPED_TRACE(when);
    c.move(0.05, rng);
    c.copy_positions(stream.s);
    graph.launch();
    plan.synchronize();
    c.expect_reference(kernel);
  };
  replay_and_check("before the eager set_points");
  // The particles sorted by cell, so that set_points finds them in binned order and
  // takes the one-pass sort, which reads its runs back at this size.
  c.sort_by_cell();
  c.copy_positions(stream.s);
  c.step(plan, false);  // once to find the order, once to take the one-pass sort
  c.step(plan, false);
  plan.synchronize();
  replay_and_check("after the eager set_points");
}

// Positions that drift out of the periodic box, never wrapped by the caller (the plan wraps
// them): set_points, `eager` eager steps of update_points, spread and interp, a capture,
// then `replayed` steps from the graph with an eager one every `eager_every`-th, against
// the CPU backend in float64 each step.
void expect_drifting_steps_match(MovingCase& c, int eager, int replayed, int eager_every, std::mt19937_64& rng) {
  Stream stream;
  const Kernel kernel = Kernel::mp4();
  Plan<float, 3> plan(c.grid, kernel, on_stream(stream));
  c.copy_positions(stream.s);
  c.step(plan, false);
  for (int s = 0; s < eager; ++s) {
    SCOPED_TRACE("eager step " + std::to_string(s));
    c.move(0.25, rng, false);
    c.copy_positions(stream.s);
    c.step(plan, true);
    plan.synchronize();
    c.expect_reference(kernel);
  }
  const cuda::CapturedGraph graph(stream.s, [&] { c.step(plan, true); });
  for (int s = 0; s < replayed; ++s) {
    SCOPED_TRACE("replayed step " + std::to_string(s));
    c.move(0.25, rng, false);
    c.copy_positions(stream.s);
    if (s % eager_every == eager_every - 1) c.step(plan, true);
    else graph.launch();
    plan.synchronize();
    c.expect_reference(kernel);
  }
}

TEST(CudaGraphs, UnwrappedDriftingPositionsMatchTheCpuBackend) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  MovingCase c(scaled(std::size_t(1) << 17), rng);
  expect_drifting_steps_match(c, 16, 16, 4, rng);
}

// A simulation's schedule at one particle a cell (the tiles' chunks short, the binning's
// paths those of many small tiles): two eager steps, then replays with an eager step every
// eighth; the particles in no order (the partition) or sorted by cell (the one-pass sort).
void expect_simulation_schedule_matches(bool sorted) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  MovingCase c(std::size_t(1) << 18, rng, 64);  // not scaled: the density is the case
  if (sorted) c.sort_by_cell();
  expect_drifting_steps_match(c, 2, 24, 8, rng);
}

TEST(CudaGraphs, ASimulationsScheduleAtOneParticleACellMatchesTheCpuBackend) {
  PMKIT_REQUIRE_GPU();
  expect_simulation_schedule_matches(false);
}

TEST(CudaGraphs, ASimulationsScheduleOnParticlesSortedByCellMatchesTheCpuBackend) {
  PMKIT_REQUIRE_GPU();
  expect_simulation_schedule_matches(true);
}

// Deterministic mode (update_points is a full binning there): set_points, spread and
// interp replayed from a graph give the bits of the same calls made eagerly by a second
// plan, step after step.
TEST(CudaGraphs, DeterministicReplaysGiveTheEagerBits) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  MovingCase c(scaled(std::size_t(1) << 16), rng);
  Stream stream;
  Plan<float, 3> replayed(c.grid, Kernel::bspline(4), on_stream(stream, true)),
      eager(c.grid, Kernel::bspline(4), on_stream(stream, true));
  c.copy_positions(stream.s);
  c.step(replayed, false);
  c.step(eager, false);
  replayed.synchronize();
  const cuda::CapturedGraph graph(stream.s, [&] { c.step(replayed, true); });
  for (int s = 0; s < 8; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    c.move(s == 4 ? 2.0 : 0.1, rng);
    c.copy_positions(stream.s);
    graph.launch();
    replayed.synchronize();
    const std::vector<float> mesh = c.mesh.download(), values = c.values.download();
    c.step(eager, true);
    eager.synchronize();
    EXPECT_TRUE(same_bytes(mesh, c.mesh.download())) << "spread";
    EXPECT_TRUE(same_bytes(values, c.values.download())) << "interp";
  }
}

// A rejected position in a replay: synchronize reports it with the particle named, and
// the plan needs set_points (an eager one, after which a new capture replays again).
TEST(CudaGraphs, ARejectedPositionInAReplayIsReportedBySynchronize) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  MovingCase c(20000, rng);
  Stream stream;
  Plan<float, 3> plan(c.grid, Kernel::tsc(), on_stream(stream));
  c.copy_positions(stream.s);
  c.step(plan, false);
  c.step(plan, true);
  plan.synchronize();
  {
    const cuda::CapturedGraph graph(stream.s, [&] { c.step(plan, true); });
    c.pos[0][17] = std::numeric_limits<float>::infinity();
    c.copy_positions(stream.s);
    graph.launch();
    EXPECT_PMKIT_ERROR(plan.synchronize(), ErrorCode::NonFinitePosition, "positions[0][17]");
    EXPECT_FALSE(plan.has_points());
  }
  c.pos[0][17] = 1.0f;
  c.copy_positions(stream.s);
  c.step(plan, false);
  plan.synchronize();
  const cuda::CapturedGraph again(stream.s, [&] { c.step(plan, true); });
  again.launch();
  EXPECT_NO_THROW(plan.synchronize());
  const auto [ref_mesh, ref_values] = c.reference(Kernel::tsc());
  EXPECT_LE(rel_l2<float>(View<const float>(c.mesh.download()), ref_mesh), 2 * tolerance<float>());
}

}  // namespace
}  // namespace pmkit::test
