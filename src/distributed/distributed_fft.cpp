// The DistributedRealFft front end: the shape, options and transport checked and agreed
// by all ranks, the slab layout (fft_slabs.hpp), and each transform's arrays checked on
// every rank before the backend's messages.
#include <climits>

#include "core/arguments.hpp"
#include "core/make_backend.hpp"
#include "distributed/collective.hpp"
#include "distributed/fft_slabs.hpp"
#include "pmkit/distributed_fft.hpp"

namespace pmkit {

using detail::fail;
using distributed::agree;

namespace {

void check_transport(Transport transport) {
  if (transport != Transport::Auto && transport != Transport::Nccl && transport != Transport::HostMpi)
    fail(ErrorCode::InvalidArgument, "transport = ", static_cast<int>(transport),
         ": Transport::Auto, Transport::Nccl or Transport::HostMpi");
}

// The shape: each axis from 1 to INT_MAX (FFTW and cuFFT take ints), the same on every rank.
template <int D>
void check_shape(MPI_Comm comm, const std::array<std::int64_t, D>& shape) {
  agree(comm, "DistributedRealFft", [&] {
    for (int d = 0; d < D; ++d)
      if (shape[d] < 1 || shape[d] > INT_MAX)
        fail(ErrorCode::InvalidArgument, "DistributedRealFft shape[", d, "] = ", shape[d],
             ": each axis needs between 1 and ", INT_MAX, " points");
  });
  std::array<long long, 2 * D> range;
  for (int d = 0; d < D; ++d) range[d] = shape[d], range[D + d] = -shape[d];
  MPI_Allreduce(MPI_IN_PLACE, range.data(), 2 * D, MPI_LONG_LONG, MPI_MAX, comm);
  for (int d = 0; d < D; ++d)
    if (range[d] != -range[D + d])
      fail(ErrorCode::InvalidArgument, "DistributedRealFft shape[", d, "] differs between the ranks (",
           -range[D + d], " to ", range[d], "): every rank passes the whole mesh's shape");
}

// One transform's arrays on this rank: present where they hold values, and apart.
void check_arrays(const char* call, const void* real, std::int64_t real_bytes, const void* spectrum,
                  std::int64_t spectrum_bytes) {
  if (real == nullptr && real_bytes > 0)
    fail(ErrorCode::InvalidArgument, "DistributedRealFft::", call, ": the real slab is null");
  if (spectrum == nullptr && spectrum_bytes > 0)
    fail(ErrorCode::InvalidArgument, "DistributedRealFft::", call, ": the spectrum slab is null");
  if (detail::bytes_overlap(real, static_cast<std::size_t>(real_bytes), spectrum,
                            static_cast<std::size_t>(spectrum_bytes)))
    fail(ErrorCode::InvalidArgument, "DistributedRealFft::", call,
         ": the real slab and the spectrum slab overlap; the transforms are out of place");
}

}  // namespace

template <class T, int D>
DistributedRealFft<T, D>::DistributedRealFft(MPI_Comm comm, const std::array<std::int64_t, D>& shape,
                                             FftOptions options, Transport transport)
    : shape_(shape), options_(options) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  try {
    check_shape<D>(comm_, shape);
    const distributed::SlabGeometry geometry = distributed::SlabGeometry::of<D>(shape, rank_, size_);
    agree(comm_, "DistributedRealFft", [&] {
      detail::check_execution_options(options, "options");
      check_transport(transport);
      const int empty = geometry.first_empty();
      if (empty < size_)
        fail(ErrorCode::InvalidArgument, "DistributedRealFft: shape[", D - 1, "] = ", shape[D - 1], " over ", size_,
             " ranks: slabs of ", geometry.a.block, " planes (FFTW's, ceil(", shape[D - 1], " / ", size_,
             ")) leave rank ", empty, " without a plane; every rank needs one: use a rank count P with (P - 1) * ",
             "ceil(n / P) < n = ", shape[D - 1]);
    });
    // The real slab as a block of the periodic grid of this shape, split 1 x ... x P.
    for (int d = 0; d < D; ++d) {
      real_.ranks[d] = d == D - 1 ? size_ : 1;
      real_.coords[d] = d == D - 1 ? rank_ : 0;
      real_.first_cell[d] = real_.first_node[d] = d == D - 1 ? geometry.a_first() : 0;
      real_.cells[d] = real_.shape[d] = d == D - 1 ? geometry.a_count() : shape[d];
    }
    // The spectrum's slab: 3D [k1][k2][k0] split along k1, 2D [k0][k1] split along k0.
    spectrum_.shape = shape;
    spectrum_.shape[0] = shape[0] / 2 + 1;
    const int split = D == 3 ? 1 : 0;
    spectrum_.first[split] = geometry.b_first();
    spectrum_.shape[split] = geometry.b_count();
    if constexpr (D == 3) spectrum_.order = {0, 2, 1};
    else spectrum_.order = {1, 0};
    const distributed::FftSetup<D> setup{comm_, shape_, options_, transport, geometry};
    backend_ = detail::make_backend(
        options, "options",
        [&]() -> std::unique_ptr<detail::DistributedFftBackend<T, D>> {
#if defined(PMKIT_WITH_FFTW_MPI)
          return detail::make_fftw_mpi_backend<T, D>(setup);
#else
          fail(ErrorCode::Unsupported,
               "DistributedRealFft on Backend::Cpu: this build of pmkit has no FFTW MPI interface (install "
               "libfftw3-dev and libfftw3-mpi-dev, then configure again with PMKIT_FFTW=ON)");
#endif
        },
        [&] { return detail::make_slab_cufft_backend<T, D>(setup); });
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
}

template <class T, int D>
DistributedRealFft<T, D>::~DistributedRealFft() {
  backend_.reset();  // before the communicator it sends on
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

template <class T, int D>
DistributedRealFft<T, D>::DistributedRealFft(DistributedRealFft&& o) noexcept
    : shape_(o.shape_), options_(o.options_), rank_(o.rank_), size_(o.size_), real_(o.real_),
      spectrum_(o.spectrum_), comm_(o.comm_), backend_(std::move(o.backend_)) {
  o.comm_ = MPI_COMM_NULL;
}

template <class T, int D>
DistributedRealFft<T, D>& DistributedRealFft<T, D>::operator=(DistributedRealFft&& o) noexcept {
  std::swap(shape_, o.shape_);
  std::swap(options_, o.options_);
  std::swap(rank_, o.rank_);
  std::swap(size_, o.size_);
  std::swap(real_, o.real_);
  std::swap(spectrum_, o.spectrum_);
  std::swap(comm_, o.comm_);
  std::swap(backend_, o.backend_);
  return *this;
}

template <class T, int D>
RankGrid<D> DistributedRealFft<T, D>::rank_grid() const {
  RankGrid<D> split;
  for (int d = 0; d < D; ++d) split.ranks[d] = real_.ranks[d];
  const distributed::SlabAxis a = distributed::SlabAxis::over(shape_[D - 1], size_);
  for (int r = 0; r <= size_; ++r) split.cuts[D - 1].push_back(a.first(r));
  return split;
}

template <class T, int D>
std::int64_t DistributedRealFft<T, D>::real_size() const {
  std::int64_t n = 1;
  for (int d = 0; d < D; ++d) n *= real_.shape[d];
  return n;
}

template <class T, int D>
void DistributedRealFft<T, D>::forward(const T* real, Complex* spectrum) {
  agree(comm_, "DistributedRealFft::forward", [&] {
    check_arrays("forward", real, real_size() * std::int64_t(sizeof(T)), spectrum,
                 spectrum_size() * std::int64_t(sizeof(Complex)));
    backend_->check_arrays("forward", real, spectrum);
  });
  backend_->forward(real, spectrum);
}

template <class T, int D>
void DistributedRealFft<T, D>::inverse(Complex* spectrum, T* real) {
  agree(comm_, "DistributedRealFft::inverse", [&] {
    check_arrays("inverse", real, real_size() * std::int64_t(sizeof(T)), spectrum,
                 spectrum_size() * std::int64_t(sizeof(Complex)));
    backend_->check_arrays("inverse", real, spectrum);
  });
  backend_->inverse(spectrum, real);
}

template <class T, int D>
Transport DistributedRealFft<T, D>::transport() const {
  return backend_->transport();
}

template <class T, int D>
DistributedFftTimings DistributedRealFft<T, D>::last_timings() const {
  return backend_->timings();
}

template class DistributedRealFft<float, 2>;
template class DistributedRealFft<float, 3>;
template class DistributedRealFft<double, 2>;
template class DistributedRealFft<double, 3>;

}  // namespace pmkit
