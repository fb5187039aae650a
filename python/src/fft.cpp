// The real FFTs of the extension module: one class per dtype and dimension
// (_pmkit.RealFft_float32_3d, ...), which the Python class pmkit.RealFft picks from. Real
// meshes and spectra are C-order arrays (the last axis x, the halved one), a leading axis
// of F fields transformed one after the other.
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <complex>
#include <vector>

#include "device_streams.hpp"
#include "pmkit/fft.hpp"
#include "plans.hpp"

namespace pmkit::python {

namespace {

using namespace nb::literals;

template <class T, int D>
class RealFftBinding {
  using Complex = std::complex<T>;

 public:
  RealFftBinding(const std::array<std::int64_t, D>& shape, const FftOptions& options)
      : fft_(shape, options),
        where_(placement(options.backend, false, options.device)),
        real_shape_(c_order<D>(fft_.shape())),
        spectrum_shape_(c_order<D>(fft_.spectrum_shape())),
        device_copy_(options.device) {}

  void forward(const nb::list& reals, const nb::list& spectra, Stream stream) {
    const Views<const T> in(reals, "real", Layout::Mesh, where_, real_shape_);
    const Views<Complex> out(spectra, "out", Layout::Mesh, where_, spectrum_shape_);
    require_count("out", out.size(), in.size(), "spectra", "one per real mesh");
    follow_stream(fft_, where_.device, stream);
    nb::gil_scoped_release release;
    for (std::size_t f = 0; f < in.size(); ++f) fft_.forward(in[f].data, out[f].data);
  }

  // The spectra are overwritten where `overwrite` allows it (RealFft's inverse uses its
  // input as scratch), else each is copied first into memory of the binding's own.
  void inverse(const nb::list& spectra, const nb::list& reals, bool overwrite, Stream stream) {
    if (overwrite)
      inverse_of(Views<Complex>(spectra, "spectrum", Layout::Mesh, where_, spectrum_shape_), reals, stream,
                 [](Complex* spectrum) { return spectrum; });
    else
      inverse_of(Views<const Complex>(spectra, "spectrum", Layout::Mesh, where_, spectrum_shape_), reals, stream,
                 [this](const Complex* spectrum) { return copy(spectrum); });
  }

  void synchronize() {
    nb::gil_scoped_release release;
    if (where_.device) synchronize_stream(fft_.options().stream, where_.device_id);
  }

  const RealFft<T, D>& fft() const { return fft_; }
  const std::vector<std::int64_t>& real_shape() const { return real_shape_; }
  const std::vector<std::int64_t>& spectrum_shape() const { return spectrum_shape_; }

 private:
  template <class E, class Scratch>
  void inverse_of(const Views<E>& in, const nb::list& reals, Stream stream, Scratch scratch) {
    const Views<T> out(reals, "out", Layout::Mesh, where_, real_shape_);
    require_count("out", out.size(), in.size(), "real meshes", "one per spectrum");
    follow_stream(fft_, where_.device, stream);
    nb::gil_scoped_release release;
    for (std::size_t f = 0; f < in.size(); ++f) fft_.inverse(scratch(in[f].data), out[f].data);
  }

  // A copy of one spectrum that the inverse may overwrite, on the FFT's stream.
  Complex* copy(const Complex* spectrum) {
    const auto n = static_cast<std::size_t>(fft_.spectrum_size());
    if (where_.device)
      return static_cast<Complex*>(device_copy_.copy_from(spectrum, n * sizeof(Complex), fft_.options().stream));
    host_copy_.resize(n);
    std::copy(spectrum, spectrum + n, host_copy_.begin());
    return host_copy_.data();
  }

  RealFft<T, D> fft_;
  Placement where_;
  std::vector<std::int64_t> real_shape_, spectrum_shape_;
  std::vector<Complex> host_copy_;
  DeviceBuffer device_copy_;
};

template <class T, int D>
void bind_fft(nb::module_& m, const char* name) {
  using F = RealFftBinding<T, D>;
  nb::class_<F>(m, name, "pmkit::RealFft for one dtype and dimension; use pmkit.RealFft.")
      .def(nb::init<const std::array<std::int64_t, D>&, const FftOptions&>(), "shape"_a, "options"_a)
      .def("forward", &F::forward, "real"_a, "out"_a, "stream"_a.none())
      .def("inverse", &F::inverse, "spectrum"_a, "out"_a, "overwrite"_a, "stream"_a.none())
      .def("synchronize", &F::synchronize, "Waits for the work queued on the FFT's stream.")
      .def_prop_ro("shape", [](const F& f) { return f.real_shape(); })
      .def_prop_ro("spectrum_shape", [](const F& f) { return f.spectrum_shape(); })
      .def_prop_ro("options", [](const F& f) { return f.fft().options(); });
}

}  // namespace

void bind_ffts(nb::module_& m) {
  nb::class_<FftOptions, ExecutionOptions>(m, "FftOptions", "pmkit::FftOptions of a RealFft.").def(nb::init<>());
  bind_fft<float, 2>(m, "RealFft_float32_2d");
  bind_fft<float, 3>(m, "RealFft_float32_3d");
  bind_fft<double, 2>(m, "RealFft_float64_2d");
  bind_fft<double, 3>(m, "RealFft_float64_3d");
}

}  // namespace pmkit::python
