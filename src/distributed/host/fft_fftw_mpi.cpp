// DistributedRealFft on CPU ranks: FFTW's MPI transforms (fftw3_mpi, fftw3f_mpi), in
// place in one FFTW array per rank with the spectrum transposed (FFTW_MPI_TRANSPOSED_OUT
// and _IN), so that a transform is one all-to-all. FFTW's real array pads each row of x
// to 2 (n0/2 + 1) values: the caller's unpadded slab is copied in and out of it, and the
// spectrum copied as it is (its layout is the slab's).
#include <fftw3-mpi.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "cpu/fftw_calls.hpp"
#include "distributed/collective.hpp"
#include "distributed/fft_slabs.hpp"

namespace pmkit::detail {
namespace {

// FFTW's MPI API of each precision under one name, beside its serial one (Fftw<T>).
template <class T>
struct FftwMpi;

template <>
struct FftwMpi<double> : Fftw<double> {
  static void init() { fftw_mpi_init(); }
  static ptrdiff_t local_size(int d, const ptrdiff_t* n, MPI_Comm comm, ptrdiff_t* n0, ptrdiff_t* first0,
                              ptrdiff_t* n1, ptrdiff_t* first1) {
    return fftw_mpi_local_size_transposed(d, n, comm, n0, first0, n1, first1);
  }
  static Plan r2c(int d, const ptrdiff_t* n, Complex* data, MPI_Comm comm, unsigned flags) {
    return fftw_mpi_plan_dft_r2c(d, n, reinterpret_cast<double*>(data), data, comm, flags);
  }
  static Plan c2r(int d, const ptrdiff_t* n, Complex* data, MPI_Comm comm, unsigned flags) {
    return fftw_mpi_plan_dft_c2r(d, n, data, reinterpret_cast<double*>(data), comm, flags);
  }
  static void execute(Plan p) { fftw_execute(p); }
};

template <>
struct FftwMpi<float> : Fftw<float> {
  static void init() { fftwf_mpi_init(); }
  static ptrdiff_t local_size(int d, const ptrdiff_t* n, MPI_Comm comm, ptrdiff_t* n0, ptrdiff_t* first0,
                              ptrdiff_t* n1, ptrdiff_t* first1) {
    return fftwf_mpi_local_size_transposed(d, n, comm, n0, first0, n1, first1);
  }
  static Plan r2c(int d, const ptrdiff_t* n, Complex* data, MPI_Comm comm, unsigned flags) {
    return fftwf_mpi_plan_dft_r2c(d, n, reinterpret_cast<float*>(data), data, comm, flags);
  }
  static Plan c2r(int d, const ptrdiff_t* n, Complex* data, MPI_Comm comm, unsigned flags) {
    return fftwf_mpi_plan_dft_c2r(d, n, data, reinterpret_cast<float*>(data), comm, flags);
  }
  static void execute(Plan p) { fftwf_execute(p); }
};

template <class T, int D>
class FftwMpiBackend final : public DistributedFftBackend<T, D> {
  using F = FftwMpi<T>;
  using FC = typename F::Complex;

 public:
  explicit FftwMpiBackend(const distributed::FftSetup<D>& setup)
      : geometry_(setup.geometry), row_(setup.shape[0]) {
    // FFTW is row-major (last index fastest): pmkit's x-fastest shape, reversed; its
    // local sizes take the complex array's, the last axis halved.
    ptrdiff_t n[D], half[D];
    std::int64_t real_size = 1;
    for (int d = 0; d < D; ++d) {
      n[d] = half[d] = static_cast<ptrdiff_t>(setup.shape[D - 1 - d]);
      real_size *= setup.shape[d];
    }
    half[D - 1] = n[D - 1] / 2 + 1;
    rows_ = geometry_.a_count() * (real_size / setup.shape[D - 1]) / row_;
    spectrum_size_ = geometry_.b_count() * geometry_.a.n * geometry_.c;
    std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    static std::once_flag ready;
    std::call_once(ready, [] {
#if defined(PMKIT_FFTW_THREADS)
      F::init_threads();
#endif
      F::init();
    });
    try {
      plan(setup, n, half, real_size);
    } catch (...) {
      release();
      throw;
    }
  }
  ~FftwMpiBackend() override {
    std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    release();
  }

  void check_arrays(const char*, const T*, const std::complex<T>*) const override {}
  void forward(const T* real, std::complex<T>* spectrum) override {
    const double start = MPI_Wtime();
    T* padded = reinterpret_cast<T*>(data_);
    const std::int64_t stride = 2 * (row_ / 2 + 1);
    for (std::int64_t r = 0; r < rows_; ++r) std::copy_n(real + r * row_, row_, padded + r * stride);
    F::execute(forward_);
    if (spectrum_size_ > 0) std::memcpy(static_cast<void*>(spectrum), data_, spectrum_size_ * sizeof(FC));
    seconds_ = MPI_Wtime() - start;
  }
  void inverse(std::complex<T>* spectrum, T* real) override {
    const double start = MPI_Wtime();
    if (spectrum_size_ > 0) std::memcpy(data_, spectrum, spectrum_size_ * sizeof(FC));
    F::execute(inverse_);
    const T* padded = reinterpret_cast<const T*>(data_);
    const std::int64_t stride = 2 * (row_ / 2 + 1);
    for (std::int64_t r = 0; r < rows_; ++r) std::copy_n(padded + r * stride, row_, real + r * row_);
    seconds_ = MPI_Wtime() - start;
  }
  Transport transport() const override { return Transport::HostMpi; }
  DistributedFftTimings timings() const override { return {seconds_, 0.0}; }

 private:
  // FFTW's slabs checked against pmkit's, its array and both plans (collective; the
  // planner's lock held).
  void plan(const distributed::FftSetup<D>& setup, const ptrdiff_t* n, const ptrdiff_t* half,
            std::int64_t real_size) {
    const std::int64_t planes = geometry_.a_count();
    ptrdiff_t n0 = 0, first0 = 0, n1 = 0, first1 = 0;
    const ptrdiff_t room = F::local_size(D, half, setup.comm, &n0, &first0, &n1, &first1);
    distributed::agree(setup.comm, "DistributedRealFft", [&] {
      // (FFTW puts an empty part at 0.)
      if (n0 != planes || first0 != geometry_.a_first() || n1 != geometry_.b_count() ||
          (n1 > 0 && first1 != geometry_.b_first()))
        fail(ErrorCode::Unsupported, "DistributedRealFft: FFTW's MPI slabs (", n0, " planes from ", first0,
             ", spectrum ", n1, " from ", first1, ") are not pmkit's (", planes, " from ", geometry_.a_first(),
             ", ", geometry_.b_count(), " from ", geometry_.b_first(), ")");
      data_ = static_cast<FC*>(F::malloc(std::max<ptrdiff_t>(room, 1) * sizeof(FC)));
      if (data_ == nullptr)
        fail(ErrorCode::OutOfMemory, "DistributedRealFft: fftw_malloc of ", room, " complex values failed");
    });
#if defined(PMKIT_FFTW_THREADS)
    F::plan_with_nthreads(fftw_threads(real_size / setup.geometry.size, setup.options.num_threads));
#endif
    // FFTW_ESTIMATE plans without running transforms (and alike on every rank).
    forward_ = F::r2c(D, n, data_, setup.comm, FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_OUT);
    inverse_ = F::c2r(D, n, data_, setup.comm, FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_IN);
    distributed::agree(setup.comm, "DistributedRealFft", [&] {
      if (!forward_ || !inverse_) fail(ErrorCode::Unsupported, "DistributedRealFft: FFTW could not plan the shape");
    });
  }
  void release() {
    if (forward_) F::destroy(forward_);
    if (inverse_) F::destroy(inverse_);
    if (data_) F::free(data_);
    forward_ = inverse_ = nullptr;
    data_ = nullptr;
  }

  distributed::SlabGeometry geometry_;
  std::int64_t row_;            // x values of a row of the real mesh
  std::int64_t rows_ = 0;       // rows of x in this rank's slab
  std::int64_t spectrum_size_ = 0;
  double seconds_ = 0;          // the last transform's
  FC* data_ = nullptr;          // FFTW's array: the padded real slab, then the spectrum slab
  typename F::Plan forward_ = nullptr, inverse_ = nullptr;
};

}  // namespace

template <class T, int D>
std::unique_ptr<DistributedFftBackend<T, D>> make_fftw_mpi_backend(const distributed::FftSetup<D>& setup) {
  return std::make_unique<FftwMpiBackend<T, D>>(setup);
}

template std::unique_ptr<DistributedFftBackend<float, 2>> make_fftw_mpi_backend<float, 2>(const distributed::FftSetup<2>&);
template std::unique_ptr<DistributedFftBackend<float, 3>> make_fftw_mpi_backend<float, 3>(const distributed::FftSetup<3>&);
template std::unique_ptr<DistributedFftBackend<double, 2>> make_fftw_mpi_backend<double, 2>(const distributed::FftSetup<2>&);
template std::unique_ptr<DistributedFftBackend<double, 3>> make_fftw_mpi_backend<double, 3>(const distributed::FftSetup<3>&);

}  // namespace pmkit::detail
