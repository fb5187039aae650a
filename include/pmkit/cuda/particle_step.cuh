#pragma once
// The particle step for a caller's update functor on either backend. Include this from a
// file compiled by nvcc and call pmkit::cuda::step(particles, update, meshes): on a CUDA
// plan the step's pass runs in a kernel compiled here for the functor, over the
// particles in binned order, on the plan's stream, without a host wait: the fields
// interpolated at the particle's position, the functor, the new position checked and
// wrapped, and the functor's deposits added at the new position (each block's summed in
// shared memory first); on a CPU plan it is pmkit::step (pmkit/particle_step.hpp), the
// same pass on the host without the deposits. The functor's operator() is therefore
// PMKIT_HD (__host__ __device__ under nvcc). The rest of the step (update_points, the
// binned order) is compiled into the library. In deterministic mode the fields come
// from the plan's interp calls before the pass, and the deposits go through the plan's
// spread and the exact affine deposit after it, so that a step gives the unfused calls'
// bits; else the pass interpolates and deposits itself (to rounding the same: the
// plan's CUDA interp sums a stencil's rows in another order, a block's float deposits
// are summed in fixed point at the block's scale, and atomics add in any order).
//
// A position that the update leaves bad is found on the device: the step's later passes,
// and the later steps', then write nothing, and the next call that sees the rejection
// (a step whose plan call reports it, or Particles::synchronize, which waits) throws it,
// with the particles restored to their state before that step and binned again.
#include <cuda_runtime.h>

#include "pmkit/detail/cuda/runtime.hpp"
#include "pmkit/detail/cuda/step_deposit.cuh"
#include "pmkit/particle_step.hpp"

namespace pmkit {
namespace detail {

// A deposit box takes as many meshes as a step deposits on.
static_assert(kMaxStepMeshes <= kMaxBoxMeshes && kMaxAffineMeshes <= kMaxBoxMeshes, "a box for every deposit mesh");

// The step's pass on the device: one thread a binned slot, in a grid-stride loop
// (neighbouring threads read neighbouring nodes, in cache); nothing once a step has left
// a rejected position. A bad new position is recorded: its slot (the least), and the
// state buffer before the step. The deposits go to StepArrays::deposits for the
// library's passes.
template <class K, bool kFused, class T, int D, class Update>
__global__ void __launch_bounds__(256)
    particle_step_kernel(StepArrays<T> a, StepGather<T, D> g, Update update) {
  if (a.rejection->slot != kNoRejection) return;
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < a.n;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    StepParticleFor<T, D, Update> p;
    if (update_particle<K, kFused>(a, g, k, update, p)) {
      store_deposits<T, D, Update>(a, k, p);
    } else {
      a.rejection->good_buffer = a.good_buffer;
      atomicMin(&a.rejection->slot, static_cast<unsigned long long>(k));
    }
  }
}

// Binned particles a thread of the pass with deposits takes: more a block means fewer
// of the box's global atomics a particle, at the cost of the registers that hold each
// particle's position and deposits until the block's box is known, and of the
// occupancy they leave. Several only for kernels K of support 2 and few values held (a
// CIC push: 4); a wider stencil's weights (TSC, M'4) or the affine moments of an MLS-MPM
// update (whose pass gets K = BSpline<2> where it deposits only affinely,
// with_step_kernel) take those registers: 1. Measured in docs/tuning.md.
template <class K, int D, class Update>
constexpr int deposit_slots_per_thread() {
  using C = StepCounts<Update>;
  constexpr int held = D + C::deposits + C::affine_deposits * (1 + D);
  if (K::support > 2) return 1;
  return held <= 6 ? 4 : held <= 12 ? 2 : 1;
}

// The pass with its deposits (StepGather::fused_deposits): one block a run of 256 x P
// binned particles (P = deposit_slots_per_thread), thread t taking slots t, t + 256, ...,
// whose deposits at their new positions are summed in a box of nodes in shared memory
// (block_deposit: kDepositBoxBytes of dynamic shared memory) and added to the meshes with
// one atomic a node, or, where the box does not fit, added to the meshes directly. A
// particle whose new position is bad deposits nothing.
template <class K, class T, int D, class Update>
__global__ void __launch_bounds__(256)
    particle_step_deposit_kernel(StepArrays<T> a, StepGather<T, D> g, Update update) {
  using C = StepCounts<Update>;
  constexpr int P = deposit_slots_per_thread<K, D, Update>();
  extern __shared__ __align__(16) unsigned char step_shared[];
  __shared__ int first[D], last[D];
  __shared__ bool stopped;
  // Read once a block: this kernel's other blocks may record a rejection meanwhile, and
  // the block's barriers need all its threads.
  if (threadIdx.x == 0) stopped = a.rejection->slot != kNoRejection;
  __syncthreads();
  if (stopped) return;
  StepParticleFor<T, D, Update> p[P];
  bool active[P];
  T x[P][D];  // inside the domain on every thread, so that every stencil is one
  PMKIT_UNROLL
  for (int i = 0; i < P; ++i) {
    const std::size_t k = (blockIdx.x * static_cast<std::size_t>(P) + i) * blockDim.x + threadIdx.x;
    active[i] = false;
    if (k < a.n) {
      active[i] = update_particle<K, true>(a, g, k, update, p[i]);
      if (!active[i]) {
        a.rejection->good_buffer = a.good_buffer;
        atomicMin(&a.rejection->slot, static_cast<unsigned long long>(k));
      }
    }
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) x[i][d] = active[i] ? p[i].x[d] : static_cast<T>(g.axes[d].origin);
  }
  if constexpr (C::deposits > 0) {
    int base[P][D];
    T s[P][D];
    PMKIT_UNROLL
    for (int i = 0; i < P; ++i) locate_position<K>(g.layout, x[i], base[i], s[i]);
    const double peak = node_peak_weight<K, D>();
    const auto bound = [&](int i, double(&most)[kMaxBoxMeshes]) {
      PMKIT_UNROLL
      for (int q = 0; q < C::deposits; ++q) most[q] = peak * fabs(static_cast<double>(p[i].deposit[q]));
    };
    block_deposit<D>(g.layout, g.deposits, C::deposits, K::support, active, base, true, step_shared, kDepositBoxBytes,
                     first, last, bound, [&](const Layout<D>& where, int i, auto&& add) {
                       for_each_node<K, D>(where, base[i], s[i], [&](std::int64_t j, T w) {
                         PMKIT_UNROLL
                         for (int q = 0; q < C::deposits; ++q) add(q, j, w * p[i].deposit[q]);
                       });
                     });
    __syncthreads();  // the box and its bounds again below
  }
  if constexpr (C::affine_deposits > 0) {
    int affine_base[P][D];  // left as they are: the deposit below places its stencils from x again
    PMKIT_UNROLL
    for (int i = 0; i < P; ++i) {
      const AffineStencil<D, T> stencil(g.layout, x[i]);
      PMKIT_UNROLL
      for (int d = 0; d < D; ++d) affine_base[i][d] = stencil.base[d];
    }
    const double peak = node_peak_weight<typename AffineStencil<D, T>::K, D>();
    const auto bound = [&](int i, double(&most)[kMaxBoxMeshes]) {
      PMKIT_UNROLL
      for (int m = 0; m < C::affine_deposits; ++m) most[m] = peak * affine_reach(g.layout, p[i].affine_deposit[m],
                                                                                  p[i].affine_slope[m]);
    };
    block_deposit<D>(g.layout, g.affine_deposits.mesh, C::affine_deposits, 3, active, affine_base, false, step_shared,
                     kDepositBoxBytes, first, last, bound, [&](const Layout<D>& where, int i, auto&& add) {
                       const AffineStencil<D, T> in(where, x[i]);
                       PMKIT_UNROLL
                       for (int m = 0; m < C::affine_deposits; ++m)
                         affine_deposit_mesh(in, m, p[i].affine_deposit[m], p[i].affine_slope[m], add);
                     });
  }
}

}  // namespace detail

namespace cuda {

// The step on the plan's backend. Kernels, where given, are the only plan kernels the
// pass is compiled for (as pmkit::step's): pmkit::cuda::step<kernels::TSC>(particles,
// update, meshes) compiles one kernel of the pass instead of one a plan kernel.
template <class... Kernels, class T, int D, class Update>
void step(Particles<T, D>& particles, const Update& update, const StepMeshes<T>& meshes = {}) {
  const Options& options = particles.plan().options();
  if (options.backend != Backend::Cuda) return pmkit::step<Kernels...>(particles, update, meshes);
  detail::require_compiled_kernel<Kernels...>(particles.plan().kernel(), "pmkit::cuda::step");
  detail::StepGather<T, D> g;
  const detail::StepArrays<T> a = detail::ParticlesAccess::begin(particles, meshes, StepShape::of<Update>(), g);
  if (a.n > 0) {
    const DeviceScope on_device(options.device);
    constexpr int kThreads = 256;
    const std::size_t wanted = (a.n + kThreads - 1) / kThreads;
    const cudaStream_t stream = to_cuda_stream(options.stream);
    detail::with_step_kernel<Update, true, Kernels...>(particles.plan().kernel(), g, [&](auto k, auto fused, auto deposit) {
      using K = decltype(k);
      if constexpr (decltype(deposit)::value) {
        constexpr std::size_t kPerBlock = kThreads * detail::deposit_slots_per_thread<K, D, Update>();
        detail::particle_step_deposit_kernel<K, T, D>
            <<<static_cast<unsigned>((a.n + kPerBlock - 1) / kPerBlock), kThreads, detail::kDepositBoxBytes, stream>>>(
                a, g, update);
      } else {
        const unsigned blocks = static_cast<unsigned>(wanted < (1u << 20) ? wanted : (1u << 20));
        detail::particle_step_kernel<K, decltype(fused)::value, T, D><<<blocks, kThreads, 0, stream>>>(a, g, update);
      }
    });
    check_launch("pmkit::cuda::step (the update functor's kernel)");
  }
  detail::ParticlesAccess::end(particles, meshes, detail::kNoRejection);
}

}  // namespace cuda
}  // namespace pmkit
