// The MLS-MPM example on a CUDA plan (driver.hpp gives the command line): pmkit::cuda::step
// on the device, the grid update in a kernel, everything on the plan's stream (the
// default one).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "driver.hpp"
#include "pmkit/cuda/particle_step.cuh"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device array of n values.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) : n_(n) {
    check(cudaMalloc(&data_, n * sizeof(T)), "cudaMalloc");
    check(cudaMemset(data_, 0, n * sizeof(T)), "cudaMemset");
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
__global__ void grid_update_kernel(mpm::Parameters<T> par, mpm::Shape<D> shape, bool walls, const T* mass,
                                   Pointers<T, D> p, std::int64_t nodes) {
  for (std::int64_t node = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; node < nodes;
       node += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    mpm::grid_node_update<T, D>(par, shape.n, walls, node, mass, p.momentum, p.velocity);
}

struct DeviceExec {
  template <class T>
  using Array = DeviceArray<T>;
  static const char* name() { return "cuda"; }
  static pmkit::Options options() {
    pmkit::Options o;
    o.backend = pmkit::Backend::Cuda;
    return o;
  }
  template <class T>
  static DeviceArray<T> upload(const std::vector<T>& a) {
    DeviceArray<T> d(a.size());
    check(cudaMemcpy(d.data(), a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    return d;
  }
  template <class T>
  static std::vector<T> download(const DeviceArray<T>& d) {
    std::vector<T> a(d.size());
    check(cudaMemcpy(a.data(), d.data(), a.size() * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return a;
  }
  template <class T, int D, class Update>
  static void step(pmkit::Particles<T, D>& particles, const Update& update, const pmkit::StepMeshes<T>& meshes) {
    pmkit::cuda::step(particles, update, meshes);
  }
  template <class T, int D>
  static void grid_update(const mpm::Parameters<T>& par, const std::int64_t (&shape)[D], bool walls, const T* mass,
                          const T* const* momentum, T* const* velocity, std::int64_t nodes) {
    mpm::Shape<D> s;
    Pointers<T, D> p;
    for (int d = 0; d < D; ++d) s.n[d] = shape[d], p.momentum[d] = momentum[d], p.velocity[d] = velocity[d];
    const int threads = 256;
    const std::int64_t blocks = (nodes + threads - 1) / threads;
    grid_update_kernel<T, D><<<static_cast<unsigned>(blocks < 65535 * 64 ? blocks : 65535 * 64), threads>>>(
        par, s, walls, mass, p, nodes);
    check(cudaGetLastError(), "the grid update's kernel");
  }
  template <class T, int D>
  static void synchronize(pmkit::Particles<T, D>& particles) {
    particles.synchronize();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
};

}  // namespace

int main(int argc, char** argv) { return mpm::main_for<DeviceExec>(argc, argv); }
