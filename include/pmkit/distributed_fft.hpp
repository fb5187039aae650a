#pragma once
// DistributedRealFft<T, D>: RealFft's periodic real <-> complex transforms of one mesh
// shape over the ranks of an MPI communicator, each rank holding a slab of the real mesh
// and a slab of the spectrum. CPU ranks run FFTW's MPI interface; CUDA ranks run cuFFT
// on their slabs and exchange them through the DistributedPlan's transports (NCCL, or
// host-staged MPI where ranks share a GPU). Library pmkit_mpi (CMake pmkit::distributed).
//
//   pmkit::DistributedRealFft<float, 3> fft(MPI_COMM_WORLD, {nx, ny, nz});
//   pmkit::DistributedPlan<float, 3> plan(MPI_COMM_WORLD, grid, kernel, options,
//                                         fft.rank_grid());   // blocks = the FFT's slabs
//   plan.spread({q}, {rho});                    // rho: this rank's slab, real_size() values
//   fft.forward(rho, rho_hat);                  // rho_hat: spectrum_size() values
//   ... rho_hat[i] *= G(k) for k = fft.spectrum_slab().at(i) ...
//   fft.inverse(rho_hat, phi);                  // phi: this rank's slab, as rho
//   plan.interp({phi}, {phi_at_particles});
//
// Layout. The real mesh is split along its slowest axis (D - 1: z in 3D, y in 2D) into
// slabs of b = ceil(n / P) planes (FFTW's blocks; the last rank holds the rest), rank r
// holding planes [r b, min(n, (r + 1) b)); each rank's slab is the single-rank mesh's
// planes, x fastest, with no padding: real_block() says where. rank_grid() is that split
// as a RankGrid (1 x ... x P, these cuts), so that a DistributedPlan of a periodic grid of
// this shape built with it has blocks equal to the slabs: spread's blocks go into forward
// and inverse's come back to interp as they are, with no redistribution. Every rank must
// hold at least one plane: a rank count that leaves a rank without one (n = 6 over 4
// ranks: slabs of 2) fails in the constructor, on every rank, naming the axis.
//
// The spectrum is the half spectrum of RealFft (k0 in [0, n0/2], the others whole),
// transposed so that the next axis is the distributed one (FFTW's TRANSPOSED_OUT):
// 3D: k1 split into blocks of ceil(n1 / P), stored k0 fastest, then k2, then k1;
// 2D: k0 split into blocks of ceil((n0/2 + 1) / P), stored k1 fastest, then k0.
// spectrum_slab() gives this rank's wavenumber ranges and that order (a rank may hold
// none of the spectrum where the split axis has fewer values than ranks). forward's
// output is that slab and inverse's input the same: a reciprocal-space convolution
// scales each value in place between the two.
//
// Conventions are RealFft's: forward(f)[k] = sum_j f[j] exp(-2 pi i k.j / n), inverse
// the unscaled sum back, so inverse(forward(f)) = (n0 n1 [n2]) f; inverse ignores the
// imaginary parts of the self-conjugate wavenumbers. Out of place: the real slab and the
// spectrum slab must not overlap; forward leaves its input unchanged, inverse may
// overwrite the spectrum it reads.
//
// Collective calls. The constructor, forward and inverse are collective: every rank makes
// them, in the same order. Their arguments are checked and agreed by all ranks before any
// message: a bad argument on one rank throws pmkit::Error on every rank (the others name
// the failing rank). Backend::Cpu takes host pointers; Backend::Cuda device pointers on
// options.device, and queues the transforms on options.stream (the host-staged transport
// waits for the stream before each message); the caller synchronises the stream before it
// reads results on the host.
#include <array>
#include <complex>
#include <cstdint>
#include <memory>

#include <mpi.h>

#include "pmkit/distributed.hpp"
#include "pmkit/fft.hpp"

namespace pmkit {

// Where a rank's part of the distributed spectrum lies and how it is stored.
template <int D>
struct SpectrumSlab {
  std::array<std::int64_t, D> first{};  // first index held, per axis (k0 in [0, n0/2])
  std::array<std::int64_t, D> shape{};  // indices held, per axis
  std::array<int, D> order{};           // the axes from the fastest in memory to the slowest

  // The offset in this rank's spectrum array of half-spectrum index k (inside the slab).
  std::int64_t index(const std::array<std::int64_t, D>& k) const {
    std::int64_t offset = 0, stride = 1;
    for (int i = 0; i < D; ++i) {
      offset += (k[order[i]] - first[order[i]]) * stride;
      stride *= shape[order[i]];
    }
    return offset;
  }
  // The half-spectrum index held at offset i of this rank's spectrum array (index's inverse).
  std::array<std::int64_t, D> at(std::int64_t i) const {
    std::array<std::int64_t, D> k{};
    for (int j = 0; j < D; ++j) {
      k[order[j]] = first[order[j]] + i % shape[order[j]];
      i /= shape[order[j]];
    }
    return k;
  }
  std::int64_t size() const {
    std::int64_t n = 1;
    for (int d = 0; d < D; ++d) n *= shape[d];
    return n;
  }
};

// Seconds of the last forward or inverse (CUDA ranks: the device's time between events on
// the stream; last_timings waits for the transform to finish).
struct DistributedFftTimings {
  double total_s = 0;     // the whole transform, its exchange included
  double exchange_s = 0;  // CUDA ranks: the slabs' exchange; CPU ranks: 0 (FFTW's MPI
                          // transforms exchange inside, not timed apart)
};

namespace detail {
template <class T, int D>
class DistributedFftBackend;
}

template <class T, int D>
class DistributedRealFft {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "pmkit FFTs are float or double");
  static_assert(D == 2 || D == 3, "pmkit FFTs are 2D or 3D");

 public:
  using Complex = std::complex<T>;

  // comm: the ranks that share the mesh (the FFT keeps its own communicator); shape: the
  // whole mesh's points per axis, x first, the same on every rank. options: as RealFft's
  // (backend, threads; on CUDA ranks device and stream). transport: how CUDA ranks
  // exchange their slabs, as DistributedPlan's (Auto: NCCL where every rank has a GPU of
  // its own, else host-staged MPI); CPU ranks use MPI. Throws on every rank for a bad
  // shape, options or transport, or a rank count that leaves a rank without a plane.
  DistributedRealFft(MPI_Comm comm, const std::array<std::int64_t, D>& shape, FftOptions options = {},
                     Transport transport = Transport::Auto);
  ~DistributedRealFft();
  DistributedRealFft(DistributedRealFft&&) noexcept;
  DistributedRealFft& operator=(DistributedRealFft&&) noexcept;
  DistributedRealFft(const DistributedRealFft&) = delete;
  DistributedRealFft& operator=(const DistributedRealFft&) = delete;

  // This rank's real slab (real_size() values) -> its spectrum slab (spectrum_size()).
  void forward(const T* real, Complex* spectrum);
  // This rank's spectrum slab (overwritten) -> its real slab.
  void inverse(Complex* spectrum, T* real);

  const std::array<std::int64_t, D>& shape() const { return shape_; }
  const FftOptions& options() const { return options_; }
  // This rank's real slab as a DistributedPlan block of the periodic grid of this shape
  // (first_node and shape; ranks and coords of the 1 x ... x P rank grid).
  const Block<D>& real_block() const { return real_; }
  // The split for a DistributedPlan whose blocks are the real slabs.
  RankGrid<D> rank_grid() const;
  const SpectrumSlab<D>& spectrum_slab() const { return spectrum_; }
  std::int64_t real_size() const;
  std::int64_t spectrum_size() const { return spectrum_.size(); }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // How a CUDA rank's slabs travel (Auto resolved); HostMpi on CPU ranks.
  Transport transport() const;
  // This rank's times of its last forward or inverse.
  DistributedFftTimings last_timings() const;

 private:
  std::array<std::int64_t, D> shape_;
  FftOptions options_;
  int rank_ = 0, size_ = 1;
  Block<D> real_;
  SpectrumSlab<D> spectrum_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<detail::DistributedFftBackend<T, D>> backend_;
};

}  // namespace pmkit
