#pragma once
// Cutoff pair test cases shared by the CPU and CUDA pair tests: an O(N^2) float64 brute
// force, fresh random inputs, and a runner for either backend.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pmkit/pairs.hpp"
#include "test_support.hpp"
#if defined(PMKIT_WITH_CUDA)
#include "cuda_support.hpp"
#include "cuda/runtime.hpp"
#endif

namespace pmkit::test {
// Internal linkage: a file compiled by nvcc instantiates these helpers with
// pmkit::cuda::compute for the same kernel types that a plain C++ file instantiates with
// PairPlan::compute; each file keeps its own copy instead of the linker picking one.
namespace {

// Brute force in double over every unordered pair, minimum image on periodic axes.
// Where `near_cutoff` is given, it marks both particles of every pair whose r^2 lies
// within `band` (relative) of the cutoff's square: a float computation may take such a
// pair or not, and a kernel that is not zero at the cutoff then changes by a whole pair.
template <int D, class Kernel>
std::vector<std::vector<double>> brute_force(const Box<D>& box, double cutoff, const Kernel& kernel,
                                             const std::array<std::vector<double>, D>& x,
                                             const std::vector<std::vector<double>>& in,
                                             std::vector<char>* near_cutoff = nullptr, double band = 0.0) {
  const std::size_t n = x[0].size();
  if (near_cutoff) near_cutoff->assign(n, 0);
  std::vector<std::vector<double>> out(Kernel::outputs, std::vector<double>(n, 0.0));
  double in_i[Kernel::inputs + 1] = {}, in_j[Kernel::inputs + 1] = {};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      double r[D], r2 = 0;
      for (int d = 0; d < D; ++d) {
        double v = x[d][i] - x[d][j];
        if (box.boundary[d] == Boundary::Periodic) v -= box.length[d] * std::round(v / box.length[d]);
        r[d] = v;
        r2 += v * v;
      }
      if (near_cutoff && std::abs(r2 - cutoff * cutoff) <= band * cutoff * cutoff)
        (*near_cutoff)[i] = (*near_cutoff)[j] = 1;
      if (r2 >= cutoff * cutoff) continue;
      for (int k = 0; k < Kernel::inputs; ++k) {
        in_i[k] = in[k][i];
        in_j[k] = in[k][j];
      }
      double oi[Kernel::outputs] = {}, oj[Kernel::outputs] = {};
      kernel(r, r2, in_i, in_j, oi, oj);
      for (int k = 0; k < Kernel::outputs; ++k) {
        out[k][i] += oi[k];
        out[k][j] += oj[k];
      }
    }
  for (std::size_t i = 0; i < n; ++i) {  // the kernel's finish (pmkit/pairs.hpp), if any
    double sums[Kernel::outputs];
    for (int k = 0; k < Kernel::outputs; ++k) sums[k] = out[k][i];
    detail::finish_outputs(kernel, sums);
    for (int k = 0; k < Kernel::outputs; ++k) out[k][i] = sums[k];
  }
  return out;
}

// Relative L2 error, over the particles `skip` does not mark (if given).
template <class T>
inline double rel_err(const std::vector<T>& got, const std::vector<double>& want,
                      const std::vector<char>* skip = nullptr) {
  double e = 0, w = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (skip && (*skip)[i]) continue;
    e += (got[i] - want[i]) * (got[i] - want[i]);
    w += want[i] * want[i];
  }
  return w > 0 ? std::sqrt(e / w) : std::sqrt(e);
}

// Every output of a pair computation in T against the float64 brute force, within tol
// (relative L2). In float, particles with a pair within float's rounding of the cutoff
// are left out (brute_force's near_cutoff: a kernel that is not zero at the cutoff
// changes by a whole pair there); the others must match. Most runs leave out none.
template <class T, int D, class Kernel>
void expect_brute_force(const Box<D>& box, double cutoff, const Kernel& kernel,
                        const std::array<std::vector<double>, D>& xd, const std::vector<std::vector<double>>& in,
                        const std::vector<std::vector<T>>& out, double tol) {
  const bool single = std::is_same<T, float>::value;
  std::vector<char> near_cutoff;
  const auto want = brute_force<D>(box, cutoff, kernel, xd, in, single ? &near_cutoff : nullptr, 1e-5);
  for (int k = 0; k < Kernel::outputs; ++k)
    EXPECT_LE(rel_err(out[k], want[k], single ? &near_cutoff : nullptr), tol) << "output " << k;
}

enum class Layout { Uniform, Clustered, Lattice };

// The plan's compute for any kernel: a file compiled by nvcc (after pmkit/cuda/pairs.cuh)
// runs the caller's kernels on the CUDA backend through pmkit::cuda::compute.
template <class T, int D, class Kernel>
void compute_any(PairPlan<T, D>& plan, const Kernel& kernel, const std::vector<View<const T>>& in,
                 const std::vector<View<T>>& out) {
#if defined(__CUDACC__)
  cuda::compute(plan, kernel, in, out);
#else
  plan.compute(kernel, in, out);
#endif
}

// A plan's outputs (its points set) for inputs in, from host arrays (CPU) or through
// device copies (CUDA).
template <class T, int D, class Kernel>
std::vector<std::vector<T>> compute_pairs(PairPlan<T, D>& plan, const Kernel& kernel,
                                          const std::vector<std::vector<T>>& in = {}) {
  const std::size_t n = plan.num_points();
  std::vector<std::vector<T>> out(Kernel::outputs, std::vector<T>(n, T(-7)));
  if (plan.options().backend == Backend::Cpu) {
    std::vector<View<const T>> in_views(in.begin(), in.end());
    std::vector<View<T>> out_views(out.begin(), out.end());
    compute_any(plan, kernel, in_views, out_views);
    return out;
  }
#if defined(PMKIT_WITH_CUDA)
  std::vector<std::unique_ptr<cuda::DeviceBuffer<T>>> din, dout;
  std::vector<View<const T>> in_views;
  std::vector<View<T>> out_views;
  for (const auto& v : in) {
    din.push_back(std::make_unique<cuda::DeviceBuffer<T>>(v));
    in_views.push_back(device_cview(*din.back()));
  }
  for (const auto& v : out) {
    dout.push_back(std::make_unique<cuda::DeviceBuffer<T>>(v));
    out_views.push_back(device_view(*dout.back()));
  }
  compute_any(plan, kernel, in_views, out_views);
  cuda::check(cudaStreamSynchronize(cuda::to_cuda_stream(plan.options().stream)), "compute_pairs");
  for (std::size_t k = 0; k < out.size(); ++k) out[k] = dout[k]->download();
#endif
  return out;
}

// Positions as the CUDA backend wants them (device memory) or the host's.
template <class T, int D>
struct PositionsOn {
  std::array<View<const T>, D> views;
#if defined(PMKIT_WITH_CUDA)
  std::vector<std::unique_ptr<cuda::DeviceBuffer<T>>> device;
#endif
  PositionsOn(const Positions<T, D>& pos, [[maybe_unused]] bool on_device) {
    for (int d = 0; d < D; ++d) {
      views[d] = View<const T>(pos[d]);
#if defined(PMKIT_WITH_CUDA)
      if (on_device) {
        device.push_back(std::make_unique<cuda::DeviceBuffer<T>>(pos[d]));
        views[d] = device_cview(*device.back());
      }
#endif
    }
  }
};

// Sets positions x (host arrays, copied to the device for CUDA) and computes.
template <class T, int D, class Kernel, class HostPositions>
std::vector<std::vector<T>> run_pairs(PairPlan<T, D>& plan, const Kernel& kernel, const HostPositions& x,
                                      const std::vector<std::vector<T>>& in = {}) {
  const PositionsOn<T, D> on(x, plan.options().backend == Backend::Cuda);
  plan.set_points(on.views);
  return compute_pairs(plan, kernel, in);
}

// Fresh random particles (uniform, clustered or on a lattice whose spacing is the
// cutoff) in T, their float64 copies, and `inputs` values in [0, 1) a particle.
template <class T, int D>
struct RandomPairCase {
  std::array<std::vector<T>, D> x;
  std::array<std::vector<double>, D> xd;
  std::vector<std::vector<T>> in_t;
  std::vector<std::vector<double>> in;
};

template <class T, int D>
RandomPairCase<T, D> random_pair_case(const Box<D>& box, std::size_t n, Layout layout, int inputs,
                                      std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  RandomPairCase<T, D> c;
  for (int d = 0; d < D; ++d) {
    c.x[d].resize(n);
    c.xd[d].resize(n);
  }
  for (std::size_t i = 0; i < n; ++i)
    for (int d = 0; d < D; ++d) {
      double u = unit(rng);
      if (layout == Layout::Clustered && i % 10 != 0) u = 0.3 + 0.05 * u;  // 90% in a small region
      if (layout == Layout::Lattice) u = std::floor(u * 8) / 8;            // pairs exactly at the cutoff
      c.x[d][i] = static_cast<T>(box.origin[d] + u * box.length[d]);
      c.xd[d][i] = c.x[d][i];
    }
  c.in.assign(inputs, std::vector<double>(n));
  c.in_t.assign(inputs, std::vector<T>(n));
  for (int k = 0; k < inputs; ++k)
    for (std::size_t i = 0; i < n; ++i) c.in[k][i] = c.in_t[k][i] = static_cast<T>(unit(rng));
  return c;
}

// The tolerance of a pair computation in T against the float64 brute force (relative L2).
template <class T>
constexpr double pair_tolerance() {
  return std::is_same<T, float>::value ? 1e-4 : 1e-12;
}

// One case: fresh random particles against the brute force.
template <class T, int D, class Kernel>
void check_case(const Box<D>& box, double cutoff, const Kernel& kernel, std::size_t n, Layout layout,
                const PairOptions& opt) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed) + ", n = " + std::to_string(n) + ", " +
               (opt.backend == Backend::Cuda ? std::string("CUDA ") + to_string(opt.method)
                                             : opt.half_shell ? std::string("half shell") : std::string("full shell")));
  std::mt19937_64 rng(seed);
  const RandomPairCase<T, D> c = random_pair_case<T, D>(box, n, layout, Kernel::inputs, rng);
  PairPlan<T, D> plan(box, cutoff, opt);
  const auto out = run_pairs(plan, kernel, c.x, c.in_t);
  expect_brute_force<T, D>(box, cutoff, kernel, c.xd, c.in, out, pair_tolerance<T>());
}

inline const PairMethod kCudaMethods[] = {PairMethod::CudaThreadPerParticle, PairMethod::CudaThreeThreadsPerParticle,
                                          PairMethod::CudaBlockPerCell,      PairMethod::CudaXPencil,
                                          PairMethod::CudaHalfShell,         PairMethod::CudaCompactPencil,
                                          PairMethod::CudaRowSplit,          PairMethod::Auto};
#if defined(PMKIT_WITH_CUDA)
inline PairOptions cuda_options(PairMethod method) {
  PairOptions opt;
  opt.backend = Backend::Cuda;
  opt.method = method;
  return opt;
}
#endif

// The pair options a variant of the backend matrix runs with: on the CPU both shells,
// on CUDA every method.
inline std::vector<PairOptions> pair_settings(const Variant& v) {
  std::vector<PairOptions> out;
  PairOptions o = options_of<PairOptions>(v);
  if (on_cuda(v)) {
    for (PairMethod method : kCudaMethods) {
      o.method = method;
      out.push_back(o);
    }
  } else {
    for (bool half : {true, false}) {
      o.half_shell = half;
      out.push_back(o);
    }
  }
  return out;
}

inline PairOptions cpu_options(bool half_shell, int threads) {
  PairOptions opt;
  opt.half_shell = half_shell;
  opt.num_threads = threads;
  return opt;
}

}  // namespace
}  // namespace pmkit::test
