#pragma once
// The particle step for a caller's update functor on either backend. Include this from a
// file compiled by nvcc and call pmkit::cuda::step(particles, update, meshes): on a CUDA
// plan the update runs in a kernel compiled here for the functor, one thread a particle
// in binned order, on the plan's stream, without a host wait; on a CPU plan it is
// pmkit::step (pmkit/particle_step.hpp), the functor called on the host. The functor's
// operator() is therefore PMKIT_HD (__host__ __device__ under nvcc). Everything of the
// step but the update (the interpolation, the position check and wrap, update_points, the
// deposit's spread, the binned order) is compiled into the library.
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

// The update on the device: one thread a binned slot, in a grid-stride loop; nothing
// once a step has left a rejected position.
template <class T, int D, class Update>
__global__ void __launch_bounds__(256) particle_step_kernel(StepArrays<T> a, Update update) {
  if (*a.rejected != kNoRejection) return;
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < a.n;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    update_particle<T, D>(a, k, update);
}

}  // namespace detail

namespace cuda {

template <class T, int D, class Update>
void step(Particles<T, D>& particles, const Update& update, const StepMeshes<T>& meshes = {}) {
  const Options& options = particles.plan().options();
  if (options.backend != Backend::Cuda) return pmkit::step(particles, update, meshes);
  const detail::StepArrays<T> a = detail::ParticlesAccess::begin(particles, meshes, StepShape::of<Update>());
  if (a.n > 0) {
    const DeviceScope on_device(options.device);
    constexpr int kThreads = 256;
    const std::size_t wanted = (a.n + kThreads - 1) / kThreads;
    const unsigned blocks = static_cast<unsigned>(wanted < (1u << 20) ? wanted : (1u << 20));
    detail::particle_step_kernel<T, D><<<blocks, kThreads, 0, to_cuda_stream(options.stream)>>>(a, update);
    check_launch("pmkit::cuda::step (the update functor's kernel)");
  }
  detail::ParticlesAccess::end(particles, meshes);
}

}  // namespace cuda
}  // namespace pmkit
