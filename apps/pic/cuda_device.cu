// A CUDA device as a PIC device: the arrays in device memory, the push and the spectrum
// scaling as one-thread-per-item kernels on the default stream (the plan's and the FFT's),
// the diagnostics' sums by CUB.
#include <cub/device/device_reduce.cuh>
#include <cuda/std/tuple>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <memory>
#include <vector>

#include "device.hpp"
#include "pmkit/cuda/runtime.hpp"

namespace pmkit::pic {
namespace {

constexpr int kThreads = 256;  // one item a thread; any multiple of the warp serves these streaming kernels

unsigned blocks(std::size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <class T, int D>
__global__ void push_kernel(Particles<T, D> p, LeapfrogPush<T, D> push) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i < p.n) push(p, i);
}

template <class T>
__global__ void scale_kernel(const T* in, const T* factor, T* out, std::size_t n, ScaleSpectrum<T> scale) {
  const std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (k < n) scale(in, factor, out, k);
}

// Particle i's (kinetic, momentum...) terms, for the reduction.
template <class T, int D>
struct MomentTerms {
  Particles<T, D> p;
  __host__ __device__ ::cuda::std::tuple<double, double, double, double> operator()(std::size_t i) const {
    const double w = p.w[i];
    double v[3] = {0, 0, 0}, v2 = 0;
    for (int d = 0; d < D; ++d) {
      v[d] = p.v[d][i];
      v2 += v[d] * v[d];
    }
    return {0.5 * w * v2, w * v[0], w * v[1], w * v[2]};
  }
};
struct SumTuple {
  __host__ __device__ ::cuda::std::tuple<double, double, double, double> operator()(
      const ::cuda::std::tuple<double, double, double, double>& a,
      const ::cuda::std::tuple<double, double, double, double>& b) const {
    return {::cuda::std::get<0>(a) + ::cuda::std::get<0>(b), ::cuda::std::get<1>(a) + ::cuda::std::get<1>(b),
            ::cuda::std::get<2>(a) + ::cuda::std::get<2>(b), ::cuda::std::get<3>(a) + ::cuda::std::get<3>(b)};
  }
};
template <class T>
struct Product {
  const T* a;
  const T* b;
  __host__ __device__ ::cuda::std::tuple<double, double, double, double> operator()(std::size_t i) const {
    return {double(a[i]) * b[i], 0.0, 0.0, 0.0};
  }
};

template <class T, int D>
class CudaDevice final : public Device<T, D> {
  using Sums = ::cuda::std::tuple<double, double, double, double>;

 public:
  CudaDevice() : sums_(1, "pic sums") {}

  T* allocate(std::size_t n) override {
    arrays_.emplace_back(n, "pic arrays");
    return arrays_.back().get();
  }
  void upload(T* dst, const std::vector<T>& src) override {
    pmkit::cuda::check(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), "pic upload");
  }
  std::vector<T> download(const T* src, std::size_t n) override {
    std::vector<T> host(n);
    pmkit::cuda::check(cudaMemcpy(host.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost), "pic download");
    return host;
  }

  void push(const Particles<T, D>& p, const LeapfrogPush<T, D>& push) override {
    if (p.n == 0) return;
    push_kernel<T, D><<<blocks(p.n), kThreads>>>(p, push);
    pmkit::cuda::check_launch("pmkit::pic::push");
  }

  Moments<T, D> moments(const Particles<T, D>& p) override {
    const Sums s = reduce(thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0), MomentTerms<T, D>{p}),
                          p.n);
    Moments<T, D> m;
    m.kinetic = ::cuda::std::get<0>(s);
    const double momentum[3] = {::cuda::std::get<1>(s), ::cuda::std::get<2>(s), ::cuda::std::get<3>(s)};
    for (int d = 0; d < D; ++d) m.momentum[d] = momentum[d];
    return m;
  }

  void scale_spectrum(const T* in, const T* factor, T* out, std::size_t n, bool rotate) override {
    if (n == 0) return;
    scale_kernel<T><<<blocks(n), kThreads>>>(in, factor, out, n, ScaleSpectrum<T>{rotate});
    pmkit::cuda::check_launch("pmkit::pic::scale_spectrum");
  }

  double dot(const T* a, const T* b, std::size_t n) override {
    return ::cuda::std::get<0>(reduce(thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0), Product<T>{a, b}), n));
  }

  void synchronize() override { pmkit::cuda::check(cudaStreamSynchronize(nullptr), "pic synchronize"); }

 private:
  // One reduction of four doubles, its scratch kept between calls.
  template <class It>
  Sums reduce(It items, std::size_t n) {
    std::size_t bytes = 0;
    const Sums zero{0.0, 0.0, 0.0, 0.0};
    pmkit::cuda::check(cub::DeviceReduce::Reduce(nullptr, bytes, items, sums_.get(), static_cast<std::int64_t>(n), SumTuple{}, zero),
                       "pic reduce");
    scratch_.reserve(bytes, "pic reduce scratch");
    pmkit::cuda::check(cub::DeviceReduce::Reduce(scratch_.get(), bytes, items, sums_.get(), static_cast<std::int64_t>(n),
                                                 SumTuple{}, zero),
                       "pic reduce");
    return sums_.download()[0];
  }

  std::vector<pmkit::cuda::DeviceBuffer<T>> arrays_;
  pmkit::cuda::DeviceBuffer<Sums> sums_;
  pmkit::cuda::DeviceBuffer<unsigned char> scratch_;
};

}  // namespace

template <class T, int D>
std::unique_ptr<Device<T, D>> make_cuda_device() {
  return std::make_unique<CudaDevice<T, D>>();
}

template std::unique_ptr<Device<float, 2>> make_cuda_device<float, 2>();
template std::unique_ptr<Device<float, 3>> make_cuda_device<float, 3>();
template std::unique_ptr<Device<double, 2>> make_cuda_device<double, 2>();
template std::unique_ptr<Device<double, 3>> make_cuda_device<double, 3>();

}  // namespace pmkit::pic
