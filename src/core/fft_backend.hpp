#pragma once
// The interface behind pmkit::RealFft. The front end (src/fft.cpp) has checked the shape,
// the options and the pointers' presence when these are called.
#include <array>
#include <complex>
#include <cstdint>
#include <memory>

#include "pmkit/fft.hpp"

namespace pmkit::detail {

template <class T, int D>
class FftBackend {
 public:
  virtual ~FftBackend() = default;
  virtual void forward(const T* real, std::complex<T>* spectrum) = 0;
  virtual void inverse(std::complex<T>* spectrum, T* real) = 0;
  virtual void set_stream(StreamHandle stream) = 0;
};

// shape: x first (pmkit's order); each backend reverses it for its row-major library.
template <class T, int D>
std::unique_ptr<FftBackend<T, D>> make_fftw_backend(const std::array<std::int64_t, D>& shape,
                                                    const ExecutionOptions& options);
template <class T, int D>
std::unique_ptr<FftBackend<T, D>> make_cufft_backend(const std::array<std::int64_t, D>& shape,
                                                     const ExecutionOptions& options);

}  // namespace pmkit::detail
