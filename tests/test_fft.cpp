// RealFft against a direct DFT in double: forward and inverse, 2D and 3D, odd and even
// axes, float and double, on the CPU (FFTW) and on a GPU (cuFFT); and its errors.
#include <complex>
#include <sstream>
#include <random>
#include <vector>

#include "test_support.hpp"
#if defined(PMKIT_WITH_CUDA)
#include "cuda_support.hpp"
#endif

namespace pmkit::test {
namespace {

using cd = std::complex<double>;

// The direct DFT of a real mesh (x fastest), on RealFft's half spectrum.
template <int D>
std::vector<cd> direct_forward(const std::vector<double>& f, const std::array<std::int64_t, D>& n) {
  std::array<std::int64_t, 3> s{1, 1, 1}, h{1, 1, 1};
  for (int d = 0; d < D; ++d) s[d] = h[d] = n[d];
  h[0] = n[0] / 2 + 1;
  const double two_pi = 2 * std::acos(-1.0);
  std::vector<cd> F(static_cast<std::size_t>(h[0] * h[1] * h[2]));
  for (std::int64_t k2 = 0; k2 < h[2]; ++k2)
    for (std::int64_t k1 = 0; k1 < h[1]; ++k1)
      for (std::int64_t k0 = 0; k0 < h[0]; ++k0) {
        cd sum = 0;
        for (std::int64_t j2 = 0; j2 < s[2]; ++j2)
          for (std::int64_t j1 = 0; j1 < s[1]; ++j1)
            for (std::int64_t j0 = 0; j0 < s[0]; ++j0) {
              const double phase = double(k0 * j0 % s[0]) / s[0] + double(k1 * j1 % s[1]) / s[1] +
                                   double(k2 * j2 % s[2]) / s[2];
              sum += f[j0 + s[0] * (j1 + s[1] * j2)] * std::polar(1.0, -two_pi * phase);
            }
        F[k0 + h[0] * (k1 + h[1] * k2)] = sum;
      }
  return F;
}

template <class T>
double tolerance() {
  return std::is_same<T, float>::value ? 2e-6 : 1e-13;
}

// Runs forward and inverse through `run` (which moves the arrays to the backend and back)
// and compares them with the direct DFT: forward(f) = F, inverse(F) = N f.
template <class T, int D, class Run>
void check_against_direct(const std::array<std::int64_t, D>& shape, FftOptions options, Run run) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  RealFft<T, D> fft(shape, options);
  const auto n = static_cast<std::size_t>(fft.real_size());
  std::vector<double> f(n);
  for (double& v : f) v = u(rng);
  const std::vector<cd> F = direct_forward<D>(f, shape);
  ASSERT_EQ(F.size(), static_cast<std::size_t>(fft.spectrum_size()));

  std::vector<T> real(f.begin(), f.end());
  std::vector<std::complex<T>> spectrum(F.size());
  run(fft, real, spectrum);
  double scale = 0, err = 0;
  for (std::size_t k = 0; k < F.size(); ++k) {
    scale = std::max(scale, std::abs(F[k]));
    err = std::max(err, std::abs(cd(spectrum[k]) - F[k]));
  }
  EXPECT_LE(err, tolerance<T>() * scale * std::sqrt(double(n))) << "forward, max |F| = " << scale;
  for (std::size_t i = 0; i < real.size(); ++i) EXPECT_EQ(real[i], T(f[i])) << "forward changed its input";

  // inverse of the exact spectrum, rounded to T: N times the input.
  for (std::size_t k = 0; k < F.size(); ++k) spectrum[k] = std::complex<T>(F[k]);
  std::vector<T> back(n);
  run.inverse(fft, spectrum, back);
  err = 0;
  for (std::size_t i = 0; i < n; ++i) err = std::max(err, std::abs(double(back[i]) - double(n) * f[i]));
  EXPECT_LE(err, tolerance<T>() * scale * std::sqrt(double(n))) << "inverse";
}

struct HostRun {
  template <class T, int D>
  void operator()(RealFft<T, D>& fft, std::vector<T>& real, std::vector<std::complex<T>>& spectrum) {
    fft.forward(real.data(), spectrum.data());
  }
  template <class T, int D>
  void inverse(RealFft<T, D>& fft, std::vector<std::complex<T>>& spectrum, std::vector<T>& real) {
    fft.inverse(spectrum.data(), real.data());
  }
};

#if defined(PMKIT_WITH_CUDA)
// Copies to the device, transforms there, copies back.
struct DeviceRun {
  template <class T, int D>
  void operator()(RealFft<T, D>& fft, std::vector<T>& real, std::vector<std::complex<T>>& spectrum) {
    DeviceBuffer<T> r(real);
    DeviceBuffer<std::complex<T>> s(spectrum.size());
    fft.forward(r.get(), s.get());
    cuda::check(cudaDeviceSynchronize(), "forward");
    spectrum = s.download();
    real = r.download();
  }
  template <class T, int D>
  void inverse(RealFft<T, D>& fft, std::vector<std::complex<T>>& spectrum, std::vector<T>& real) {
    DeviceBuffer<std::complex<T>> s(spectrum);
    DeviceBuffer<T> r(real.size());
    fft.inverse(s.get(), r.get());
    cuda::check(cudaDeviceSynchronize(), "inverse");
    real = r.download();
  }
};
#endif

// The transforms on every variant of FftOptions (CPU threads, CUDA device pointers),
// both precisions, odd and even axes, axes of one.
class FftTest : public VariantTest {
 protected:
  void SetUp() override {
    VariantTest::SetUp();
    if (!IsSkipped() && !on_cuda(bc_)) PMKIT_REQUIRE_FFTW();
  }
  template <int D>
  void check(const std::array<std::int64_t, D>& shape) {
    std::ostringstream what;
    for (auto n : shape) what << n << " ";
    SCOPED_TRACE(what.str());
    const FftOptions o = options_of<FftOptions>(bc_);
    if (!on_cuda(bc_)) {
      check_against_direct<float, D>(shape, o, HostRun{});
      check_against_direct<double, D>(shape, o, HostRun{});
      return;
    }
#if defined(PMKIT_WITH_CUDA)
    check_against_direct<float, D>(shape, o, DeviceRun{});
    check_against_direct<double, D>(shape, o, DeviceRun{});
#endif
  }
};

TEST_P(FftTest, MatchesDirectDft2D) {
  for (auto shape : {std::array<std::int64_t, 2>{8, 6}, {7, 5}, {1, 9}, {12, 1}, {16, 15}}) check<2>(shape);
}

TEST_P(FftTest, MatchesDirectDft3D) {
  for (auto shape : {std::array<std::int64_t, 3>{4, 6, 8}, {5, 3, 7}, {9, 4, 1}, {2, 2, 2}, {8, 8, 9}}) check<3>(shape);
}

INSTANTIATE_TEST_SUITE_P(Backends, FftTest, variant_values<FftOptions>(), variant_name);

// Arrays off FFTW's SIMD alignment (here by one float) take the unaligned plans.
TEST(FftCpu, UnalignedArrays) {
  PMKIT_REQUIRE_FFTW();
  RealFft<float, 2> fft({10, 6});
  std::mt19937 rng(static_cast<unsigned>(fresh_seed()));
  std::vector<float> real(61);
  for (float& v : real) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<float> copy(real.begin() + 1, real.end());
  std::vector<std::complex<float>> expected(fft.spectrum_size()), storage(fft.spectrum_size() + 1);
  auto* shifted = reinterpret_cast<std::complex<float>*>(reinterpret_cast<float*>(storage.data()) + 1);
  fft.forward(copy.data(), expected.data());
  fft.forward(real.data() + 1, shifted);
  for (std::size_t k = 0; k < expected.size(); ++k) EXPECT_LE(std::abs(shifted[k] - expected[k]), 1e-5f) << k;
}

TEST(FftErrors, BadShapesAndArrays) {
  EXPECT_THROW((RealFft<float, 2>({0, 4})), Error);
  EXPECT_THROW((RealFft<double, 3>({4, -1, 4})), Error);
  EXPECT_THROW((RealFft<double, 3>({4, 4, std::int64_t(1) << 32})), Error);
  FftOptions bad;
  bad.num_threads = -2;
  EXPECT_THROW((RealFft<float, 2>({4, 4}, bad)), Error);
  PMKIT_REQUIRE_FFTW();
  try {
    RealFft<float, 2> fft({4, 0});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("shape[1] = 0"), std::string::npos) << e.what();
  }
  RealFft<float, 2> fft({8, 4});
  std::vector<float> real(32);
  std::vector<std::complex<float>> spectrum(20);
  EXPECT_THROW(fft.forward(nullptr, spectrum.data()), Error);
  EXPECT_THROW(fft.inverse(spectrum.data(), nullptr), Error);
  // In place (overlapping) is refused.
  std::vector<float> both(64);
  EXPECT_THROW(fft.forward(both.data(), reinterpret_cast<std::complex<float>*>(both.data() + 8)), Error);
  EXPECT_EQ(fft.spectrum_shape()[0], 5);
  EXPECT_EQ(fft.spectrum_size(), 20);
  EXPECT_EQ(fft.real_size(), 32);
}

#if defined(PMKIT_WITH_CUDA)
// After set_stream the transforms run on the new stream, after the old one's work.
TEST(FftCuda, SetStreamOrdersTheStreams) {
  PMKIT_REQUIRE_GPU();
  cudaStream_t a = nullptr, b = nullptr;
  cuda::check(cudaStreamCreate(&a), "stream");
  cuda::check(cudaStreamCreate(&b), "stream");
  FftOptions o;
  o.backend = Backend::Cuda;
  o.stream = cuda::stream_handle(a);
  const std::array<std::int64_t, 3> shape{64, 64, 64};
  RealFft<float, 3> fft(shape, o);
  std::vector<float> ones(fft.real_size(), 1.0f);
  DeviceBuffer<float> real(ones), back(ones.size());
  DeviceBuffer<std::complex<float>> spectrum(fft.spectrum_size());
  fft.forward(real.get(), spectrum.get());
  fft.set_stream(cuda::stream_handle(b));
  fft.inverse(spectrum.get(), back.get());
  cuda::check(cudaStreamSynchronize(b), "stream b");
  std::vector<float> out(ones.size());
  out = back.download();
  for (std::size_t i = 0; i < out.size(); i += 997) ASSERT_FLOAT_EQ(out[i], float(fft.real_size()));
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST(FftCuda, HostPointerIsAnError) {
  PMKIT_REQUIRE_GPU();
  FftOptions o;
  o.backend = Backend::Cuda;
  RealFft<double, 2> fft({6, 6}, o);
  std::vector<double> real(36);
  std::vector<std::complex<double>> spectrum(24);
  EXPECT_THROW(fft.forward(real.data(), spectrum.data()), Error);
  o.device = 99;
  EXPECT_THROW((RealFft<double, 2>({6, 6}, o)), Error);
}
#else
TEST(FftErrors, CudaWithoutTheBackend) {
  FftOptions o;
  o.backend = Backend::Cuda;
  try {
    RealFft<float, 3> fft({4, 4, 4}, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
}
#endif

}  // namespace
}  // namespace pmkit::test
