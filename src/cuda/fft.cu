// RealFft on a CUDA device: cuFFT plans of the shape, made once, run on the object's stream.
#include "core/fft_backend.hpp"
#include "cuda/cufft_calls.hpp"
#include "cuda/runtime.hpp"

namespace pmkit::detail {
namespace {

template <class T, int D>
class CufftBackend final : public FftBackend<T, D> {
 public:
  CufftBackend(const std::array<std::int64_t, D>& shape, const ExecutionOptions& options)
      : device_(options.device), stream_(cuda::to_cuda_stream(options.stream)) {
    int count = 0;
    cuda::check(cudaGetDeviceCount(&count), "RealFft: cudaGetDeviceCount");
    if (options.device < 0 || options.device >= count)
      fail(ErrorCode::InvalidArgument, "options.device = ", options.device, " but ", count,
           " CUDA devices are present");
    cuda::DeviceScope scope(device_);
    // cuFFT is row-major (last index fastest): pmkit's x-fastest shape, reversed.
    long long n[D];
    for (int d = 0; d < D; ++d) n[d] = shape[D - 1 - d];
    try {
      make_plan(&forward_, n, Cufft<T>::forward_type);
      make_plan(&inverse_, n, Cufft<T>::inverse_type);
    } catch (...) {
      release();
      throw;
    }
  }
  ~CufftBackend() override { release(); }

  void forward(const T* real, std::complex<T>* spectrum) override {
    pointers_.require(real, "RealFft::forward's real array", 0);
    pointers_.require(spectrum, "RealFft::forward's spectrum", 0);
    cuda::DeviceScope scope(device_);
    check_cufft(Cufft<T>::forward(forward_, real, spectrum), "the forward transform");
  }
  void inverse(std::complex<T>* spectrum, T* real) override {
    pointers_.require(spectrum, "RealFft::inverse's spectrum", 0);
    pointers_.require(real, "RealFft::inverse's real array", 0);
    cuda::DeviceScope scope(device_);
    check_cufft(Cufft<T>::inverse(inverse_, spectrum, real), "the inverse transform");
  }
  void set_stream(StreamHandle stream) override {
    cudaStream_t next = cuda::to_cuda_stream(stream);
    if (next == stream_) return;
    cuda::DeviceScope scope(device_);
    handover_.order(stream_, next);  // the new stream waits for the transforms queued on the old
    check_cufft(cufftSetStream(forward_, next), "cufftSetStream");
    check_cufft(cufftSetStream(inverse_, next), "cufftSetStream");
    stream_ = next;
  }

 private:
  void make_plan(cufftHandle* plan, long long* n, cufftType type) {
    check_cufft(cufftCreate(plan), "cufftCreate");
    ++plans_made_;
    std::size_t work = 0;
    check_cufft(cufftMakePlanMany64(*plan, D, n, nullptr, 1, 0, nullptr, 1, 0, type, 1, &work),
                "cufftMakePlanMany64");
    check_cufft(cufftSetStream(*plan, stream_), "cufftSetStream");
  }
  void release() {
    cuda::DeviceScope scope(device_);
    if (plans_made_ > 0) cufftDestroy(forward_);
    if (plans_made_ > 1) cufftDestroy(inverse_);
    plans_made_ = 0;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cufftHandle forward_ = 0, inverse_ = 0;
  int plans_made_ = 0;  // forward_, then inverse_: those to destroy
  cuda::StreamHandover handover_;  // set_stream's ordering of the new stream after the old
  cuda::DevicePointerCheck pointers_;
};

}  // namespace

template <class T, int D>
std::unique_ptr<FftBackend<T, D>> make_cufft_backend(const std::array<std::int64_t, D>& shape,
                                                     const ExecutionOptions& options) {
  return std::make_unique<CufftBackend<T, D>>(shape, options);
}

template std::unique_ptr<FftBackend<float, 2>> make_cufft_backend<float, 2>(const std::array<std::int64_t, 2>&, const ExecutionOptions&);
template std::unique_ptr<FftBackend<float, 3>> make_cufft_backend<float, 3>(const std::array<std::int64_t, 3>&, const ExecutionOptions&);
template std::unique_ptr<FftBackend<double, 2>> make_cufft_backend<double, 2>(const std::array<std::int64_t, 2>&, const ExecutionOptions&);
template std::unique_ptr<FftBackend<double, 3>> make_cufft_backend<double, 3>(const std::array<std::int64_t, 3>&, const ExecutionOptions&);

}  // namespace pmkit::detail
