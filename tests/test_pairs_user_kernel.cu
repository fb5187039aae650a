// Pair kernels of the caller's own on the CUDA backend: the file is compiled by nvcc and
// includes pmkit/cuda/pairs.cuh, which compiles the traversal for each kernel, run through
// pmkit::cuda::compute (the built-in kernels are tested from plain C++ in test_pairs.cpp).
// Checked against the float64 brute force.
#include <algorithm>
#include <cmath>
#include <vector>

#include "pmkit/cuda/pairs.cuh"
#include "../bench/pair_synthetic.hpp"
#include "pair_mesh_cases.hpp"

namespace pmkit::test {
namespace {

// Screened Coulomb (Yukawa) with a charge per particle: the potential at each particle
// and the field there, softened so that coincident particles stay finite.
template <int D>
struct Yukawa {
  static constexpr int inputs = 1;       // charge
  static constexpr int outputs = 1 + D;  // potential, field
  double screening = 2.0;
  double softening = 0.01;
  template <class T>
  PMKIT_HD void operator()(const T* r, T r2, const T* q_i, const T* q_j, T* out_i, T* out_j) const {
    using std::exp;
    using std::sqrt;
    const T s = sqrt(r2 + T(softening * softening));
    const T g = exp(-T(screening) * s) / s;
    const T dg = g * (T(screening) + T(1) / s) / s;  // -(dg/ds) / s
    out_i[0] += q_j[0] * g;
    out_j[0] += q_i[0] * g;
    for (int d = 0; d < D; ++d) {
      out_i[1 + d] += q_j[0] * dg * r[d];
      out_j[1 + d] -= q_i[0] * dg * r[d];
    }
  }
};

TEST(CudaPairs, UserKernelCompiledByTheCaller) {
  PMKIT_REQUIRE_GPU();
  for (PairMethod method : {PairMethod::CudaThreadPerParticle, PairMethod::CudaThreeThreadsPerParticle,
                            PairMethod::CudaBlockPerCell, PairMethod::CudaXPencil, PairMethod::CudaHalfShell,
                            PairMethod::CudaCompactPencil, PairMethod::CudaRowSplit, PairMethod::Auto}) {
    PairOptions opt;
    opt.backend = Backend::Cuda;
    opt.method = method;
    check_case<double, 3>(Box<3>::periodic({3.0, 3.0, 3.0}), 0.6, Yukawa<3>{}, scaled(2000), Layout::Uniform, opt);
    check_case<float, 2>(Box<2>::bounded({3.0, 2.0}), 0.5, Yukawa<2>{}, scaled(2000), Layout::Clustered, opt);
    // The same kernel on the CPU from this nvcc-compiled file (OpenMP host code).
    check_case<double, 3>(Box<3>::periodic({3.0, 3.0, 3.0}), 0.6, Yukawa<3>{}, 500, Layout::Uniform, PairOptions{});
  }
}

TEST(CudaPairs, SyntheticKernelsMixedBoundariesAndSmallBoxes) {
  PMKIT_REQUIRE_GPU();
  bench::CheapSynthetic cheap{0.5};
  bench::ExpensiveSynthetic expensive{0.5};
  Box<3> mixed = Box<3>::periodic({1.2, 2.0, 1.6});  // 2 cells in x: neighbours wrap onto each other
  mixed.boundary[2] = Boundary::Bounded;
  Box<3> one_cell = Box<3>::periodic({1.0, 1.0, 1.0});  // 2 x 2 x 2 cells of a 1-box: every image
  for (PairMethod method : kCudaMethods) {
    const PairOptions opt = cuda_options(method);
    check_case<double, 3>(mixed, 0.5, cheap, 500, Layout::Uniform, opt);
    check_case<double, 3>(mixed, 0.5, expensive, 500, Layout::Clustered, opt);
    check_case<float, 3>(one_cell, 0.5, expensive, 200, Layout::Uniform, opt);
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, expensive, 300, Layout::Lattice, opt);
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, cheap, 1, Layout::Uniform, opt);  // alone
    check_case<double, 2>(Box<2>::periodic({4.0, 4.0}), 0.5, cheap, 0, Layout::Uniform, opt);  // empty
  }
}

// Every method and launch variant that Auto times, launched alone on the plan's cells,
// against the float64 brute force: Auto runs whichever was fastest, and under another
// process's load that can be any of them.
template <class T, int D, class Kernel>
void check_every_auto_candidate(const Box<D>& box, double cutoff, const Kernel& kernel, std::size_t n,
                                Layout layout) {
  namespace pt = detail::pair_traversal;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed) + ", n = " + std::to_string(n));
  std::mt19937_64 rng(seed);
  const RandomPairCase<T, D> c = random_pair_case<T, D>(box, n, layout, Kernel::inputs, rng);
  PairPlan<T, D> plan(box, cutoff, cuda_options(PairMethod::CudaXPencil));
  const PositionsOn<T, D> on(c.x, true);
  plan.set_points(on.views);
  std::vector<std::unique_ptr<cuda::DeviceBuffer<T>>> din, dout;
  std::vector<View<const T>> in_views;
  std::vector<View<T>> out_views;
  for (const auto& v : c.in_t) {
    din.push_back(std::make_unique<cuda::DeviceBuffer<T>>(v));
    in_views.push_back(device_cview(*din.back()));
  }
  for (int k = 0; k < Kernel::outputs; ++k) {
    dout.push_back(std::make_unique<cuda::DeviceBuffer<T>>(n, "outputs"));
    out_views.push_back(device_view(*dout.back()));
  }
  // The brute force once (in float, without the particles that have a pair within
  // rounding of the cutoff), every candidate against it.
  const bool single = std::is_same<T, float>::value;
  std::vector<char> near_cutoff;
  const auto want = brute_force<D>(box, cutoff, kernel, c.xd, c.in, single ? &near_cutoff : nullptr, 1e-5);
  detail::DevicePairs<T, D>& dev = *detail::PairPlanAccess::device_pairs(plan);
  const detail::DevicePairView<T, D> cells = dev.view();
  const auto args = pt::make_args<Kernel>(dev, cells, Span<View<const T>>(in_views), Span<View<T>>(out_views));
  for (const pt::Candidate& candidate : pt::kAutoCandidates) {
    if (candidate.variant.few_registers && !pt::kHasFewRegisters<T>) continue;
    SCOPED_TRACE(std::string(to_string(candidate.method)) + ", " + std::to_string(candidate.variant.pencil_targets) +
                 " targets a block" + (candidate.variant.few_registers ? ", fewer registers" : ""));
    for (auto& o : dout) cuda::check(cudaMemset(o->get(), 0xff, n * sizeof(T)), "cudaMemset");  // NaN
    pt::launch(dev, cells, kernel, candidate.method, candidate.variant, args);
    cuda::check(cudaDeviceSynchronize(), "every Auto candidate");
    std::vector<std::vector<T>> out;
    for (auto& o : dout) out.push_back(o->download());
    for (int k = 0; k < Kernel::outputs; ++k)
      EXPECT_LE(rel_err(out[k], want[k], single ? &near_cutoff : nullptr), pair_tolerance<T>()) << "output " << k;
  }
}

TEST(CudaPairs, EveryAutoCandidateMatchesTheBruteForce) {
  PMKIT_REQUIRE_GPU();
  const Box<3> box = Box<3>::periodic({4.0, 4.0, 4.0});  // 5 cells an axis at cutoff 0.8
  const pair_kernels::LennardJones<3> lj{1.0, 0.3, 0.8, 0.05};
  for (std::size_t n : {scaled(300), scaled(4000), scaled(12000)}) {  // 2 to 100 a cell
    check_every_auto_candidate<double, 3>(box, 0.8, lj, n, Layout::Uniform);
    check_every_auto_candidate<float, 3>(box, 0.8, lj, n, Layout::Uniform);
  }
  check_every_auto_candidate<double, 3>(box, 0.8, lj, scaled(4000), Layout::Clustered);
  check_every_auto_candidate<float, 3>(Box<3>::periodic({9.6, 4.0, 4.0}), 0.8, Yukawa<3>{}, scaled(9000),
                                       Layout::Uniform);  // 12 cells in x: several pencils a row
  check_every_auto_candidate<double, 2>(Box<2>::bounded({3.0, 2.0}), 0.5, Yukawa<2>{}, scaled(2000),
                                        Layout::Clustered);
}

// The CUDA binning validates on the device: a rejected position is thrown by
// synchronize(), or by the next call once the device has found it, with set_points'
// message on the CPU backend; the plan has no points after it.
TEST(CudaPairs, BadInput) {
  PMKIT_REQUIRE_GPU();
  const PairOptions opt = cuda_options(PairMethod::Auto);
  PairPlan<double, 3> plan(Box<3>::periodic({2.0, 2.0, 2.0}), 0.5, opt);
  std::vector<double> good = {0.1, 0.2, 1.9}, bad = {0.1, std::nan(""), 0.3}, far = {0.1, 2.5, 0.3};
  cuda::DeviceBuffer<double> x(good), nan_x(bad), out(std::vector<double>(3, 5.0));
  bench::CheapSynthetic cheap{0.5};
  expect_pmkit_error(ErrorCode::NotReady, "", [&] { cuda::compute(plan, cheap, {}, {device_view(out)}); });
  expect_pmkit_error(ErrorCode::InvalidArgument, "", [&] { plan.set_points({good, good, good}); });  // host pointers
  plan.set_points({device_cview(x), device_cview(nan_x), device_cview(x)});
  expect_pmkit_error(ErrorCode::NonFinitePosition, "positions[1][1] = nan", [&] { plan.synchronize(); });
  EXPECT_FALSE(plan.has_points());
  plan.synchronize();  // reported once
  plan.set_points({device_cview(x), device_cview(x), device_cview(x)});
  plan.synchronize();
  EXPECT_TRUE(plan.has_points());
  // Once the device has found it (the stream waited for here), the next call throws it.
  plan.set_points({device_cview(x), device_cview(x), device_cview(nan_x)});
  cuda::check(cudaStreamSynchronize(cuda::to_cuda_stream(opt.stream)), "cudaStreamSynchronize");
  expect_pmkit_error(ErrorCode::NonFinitePosition, "positions[2][1]",
                     [&] { cuda::compute(plan, cheap, {}, {device_view(out)}); });
  EXPECT_FALSE(plan.has_points());
  // A compute queued right behind a rejected binning runs on memory of the plan's (the
  // rejected particle binned at the origin), and the error comes exactly once.
  plan.set_points({device_cview(nan_x), device_cview(x), device_cview(x)});
  int reported = 0;
  try {
    cuda::compute(plan, cheap, {}, {device_view(out)});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NonFinitePosition);
    ++reported;
  }
  try {
    plan.synchronize();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NonFinitePosition);
    ++reported;
  }
  EXPECT_EQ(reported, 1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  plan.set_points({device_cview(x), device_cview(x), device_cview(x)});
  cuda::check(cudaMemcpy(out.get(), std::vector<double>(3, 5.0).data(), 3 * sizeof(double), cudaMemcpyHostToDevice),
              "reset out");
  expect_pmkit_error(ErrorCode::InvalidArgument, "", [&] { cuda::compute(plan, cheap, {}, {View<double>(good.data(), 3)}); });
  // A built-in kernel through cuda::compute: the plan checks its parameters.
  expect_pmkit_error(ErrorCode::InvalidArgument, "sigma = 0", [&] {
    cuda::compute(plan, pair_kernels::LennardJones<3>{1.0, 0.0, 0.5, 0.0}, {},
                  {device_view(out), device_view(out), device_view(out), device_view(out)});
  });
  EXPECT_EQ(out.download(), std::vector<double>(3, 5.0));  // nothing written on error
  cuda::compute(plan, cheap, {}, {device_view(out)});
  // x = y = z = (0.1, 0.2, 1.9): r^2 = 0.03 for 0-1, 0.12 for 0-2 across the seam, 0.27
  // (beyond 0.5^2) for 1-2; the cheap kernel adds 0.25 - r^2 to both of a pair.
  const std::vector<double> got = out.download();
  EXPECT_NEAR(got[0], 0.22 + 0.13, 1e-12);
  EXPECT_NEAR(got[1], 0.22, 1e-12);
  EXPECT_NEAR(got[2], 0.13, 1e-12);
  expect_pmkit_error(ErrorCode::OutOfBounds, "positions[2][1] = 2.5", [&] {
    PairPlan<double, 3> bounded(Box<3>::bounded({2.0, 2.0, 2.0}), 0.5, opt);
    cuda::DeviceBuffer<double> outside(far);
    bounded.set_points({device_cview(x), device_cview(x), device_cview(outside)});
    bounded.synchronize();
  });
  expect_pmkit_error(ErrorCode::InvalidArgument, "", [&] {
    PairOptions wrong;
    wrong.method = PairMethod::CudaXPencil;  // a CUDA method on the CPU backend
    PairPlan<double, 3>(Box<3>::periodic({2.0, 2.0, 2.0}), 0.5, wrong);
  });
}

// The seam puts particles a few roundings of T apart: the smooth synthetic kernel there,
// from a mesh plan on the same Grid (see test_pairs_from_mesh.cpp).
TEST(CudaPairsFromMesh, SyntheticKernelAtTheSeam) {
  PMKIT_REQUIRE_GPU();
  bench::ExpensiveSynthetic expensive{kCutoff};
  for_each_cuda_mesh_case([&](const Kernel& kernel, const Grid<3>& grid3, const Grid<2>& grid2,
                              const Options& mesh_options, const PairOptions& pair_options) {
    check_from_mesh<float, 3>(grid3, kernel, expensive, kCutoff, Distribution::Seam, scaled(6000), mesh_options,
                              pair_options);
    check_from_mesh<double, 2>(grid2, kernel, expensive, kCutoff, Distribution::Seam, scaled(3000), mesh_options,
                               pair_options);
  });
}

__global__ void erfc_and_gaussian_kernel(const float* x, std::size_t n, float* erfc_x, float* gaussian) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i < n) pair_kernels::detail::erfc_and_gaussian(x[i], erfc_x[i], gaussian[i]);
}

// The Ewald kernel's erfc and Gaussian in float on the device (its own fit, not erfcf)
// against float64 at every float of [0, 9] a step of 2^-12 apart (the range where erfc is a
// normal float), within a few ulp: 8e-7 relative (the fit's 4e-7 on the host and expf's
// own 2 ulp), the Gaussian 4e-7.
TEST(CudaPairs, EwaldErfcOnTheDeviceWithinAFewUlp) {
  PMKIT_REQUIRE_GPU();
  std::vector<float> x;
  for (int k = 0; k <= 9 * 4096; ++k) x.push_back(float(k) / 4096.0f);
  const std::size_t n = x.size();
  cuda::DeviceBuffer<float> dx(x), derfc(n), dgauss(n);
  erfc_and_gaussian_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(dx.get(), n, derfc.get(), dgauss.get());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> erfc_x = derfc.download(), gaussian = dgauss.download();
  double worst_erfc = 0, worst_gaussian = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double xd = x[i];
    worst_erfc = std::max(worst_erfc, std::abs(erfc_x[i] / std::erfc(xd) - 1));
    worst_gaussian = std::max(worst_gaussian, std::abs(gaussian[i] / std::exp(-xd * xd) - 1));
  }
  EXPECT_LE(worst_erfc, 8e-7);
  EXPECT_LE(worst_gaussian, 4e-7);
}

}  // namespace
}  // namespace pmkit::test
