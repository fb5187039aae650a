#pragma once
// The MLS-MPM example's CUDA execution (simulation.hpp's Exec): the plan's arrays in
// device memory, pmkit::cuda::step, the grid update in a kernel, all on the default
// stream (the plan's). Include from a file compiled by nvcc.
#include <cuda_runtime.h>

#include <climits>
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

// The box of the particles' first stencil nodes: box[d] the lowest, box[D + d] the
// highest on axis d (reset to the extremes first).
template <int D>
__global__ void reset_box_kernel(int* box) {
  if (threadIdx.x < D) {
    box[threadIdx.x] = INT_MAX;
    box[D + threadIdx.x] = INT_MIN;
  }
}

template <class T, int D>
__global__ void box_kernel(GridUpdate<T, D> g, int* box) {
  __shared__ int lo[D], hi[D];
  if (threadIdx.x < D) {
    lo[threadIdx.x] = INT_MAX;
    hi[threadIdx.x] = INT_MIN;
  }
  __syncthreads();
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < g.particles;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    for (int d = 0; d < D; ++d) {
      const int first = g.first_node(k, d);
      atomicMin(&lo[d], first);
      atomicMax(&hi[d], first);
    }
  __syncthreads();
  if (threadIdx.x < D) {
    atomicMin(&box[threadIdx.x], lo[threadIdx.x]);
    atomicMax(&box[D + threadIdx.x], hi[threadIdx.x]);
  }
}

template <class T, int D>
__global__ void grid_update_kernel(GridUpdate<T, D> g, const int* box) {
  int lo[D], hi[D];
  for (int d = 0; d < D; ++d) lo[d] = box[d], hi[d] = box[D + d];
  g.finish_box(lo, hi);
  const std::int64_t nodes = GridUpdate<T, D>::box_size(lo, hi);
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < nodes;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    g.update(lo, hi, j);
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
    pmkit::cuda::step<pmkit::kernels::TSC>(particles, update, meshes);  // the quadratic B-spline, the plan's
  }
  // Three launches without a host wait: the box reset, the particles' box, the box's
  // nodes (a fixed grid: the box's size stays on the device).
  template <class T, int D>
  static void grid_update(const GridUpdate<T, D>& g, device::DeviceArray<int>& box) {
    constexpr int threads = 256, blocks = 2048;
    device::reset_box_kernel<D><<<1, 32>>>(box.data());
    device::box_kernel<T, D><<<blocks, threads>>>(g, box.data());
    device::grid_update_kernel<T, D><<<blocks * 4, threads>>>(g, box.data());
    device::check(cudaGetLastError(), "the grid update's kernels");
  }
  template <class T, int D>
  static void synchronize(pmkit::Particles<T, D>& particles) {
    particles.synchronize();
    device::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
};

}  // namespace mpm
