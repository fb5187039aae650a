#pragma once
// CUDA traversal of the pair cell lists for a caller's pair kernel. Include this from a
// file compiled by nvcc and call pmkit::cuda::compute(plan, kernel, inputs, outputs) to run
// your own kernel on a CUDA pair plan (PairPlan::compute runs the built-in kernels, which
// the library compiles, and any kernel on the CPU backend).
//
// Four methods are full shell: every particle (a "target") sums its own outputs over the
// "sources" of the 3^D cells around its cell, so no two threads write the same output and
// no atomics are needed. The particles are sorted by cell with x fastest, so the three
// cells of one neighbouring x-row are one contiguous range of sorted slots: a row is one
// range (two or three on a periodic seam, each with its periodic image shift).
//
// - thread per particle: each thread reads its sources from global memory (the threads of
//   a warp share cells, so the reads hit L1);
// - three threads per particle: the same with a particle's rows in three parts, each
//   walked by a warp of its own (for few particles a cell: thread_per_particle_kernel);
// - x-pencil: a block takes L consecutive cells of an x-row; it stages cells x0-1 .. x0+L
//   of all 3^(D-1) neighbouring rows into shared memory at once (in stages if they do not
//   fit), and every target reads its three cells of each row from there. Where cells
//   hold 4 or more particles the binning also sorts each cell by x, and each staged row
//   is cut by binary search to the x-window within a cutoff of the warp's targets (or of
//   each lane's target, when a warp spans more than a cell). Where cells are dense (3D),
//   the binning also lists, for each of the four corner rows (dy and dz both nonzero),
//   only the sources that can be within the cutoff of the x-row, and those rows are
//   staged from these lists (pair_geometry.hpp, corner_source_live);
// - block per cell: the x-pencil with L = 1;
// - compacted x-pencil: the x-pencil with each chunk of 32 candidates tested into a mask,
//   the kernel then run on the ones in range only (a costly kernel's lanes run it
//   together); the row split: the same walk with a target's rows split over warps, one
//   row each, added in a fixed order, a cell's targets in blocks of 32 (small systems).
//
// The fourth, the half shell, calls the kernel once per pair (Newton's third law): the
// x-pencil's blocks and staging on the rows ahead of the target only (see
// half_shell_kernel), the source's share summed over a warp in registers and added with
// one atomic per source and warp. Its results vary in the last bits from run to run.
// Where cells are dense, its blocks' targets are whole warps, the last running on into the
// next pencil's first cell (pencil_targets).
//
// The pieces, one job each (pmkit/detail/cuda/): pair_rows.cuh (arguments, row ranges),
// pair_thread_kernel.cuh, pair_pencil_block.cuh (a pencil block's staging),
// pair_window.cuh (a target's window and walk over a staged row), pair_pencil_kernel.cuh,
// pair_half_shell_kernel.cuh, pair_compact_kernel.cuh (the compacted walk and the row
// split), pair_launch.cuh (shapes, dispatch) and pair_auto.cuh (the Auto timing). The cell binning and the rest that does not depend on the kernel type
// are compiled into the library.
#include <cuda_runtime.h>

#include "pmkit/detail/cuda/pair_auto.cuh"
#include "pmkit/pairs.hpp"

namespace pmkit {

namespace detail {
template <class X>
struct NonDeduced {
  using type = X;
};

struct PairPlanAccess {
  template <class T, int D>
  static void check_compute(const PairPlan<T, D>& plan, std::size_t inputs, std::size_t outputs,
                            Span<View<const T>> in, Span<View<T>> out) {
    plan.check_compute(inputs, outputs, in, out);
  }
  template <class T, int D>
  static DevicePairs<T, D>* device_pairs(PairPlan<T, D>& plan) {
    return plan.device_pairs();
  }
};
// The traversals the library compiles for its built-in kernels (src/cuda/pairs/builtin.cuh,
// P = template), declared here (P = extern template) so that code including this header
// links them instead of compiling them again.
#define PMKIT_CUDA_PAIR_TRAVERSAL(P, T, D, KERNEL)                                                              \
  P void device_pair_compute<T, D, KERNEL>(DevicePairs<T, D>&, const KERNEL&, PairMethod, Span<View<const T>>, \
                                           Span<View<T>>);
#define PMKIT_CUDA_BUILTIN_PAIR_TRAVERSALS(P, T)                    \
  PMKIT_CUDA_PAIR_TRAVERSAL(P, T, 2, pair_kernels::LennardJones<2>)   \
  PMKIT_CUDA_PAIR_TRAVERSAL(P, T, 3, pair_kernels::LennardJones<3>)   \
  PMKIT_CUDA_PAIR_TRAVERSAL(P, T, 2, pair_kernels::NeighbourCount)    \
  PMKIT_CUDA_PAIR_TRAVERSAL(P, T, 3, pair_kernels::NeighbourCount)    \
  PMKIT_CUDA_PAIR_TRAVERSAL(P, T, 2, pair_kernels::EwaldRealSpace<2>) \
  PMKIT_CUDA_PAIR_TRAVERSAL(P, T, 3, pair_kernels::EwaldRealSpace<3>)
PMKIT_CUDA_BUILTIN_PAIR_TRAVERSALS(extern template, float)
PMKIT_CUDA_BUILTIN_PAIR_TRAVERSALS(extern template, double)
}  // namespace detail

namespace cuda {

// PairPlan::compute for any pair kernel on either backend: on a CUDA plan, the traversal
// compiled here for the kernel; on a CPU plan, and for a built-in kernel (whose
// parameters the plan checks), PairPlan::compute.
template <class T, int D, class Kernel>
void compute(PairPlan<T, D>& plan, const Kernel& kernel, typename detail::NonDeduced<Span<View<const T>>>::type inputs,
             typename detail::NonDeduced<Span<View<T>>>::type outputs) {
  if constexpr (detail::kBuiltinPairKernel<Kernel, D>) {
    plan.compute(kernel, inputs, outputs);
  } else {
    detail::DevicePairs<T, D>* dev = detail::PairPlanAccess::device_pairs(plan);
    if (!dev) return plan.compute(kernel, inputs, outputs);
    detail::PairPlanAccess::check_compute(plan, Kernel::inputs, Kernel::outputs, inputs, outputs);
    detail::device_pair_compute<T, D>(*dev, kernel, plan.options().method, inputs, outputs);
  }
}

}  // namespace cuda
}  // namespace pmkit
