// A CUDA device as a PIC device: the arrays in device memory; the push and the spectrum
// scaling as one-thread-per-item kernels, the particle step pmkit::cuda::step's kernel
// compiled here for the push, the diagnostics' sums by CUB (the terms from
// particle_ops.hpp), all on a non-blocking stream of the object's own, which the plan and
// the FFT take too, so that a step can be captured into a CUDA graph (capture is not
// allowed on the legacy default stream).
#include <cub/device/device_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <memory>
#include <vector>

#include "device.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/cuda/particle_step.cuh"

namespace pmkit::pic {
namespace {

using pmkit::cuda::check;
using pmkit::cuda::check_launch;

constexpr int kThreads = 256;  // one item a thread; any multiple of the warp serves these streaming kernels
// The diagnostics' log: records of the steps since the last take. A take every this many
// steps waits for the device once (about 1/4 MiB of records).
constexpr std::size_t kLogRecords = 4096;

unsigned blocks(std::size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <class T, int D>
__global__ void push_kernel(ParticleArrays<T, D> p, LeapfrogPush<T, D> push) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i < p.n) push(p, i);
}

template <class T>
__global__ void scale_kernel(const T* in, const T* factor, T* out, std::size_t n, ScaleSpectrum<T> scale) {
  const std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (k < n) scale(in, factor, out, k);
}

// Appends the current sums to the log at the count the device keeps (one thread): a
// graph's replay appends where the last step left off. A full log keeps its records and
// counts on, which the take reports.
__global__ void record_kernel(const StepSums* current, StepSums* log, unsigned long long* count,
                              unsigned long long capacity) {
  const unsigned long long k = *count;
  if (k < capacity) log[k] = *current;
  *count = k + 1;
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

// The object's stream, made on its device and destroyed last.
class OwnStream {
 public:
  OwnStream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "pic: cudaStreamCreate"); }
  ~OwnStream() { cudaStreamDestroy(stream_); }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

template <class T, int D>
class CudaDevice final : public Device<T, D> {
 public:
  CudaDevice() : current_(1, "pic sums"), log_(kLogRecords, "pic diagnostics log"), count_(1, "pic diagnostics log") {
    check(cudaMemsetAsync(current_.get(), 0, sizeof(StepSums), s()), "pic: cudaMemset");
    check(cudaMemsetAsync(count_.get(), 0, sizeof(unsigned long long), s()), "pic: cudaMemset");
  }
  ~CudaDevice() override {
    if (graph_) cudaGraphExecDestroy(graph_);
  }

  StreamHandle stream() const override { return pmkit::cuda::stream_handle(stream_.get()); }

  T* allocate(std::size_t n) override {
    arrays_.emplace_back(n, "pic arrays");
    return arrays_.back().get();
  }
  void upload(T* dst, const std::vector<T>& src) override {
    check(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, s()), "pic upload");
    check(cudaStreamSynchronize(s()), "pic upload");
  }
  void download(std::vector<T>& dst, const T* src) override {
    check(cudaMemcpyAsync(dst.data(), src, dst.size() * sizeof(T), cudaMemcpyDeviceToHost, s()), "pic download");
    check(cudaStreamSynchronize(s()), "pic download");
  }

  void push(const ParticleArrays<T, D>& p, const LeapfrogPush<T, D>& push) override {
    if (p.n == 0) return;
    push_kernel<T, D><<<blocks(p.n), kThreads, 0, s()>>>(p, push);
    check_launch("pmkit::pic::push");
  }

  // The pass compiled for the kernels `pmkit pic` offers (pic_kernel_names), not every plan kernel.
  void step(pmkit::Particles<T, D>& p, const StepPush<T, D, false>& push, const StepMeshes<T>& meshes) override {
    pmkit::cuda::step<kernels::Linear, kernels::TSC, kernels::MP4>(p, push, meshes);
  }
  void step(pmkit::Particles<T, D>& p, const StepPush<T, D, true>& push, const StepMeshes<T>& meshes) override {
    pmkit::cuda::step<kernels::Linear, kernels::TSC, kernels::MP4>(p, push, meshes);
  }

  void scale_spectrum(const T* in, const T* factor, T* out, std::size_t n, bool rotate) override {
    if (n == 0) return;
    scale_kernel<T><<<blocks(n), kThreads, 0, s()>>>(in, factor, out, n, ScaleSpectrum<T>{rotate});
    check_launch("pmkit::pic::scale_spectrum");
  }

  void moments(const Velocities<T, D>& p) override {
    reduce(items(MomentTerms<T, D>{p}), p.n, MomentSums{0, {0, 0, 0}}, &current_.get()->moments);
  }
  void dot(const T* a, const T* b, std::size_t n, int term) override {
    reduce(items(Product<T>{a, b}), n, 0.0, &current_.get()->field[term]);
  }
  void record() override {
    record_kernel<<<1, 1, 0, s()>>>(current_.get(), log_.get(), count_.get(), kLogRecords);
    check_launch("pmkit::pic::record");
  }
  std::vector<StepSums> take_records(std::size_t count) override {
    unsigned long long logged = 0;
    std::vector<StepSums> taken(count);
    check(cudaMemcpyAsync(&logged, count_.get(), sizeof logged, cudaMemcpyDeviceToHost, s()), "pic diagnostics");
    if (count > 0)
      check(cudaMemcpyAsync(taken.data(), log_.get(), count * sizeof(StepSums), cudaMemcpyDeviceToHost, s()),
            "pic diagnostics");
    check(cudaMemsetAsync(count_.get(), 0, sizeof logged, s()), "pic: cudaMemset");
    check(cudaStreamSynchronize(s()), "pic diagnostics");
    if (logged != count)
      detail::fail(ErrorCode::Device, "pic diagnostics: the device logged ", logged, " steps' sums where ", count,
                   " were queued (", kLogRecords, " fit)");
    return taken;
  }
  std::size_t record_capacity() const override { return kLogRecords; }

  void synchronize() override { check(cudaStreamSynchronize(s()), "pic synchronize"); }

  bool can_capture() const override { return true; }
  void capture(const std::function<void()>& queue) override {
    if (graph_) check(cudaGraphExecDestroy(graph_), "pic: cudaGraphExecDestroy");
    graph_ = nullptr;
    // Thread-local: a call of this thread that would wait or allocate fails the capture
    // instead of running.
    check(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal), "pic: cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
      queue();
    } catch (...) {
      cudaStreamEndCapture(s(), &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();  // the invalidated capture's error, not a later call's
      throw;
    }
    check(cudaStreamEndCapture(s(), &graph), "pic: cudaStreamEndCapture");
    const cudaError_t made = cudaGraphInstantiate(&graph_, graph, 0);
    cudaGraphDestroy(graph);
    if (made != cudaSuccess) graph_ = nullptr;
    check(made, "pic: cudaGraphInstantiate");
    check(cudaGraphUpload(graph_, s()), "pic: cudaGraphUpload");
  }
  void replay() override {
    if (!graph_) detail::fail(ErrorCode::NotReady, "pic: replay before a capture");
    check(cudaGraphLaunch(graph_, s()), "pic: cudaGraphLaunch");
  }

 private:
  cudaStream_t s() const { return stream_.get(); }

  // f(0), f(1), ... as an input of CUB.
  template <class F>
  static auto items(F f) {
    return thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0), f);
  }

  // The sum of n items into *sum (device memory), queued on the stream; the scratch kept
  // between calls, so that a captured reduction allocates nothing.
  template <class It, class V>
  void reduce(It items, std::size_t n, V zero, V* sum) {
    std::size_t bytes = 0;
    check(cub::DeviceReduce::Reduce(nullptr, bytes, items, sum, static_cast<std::int64_t>(n), Add{}, zero, s()),
          "pic reduce");
    scratch_.reserve(bytes, "pic reduce scratch");
    check(cub::DeviceReduce::Reduce(scratch_.get(), bytes, items, sum, static_cast<std::int64_t>(n), Add{}, zero, s()),
          "pic reduce");
  }

  OwnStream stream_;  // first: every buffer and graph below is freed before it
  std::vector<pmkit::cuda::DeviceBuffer<T>> arrays_;
  pmkit::cuda::DeviceBuffer<StepSums> current_;
  pmkit::cuda::DeviceBuffer<StepSums> log_;
  pmkit::cuda::DeviceBuffer<unsigned long long> count_;
  pmkit::cuda::DeviceBuffer<unsigned char> scratch_;
  cudaGraphExec_t graph_ = nullptr;
};

}  // namespace

template <class T, int D>
std::unique_ptr<Device<T, D>> make_cuda_device(int device_ordinal) {
  // The plans' own check, before the first allocation fails with the driver's message.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    detail::fail(ErrorCode::Unsupported, "options.backend = Cuda: no CUDA device is available");
  }
  if (device_ordinal < 0 || device_ordinal >= devices)
    detail::fail(ErrorCode::InvalidArgument, "options.device = ", device_ordinal, " but ", devices,
                 " CUDA devices are present");
  // The stream, the arrays and the kernels on the configured device.
  check(cudaSetDevice(device_ordinal), "pic: cudaSetDevice");
  return std::make_unique<CudaDevice<T, D>>();
}

template std::unique_ptr<Device<float, 2>> make_cuda_device<float, 2>(int);
template std::unique_ptr<Device<float, 3>> make_cuda_device<float, 3>(int);
template std::unique_ptr<Device<double, 2>> make_cuda_device<double, 2>(int);
template std::unique_ptr<Device<double, 3>> make_cuda_device<double, 3>(int);

}  // namespace pmkit::pic
