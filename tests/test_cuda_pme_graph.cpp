// CUDA white box: a PmePlan step captured into a CUDA graph and replayed, against the same
// calls made eagerly on a second plan, step by step, while the charges move (their
// positions rewritten in place in the arrays the graph was captured with), through a
// step in which a third of them jump far from their tiles, and after an eager step on the
// captured plan between replays.
#include <cmath>
#include <random>

#include "cuda_cases.hpp"
#include "pmkit/pme.hpp"

namespace pmkit::test {
namespace {

// Neutral random charges in a periodic box, their positions on the host (moved by
// move_*) and on the device, and the outputs of one plan.
struct Charges {
  std::array<double, 3> box;
  std::array<std::vector<double>, 3> x, v;  // positions, displacements a step
  std::vector<double> q;
  std::array<std::unique_ptr<DeviceBuffer<double>>, 3> dx;
  std::unique_ptr<DeviceBuffer<double>> dq;

  Charges(std::array<double, 3> lengths, std::size_t n, double step, std::mt19937_64& rng) : box(lengths) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::normal_distribution<double> normal(0.0, step / std::sqrt(3.0));
    for (int d = 0; d < 3; ++d)
      for (std::size_t i = 0; i < n; ++i) {
        x[d].push_back(unit(rng) * box[d]);
        v[d].push_back(normal(rng));
      }
    for (std::size_t i = 0; i < n; ++i) q.push_back(i % 2 ? -1.0 : 1.0);
    for (int d = 0; d < 3; ++d) dx[d] = std::make_unique<DeviceBuffer<double>>(x[d]);
    dq = std::make_unique<DeviceBuffer<double>>(q);
  }
  PmePlan<double>::Positions positions() const {
    return {device_cview(*dx[0]), device_cview(*dx[1]), device_cview(*dx[2])};
  }
  // Every charge by its own displacement (unwrapped: the periodic plans wrap), written
  // into the same device arrays.
  void move() {
    for (int d = 0; d < 3; ++d) {
      for (std::size_t i = 0; i < q.size(); ++i) x[d][i] += v[d][i];
      dx[d]->upload(x[d]);
    }
  }
  // Every third charge to a random place in the box: far from its tile.
  void scatter(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int d = 0; d < 3; ++d) {
      for (std::size_t i = 0; i < q.size(); i += 3) x[d][i] = unit(rng) * box[d];
      dx[d]->upload(x[d]);
    }
  }
};

struct Outputs {
  DeviceBuffer<double> fx, fy, fz, potential, energy;
  explicit Outputs(std::size_t n) : fx(n), fy(n), fz(n), potential(n), energy(1) {}
  PmePlan<double>::Forces forces() { return {device_view(fx), device_view(fy), device_view(fz)}; }
};

// The largest difference of the two plans' results: forces relative to the forces' RMS,
// potentials to the potentials' RMS, the energy to half the sum of |q_i phi_i| (the size
// of its terms; a neutral random system's energy is a remainder of them).
struct Difference {
  double force = 0, potential = 0, energy = 0;
};
Difference difference(Outputs& replayed, Outputs& eager, const std::vector<double>& q) {
  Difference out;
  double force_norm = 0, force_diff = 0;
  for (DeviceBuffer<double> Outputs::*f : {&Outputs::fx, &Outputs::fy, &Outputs::fz}) {
    const std::vector<double> a = (replayed.*f).download(), b = (eager.*f).download();
    for (std::size_t i = 0; i < a.size(); ++i) {
      force_norm += b[i] * b[i];
      force_diff = std::max(force_diff, std::abs(a[i] - b[i]));
    }
  }
  out.force = force_diff / std::sqrt(force_norm / (3.0 * q.size()));
  const std::vector<double> pa = replayed.potential.download(), pb = eager.potential.download();
  double potential_norm = 0, potential_diff = 0, terms = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    potential_norm += pb[i] * pb[i];
    potential_diff = std::max(potential_diff, std::abs(pa[i] - pb[i]));
    terms += 0.5 * std::abs(q[i] * pb[i]);
  }
  out.potential = potential_diff / std::sqrt(potential_norm / pa.size());
  out.energy = std::abs(replayed.energy.download()[0] - eager.energy.download()[0]) / terms;
  return out;
}

// Replays a captured step (update_points, then compute_reciprocal or compute) for
// `steps` steps against the same calls made eagerly on a plan of its own. Both plans run
// on one stream. Step steps / 3 scatters a third of the charges (the captured update
// keeps every one in its away list: the mesh plan re-bins only in an eager call), step
// 2 steps / 3 runs an eager step on the captured plan (which may re-bin) before its
// replay.
//
// Tolerance: the two plans do the same arithmetic in double on the same inputs, in a
// different order only where floating-point atomics add (the spread into the mesh, the
// away charges against the binned ones, the pairs' half-shell reactions): differences of
// a few roundings of the mesh and the forces, about 1e-15 of their size. 1e-11 leaves room
// for that, while a charge binned wrongly (missed, counted twice, or at its position of
// a step before: 0.01 away, 3% of a pair's force at a distance of 0.3) changes the forces
// near it by orders of magnitude more.
void replay_against_eager(bool real_space, int steps) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const std::array<double, 3> box = {3.0, 3.2, 2.8};
  const std::size_t n = scaled(6000);
  Charges charges(box, n, 0.01, rng);
  Stream stream;
  PmeOptions options;
  options.backend = Backend::Cuda;
  options.stream = cuda::stream_handle(stream.s);
  const PmeParameters params = PmeParameters::choose(box, 1.0, 5e-4);
  PmePlan<double> captured(box, params, options), eager(box, params, options);
  Outputs replayed_out(n), eager_out(n);
  auto step = [&](PmePlan<double>& plan, Outputs& out) {
    plan.update_points(charges.positions());
    if (real_space)
      plan.compute(device_cview(*charges.dq), out.forces(), device_view(out.energy), device_view(out.potential));
    else
      plan.compute_reciprocal(device_cview(*charges.dq), out.forces(), device_view(out.energy),
                              device_view(out.potential));
  };
  // One eager step sizes every buffer (and times the pair methods) before the capture.
  captured.set_points(charges.positions());
  eager.set_points(charges.positions());
  step(captured, replayed_out);
  captured.synchronize();
  const cuda::CapturedGraph graph(stream.s, [&] { step(captured, replayed_out); });
  EXPECT_GT(graph.nodes(), 4u);
  for (int s = 1; s <= steps; ++s) {
    const bool far = s == steps / 3, eager_first = s == 2 * steps / 3;
    SCOPED_TRACE(::testing::Message() << "step " << s << (far ? ", a third of the charges scattered" : "")
                                      << (eager_first ? ", after an eager step on the captured plan" : ""));
    if (far)
      charges.scatter(rng);
    else
      charges.move();
    if (eager_first) step(captured, replayed_out);
    graph.launch();
    step(eager, eager_out);
    captured.synchronize();
    eager.synchronize();
    const Difference d = difference(replayed_out, eager_out, charges.q);
    EXPECT_LE(d.force, 1e-11);
    EXPECT_LE(d.potential, 1e-11);
    EXPECT_LE(d.energy, 1e-11);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(CudaPmeGraph, ReciprocalStepReplaysAsEagerCalls) { replay_against_eager(false, 30); }

TEST(CudaPmeGraph, FullStepReplaysAsEagerCalls) { replay_against_eager(true, 15); }

}  // namespace
}  // namespace pmkit::test
