#pragma once
// The MLS-MPM example's CUDA execution (simulation.hpp's Exec): the plan's arrays in
// device memory, pmkit::cuda::step, the grid update in a kernel, all on the default
// stream (the plan's). Include from a file compiled by nvcc.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mpm.hpp"
#include "pmkit/cuda/particle_step.cuh"

namespace mpm {
namespace device {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device array of n values.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) : n_(n) {
    device::check(cudaMalloc(&data_, n * sizeof(T)), "cudaMalloc");
    device::check(cudaMemset(data_, 0, n * sizeof(T)), "cudaMemset");
  }
  DeviceArray(DeviceArray&& o) noexcept : data_(o.data_), n_(o.n_) { o.data_ = nullptr, o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceArray() {
    if (data_) cudaFree(data_);
  }
  T* data() const { return data_; }
  std::size_t size() const { return n_; }

 private:
  T* data_ = nullptr;
  std::size_t n_ = 0;
};

template <class T, int D>
struct Pointers {
  const T* momentum[D];
  T* velocity[D];
};

template <class T, int D>
__global__ void grid_update_kernel(Parameters<T> par, Shape<D> shape, bool walls, const T* mass,
                                   Pointers<T, D> p, std::int64_t nodes) {
  for (std::int64_t node = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; node < nodes;
       node += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    grid_node_update<T, D>(par, shape.n, walls, node, mass, p.momentum, p.velocity);
}

}  // namespace device

struct DeviceExec {
  template <class T>
  using Array = device::DeviceArray<T>;
  static const char* name() { return "cuda"; }
  static pmkit::Options options() {
    pmkit::Options o;
    o.backend = pmkit::Backend::Cuda;
    return o;
  }
  template <class T>
  static device::DeviceArray<T> upload(const std::vector<T>& a) {
    device::DeviceArray<T> d(a.size());
    device::check(cudaMemcpy(d.data(), a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    return d;
  }
  template <class T>
  static std::vector<T> download(const device::DeviceArray<T>& d) {
    std::vector<T> a(d.size());
    device::check(cudaMemcpy(a.data(), d.data(), a.size() * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return a;
  }
  template <class T, int D, class Update>
  static void step(pmkit::Particles<T, D>& particles, const Update& update, const pmkit::StepMeshes<T>& meshes) {
    pmkit::cuda::step(particles, update, meshes);
  }
  template <class T, int D>
  static void grid_update(const Parameters<T>& par, const std::int64_t (&shape)[D], bool walls, const T* mass,
                          const T* const* momentum, T* const* velocity, std::int64_t nodes) {
    Shape<D> s;
    device::Pointers<T, D> p;
    for (int d = 0; d < D; ++d) s.n[d] = shape[d], p.momentum[d] = momentum[d], p.velocity[d] = velocity[d];
    const int threads = 256;
    const std::int64_t blocks = (nodes + threads - 1) / threads;
    device::grid_update_kernel<T, D><<<static_cast<unsigned>(blocks < 65535 * 64 ? blocks : 65535 * 64), threads>>>(
        par, s, walls, mass, p, nodes);
    device::check(cudaGetLastError(), "the grid update's kernel");
  }
  template <class T, int D>
  static void synchronize(pmkit::Particles<T, D>& particles) {
    particles.synchronize();
    device::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
};

}  // namespace mpm
