// The RealFft front end: shape and argument checks common to both backends.
#include <climits>

#include "core/arguments.hpp"
#include "core/fft_backend.hpp"
#include "core/make_backend.hpp"
#include "pmkit/fft.hpp"

namespace pmkit {

using detail::fail;

template <class T, int D>
RealFft<T, D>::RealFft(const std::array<std::int64_t, D>& shape, FftOptions options)
    : shape_(shape), options_(options) {
  for (int d = 0; d < D; ++d) {
    // Both libraries take each axis as an int.
    if (shape[d] < 1 || shape[d] > INT_MAX)
      fail(ErrorCode::InvalidArgument, "RealFft shape[", d, "] = ", shape[d],
           ": each axis needs between 1 and ", INT_MAX, " points");
  }
  backend_ = detail::make_backend(
      options, "options",
      [&]() -> std::unique_ptr<detail::FftBackend<T, D>> {
#if defined(PMKIT_WITH_FFTW)
        return detail::make_fftw_backend<T, D>(shape, options);
#else
        fail(ErrorCode::Unsupported,
             "RealFft on Backend::Cpu: this build of pmkit has no FFTW (install libfftw3-dev and "
             "configure with PMKIT_FFTW=ON)");
#endif
      },
      [&] { return detail::make_cufft_backend<T, D>(shape, options); });
}

template <class T, int D>
RealFft<T, D>::~RealFft() = default;
template <class T, int D>
RealFft<T, D>::RealFft(RealFft&&) noexcept = default;
template <class T, int D>
RealFft<T, D>& RealFft<T, D>::operator=(RealFft&&) noexcept = default;

template <class T, int D>
std::array<std::int64_t, D> RealFft<T, D>::spectrum_shape() const {
  std::array<std::int64_t, D> s = shape_;
  s[0] = shape_[0] / 2 + 1;
  return s;
}

template <class T, int D>
std::int64_t RealFft<T, D>::real_size() const {
  std::int64_t n = 1;
  for (int d = 0; d < D; ++d) n *= shape_[d];
  return n;
}

template <class T, int D>
std::int64_t RealFft<T, D>::spectrum_size() const {
  std::int64_t n = 1;
  for (std::int64_t s : spectrum_shape()) n *= s;
  return n;
}

namespace {
// Both arrays present and apart (the transforms are out of place).
void require_arrays(const char* call, const void* real, std::int64_t real_bytes, const void* spectrum,
                    std::int64_t spectrum_bytes) {
  if (real == nullptr) fail(ErrorCode::InvalidArgument, "RealFft::", call, ": the real array is null");
  if (spectrum == nullptr) fail(ErrorCode::InvalidArgument, "RealFft::", call, ": the spectrum is null");
  if (detail::bytes_overlap(real, static_cast<std::size_t>(real_bytes), spectrum,
                            static_cast<std::size_t>(spectrum_bytes)))
    fail(ErrorCode::InvalidArgument, "RealFft::", call,
         ": the real array and the spectrum overlap; the transforms are out of place");
}
}  // namespace

template <class T, int D>
void RealFft<T, D>::forward(const T* real, Complex* spectrum) {
  require_arrays("forward", real, real_size() * std::int64_t(sizeof(T)), spectrum,
                 spectrum_size() * std::int64_t(sizeof(Complex)));
  backend_->forward(real, spectrum);
}

template <class T, int D>
void RealFft<T, D>::inverse(Complex* spectrum, T* real) {
  require_arrays("inverse", real, real_size() * std::int64_t(sizeof(T)), spectrum,
                 spectrum_size() * std::int64_t(sizeof(Complex)));
  backend_->inverse(spectrum, real);
}

template <class T, int D>
void RealFft<T, D>::set_stream(StreamHandle stream) {
  backend_->set_stream(stream);
  options_.stream = stream;
}

template class RealFft<float, 2>;
template class RealFft<float, 3>;
template class RealFft<double, 2>;
template class RealFft<double, 3>;

}  // namespace pmkit
