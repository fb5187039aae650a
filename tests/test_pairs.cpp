// Cutoff pair interactions on cell lists, CPU and CUDA (the built-in kernels; the CUDA
// cases of other kernels are in test_pairs_user_kernel.cu): against an O(N^2) float64
// brute force on fresh random inputs, both shells and every method; an energy-conserving
// Lennard-Jones run; two plans on two streams; bad input.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "../bench/pair_synthetic.hpp"
#include "pair_cases.hpp"
#include "pmkit/detail/pair_geometry.hpp"

namespace pmkit::test {
namespace {

// The pair bodies on every variant of PairOptions, each in every setting it has
// (pair_settings: the CPU's two shells, CUDA's methods).
class PairTest : public VariantTest {};

TEST_P(PairTest, LennardJonesAgainstBruteForce) {
  pair_kernels::LennardJones<3> lj3{1.0, 0.3, 0.8, 0.05};
  pair_kernels::LennardJones<2> lj2{1.0, 0.3, 0.8, 0.05};
  for (const PairOptions& opt : pair_settings(bc_)) {
    for (double ppc : {0.5, 10.0, 60.0}) {
      // 5 x 4 x 6 cells, periodic; 5 x 3 cells, bounded.
      check_case<double, 3>(Box<3>::periodic({4.0, 3.2, 4.8}), 0.8, lj3, scaled(std::size_t(ppc * 120)),
                            Layout::Uniform, opt);
      check_case<double, 2>(Box<2>::bounded({4.0, 2.4}), 0.8, lj2, scaled(std::size_t(ppc * 15)), Layout::Uniform,
                            opt);
      check_case<float, 2>(Box<2>::bounded({4.0, 2.4}), 0.8, lj2, scaled(std::size_t(ppc * 15)), Layout::Uniform,
                           opt);
    }
    // 200 per cell on 3^3 cells (every cell is a neighbour of every other).
    check_case<double, 3>(Box<3>::periodic({2.4, 2.4, 2.4}), 0.8, lj3, scaled(5400), Layout::Uniform, opt);
    // Most particles in a few cells: more sources than one shared-memory stage holds.
    check_case<double, 3>(Box<3>::periodic({4.0, 4.0, 4.0}), 0.8, lj3, scaled(400), Layout::Clustered, opt);
    check_case<double, 3>(Box<3>::periodic({4.0, 4.0, 4.0}), 0.8, lj3, scaled(3000), Layout::Clustered, opt);
    check_case<float, 3>(Box<3>::bounded({3.2, 3.2, 3.2}), 0.8, lj3, scaled(300), Layout::Uniform, opt);
    // 10 a cell, where a warp's targets span several cells and each lane searches its
    // own x-window: cells wider than the cutoff (0.84 x 1.0 x 0.92), and a lattice of the
    // cutoff's spacing (particles on cell faces, pairs exactly at it).
    check_case<float, 3>(Box<3>::periodic({4.2, 3.0, 4.6}), 0.8, lj3, scaled(750), Layout::Uniform, opt);
    check_case<float, 3>(Box<3>::periodic({4.4, 4.4, 4.4}), 0.55, pair_kernels::LennardJones<3>{1.0, 0.3, 0.55, 0.05},
                         scaled(5120), Layout::Lattice, opt);
    // Rows longer than a pencil (where the half shell's blocks take whole warps, the last
    // running on into the next pencil's first cell): 10 a cell on 40 x 3 x 3 cells, 40 a
    // cell on a row bounded in x (the last pencil ends at the face), and clustered cells,
    // where the next pencil's first cell may hold fewer than a warp.
    check_case<float, 3>(Box<3>::periodic({32.0, 2.4, 2.4}), 0.8, lj3, scaled(3600), Layout::Uniform, opt);
    check_case<float, 3>(Box<3>::bounded({16.0, 2.4, 2.4}), 0.8, lj3, scaled(7200), Layout::Uniform, opt);
    // 50 a cell in float, periodic in x and z only: rows missing past the bounded y faces
    // and shifted across the periodic z faces.
    {
      Box<3> mixed = Box<3>::periodic({8.0, 3.2, 2.4});
      mixed.boundary[1] = Boundary::Bounded;
      check_case<float, 3>(mixed, 0.8, lj3, scaled(6000), Layout::Uniform, opt);
    }
    check_case<double, 3>(Box<3>::periodic({8.0, 2.4, 2.4}), 0.8, lj3, scaled(4000), Layout::Clustered, opt);
  }
}

TEST(Pairs, SyntheticKernelsMixedBoundariesAndSmallBoxes) {
  bench::CheapSynthetic cheap{0.5};
  bench::ExpensiveSynthetic expensive{0.5};
  Box<3> mixed = Box<3>::periodic({1.2, 2.0, 1.6});  // 2 cells in x: neighbours wrap onto each other
  mixed.boundary[2] = Boundary::Bounded;
  for (bool half : {true, false}) {
    check_case<double, 3>(mixed, 0.5, cheap, 500, Layout::Uniform, cpu_options(half, 2));
    check_case<double, 3>(mixed, 0.5, expensive, 500, Layout::Clustered, cpu_options(half, 2));
    // Lattice spacing 1/8 of the box: many pairs exactly at the cutoff (excluded); the
    // expensive kernel is non-zero there, so including them would show.
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, expensive, 300, Layout::Lattice, cpu_options(half, 2));
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, cheap, 1, Layout::Uniform, cpu_options(half, 2));  // alone
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, cheap, 0, Layout::Uniform, cpu_options(half, 2));  // empty
  }
}

// Velocity Verlet with Lennard-Jones in reduced units: the total energy stays bounded.
void verlet_energy_drift(const PairOptions& options) {
  constexpr int k = 5;  // 5^3 = 125 particles on a cubic lattice, density ~0.6
  const double spacing = 1.2, length = k * spacing, cutoff = 2.5, dt = 0.002;
  pair_kernels::LennardJones<3> lj{1.0, 1.0, cutoff, 0.0};
  PairPlan<double, 3> plan(Box<3>::periodic({length, length, length}), cutoff, options);
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<double> gauss(0.0, 0.5);
  const std::size_t n = k * k * k;
  std::array<std::vector<double>, 3> x, v;
  for (int d = 0; d < 3; ++d) {
    x[d].resize(n);
    v[d].resize(n);
  }
  for (std::size_t i = 0; i < n; ++i) {
    x[0][i] = spacing * (i % k);
    x[1][i] = spacing * ((i / k) % k);
    x[2][i] = spacing * (i / (k * k));
    for (int d = 0; d < 3; ++d) v[d][i] = gauss(rng);
  }
  std::vector<std::vector<double>> f = run_pairs(plan, lj, x);  // f[0..2] forces, f[3] energies
  auto total_energy = [&] {
    double e = 0;
    for (std::size_t i = 0; i < n; ++i) e += f[3][i] + 0.5 * (v[0][i] * v[0][i] + v[1][i] * v[1][i] + v[2][i] * v[2][i]);
    return e;
  };
  const double e0 = total_energy();
  double worst = 0;
  // 30 steps under compute-sanitizer (PMKIT_TEST_SMALL): each step runs the same kernels,
  // and 300 of them took 73 s of racecheck's ~7 minutes over the suite.
  const int steps = sanitizing() ? 30 : 300;
  for (int step = 0; step < steps; ++step) {
    for (int d = 0; d < 3; ++d)
      for (std::size_t i = 0; i < n; ++i) {
        v[d][i] += 0.5 * dt * f[d][i];
        x[d][i] += dt * v[d][i];
      }
    f = run_pairs(plan, lj, x);  // forces at the new positions
    for (int d = 0; d < 3; ++d)
      for (std::size_t i = 0; i < n; ++i) v[d][i] += 0.5 * dt * f[d][i];
    worst = std::max(worst, std::fabs(total_energy() - e0));
  }
  std::cout << "LJ Verlet: E0 = " << e0 << ", largest |E - E0| over " << steps << " steps = " << worst << "\n";
  EXPECT_LT(worst, 1e-3 * std::fabs(e0) + 0.05);
}

// The CPU cell sort runs in parallel shares but keeps the serial order (by index within
// a cell): the full shell, which sums each particle's pairs in that order, gives the same
// bits on 1 and 3 threads, also with more particles than one share holds.
TEST(Pairs, CellOrderIndependentOfThreads) {
  pair_kernels::LennardJones<3> lj{1.0, 0.3, 0.8, 0.05};
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const std::size_t n = 40000;  // ~5 shares of 8192 particles
  std::array<std::vector<double>, 3> x;
  for (auto& v : x) {
    v.resize(n);
    for (double& c : v) c = 4.0 * unit(rng);
  }
  PairPlan<double, 3> one(Box<3>::periodic({4.0, 4.0, 4.0}), 0.8, cpu_options(false, 1));
  PairPlan<double, 3> three(Box<3>::periodic({4.0, 4.0, 4.0}), 0.8, cpu_options(false, 3));
  const auto a = run_pairs(one, lj, x), b = run_pairs(three, lj, x);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(a[k], b[k]) << "output " << k;
}

TEST_P(PairTest, LennardJonesVerletConservesEnergy) {
  for (const PairOptions& opt : pair_settings(bc_)) verlet_energy_drift(opt);
}

INSTANTIATE_TEST_SUITE_P(Backends, PairTest, variant_values<PairOptions>(), variant_name);

TEST(Pairs, BadInput) {
  const Box<3> box = Box<3>::periodic({2.0, 2.0, 2.0});
  expect_pmkit_error(ErrorCode::InvalidArgument, "", [&] { PairPlan<double, 3>(box, 0.0); });
  expect_pmkit_error(ErrorCode::InvalidArgument, "", [&] { PairPlan<double, 3>(box, -1.0); });
  expect_pmkit_error(ErrorCode::InvalidArgument, "", [&] { PairPlan<double, 3>(box, 1.01); });  // > half the box
  PairPlan<double, 3> plan(box, 0.5);
  std::vector<double> x = {0.1, 0.2}, y = {0.3, 0.4}, z = {0.5, std::nan("")}, out(2, 5.0), short_x = {0.1};
  bench::CheapSynthetic cheap{0.5};
  expect_pmkit_error(ErrorCode::NotReady, "", [&] { plan.compute(cheap, {}, {out}); });
  expect_pmkit_error(ErrorCode::NonFinitePosition, "", [&] { plan.set_points({x, y, z}); });
  expect_pmkit_error(ErrorCode::SizeMismatch, "", [&] { plan.set_points({short_x, y, y}); });
  plan.set_points({x, y, y});
  std::vector<double> wrong(3, 5.0);
  expect_pmkit_error(ErrorCode::SizeMismatch, "", [&] { plan.compute(cheap, {}, {wrong}); });
  expect_pmkit_error(ErrorCode::SizeMismatch, "", [&] { plan.compute(cheap, {}, {out, out}); });
  EXPECT_EQ(out, std::vector<double>(2, 5.0));  // nothing written on error
  expect_pmkit_error(ErrorCode::OutOfBounds, "", [&] {
    PairPlan<double, 3> bounded(Box<3>::bounded({2.0, 2.0, 2.0}), 0.5);
    std::vector<double> far = {0.1, 2.5};
    bounded.set_points({x, y, far});
  });
}

// Lennard-Jones' parameters: a finite epsilon, a positive finite sigma, a finite softening
// of zero or more, and the plan's cutoff (a larger one would drop the pairs beyond the
// plan's, a smaller one shift the energy at one cutoff and truncate at the other), each
// named. On every variant, so through the CUDA plan's compute too.
TEST_P(PairTest, LennardJonesParametersAreChecked) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (const PairOptions& opt : pair_settings(bc_)) {
    PairPlan<double, 3> plan(Box<3>::periodic({2.0, 2.0, 2.0}), 0.5, opt);
    const std::array<std::vector<double>, 3> x = {std::vector<double>{0.1, 0.3}, std::vector<double>{0.2, 0.2},
                                                  std::vector<double>{0.5, 0.5}};
    const auto good = run_pairs(plan, pair_kernels::LennardJones<3>{1.0, 0.3, 0.5, 0.0}, x);
    EXPECT_NE(good[0][0], 0.0);
    struct Bad {
      pair_kernels::LennardJones<3> lj;
      const char* needle;
    };
    const Bad bad[] = {
        {{1.0, 0.3, 0.75, 0.0}, "cutoff = 0.75"},
        {{1.0, 0.3, 0.375, 0.0}, "cutoff = 0.375"},
        {{1.0, 0.3, -1.0, 0.0}, "cutoff = -1"},
        {{1.0, 0.3, nan, 0.0}, "cutoff = nan"},
        {{1.0, 0.0, 0.5, 0.0}, "sigma = 0"},
        {{1.0, -0.25, 0.5, 0.0}, "sigma = -0.25"},
        {{1.0, inf, 0.5, 0.0}, "sigma = inf"},
        {{nan, 0.3, 0.5, 0.0}, "epsilon = nan"},
        {{-inf, 0.3, 0.5, 0.0}, "epsilon = -inf"},
        {{1.0, 0.3, 0.5, -0.125}, "softening = -0.125"},
        {{1.0, 0.3, 0.5, inf}, "softening = inf"},
    };
    for (const Bad& b : bad) EXPECT_PMKIT_ERROR(compute_pairs(plan, b.lj), ErrorCode::InvalidArgument, b.needle);
  }
}

#if defined(PMKIT_WITH_CUDA)
// The corner lists' test (host-callable): a source of a corner row that lies within the
// cutoff of any point of the x-row's cells is kept, whatever the rounding; and about the
// expected share is left out (1 - pi/4 of a row where cells are a cutoff wide), so that
// the lists cut at all. The distance is measured in double from the row's rectangle.
template <class T>
void check_corner_test(double cutoff, double width, std::mt19937_64& rng) {
  detail::PairGeometry<T, 3> g{};
  for (int d = 0; d < 3; ++d) {
    g.ncell[d] = 7;
    g.length[d] = static_cast<T>(7 * width);
    g.inv_width[d] = static_cast<T>(1 / width);
    g.periodic[d] = true;
  }
  g.cutoff = static_cast<T>(cutoff);
  g.cutoff2 = g.cutoff * g.cutoff;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int samples = 20000;
  for (int q = 0; q < 4; ++q) {
    const int sy = 3, sz = 3, ty = sy - detail::corner_dy(q), tz = sz - detail::corner_dz(q);
    int tested = 0, kept = 0, missed = 0;
    for (int k = 0; k < samples; ++k) {
      detail::PackedPosition<T, 3> p{};
      // A tenth of the sources on the cell's faces.
      const double fy = k % 10 == 0 ? std::round(unit(rng)) : unit(rng), fz = unit(rng);
      p.y = static_cast<T>((sy + fy) * width);
      p.z = static_cast<T>((sz + fz) * width);
      if (detail::pair_cell_coordinate(g, 1, p.y) != sy || detail::pair_cell_coordinate(g, 2, p.z) != sz) continue;
      const double gy = std::max({0.0, ty * width - double(p.y), double(p.y) - (ty + 1) * width});
      const double gz = std::max({0.0, tz * width - double(p.z), double(p.z) - (tz + 1) * width});
      const bool live = detail::corner_source_live(g, q, sy, sz, p);
      if (k % 10 != 0) {  // the share from the uniform sources only
        ++tested;
        kept += live;
      }
      if (!live && std::sqrt(gy * gy + gz * gz) < cutoff) ++missed;
    }
    EXPECT_EQ(missed, 0) << "corner " << q << ": sources within the cutoff of the x-row left out";
    ASSERT_GT(tested, samples / 2);
    const double culled = 1.0 - double(kept) / tested;
    const double expected = 1.0 - 0.25 * M_PI * (cutoff / width) * (cutoff / width);
    EXPECT_NEAR(culled, expected, 0.03) << "corner " << q << ", cells " << width / cutoff << " cutoffs wide";
  }
}

TEST(CudaPairs, CornerListsKeepEverySourceInRange) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  check_corner_test<float>(0.8, 0.8, rng);
  check_corner_test<float>(0.8, 1.0, rng);
  check_corner_test<double>(0.5, 0.5, rng);
  check_corner_test<double>(1e-3, 1.2e-3, rng);
}

// A kernel of the caller's on a CUDA plan through PairPlan::compute, without
// pmkit/cuda/pairs.cuh (this file is plain C++): a clear error, nothing written.
TEST(CudaPairs, CallersKernelWithoutTheCudaHeaderIsAnError) {
  PMKIT_REQUIRE_GPU();
  PairPlan<double, 3> plan(Box<3>::periodic({2.0, 2.0, 2.0}), 0.5, cuda_options(PairMethod::Auto));
  const std::vector<double> good = {0.1, 0.2, 1.9};
  cuda::DeviceBuffer<double> x(good), out(std::vector<double>(3, 5.0));
  plan.set_points({device_cview(x), device_cview(x), device_cview(x)});
  expect_pmkit_error(ErrorCode::Unsupported, "pmkit/cuda/pairs.cuh",
                     [&] { plan.compute(bench::CheapSynthetic{0.5}, {}, {device_view(out)}); });
  EXPECT_EQ(out.download(), std::vector<double>(3, 5.0));
}

// Holds a stream for a while (a host function on it): work enqueued after it runs later.
void CUDART_CB hold_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

// Two pair plans on two streams of their own, computing at once. Each stream first waits
// (hold_stream), then fills the outputs with NaN, then computes: a plan that ran any of
// its work on another stream would have its outputs overwritten by the NaNs, or read
// before they are written.
TEST(CudaPairs, TwoPlansOnTwoStreamsAtOnce) {
  PMKIT_REQUIRE_GPU();
  const Box<3> box = Box<3>::periodic({4.0, 4.0, 4.0});
  const double cutoff = 0.8;
  const pair_kernels::LennardJones<3> lj{1.0, 0.3, cutoff, 0.05};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 4.0);
  struct Run {
    cudaStream_t stream = nullptr;
    std::array<std::vector<double>, 3> x;
    std::vector<std::unique_ptr<cuda::DeviceBuffer<double>>> pos, out;
    std::unique_ptr<PairPlan<double, 3>> plan;
  };
  Run runs[2];
  const PairMethod methods[2] = {PairMethod::Auto, PairMethod::CudaXPencil};
  const std::size_t n = scaled(4000);
  for (int r = 0; r < 2; ++r) {
    Run& run = runs[r];
    cuda::check(cudaStreamCreateWithFlags(&run.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    PairOptions opt = cuda_options(methods[r]);
    opt.stream = cuda::stream_handle(run.stream);
    run.plan = std::make_unique<PairPlan<double, 3>>(box, cutoff, opt);
    std::array<View<const double>, 3> views;
    for (int d = 0; d < 3; ++d) {
      run.x[d].resize(n + r * 500);
      for (double& v : run.x[d]) v = unit(rng);
      run.pos.push_back(std::make_unique<cuda::DeviceBuffer<double>>(run.x[d]));
      views[d] = device_cview(*run.pos.back());
    }
    run.plan->set_points(views);
    for (int k = 0; k < 4; ++k) run.out.push_back(std::make_unique<cuda::DeviceBuffer<double>>(n + r * 500, "out"));
  }
  for (Run& run : runs) {
    cuda::check(cudaLaunchHostFunc(run.stream, hold_stream, nullptr), "cudaLaunchHostFunc");
    std::vector<View<double>> out;
    for (auto& o : run.out) {
      cuda::check(cudaMemsetAsync(o->get(), 0xff, o->size() * sizeof(double), run.stream), "cudaMemsetAsync");
      out.push_back(device_view(*o));
    }
    run.plan->compute(lj, {}, out);
  }
  for (int r = 0; r < 2; ++r) {
    Run& run = runs[r];
    std::vector<std::vector<double>> got(4, std::vector<double>(run.out[0]->size()));
    for (int k = 0; k < 4; ++k)
      cuda::check(cudaMemcpyAsync(got[k].data(), run.out[k]->get(), got[k].size() * sizeof(double),
                                  cudaMemcpyDeviceToHost, run.stream),
                  "cudaMemcpyAsync");
    cuda::check(cudaStreamSynchronize(run.stream), "cudaStreamSynchronize");
    expect_brute_force<double, 3>(box, cutoff, lj, run.x, {}, got, 1e-12);
    run.plan.reset();
    cuda::check(cudaStreamDestroy(run.stream), "cudaStreamDestroy");
  }
}

// The half shell's atomics change only the last bits from run to run: two runs on the
// same points agree to rounding, and the forces it sums from both sides of each pair
// add up to zero (Newton's third law) as closely as the full shell's.
TEST(CudaPairs, HalfShellRepeatsToRounding) {
  PMKIT_REQUIRE_GPU();
  const Box<3> box = Box<3>::periodic({4.0, 4.0, 4.0});
  pair_kernels::LennardJones<3> lj{1.0, 0.3, 0.8, 0.05};
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<double> unit(0.0, 4.0);
  const std::size_t n = scaled(12000);  // ~100 a cell on 5^3 cells
  std::array<std::vector<float>, 3> x;
  for (auto& axis : x) {
    axis.resize(n);
    for (float& v : axis) v = static_cast<float>(unit(rng));
  }
  PairPlan<float, 3> half(box, 0.8, cuda_options(PairMethod::CudaHalfShell));
  PairPlan<float, 3> full(box, 0.8, cuda_options(PairMethod::CudaXPencil));
  const auto a = run_pairs(half, lj, x), b = run_pairs(half, lj, x), f = run_pairs(full, lj, x);
  EXPECT_EQ(half.last_method(), PairMethod::CudaHalfShell);
  for (int k = 0; k < 4; ++k) {
    const std::vector<double> want(f[k].begin(), f[k].end());
    EXPECT_LE(rel_err(a[k], want), 1e-4) << "output " << k;
    EXPECT_LE(rel_err(b[k], want), 1e-4) << "output " << k;
  }
  for (int d = 0; d < 3; ++d) {
    double sum_half = 0, sum_full = 0, scale = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum_half += a[d][i];
      sum_full += f[d][i];
      scale += std::fabs(f[d][i]);
    }
    EXPECT_LE(std::fabs(sum_half), 1e-5 * scale + std::fabs(sum_full)) << "axis " << d;
  }
}

// The full-shell methods sum each particle's outputs in a fixed order (three threads a
// particle add their parts in a fixed order too): two runs on the same points, and a
// second plan, give the same bits. Summing through atomics, as the half shell does,
// would not.
TEST(CudaPairs, FullShellMethodsRepeatBitForBit) {
  PMKIT_REQUIRE_GPU();
  const Box<3> box = Box<3>::periodic({4.0, 4.0, 4.0});  // 5^3 cells
  pair_kernels::LennardJones<3> lj{1.0, 0.3, 0.8, 0.05};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 4.0);
  for (std::size_t n : {scaled(125), scaled(7500)}) {  // ~1 and ~60 a cell
    std::array<std::vector<float>, 3> x;
    for (auto& axis : x) {
      axis.resize(n);
      for (float& v : axis) v = static_cast<float>(unit(rng));
    }
    for (PairMethod method : {PairMethod::CudaThreadPerParticle, PairMethod::CudaThreeThreadsPerParticle,
                              PairMethod::CudaBlockPerCell, PairMethod::CudaXPencil}) {
      SCOPED_TRACE(std::string(to_string(method)) + ", n = " + std::to_string(n));
      PairPlan<float, 3> plan(box, 0.8, cuda_options(method)), again(box, 0.8, cuda_options(method));
      const auto a = run_pairs(plan, lj, x), b = run_pairs(plan, lj, x), c = run_pairs(again, lj, x);
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(0, std::memcmp(a[k].data(), b[k].data(), n * sizeof(float))) << "output " << k;
        EXPECT_EQ(0, std::memcmp(a[k].data(), c[k].data(), n * sizeof(float))) << "output " << k;
      }
    }
  }
}

// The neighbour counts the traversal may find, from the arithmetic it does in T: each
// axis's separation from the wrapped coordinates (origin 0, so wrapping is exact), the
// periodic image shift added to the source (pencils) or taken off the target (thread per
// particle), from either particle's side (the half shell decides each pair once), and r^2
// summed with or without fused multiply-adds (nvcc may contract). A pair every form puts
// inside the cutoff counts in `at_least`, one any form does in `at_most`; they differ only
// within rounding of the cutoff.
template <class T, int D>
void neighbour_bounds(const Box<D>& box, double cutoff, const std::array<std::vector<T>, D>& u,
                      std::vector<int>& at_least, std::vector<int>& at_most) {
  const std::size_t n = u[0].size();
  const T c2 = static_cast<T>(cutoff * cutoff);
  at_least.assign(n, 0);
  at_most.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      bool all = true, any = false;
      for (int side = 0; side < 2; ++side)
        for (int shifted_source = 0; shifted_source < 2; ++shifted_source) {
          const std::size_t t = side ? j : i, s = side ? i : j;
          T r[D];
          for (int d = 0; d < D; ++d) {
            // The image of s nearest t (a cell is at least a cutoff wide and there are
            // three or more a periodic axis, so no other image is within the cutoff).
            T shift = 0;
            if (box.boundary[d] == Boundary::Periodic) {
              const double L = box.length[d], v = double(u[d][t]) - double(u[d][s]);
              shift = static_cast<T>(L * std::round(v / L));
            }
            r[d] = shifted_source ? T(u[d][t] - T(u[d][s] + shift)) : T(T(u[d][t] - shift) - u[d][s]);
          }
          T plain = r[0] * r[0], fused = r[0] * r[0];
          for (int d = 1; d < D; ++d) {
            volatile T product = r[d] * r[d];  // rounded alone: the host compiler may not fuse it
            plain = T(plain + product);
            fused = std::fma(r[d], r[d], fused);
          }
          for (T r2 : {plain, fused}) {
            all = all && r2 < c2;
            any = any || r2 < c2;
          }
        }
      at_least[i] += all;
      at_least[j] += all;
      at_most[i] += any;
      at_most[j] += any;
    }
}

// Every CUDA method finds exactly the neighbours its arithmetic puts inside the cutoff
// (pair_kernels::NeighbourCount): a source wrongly left out of a window (the x-pencil cuts
// each staged row to an x-window) shows as a count below `at_least`. About 10 particles a cell, where a warp spans several cells
// and each lane cuts its own windows; a third of them with a coordinate on a cell face and
// a tenth at the cutoff's distance across a face from another; periodic, bounded and
// mixed boxes, cells as wide as the cutoff or wider.
template <class T, int D>
void check_counts(const Box<D>& box, double cutoff, std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::array<std::vector<T>, D> u;
  for (auto& axis : u) axis.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < D; ++d) u[d][i] = static_cast<T>(unit(rng) * box.length[d]);
    const int d = static_cast<int>(unit(rng) * D) % D;
    const double roll = unit(rng);
    if (roll < 0.33) {  // on a cell face
      const int cells = static_cast<int>(box.length[d] / cutoff + 1e-9);
      u[d][i] = static_cast<T>(std::floor(unit(rng) * cells) * (box.length[d] / cells));
    } else if (roll < 0.43 && i > 0) {  // at the cutoff from the previous particle, across axis d
      for (int e = 0; e < D; ++e) u[e][i] = u[e][i - 1];
      const double v = double(u[d][i - 1]) + cutoff;
      if (v < box.length[d]) u[d][i] = static_cast<T>(v);
      else if (box.boundary[d] == Boundary::Periodic) u[d][i] = static_cast<T>(v - box.length[d]);
    } else if (D == 3 && roll < 0.53 && i > 0) {
      // At the cutoff, or just inside it, from the previous particle across a diagonal of y
      // and z: often in a corner row of its row, near where the corner lists cut.
      const double reach = (unit(rng) < 0.5 ? 1.0 : 0.999) * cutoff / std::sqrt(2.0);
      for (int e = 0; e < D; ++e) u[e][i] = u[e][i - 1];
      for (int e = 1; e < D; ++e) {
        double v = double(u[e][i - 1]) + (unit(rng) < 0.5 ? -reach : reach);
        if (box.boundary[e] == Boundary::Periodic) v -= box.length[e] * std::floor(v / box.length[e]);
        else v = std::clamp(v, 0.0, box.length[e]);
        u[e][i] = static_cast<T>(v);
      }
    }
    for (int e = 0; e < D; ++e)  // a value rounded up to the length wraps to 0, as the binning does
      if (box.boundary[e] == Boundary::Periodic && !(u[e][i] < T(box.length[e]))) u[e][i] = 0;
  }
  std::vector<int> at_least, at_most;
  neighbour_bounds<T, D>(box, cutoff, u, at_least, at_most);

  Positions<T, D> x;
  for (int d = 0; d < D; ++d) x[d] = u[d];
  std::size_t pairs = 0;
  for (std::size_t i = 0; i < n; ++i) pairs += at_least[i];
  EXPECT_GT(pairs, 5 * n) << "too few pairs to test anything";
  for (PairMethod method : kCudaMethods) {
    PairOptions opt;
    opt.backend = Backend::Cuda;
    opt.method = method;
    PairPlan<T, D> plan(box, cutoff, opt);
    const std::vector<T> count = run_pairs(plan, pair_kernels::NeighbourCount{}, x)[0];
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (count[i] < at_least[i] || count[i] > at_most[i]) {
        if (++wrong <= 5)
          ADD_FAILURE() << to_string(method) << ": particle " << i << " has " << count[i]
                        << " neighbours, expected " << at_least[i] << " to " << at_most[i];
      }
    EXPECT_EQ(wrong, 0u) << to_string(method) << ", n = " << n;
  }
}

TEST(CudaPairs, NeighbourCountsExactInEveryMethod) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Box<3> mixed = Box<3>::periodic({3.0, 2.5, 3.5});
  mixed.boundary[1] = Boundary::Bounded;
  check_counts<float, 3>(Box<3>::periodic({4.0, 4.0, 4.0}), 0.5, 5120, rng);  // 8^3 cells
  check_counts<float, 3>(Box<3>::periodic({4.2, 3.0, 4.6}), 0.5, 4320, rng);  // wider cells
  check_counts<float, 3>(Box<3>::bounded({3.0, 3.0, 3.0}), 0.5, 2160, rng);
  check_counts<float, 3>(mixed, 0.5, 2100, rng);
  check_counts<float, 2>(Box<2>::periodic({4.0, 4.0}), 0.25, 2560, rng);
  check_counts<double, 3>(Box<3>::periodic({4.0, 3.0, 3.5}), 0.5, 3360, rng);
  // Rows of 32 and 16 cells at 10 and 40 a cell: several pencils a row (the half shell's
  // blocks of whole warps cross them).
  check_counts<float, 3>(Box<3>::periodic({16.0, 2.0, 2.0}), 0.5, 5120, rng);
  check_counts<float, 3>(Box<3>::periodic({8.0, 1.5, 1.5}), 0.5, 5760, rng);
  check_counts<float, 3>(Box<3>::bounded({6.0, 2.0, 1.5}), 0.5, 6912, rng);  // 48 a cell, bounded
}

#endif

}  // namespace
}  // namespace pmkit::test
