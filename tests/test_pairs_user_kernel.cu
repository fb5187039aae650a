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
  for (PairMethod method : {PairMethod::CudaThreadPerParticle, PairMethod::CudaBlockPerCell, PairMethod::CudaXPencil,
                            PairMethod::CudaHalfShell, PairMethod::Auto}) {
    PairOptions opt;
    opt.backend = Backend::Cuda;
    opt.method = method;
    check_case<double, 3>(Box<3>::periodic({3.0, 3.0, 3.0}), 0.6, Yukawa<3>{}, scaled(2000), Layout::Uniform, opt);
    check_case<float, 2>(Box<2>::bounded({3.0, 2.0}), 0.5, Yukawa<2>{}, scaled(2000), Layout::Clustered, opt);
    // The same kernel on the CPU from this nvcc-compiled file (OpenMP host code).
    check_case<double, 3>(Box<3>::periodic({3.0, 3.0, 3.0}), 0.6, Yukawa<3>{}, 500, Layout::Uniform, PairOptions{});
  }
}

// Counts each particle's neighbours within the cutoff (a count in T: exact below 2^24).
struct CountNeighbours {
  static constexpr int inputs = 0;
  static constexpr int outputs = 1;
  template <class T>
  PMKIT_HD void operator()(const T*, T, const T*, const T*, T* out_i, T* out_j) const {
    out_i[0] += T(1);
    out_j[0] += T(1);
  }
};

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
            plain = T(plain + T(r[d] * r[d]));
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

// Every method finds exactly the neighbours its arithmetic puts inside the cutoff: a
// source wrongly left out of a window (the x-pencil narrows each lane's window by the
// row's distance across y and z, row_reach) shows as a count below `at_least`. About 10
// particles a cell, where a warp spans several cells and each lane cuts its own windows;
// a third of them with a coordinate on a cell face and a tenth at the cutoff's distance
// across a face from another, on periodic, bounded and mixed boxes, cells as wide as
// the cutoff or wider.
constexpr PairMethod kEveryCudaMethod[] = {PairMethod::CudaThreadPerParticle, PairMethod::CudaBlockPerCell,
                                           PairMethod::CudaXPencil, PairMethod::CudaHalfShell, PairMethod::Auto};

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
  for (PairMethod method : kEveryCudaMethod) {
    PairOptions opt;
    opt.backend = Backend::Cuda;
    opt.method = method;
    PairPlan<T, D> plan(box, cutoff, opt);
    const std::vector<T> count = run_pairs(plan, CountNeighbours{}, x)[0];
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

TEST(CudaPairs, NeighbourCountsExactWithNarrowedWindows) {
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
}

}  // namespace
}  // namespace pmkit::test
