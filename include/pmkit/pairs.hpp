#pragma once
// Particle-particle interactions within a cutoff radius, on cell lists (cells at least
// as wide as the cutoff), on the CPU (OpenMP) or a CUDA device.
//
//   pmkit::PairPlan<double, 3> pairs(pmkit::Box<3>::periodic({L, L, L}), cutoff);
//   pairs.set_points({x, y, z});
//   pmkit::pair_kernels::LennardJones<3> lj{epsilon, sigma, cutoff};
//   pairs.compute(lj, {}, {fx, fy, fz, energy});   // outputs in the caller's order
//
// The domain is a Box, or the Grid of a mesh plan on the same particles:
// PairPlan(grid, cutoff) takes the grid's domain (origin, cells * spacing, boundaries;
// Box<D>::of(grid)). pairs.set_points(mesh_plan) then bins the mesh plan's particles
// instead of the caller's arrays (validated once, by the mesh plan).
//
// A pair kernel is a functor with
//   static constexpr int inputs;    // per-particle properties it reads (e.g. charge)
//   static constexpr int outputs;   // per-particle values it accumulates
//   template <class T> PMKIT_HD void operator()(const T* r, T r2, const T* in_i,
//       const T* in_j, T* out_i, T* out_j) const;
// called once per unordered pair {i, j} of distinct particles with |r| < cutoff (r = x_i -
// x_j, minimum image on periodic axes, r2 = |r|^2); it adds the pair's share to out_i and
// out_j. Both shells call it the same way: the half shell visits each pair once (Newton's
// third law), the full shell twice, discarding out_j; results agree to rounding.
// Optionally,
//   template <class T> PMKIT_HD void finish(T* out) const;
// turns a particle's summed outputs into its results, once, after all its pairs: a
// factor common to every pair taken out of the pair's code (Lennard-Jones' 24 eps /
// sigma^2); it must be linear (the sums of the half shell arrive in parts).
//
// Which call runs which kernel where:
//  - PairPlan::compute runs the built-in kernels (pmkit/pair_kernels.hpp) on either
//    backend (compiled into the library), and any kernel of the caller's on the CPU
//    backend: the work of a cell is compiled for the kernel where compute is called
//    (pmkit/detail/pair_traversal.hpp, plain C++), the library's threads share the cells
//    (options.num_threads), so the caller's file needs no OpenMP.
//  - A kernel of the caller's on the CUDA backend needs device code compiled for it: a
//    file compiled by nvcc includes "pmkit/cuda/pairs.cuh" and calls
//    pmkit::cuda::compute(plan, kernel, inputs, outputs) (which runs any kernel on either
//    backend). PairPlan::compute with such a kernel on a CUDA plan throws
//    pmkit::Error(Unsupported) saying so.
//
// CUDA backend (options.backend = Backend::Cuda): positions, inputs and outputs are device
// pointers, and every kernel, copy and event runs on options.stream. The full-shell
// methods gather each particle's own outputs (no atomics, the same bits from run to run);
// PairMethod::CudaHalfShell calls the kernel once per pair, as the CPU half shell does,
// and sums with floating-point atomics, so its last bits vary from run to run.
//
// Waits (CUDA): set_points (both forms) and compute queue their work and return without
// waiting for the device. The binning validates the positions on the device: a rejected
// one (not finite, outside a bounded axis) is thrown by the plan's next call that finds
// it recorded, or by synchronize(), which waits; the plan then has no points. Only the
// first compute of a kernel type with PairMethod::Auto (its timing), last_timings(),
// synchronize() and a call that must allocate more device memory wait. After one eager
// call of the same sizes (the same number of particles, the same kernel type), set_points
// and compute capture into a CUDA graph (cudaStreamBeginCapture on options.stream); a
// replay bins the positions then in the arrays it was captured with, in place.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "pmkit/backend.hpp"
#include "pmkit/detail/pair_traversal.hpp"
#include "pmkit/error.hpp"
#include "pmkit/grid.hpp"
#include "pmkit/pair_kernels.hpp"
#include "pmkit/plan.hpp"
#include "pmkit/view.hpp"

namespace pmkit {

// The domain of a pair plan: an origin, a length and a boundary per axis. Box<D>::of(grid)
// is a mesh plan's domain, so that both plans on one set of particles share it.
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
  // The grid's domain: [origin, origin + cells * spacing] per axis, its boundaries.
  static Box of(const Grid<D>& grid) {
    Box b;
    for (int d = 0; d < D; ++d) {
      b.origin[d] = grid.origin[d];
      b.length[d] = double(grid.cells[d]) * grid.spacing[d];
      b.boundary[d] = grid.boundary[d];
    }
    return b;
  }
};

// How the CUDA backend walks the cell lists (the CPU backend ignores it).
enum class PairMethod {
  // Times each method below once (the x-pencil with 256, 128 and 512 targets a block,
  // the half shell with 256 and 128; in float also the x-pencil and the half shell with
  // 256 compiled to fewer registers; the compacted x-pencil with 256 and 128, and the
  // row split), on the first compute of a kernel type after
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
  // The x-pencil's blocks and staging with a walk that tests 32 candidates at once into a
  // mask and then runs the kernel on the ones in range only, so that a warp's lanes run
  // the kernel's body together: for costly kernels (the Ewald sum's erfc) where a fifth of
  // the candidates is in range. The same pairs in the same order as the x-pencil.
  CudaCompactPencil,
  // The compacted walk with each target's neighbouring rows split over warps (one row
  // each: 9 in 3D, 3 in 2D), their outputs added in a fixed order, a cell's targets in
  // blocks of 32: for systems too small to fill the GPU with a warp per 32 targets (10^4
  // particles at 100 a cell).
  CudaRowSplit,
};

struct PairOptions : ExecutionOptions {
  bool half_shell = true;  // CPU: Newton's third law, each pair once (per-thread output buffers)
  PairMethod method = PairMethod::Auto;  // CUDA
};

inline const char* to_string(PairMethod method) {
  switch (method) {
    case PairMethod::Auto: return "auto";
    case PairMethod::CudaThreadPerParticle: return "thread-per-particle";
    case PairMethod::CudaThreeThreadsPerParticle: return "3-threads-per-particle";
    case PairMethod::CudaBlockPerCell: return "block-per-cell";
    case PairMethod::CudaXPencil: return "x-pencil";
    case PairMethod::CudaHalfShell: return "half-shell";
    case PairMethod::CudaCompactPencil: return "compact-pencil";
    case PairMethod::CudaRowSplit: return "row-split";
  }
  return "?";
}

namespace detail {
template <class T, int D>
class PairBackend;
template <class T, int D>
class DevicePairs;
struct PairPlanAccess;  // pmkit/cuda/pairs.cuh
}  // namespace detail

template <class T, int D>
class PairPlan {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "pmkit pair plans are float or double");

 public:
  using Positions = std::array<View<const T>, D>;

  PairPlan(const Box<D>& box, double cutoff, PairOptions options = {});
  // The domain of a mesh plan's grid (Box<D>::of(grid)).
  PairPlan(const Grid<D>& grid, double cutoff, PairOptions options = {});
  ~PairPlan();
  PairPlan(PairPlan&&) noexcept;
  PairPlan& operator=(PairPlan&&) noexcept;
  PairPlan(const PairPlan&) = delete;
  PairPlan& operator=(const PairPlan&) = delete;

  // Validates (finite, inside bounded axes) and bins the positions. CPU: a rejected
  // position throws here and the previous points stay. CUDA: returns once the work is
  // queued; a rejected position is thrown by a later call or synchronize(), and the plan
  // has no points after it (set_points again).
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
  // A built-in kernel's parameters are checked (LennardJones: epsilon finite, sigma
  // positive and finite, softening zero or positive and finite, cutoff the plan's).
  // Built-in kernels on either backend, the caller's own kernels on the CPU backend (see
  // the top of this file for the CUDA backend). CUDA: asynchronous on options.stream, like
  // a kernel launch: use the outputs in stream order or after synchronising the stream.
  // The first compute of a kernel type with PairMethod::Auto waits, for its one-time
  // timing.
  template <class Kernel>
  void compute(const Kernel& kernel, Span<View<const T>> inputs, Span<View<T>> outputs) {
    if constexpr (detail::kBuiltinPairKernel<Kernel, D>) {
      compute_builtin(kernel, inputs, outputs);
    } else {
      check_compute(Kernel::inputs, Kernel::outputs, inputs, outputs);
      const detail::KernelPairs<T, D, Kernel> pairs(kernel, inputs, outputs);
      host_pairs().traverse(pairs.work());
    }
  }

  // CUDA: waits for the work queued on options.stream, then throws the error of a
  // position a binning rejected (pmkit::Error: NonFinitePosition or OutOfBounds, as
  // set_points throws it on the CPU backend). CPU: returns (every call is synchronous).
  void synchronize();

  std::size_t num_points() const;
  bool has_points() const;
  std::array<int, D> cells() const;
  double cutoff() const { return cutoff_; }
  const Box<D>& box() const { return box_; }
  const PairOptions& options() const { return options_; }
  // CUDA: later calls run on `stream`, after the work queued so far on the previous one
  // (as Plan::set_stream). The CPU backend keeps the handle.
  void set_stream(StreamHandle stream);
  // CUDA: the method that ran the last compute (Auto resolved); CPU: Auto.
  PairMethod last_method() const;
  // Seconds of the last compute's traversal: CUDA, the device time of its kernels (CUDA
  // events; the one-time Auto timing excluded), which waits for them to end; CPU, the wall
  // time of the traversal.
  Timings last_timings() const;

 private:
  friend struct detail::PairPlanAccess;
  void check_compute(std::size_t inputs, std::size_t outputs, Span<View<const T>> in, Span<View<T>> out) const;
  // The CPU backend's traversal; pmkit::Error(Unsupported) on the CUDA backend.
  detail::HostPairs<T, D>& host_pairs();
  // The CUDA backend's services for the traversal; null on the CPU backend.
  detail::DevicePairs<T, D>* device_pairs();
  void compute_builtin(const pair_kernels::LennardJones<D>& kernel, Span<View<const T>> in, Span<View<T>> out);
  void compute_builtin(const pair_kernels::NeighbourCount& kernel, Span<View<const T>> in, Span<View<T>> out);
  void compute_builtin(const pair_kernels::EwaldRealSpace<D>& kernel, Span<View<const T>> in, Span<View<T>> out);
  template <class Kernel>
  void run_builtin(const Kernel& kernel, Span<View<const T>> in, Span<View<T>> out);

  Box<D> box_;
  double cutoff_;
  PairOptions options_;
  std::unique_ptr<detail::PairBackend<T, D>> backend_;
};

}  // namespace pmkit
