// A caller's own pair kernel on the CUDA backend: the file is compiled by nvcc and includes
// pmkit/cuda/pairs.cuh, which compiles the traversal for the kernel (the built-in kernels
// are tested from plain C++ in test_pairs.cpp). Checked against the float64 brute force.
#include "pmkit/cuda/pairs.cuh"
#include "pair_cases.hpp"

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
                            PairMethod::Auto}) {
    PairOptions opt;
    opt.backend = Backend::Cuda;
    opt.method = method;
    check_case<double, 3>(Box<3>::periodic({3.0, 3.0, 3.0}), 0.6, Yukawa<3>{}, scaled(2000), Layout::Uniform, opt);
    check_case<float, 2>(Box<2>::bounded({3.0, 2.0}), 0.5, Yukawa<2>{}, scaled(2000), Layout::Clustered, opt);
    // The same kernel on the CPU from this nvcc-compiled file (OpenMP host code).
    check_case<double, 3>(Box<3>::periodic({3.0, 3.0, 3.0}), 0.6, Yukawa<3>{}, 500, Layout::Uniform, PairOptions{});
  }
}

}  // namespace
}  // namespace pmkit::test
