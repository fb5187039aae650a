// The device part of DistributedPmePlan's ghosts (pme_ghosts.hpp): the rank's charges
// near its slab's faces, found and packed on the device, so that only they cross to the
// host.
#include <algorithm>
#include <numeric>

#include "cuda/runtime.hpp"
#include "distributed/cuda/launch.cuh"
#include "distributed/pme_ghosts.hpp"
#include "pmkit/cuda/runtime.hpp"

namespace pmkit::distributed {
namespace {

// Each charge within `reach` of z = lo or z = hi (the slab [lo, hi)'s faces; the charge
// inside it): its x, y, z, q at the next slot of `values` and its index in `indices`.
template <class T>
__global__ void near_faces_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ z,
                                  const T* __restrict__ q, std::size_t n, double lo, double hi, double reach,
                                  T* values, unsigned long long* indices, unsigned long long* count) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double zi = z[i];
  if (!(zi - lo < reach || hi - zi < reach)) return;
  const unsigned long long slot = atomicAdd(count, 1ull);
  values[4 * slot] = x[i];
  values[4 * slot + 1] = y[i];
  values[4 * slot + 2] = z[i];
  values[4 * slot + 3] = q[i];
  indices[slot] = i;
}

}  // namespace

template <class T>
void device_near_faces(const GhostDeviceArrays<T>& a, std::size_t n, double lo, double hi, double reach,
                       std::vector<T>& values) {
  const cuda::DeviceScope on_device(a.device);
  const cudaStream_t stream = cuda::to_cuda_stream(a.stream);
  a.values->reserve(4 * std::max<std::size_t>(n, 1), "DistributedPmePlan: charges near the slab's faces");
  a.indices->reserve(std::max<std::size_t>(n, 1), "DistributedPmePlan: charges near the slab's faces");
  a.count->reserve(1, "DistributedPmePlan: charges near the slab's faces");
  cuda::check(cudaMemsetAsync(a.count->get(), 0, sizeof(unsigned long long), stream), "DistributedPmePlan: ghosts");
  if (n > 0) {
    near_faces_kernel<T><<<blocks_for(static_cast<std::int64_t>(n)), kThreads, 0, stream>>>(
        a.x, a.y, a.z, a.q, n, lo, hi, reach, a.values->get(), a.indices->get(), a.count->get());
    cuda::check(cudaGetLastError(), "DistributedPmePlan: charges near the slab's faces");
  }
  unsigned long long count = 0;
  cuda::check(cudaMemcpyAsync(&count, a.count->get(), sizeof count, cudaMemcpyDeviceToHost, stream),
              "DistributedPmePlan: ghosts to the host");
  cuda::check(cudaStreamSynchronize(stream), "DistributedPmePlan: ghosts to the host");
  std::vector<T> packed(4 * count);
  std::vector<unsigned long long> index(count);
  cuda::check(cudaMemcpyAsync(packed.data(), a.values->get(), packed.size() * sizeof(T), cudaMemcpyDeviceToHost,
                              stream),
              "DistributedPmePlan: ghosts to the host");
  cuda::check(cudaMemcpyAsync(index.data(), a.indices->get(), index.size() * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost, stream),
              "DistributedPmePlan: ghosts to the host");
  cuda::check(cudaStreamSynchronize(stream), "DistributedPmePlan: ghosts to the host");
  // In the charges' order, as on CPU ranks: the atomics' order is the device's.
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::sort(order.begin(), order.end(), [&](std::size_t a_, std::size_t b_) { return index[a_] < index[b_]; });
  values.resize(4 * count);
  for (std::size_t k = 0; k < count; ++k)
    for (int c = 0; c < 4; ++c) values[4 * k + c] = packed[4 * order[k] + c];
}

template void device_near_faces<float>(const GhostDeviceArrays<float>&, std::size_t, double, double, double,
                                       std::vector<float>&);
template void device_near_faces<double>(const GhostDeviceArrays<double>&, std::size_t, double, double, double,
                                        std::vector<double>&);

}  // namespace pmkit::distributed
