// A CUDA device as a PIC device: the arrays in device memory, the push and the spectrum
// scaling as one-thread-per-item kernels on the default stream (the plan's and the FFT's),
// the diagnostics' sums by CUB (the terms from particle_ops.hpp).
#include <cub/device/device_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <memory>
#include <vector>

#include "device.hpp"
#include "cuda/runtime.hpp"

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

// a[i] * b[i] in double, for the reduction of a dot product.
template <class T>
struct Product {
  const T* a;
  const T* b;
  __host__ __device__ double operator()(std::size_t i) const { return double(a[i]) * b[i]; }
};

// The sum of a and b (MomentSums' operator+, or doubles').
struct Add {
  template <class V>
  __host__ __device__ V operator()(const V& a, const V& b) const {
    return a + b;
  }
};

template <class T, int D>
class CudaDevice final : public Device<T, D> {
 public:
  CudaDevice() : moment_sums_(1, "pic sums"), dot_sum_(1, "pic sums") {}

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
    return MomentTerms<T, D>::moments(reduce(items(MomentTerms<T, D>{p}), p.n, MomentSums{0, {0, 0, 0}}, moment_sums_));
  }

  void scale_spectrum(const T* in, const T* factor, T* out, std::size_t n, bool rotate) override {
    if (n == 0) return;
    scale_kernel<T><<<blocks(n), kThreads>>>(in, factor, out, n, ScaleSpectrum<T>{rotate});
    pmkit::cuda::check_launch("pmkit::pic::scale_spectrum");
  }

  double dot(const T* a, const T* b, std::size_t n) override {
    return reduce(items(Product<T>{a, b}), n, 0.0, dot_sum_);
  }

  void synchronize() override { pmkit::cuda::check(cudaStreamSynchronize(nullptr), "pic synchronize"); }

 private:
  // f(0), f(1), ... as an input of CUB.
  template <class F>
  static auto items(F f) {
    return thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0), f);
  }

  // The sum of n items into `sum` (one value), copied back; the scratch kept between calls.
  template <class It, class V>
  V reduce(It items, std::size_t n, V zero, pmkit::cuda::DeviceBuffer<V>& sum) {
    std::size_t bytes = 0;
    pmkit::cuda::check(cub::DeviceReduce::Reduce(nullptr, bytes, items, sum.get(), static_cast<std::int64_t>(n), Add{}, zero),
                       "pic reduce");
    scratch_.reserve(bytes, "pic reduce scratch");
    pmkit::cuda::check(
        cub::DeviceReduce::Reduce(scratch_.get(), bytes, items, sum.get(), static_cast<std::int64_t>(n), Add{}, zero),
        "pic reduce");
    return sum.download()[0];
  }

  std::vector<pmkit::cuda::DeviceBuffer<T>> arrays_;
  pmkit::cuda::DeviceBuffer<MomentSums> moment_sums_;
  pmkit::cuda::DeviceBuffer<double> dot_sum_;
  pmkit::cuda::DeviceBuffer<unsigned char> scratch_;
};

}  // namespace

template <class T, int D>
std::unique_ptr<Device<T, D>> make_cuda_device() {
  // The plans' own check, before the first allocation fails with the driver's message.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    detail::fail(ErrorCode::Unsupported, "options.backend = Cuda: no CUDA device is available");
  }
  return std::make_unique<CudaDevice<T, D>>();
}

template std::unique_ptr<Device<float, 2>> make_cuda_device<float, 2>();
template std::unique_ptr<Device<float, 3>> make_cuda_device<float, 3>();
template std::unique_ptr<Device<double, 2>> make_cuda_device<double, 2>();
template std::unique_ptr<Device<double, 3>> make_cuda_device<double, 3>();

}  // namespace pmkit::pic
