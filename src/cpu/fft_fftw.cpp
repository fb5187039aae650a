// RealFft on the CPU: FFTW (fftw3 for double, fftw3f for float), threaded through FFTW's
// OpenMP or threads library where the build found one (PMKIT_FFTW_THREADS).
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "core/fft_backend.hpp"
#include "cpu/fftw_calls.hpp"

namespace pmkit::detail {

// One lock for every FFTW plan of the process (fftw_calls.hpp).
std::mutex& fftw_planner_mutex() {
  static std::mutex m;
  return m;
}

namespace {

template <class T, int D>
class FftwBackend final : public FftBackend<T, D> {
  using F = Fftw<T>;
  using FC = typename F::Complex;

 public:
  FftwBackend(const std::array<std::int64_t, D>& shape, const ExecutionOptions& options) {
    // FFTW is row-major (last index fastest): pmkit's x-fastest shape, reversed.
    int n[D];
    std::size_t real_size = 1;
    for (int d = 0; d < D; ++d) {
      n[d] = static_cast<int>(shape[D - 1 - d]);
      real_size *= static_cast<std::size_t>(shape[d]);
    }
    const std::size_t spectrum_size = real_size / static_cast<std::size_t>(shape[0]) *
                                      static_cast<std::size_t>(shape[0] / 2 + 1);
    // FFTW_ESTIMATE plans without running transforms, so the scratch arrays only give the
    // plans their alignment (FFTW's SIMD one); arrays of another alignment take the
    // FFTW_UNALIGNED plans.
    T* real = static_cast<T*>(F::malloc(real_size * sizeof(T)));
    FC* spectrum = static_cast<FC*>(F::malloc(spectrum_size * sizeof(FC)));
    if (real == nullptr || spectrum == nullptr) {
      F::free(real);
      F::free(spectrum);
      fail(ErrorCode::OutOfMemory, "RealFft: fftw_malloc of the planning arrays (", real_size,
           " real values) failed");
    }
    aligned_ = F::alignment_of(real);
    {
      std::lock_guard<std::mutex> lock(fftw_planner_mutex());
#if defined(PMKIT_FFTW_THREADS)
      static std::once_flag threads_ready;
      std::call_once(threads_ready, [] { F::init_threads(); });
      F::plan_with_nthreads(fftw_threads(real_size, options.num_threads));
#else
      (void)options;
#endif
      const unsigned flags = FFTW_ESTIMATE;
      forward_ = F::r2c(D, n, real, spectrum, flags | FFTW_PRESERVE_INPUT);
      inverse_ = F::c2r(D, n, spectrum, real, flags | FFTW_DESTROY_INPUT);
      forward_unaligned_ = F::r2c(D, n, real, spectrum, flags | FFTW_PRESERVE_INPUT | FFTW_UNALIGNED);
      inverse_unaligned_ = F::c2r(D, n, spectrum, real, flags | FFTW_DESTROY_INPUT | FFTW_UNALIGNED);
    }
    F::free(real);
    F::free(spectrum);
    if (!forward_ || !inverse_ || !forward_unaligned_ || !inverse_unaligned_) {
      destroy_plans();
      fail(ErrorCode::Unsupported, "RealFft: FFTW could not plan the shape");
    }
  }
  ~FftwBackend() override { destroy_plans(); }

  void forward(const T* real, std::complex<T>* spectrum) override {
    // r2c with FFTW_PRESERVE_INPUT reads its input only.
    T* in = const_cast<T*>(real);
    FC* out = reinterpret_cast<FC*>(spectrum);
    F::execute_r2c(aligned(in, out) ? forward_ : forward_unaligned_, in, out);
  }
  void inverse(std::complex<T>* spectrum, T* real) override {
    FC* in = reinterpret_cast<FC*>(spectrum);
    F::execute_c2r(aligned(in, real) ? inverse_ : inverse_unaligned_, in, real);
  }
  void set_stream(StreamHandle) override {}

 private:
  bool aligned(const void* a, const void* b) const {
    return F::alignment_of(a) == aligned_ && F::alignment_of(b) == aligned_;
  }
  void destroy_plans() {
    std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    for (auto* p : {&forward_, &inverse_, &forward_unaligned_, &inverse_unaligned_}) {
      if (*p) F::destroy(*p);
      *p = nullptr;
    }
  }

  typename F::Plan forward_ = nullptr, inverse_ = nullptr;
  typename F::Plan forward_unaligned_ = nullptr, inverse_unaligned_ = nullptr;
  int aligned_ = 0;
};

}  // namespace

template <class T, int D>
std::unique_ptr<FftBackend<T, D>> make_fftw_backend(const std::array<std::int64_t, D>& shape,
                                                    const ExecutionOptions& options) {
  return std::make_unique<FftwBackend<T, D>>(shape, options);
}

template std::unique_ptr<FftBackend<float, 2>> make_fftw_backend<float, 2>(const std::array<std::int64_t, 2>&, const ExecutionOptions&);
template std::unique_ptr<FftBackend<float, 3>> make_fftw_backend<float, 3>(const std::array<std::int64_t, 3>&, const ExecutionOptions&);
template std::unique_ptr<FftBackend<double, 2>> make_fftw_backend<double, 2>(const std::array<std::int64_t, 2>&, const ExecutionOptions&);
template std::unique_ptr<FftBackend<double, 3>> make_fftw_backend<double, 3>(const std::array<std::int64_t, 3>&, const ExecutionOptions&);

}  // namespace pmkit::detail
