#pragma once
// The arrays behind pmkit::Particles and the passes over them that do not depend on the
// caller's update, in the plan's memory: the host's (src/particles.cpp) or a CUDA
// device's (src/cuda/particles.cu).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "pmkit/detail/affine_stencil.hpp"
#include "pmkit/detail/step_gather.hpp"
#include "pmkit/particle_step.hpp"

namespace pmkit::detail {

template <class T, int D>
class ParticleMemory {
 public:
  virtual ~ParticleMemory() = default;
  // Room for n particles: two sets of `arrays` state arrays, `fields` field arrays,
  // `deposits` deposit arrays, the ids and the order (kept where large enough).
  virtual void reserve(std::size_t n, int arrays, int fields, int deposits) = 0;
  virtual T* state(int buffer) = 0;
  virtual T* fields() = 0;
  virtual T* deposits() = 0;
  virtual std::uint32_t* ids() = 0;
  virtual std::uint32_t* order() = 0;
  virtual StepRejection* rejection() = 0;
  // Zeroes `size` values of a mesh (in stream order on a device).
  virtual void clear(T* mesh, std::int64_t size) = 0;
  // Refuses a mesh the step's pass reads that is not in this memory (a device's).
  virtual void check_mesh(const void* data, const char* what, int index) = 0;
  // to[k] = from[k] for the n particles.
  virtual void copy_in(T* to, View<const T> from) = 0;
  // to[ids[k]] = from[k].
  virtual void copy_out(View<T> to, const T* from) = 0;
  virtual void fill_ids() = 0;
  // Checks and wraps the D position arrays at x (wrap_position), for assign. The host:
  // returns the first bad slot, or kNoRejection. A device: records the first bad slot
  // and `good_buffer` for take_rejection, and returns kNoRejection.
  virtual unsigned long long check_positions(T* x, int good_buffer) = 0;
  // to[j n + k] = from[j n + order[k]] for `arrays` arrays, and the ids by the same
  // order; nothing once a rejection is recorded.
  virtual void gather(const T* from, T* to, int arrays) = 0;
  // The rejection recorded (a wait for the device), or kNoRejection; cleared. Sets
  // good_buffer to the buffer that holds the state before the rejected step.
  virtual unsigned long long take_rejection(int& good_buffer) = 0;
  // One value (a wait for the device).
  // The affine gather at the D position arrays x of the n particles into out
  // (affine_gather_particle's layout).
  virtual void affine_gather(const Layout<D>& layout, const T* x, const AffineMeshes<const T>& meshes, T* out) = 0;
  // The affine deposit of q (affine_spread_particle's layout) at x onto the meshes of
  // mesh_size values each, zeroed first where `overwrite`; nothing once a rejection is
  // recorded. `exact`: sums that do not depend on the order of the additions (a
  // device's deterministic mode; the host's always are).
  virtual void affine_spread(const Layout<D>& layout, const T* x, const T* q, const AffineMeshes<T>& meshes,
                             std::int64_t mesh_size, bool overwrite, bool exact) = 0;
  virtual T read(const T* at) = 0;
  virtual std::uint32_t read_id(std::size_t slot) = 0;
};

template <class T, int D>
std::unique_ptr<ParticleMemory<T, D>> make_host_particle_memory(const Grid<D>& grid, int threads);
template <class T, int D>
std::unique_ptr<ParticleMemory<T, D>> make_cuda_particle_memory(const Grid<D>& grid, const ExecutionOptions& options);

}  // namespace pmkit::detail
