#pragma once
// The particle step for a caller's update functor on either backend. Include this from a
// file compiled by nvcc and call pmkit::cuda::step(particles, update, meshes): on a CUDA
// plan the step's pass runs in a kernel compiled here for the functor, one thread a
// particle in binned order, on the plan's stream, without a host wait: the fields
// interpolated at the particle's position, the functor, the new position checked and
// wrapped; on a CPU plan it is pmkit::step (pmkit/particle_step.hpp), the same pass on
// the host. The functor's operator() is therefore PMKIT_HD (__host__ __device__ under
// nvcc). The rest of the step (update_points, the deposits, the binned order) is
// compiled into the library. In deterministic mode the fields come from the plan's
// interp calls, before the pass, so that a step gives the unfused calls' bits; else the
// pass interpolates them itself (to rounding the same: the plan's CUDA interp sums in
// another order).
//
// A position that the update leaves bad is found on the device: the step's later passes,
// and the later steps', then write nothing, and the next call that sees the rejection
// (a step whose plan call reports it, or Particles::synchronize, which waits) throws it,
// with the particles restored to their state before that step and binned again.
#include <cuda_runtime.h>

#include "pmkit/detail/cuda/runtime.hpp"
#include "pmkit/particle_step.hpp"

namespace pmkit {
namespace detail {

// The step's pass on the device: one thread a binned slot, in a grid-stride loop
// (neighbouring threads read neighbouring nodes, in cache); nothing once a step has left
// a rejected position. A bad new position is recorded: its slot (the least), and the
// state buffer before the step.
template <class K, bool kFused, class T, int D, class Update>
__global__ void __launch_bounds__(256)
    particle_step_kernel(StepArrays<T> a, StepGather<T, D> g, Update update) {
  if (a.rejection->slot != kNoRejection) return;
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < a.n;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    if (!update_particle<K, kFused>(a, g, k, update)) {
      a.rejection->good_buffer = a.good_buffer;
      atomicMin(&a.rejection->slot, static_cast<unsigned long long>(k));
    }
}

}  // namespace detail

namespace cuda {

template <class T, int D, class Update>
void step(Particles<T, D>& particles, const Update& update, const StepMeshes<T>& meshes = {}) {
  const Options& options = particles.plan().options();
  if (options.backend != Backend::Cuda) return pmkit::step(particles, update, meshes);
  detail::StepGather<T, D> g;
  const detail::StepArrays<T> a = detail::ParticlesAccess::begin(particles, meshes, StepShape::of<Update>(), g);
  if (a.n > 0) {
    const DeviceScope on_device(options.device);
    constexpr int kThreads = 256;
    const std::size_t wanted = (a.n + kThreads - 1) / kThreads;
    const unsigned blocks = static_cast<unsigned>(wanted < (1u << 20) ? wanted : (1u << 20));
    detail::with_step_kernel<Update>(particles.plan().kernel(), g, [&](auto k, auto fused) {
      detail::particle_step_kernel<decltype(k), decltype(fused)::value, T, D>
          <<<blocks, kThreads, 0, to_cuda_stream(options.stream)>>>(a, g, update);
    });
    check_launch("pmkit::cuda::step (the update functor's kernel)");
  }
  detail::ParticlesAccess::end(particles, meshes, detail::kNoRejection);
}

}  // namespace cuda
}  // namespace pmkit
