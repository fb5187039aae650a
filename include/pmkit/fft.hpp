#pragma once
// RealFft<T, D>: periodic real <-> complex FFTs of one mesh shape, on the CPU (FFTW) or
// on a CUDA device (cuFFT), for the mesh solvers built on pmkit's plans (Poisson by FFT
// in PIC, the reciprocal sum of PME).
//
//   pmkit::RealFft<float, 3> fft({nx, ny, nz});        // plans once, here
//   fft.forward(rho, rho_hat);                         // real mesh -> spectrum
//   ... scale rho_hat[k] by the Green's function ...
//   fft.inverse(rho_hat, phi);                         // spectrum -> real mesh
//
// Layout. The real mesh is pmkit's: shape[0] * ... * shape[D-1] values, x fastest,
// index = i0 + n0 * (i1 + n1 * i2), as Plan's periodic meshes. The spectrum keeps the
// Hermitian half along x: (n0/2 + 1) * n1 [* n2] complex values, x fastest, index =
// k0 + (n0/2 + 1) * (k1 + n1 * k2) with k0 in [0, n0/2] and k1 (k2) in [0, n1) holding
// the wavenumbers 0, 1, ..., n1/2 and then the negative ones from -(n1-1)/2 up to -1,
// as every FFT library stores them. std::complex<T> has the layout of fftw_complex and
// cufftComplex (two T, real first).
//
// Conventions. forward(f)[k] = sum_j f[j] exp(-2 pi i k.j / n), inverse(F)[j] =
// sum_k F[k] exp(+2 pi i k.j / n) over the full (Hermitian) spectrum. Neither scales:
// inverse(forward(f)) = (n0 n1 [n2]) f. The spectrum's imaginary parts on the
// self-conjugate wavenumbers (k = 0 and k = n/2 on even axes) are ignored by inverse.
//
// Memory. Out of place only: the real and the complex arrays must not overlap. forward
// leaves its input unchanged; inverse overwrites the spectrum it reads (FFTW's and
// cuFFT's multidimensional complex-to-real transforms use it as scratch). Backend::Cpu
// takes host pointers (any alignment); Backend::Cuda takes device pointers.
//
// Threads and streams. Backend::Cpu runs FFTW with Options::num_threads threads (0: as
// many as OpenMP's default) when the FFTW it is built with has a threaded library, and
// with one thread on meshes of fewer than 2^16 real values.
// Backend::Cuda queues every transform on its stream (Options::stream, or set_stream)
// and returns at once; the caller synchronises the stream before it reads the result.
// Plans (and cuFFT's work area) are made in the constructor: a transform allocates and
// plans nothing. One RealFft must not run two transforms at the same time from two
// threads; distinct RealFft objects may.
#include <array>
#include <complex>
#include <cstdint>
#include <memory>

#include "pmkit/backend.hpp"
#include "pmkit/error.hpp"

namespace pmkit {

// Where the transforms run; num_threads 0: OpenMP's default (or 1 without OpenMP).
struct FftOptions : ExecutionOptions {};

namespace detail {
template <class T, int D>
class FftBackend;
}

template <class T, int D>
class RealFft {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "pmkit FFTs are float or double");
  static_assert(D == 2 || D == 3, "pmkit FFTs are 2D or 3D");

 public:
  using Complex = std::complex<T>;

  // shape: the real mesh's points per axis, x first; each at least 1. Throws
  // pmkit::Error for a bad shape or options, or when the backend cannot plan it.
  explicit RealFft(const std::array<std::int64_t, D>& shape, FftOptions options = {});
  ~RealFft();
  RealFft(RealFft&&) noexcept;
  RealFft& operator=(RealFft&&) noexcept;
  RealFft(const RealFft&) = delete;
  RealFft& operator=(const RealFft&) = delete;

  // real (real_size() values) -> spectrum (spectrum_size() values).
  void forward(const T* real, Complex* spectrum);
  // spectrum (spectrum_size() values, overwritten) -> real (real_size() values).
  void inverse(Complex* spectrum, T* real);

  // CUDA: later transforms run on `stream`, after the work already queued on the old
  // stream by this object (an event orders them); the caller's streams are not
  // synchronised with the host. CPU: stored and ignored.
  void set_stream(StreamHandle stream);

  const std::array<std::int64_t, D>& shape() const { return shape_; }
  // The spectrum's shape: {shape[0]/2 + 1, shape[1] [, shape[2]]}.
  std::array<std::int64_t, D> spectrum_shape() const;
  std::int64_t real_size() const;
  std::int64_t spectrum_size() const;
  const FftOptions& options() const { return options_; }

 private:
  std::array<std::int64_t, D> shape_;
  FftOptions options_;
  std::unique_ptr<detail::FftBackend<T, D>> backend_;
};

}  // namespace pmkit
