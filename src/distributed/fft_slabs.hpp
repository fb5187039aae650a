#pragma once
// The slab layout of DistributedRealFft (include/pmkit/distributed_fft.hpp) and the
// interface behind it. The real mesh is split along its slowest axis, the spectrum along
// the next one (transposed), both in FFTW's blocks of ceil(n / P): the same arithmetic on
// CPU ranks (FFTW's MPI interface, which the host backend checks against it) and on CUDA
// ranks (cuFFT and slab transposes). Host code only.
#include <algorithm>
#include <array>
#include <complex>
#include <cstdint>
#include <memory>

#include <mpi.h>

#include "pmkit/distributed.hpp"
#include "pmkit/distributed_fft.hpp"
#include "pmkit/fft.hpp"

namespace pmkit::distributed {

// One axis split over P ranks in FFTW's blocks: rank r holds [r b, min(n, (r + 1) b)).
struct SlabAxis {
  std::int64_t n = 0;      // values along the axis
  std::int64_t block = 0;  // ceil(n / P)
  std::int64_t first(int r) const { return std::min(n, r * block); }
  std::int64_t count(int r) const { return std::min(n, (r + 1) * block) - first(r); }
  static SlabAxis over(std::int64_t n, int ranks) { return {n, (n + ranks - 1) / ranks}; }
};

// The geometry of the slab transposes, for D = 2 and 3 alike: the real mesh's slab holds
// a_count planes of its distributed axis a (z in 3D, y in 2D); after the transforms of
// the other axes each plane holds b rows (y in 3D, the half x spectrum in 2D) of c
// complex values (the half x spectrum in 3D, 1 in 2D); the spectrum's slab holds b_count
// of the b rows with every plane of a, stored [b][a][c].
struct SlabGeometry {
  SlabAxis a, b;
  std::int64_t c = 1;
  int rank = 0, size = 1;

  template <int D>
  static SlabGeometry of(const std::array<std::int64_t, D>& shape, int rank, int size) {
    SlabGeometry g;
    g.a = SlabAxis::over(shape[D - 1], size);
    g.b = SlabAxis::over(D == 3 ? shape[1] : shape[0] / 2 + 1, size);
    g.c = D == 3 ? shape[0] / 2 + 1 : 1;
    g.rank = rank;
    g.size = size;
    return g;
  }
  std::int64_t a_first() const { return a.first(rank); }
  std::int64_t a_count() const { return a.count(rank); }
  std::int64_t b_first() const { return b.first(rank); }
  std::int64_t b_count() const { return b.count(rank); }
  // The first rank left without a plane of a, size if none.
  int first_empty() const {
    for (int r = 0; r < size; ++r)
      if (a.count(r) <= 0) return r;
    return size;
  }
};

// What a backend is built from (the front end has checked and agreed on all of it).
template <int D>
struct FftSetup {
  MPI_Comm comm;  // the FFT's own communicator
  const std::array<std::int64_t, D>& shape;
  const FftOptions& options;
  Transport transport;
  const SlabGeometry& geometry;
};

}  // namespace pmkit::distributed

namespace pmkit::detail {

// The interface behind DistributedRealFft: the front end has checked the arrays on every
// rank (its own checks and the backend's check_arrays, agreed) when these are called.
template <class T, int D>
class DistributedFftBackend {
 public:
  virtual ~DistributedFftBackend() = default;
  // What the backend asks of the arrays beyond the front end's checks (a CUDA rank:
  // device memory); throws pmkit::Error naming the array.
  virtual void check_arrays(const char* call, const T* real, const std::complex<T>* spectrum) const = 0;
  virtual void forward(const T* real, std::complex<T>* spectrum) = 0;
  virtual void inverse(std::complex<T>* spectrum, T* real) = 0;
  virtual Transport transport() const = 0;
  virtual DistributedFftTimings timings() const = 0;
};

// FFTW's MPI transforms (host/fft_fftw_mpi.cpp) and cuFFT with slab transposes
// (cuda/fft_slabs.cu, CUDA builds only). Both are collective.
template <class T, int D>
std::unique_ptr<DistributedFftBackend<T, D>> make_fftw_mpi_backend(const distributed::FftSetup<D>& setup);
template <class T, int D>
std::unique_ptr<DistributedFftBackend<T, D>> make_slab_cufft_backend(const distributed::FftSetup<D>& setup);

}  // namespace pmkit::detail
