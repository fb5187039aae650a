#pragma once
// Particle-particle interactions within a cutoff radius, on cell lists (cells at least
// as wide as the cutoff), on the CPU (OpenMP) or a CUDA device.
//
//   pmkit::PairPlan<double, 3> pairs(pmkit::Box<3>::periodic({L, L, L}), cutoff);
//   pairs.set_points({x, y, z});
//   pmkit::pair_kernels::LennardJones<3> lj{epsilon, sigma, cutoff};
//   pairs.compute(lj, {}, {fx, fy, fz, energy});   // outputs in the caller's order
//
// With a particle-mesh plan on the same particles and box, pairs.set_points(mesh_plan)
// bins the mesh plan's particles instead (validated once, by the mesh plan).
//
// A pair kernel is a functor with
//   static constexpr int inputs;    // per-particle properties it reads (e.g. charge)
//   static constexpr int outputs;   // per-particle values it accumulates
//   template <class T> PMKIT_HD void operator()(const T* r, T r2, const T* in_i,
//       const T* in_j, T* out_i, T* out_j) const;
// called once per unordered pair {i, j} of distinct particles with |r| < cutoff (r = x_i - x_j, minimum
// image on periodic axes, r2 = |r|^2); it adds the pair's share to out_i and out_j.
// Both shells call it the same way: the half shell visits each pair once (Newton's third
// law), the full shell twice, discarding out_j; results agree to rounding. Optionally,
//   template <class T> PMKIT_HD void finish(T* out) const;
// turns a particle's summed outputs into its results, once, after all its pairs: a
// factor common to every pair taken out of the pair's code (Lennard-Jones' 24 eps /
// sigma^2, one instruction of its 13 on the GPU); it must be linear (the sums of the half
// shell arrive in parts).
//
// CUDA backend (options.backend = Backend::Cuda): positions, inputs and outputs are device
// pointers. The full-shell methods gather each particle's own outputs (no atomics, the same
// bits from run to run); PairMethod::CudaHalfShell calls the kernel once per pair, as the
// CPU half shell does, and sums with floating-point atomics, so its last bits vary from
// run to run. compute() with a kernel type runs device code compiled for that type: the
// built-in kernels come compiled in the library; a file that calls compute() with its own
// kernel on the CUDA backend is compiled by nvcc and includes "pmkit/cuda/pairs.cuh".
#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "pmkit/config.hpp"
#include "pmkit/error.hpp"
#include "pmkit/grid.hpp"
#include "pmkit/plan.hpp"  // Backend
#include "pmkit/view.hpp"

namespace pmkit {

template <int D>
struct Box {
  static_assert(D == 2 || D == 3, "pmkit boxes are 2D or 3D");
  std::array<double, D> origin{};
  std::array<double, D> length{};
  std::array<Boundary, D> boundary{};  // value-initialised: Periodic

  static Box periodic(std::array<double, D> length, double origin = 0.0) {
    Box b;
    b.length = length;
    b.origin.fill(origin);
    return b;
  }
  static Box bounded(std::array<double, D> length, double origin = 0.0) {
    Box b = periodic(length, origin);
    b.boundary.fill(Boundary::Bounded);
    return b;
  }
};

// How the CUDA backend walks the cell lists (the CPU backend ignores it).
enum class PairMethod {
  // Times each method below once (the x-pencil with 256, 128 and 512 targets a block,
  // the half shell with 256 and 128; in float also the x-pencil and the half shell with
  // 256 compiled to fewer registers), on the first compute of a kernel type after
  // set_points (and again when the particles per cell change by 2x), then keeps the
  // fastest. The timed calls produce correct outputs too. It may pick the half shell,
  // whose results are not bit-for-bit reproducible (see below).
  Auto,
  // One thread per particle; sources read from global memory (through L1), the three
  // cells of each neighbouring x-row as one contiguous range.
  CudaThreadPerParticle,
  // Thread per particle with a particle's neighbouring x-rows split over three threads
  // (in 3D one z-plane of three rows each, in 2D one row each), their outputs added in a
  // fixed order: for few particles a cell, where one thread's rows one after the other
  // are a chain of dependent loads and too few particles keep the GPU busy meanwhile.
  CudaThreeThreadsPerParticle,
  // One block per cell; the sources of each neighbouring x-row staged in shared memory.
  CudaBlockPerCell,
  // One block per x-pencil of cells (as many as fill the block with targets); the
  // 3^(D-1) neighbouring pencils staged once in shared memory for all of them, each cut
  // to the targets' x-window when cells are sorted by x (4 or more particles a cell).
  CudaXPencil,
  // Newton's third law on the x-pencil's staging: each pair once, from the target in
  // whose half shell the source's cell lies (13 of the 26 neighbour cells in 3D, 4 of 8
  // in 2D; in its own cell, the sources of higher sorted slot). The reaction reaches the
  // source through floating-point atomics, in an order that varies: results agree with
  // the other methods to rounding, but are not bit-for-bit reproducible. Needs scratch of
  // Kernel::outputs values per particle.
  CudaHalfShell,
};

struct PairOptions {
  Backend backend = Backend::Cpu;
  int num_threads = 0;     // CPU: OpenMP threads, 0 = OpenMP's default
  bool half_shell = true;  // CPU: Newton's third law, each pair once (per-thread output buffers)
  PairMethod method = PairMethod::Auto;  // CUDA
  int device = 0;                        // CUDA: device ordinal
};

inline const char* to_string(PairMethod method) {
  switch (method) {
    case PairMethod::Auto: return "auto";
    case PairMethod::CudaThreadPerParticle: return "thread-per-particle";
    case PairMethod::CudaThreeThreadsPerParticle: return "3-threads-per-particle";
    case PairMethod::CudaBlockPerCell: return "block-per-cell";
    case PairMethod::CudaXPencil: return "x-pencil";
    case PairMethod::CudaHalfShell: return "half-shell";
  }
  return "?";
}

namespace detail {
template <class Kernel, class T, class = void>
struct HasFinish : std::false_type {};
template <class Kernel, class T>
struct HasFinish<Kernel, T, std::void_t<decltype(std::declval<const Kernel&>().finish(std::declval<T*>()))>>
    : std::true_type {};

// A particle's summed outputs into its results (the kernel's finish, where it has one).
template <class Kernel, class T>
PMKIT_HD inline void finish_outputs(const Kernel& kernel, T* out) {
  if constexpr (HasFinish<Kernel, T>::value) kernel.finish(out);
}
}  // namespace detail

namespace pair_kernels {

namespace detail {
template <class T>
PMKIT_HD inline T reciprocal(T x) {
#if defined(__CUDA_ARCH__)
  // rcp.approx.ftz: one MUFU.RCP. __fdividef(1, x) adds four instructions that rescue a
  // denormal x (r^2 below 1e-38, where a pair's force overflows anyway) and returns the
  // same value for every normal x; in the pair loops they are four of the LJ body's 22
  // instructions (bench/NOTES.md P17).
  if constexpr (std::is_same<T, float>::value) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
#endif
  return T(1) / x;
}
}  // namespace detail

// Lennard-Jones, truncated at the cutoff and shifted so the energy is continuous there;
// `softening` is added to r^2 so that overlapping particles give finite values.
// Outputs: the force on the particle (D components), then its potential energy (half
// of each pair's energy goes to each particle, so the outputs sum to the total).
// sigma must be positive (the body divides by it once, into constants).
template <int D>
struct LennardJones {
  static constexpr int inputs = 0;
  static constexpr int outputs = D + 1;
  double epsilon = 1.0;
  double sigma = 1.0;
  double cutoff = 2.5;
  double softening = 0.0;

  template <class T>
  PMKIT_HD T energy(T r2) const {
    const T s2 = T(sigma * sigma) / (r2 + T(softening * softening));
    const T s6 = s2 * s2 * s2;
    return T(4 * epsilon) * (s6 * s6 - s6);
  }
  template <class T>
  PMKIT_HD void operator()(const T* r, T r2, const T*, const T*, T* out_i, T* out_j) const {
    // One reciprocal per pair, of a fused multiply-add: s2 = sigma^2 / (r^2 + soft^2) =
    // 1 / (r^2 / sigma^2 + soft^2 / sigma^2), one instruction shorter than scaling the
    // reciprocal of r^2 + soft^2 (bench/NOTES.md P26). In float on the GPU, the hardware
    // reciprocal (2 ulp) rather than the IEEE division, whose slow-path branch costs a
    // quarter of the pair.
    const double inv_sigma2 = 1 / (sigma * sigma);  // once per thread: the compiler hoists it
    const T s2 = detail::reciprocal(r2 * T(inv_sigma2) + T(softening * softening * inv_sigma2));
    const T s6 = s2 * s2 * s2;
    // With a = s^12 - s^6: U = 4 eps a and F_i = -dU/dr r_hat =
    // 24 eps (2 s^12 - s^6) / (r^2 + soft^2) r = (24 eps / sigma^2) (2 a + s6) s2 r.
    // Written so, the body is two instructions shorter on the GPU (bench/NOTES.md P18),
    // and a = s6 s6 - s6 one fused multiply-add (P20). The force is summed without its
    // constant 24 eps / sigma^2, which finish applies once (P31).
    const T a = s6 * s6 - s6;
    const T f = (T(2) * a + s6) * s2;
    for (int d = 0; d < D; ++d) {
      out_i[d] += f * r[d];
      out_j[d] -= f * r[d];
    }
    // Half of the pair's shifted energy to each particle.
    const T u = T(2 * epsilon) * a - T(0.5) * energy(T(cutoff * cutoff));
    out_i[D] += u;
    out_j[D] += u;
  }
  template <class T>
  PMKIT_HD void finish(T* out) const {
    for (int d = 0; d < D; ++d) out[d] *= T(24 * epsilon / (sigma * sigma));
  }
};

// Each particle's number of neighbours closer than the cutoff, as T (exact up to 2^24 in
// float): neighbour statistics, SPH number densities, a check of a cell list.
struct NeighbourCount {
  static constexpr int inputs = 0;
  static constexpr int outputs = 1;
  template <class T>
  PMKIT_HD void operator()(const T*, T, const T*, const T*, T* out_i, T* out_j) const {
    out_i[0] += T(1);
    out_j[0] += T(1);
  }
};

// Synthetic kernels for benchmarking the traversal: a cheap one (a few flops) and an
// expensive one (transcendental functions), both symmetric sums.
struct CheapSynthetic {
  static constexpr int inputs = 0;
  static constexpr int outputs = 1;
  double cutoff = 1.0;
  template <class T>
  PMKIT_HD void operator()(const T*, T r2, const T*, const T*, T* out_i, T* out_j) const {
    const T w = T(cutoff * cutoff) - r2;
    out_i[0] += w;
    out_j[0] += w;
  }
};
struct ExpensiveSynthetic {
  static constexpr int inputs = 1;  // a weight per particle
  static constexpr int outputs = 1;
  double cutoff = 1.0;
  template <class T>
  PMKIT_HD void operator()(const T*, T r2, const T* in_i, const T* in_j, T* out_i, T* out_j) const {
    using std::exp;
    using std::sqrt;
    using std::cos;
    const T r = sqrt(r2);
    const T w = exp(-r2) * cos(r) / (T(1) + r);
    out_i[0] += w * in_j[0];
    out_j[0] += w * in_i[0];
  }
};

}  // namespace pair_kernels

namespace detail {
template <class T, int D>
struct CellList;
}  // namespace detail

template <class T, int D>
class PairPlan {
 public:
  using Positions = std::array<View<const T>, D>;

  PairPlan(const Box<D>& box, double cutoff, PairOptions options = {});
  ~PairPlan();
  PairPlan(PairPlan&&) noexcept;
  PairPlan& operator=(PairPlan&&) noexcept;

  // Validates (finite, inside bounded axes) and bins the positions. A failed call keeps
  // the previous points.
  void set_points(const Positions& positions);
  // The particles of a mesh plan over the same box (its grid's domain: the same origin,
  // lengths to a relative 1e-12, and boundaries), taken as that plan binned them
  // (Plan::binned_positions and binned_order, on the same backend and device): nothing of
  // the caller's is read or validated again, and the cell sort reads positions in the mesh
  // plan's spatial order. Results stay in the caller's order of the mesh plan's points.
  // Positions are the mesh plan's, within a rounding of the caller's: a pair within that
  // rounding of the cutoff may count or not.
  void set_points(const Plan<T, D>& mesh);

  // Overwrites outputs[k][p] with particle p's accumulated output k of the kernel;
  // inputs[k][p] is its input k. Nothing the caller owns is written if a check fails.
  // CUDA: asynchronous on the default stream, like a kernel launch (and like Plan::spread
  // and interp with device arrays): use the outputs in stream order or after
  // cudaDeviceSynchronize(). The first compute of a kernel type with PairMethod::Auto
  // waits, for its one-time timing.
  template <class Kernel>
  void compute(const Kernel& kernel, Span<View<const T>> inputs, Span<View<T>> outputs);

  std::size_t num_points() const;
  bool has_points() const;
  std::array<int, D> cells() const;
  double cutoff() const { return cutoff_; }
  const Box<D>& box() const { return box_; }
  const PairOptions& options() const { return options_; }
  // CUDA: the method that ran the last compute (Auto resolved); CPU: Auto.
  PairMethod last_method() const;
  // Seconds of the last compute's traversal: CUDA, the device time of its kernels (CUDA
  // events; the one-time Auto timing excluded), which waits for them to end; CPU, the wall
  // time of the traversal.
  Timings last_timings() const;

 private:
  // The CPU cell sort of offsets from the box origin plus `origin` (the box's own
  // origin for the caller's positions, zeros for a mesh plan's offsets); with `order`,
  // input k is the caller's particle order[k].
  void bin_on_host(const Positions& positions, const std::array<double, D>& origin, const std::uint32_t* order);
  void check_compute(std::size_t inputs, std::size_t outputs, Span<View<const T>> in, Span<View<T>> out) const;
  Box<D> box_;
  double cutoff_;
  PairOptions options_;
  Timings timings_;
  std::unique_ptr<detail::CellList<T, D>> cells_;
};

}  // namespace pmkit

#include "pmkit/pairs_impl.hpp"
