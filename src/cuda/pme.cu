// The CUDA backend of PmePlan: device scratch, the convolution and the last step, on the
// plan's stream; the energy's sums stay on the device (no wait for the host).
#include <algorithm>

#include "core/pme_backend.hpp"
#include "cuda/runtime.hpp"
#include "pmkit/cuda/pairs.cuh"

namespace pmkit::detail {
namespace {

// Threads a block of the particle and spectrum loops (a multiple of the warp; each
// block's sums meet in one atomic per sum): docs/tuning.md#kpmeblock.
constexpr int kPmeBlock = 256;
// Blocks a multiprocessor at most in those loops: enough to keep every multiprocessor
// busy, few enough that each thread loops and the sums' atomics stay few
// (docs/tuning.md#kpmeblock).
constexpr std::size_t kPmeBlocksPerSm = 8;

// The block's sum of v into *out (one double atomic a block).
__device__ inline void block_add(double v, double* out) {
  __shared__ double partial[kPmeBlock / 32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kPmeBlock / 32 ? partial[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) atomicAdd(out, v);
  }
  __syncthreads();  // partial is reused by the caller's next block_add
}

// virial: whether to sum the reciprocal virial too (the same for every block).
template <class T>
__global__ void convolve_kernel(T* __restrict__ spectrum, const T* __restrict__ influence, std::int64_t size,
                                const PmeSpectrum geometry, bool virial, double* sums) {
  double energy = 0, w[6] = {};
  for (std::int64_t k = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; k < size;
       k += std::int64_t(gridDim.x) * blockDim.x) {
    const T c = influence[k];
    const T re = spectrum[2 * k], im = spectrum[2 * k + 1];
    energy += spectrum_energy(geometry, k, double(c), double(re) * re + double(im) * im, virial, w);
    spectrum[2 * k] = re * c;
    spectrum[2 * k + 1] = im * c;
  }
  block_add(energy, sums + kReciprocalEnergy);
  if (virial)
    for (int v = 0; v < 6; ++v) block_add(w[v], sums + kReciprocalVirial + v);
}

// The end of a finishing kernel: the grid's last block to get here (its count in *done)
// writes the energy, where asked, from the complete sums, then clears the sums and the
// count for the next compute. Folding this into the kernel saves a launch for the energy
// and one for clearing the sums. done: null where a later kernel finishes.
template <class T>
__device__ void finish_sums(const PmeParts<T>& p, double* sums, unsigned* done) {
  if (!done) return;
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's sums (block_add's atomics, thread 0's) before its count
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  double total[kPmeSums];
  for (int k = 0; k < kPmeSums; ++k) total[k] = static_cast<volatile const double*>(sums)[k];
  pme_totals(p, total);
  for (int k = 0; k < kPmeSums; ++k) sums[k] = 0;
  *done = 0;
}

template <class T>
__global__ void forces_kernel(const PmeParts<T> p, double* sums, unsigned* done) {
  double q = 0, q2 = 0, work = 0, w[6] = {};
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < p.n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    for (int d = 0; d < 3; ++d) p.forces[d][i] = pme_force(p, d, i);
    const double qi = p.charges[i];
    q += qi;
    q2 += qi * qi;
    if (p.real) work += qi * double(p.real[3 * p.real_stride + i]);
    if (p.real_virial)
      for (int v = 0; v < 6; ++v) w[v] += p.real_virial[v * p.real_stride + i];
  }
  block_add(q, sums + kChargeSum);
  block_add(q2, sums + kChargeSquares);
  block_add(work, sums + kRealSpaceWork);
  if (p.real_virial)
    for (int v = 0; v < 6; ++v) block_add(w[v], sums + kRealVirial + v);
  finish_sums(p, sums, done);
}

// After forces_kernel (the net charge's sum complete).
template <class T>
__global__ void potential_kernel(const PmeParts<T> p, double* sums, unsigned* done) {
  const double q = sums[kChargeSum];
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < p.n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p.potential[i] = pme_potential(p, i, q);
  __syncthreads();  // every thread's read of the sums before the last block clears them
  finish_sums(p, sums, done);
}

template <class T>
__global__ void dipoles_kernel(View<const T> charges, const View<const T> wx, const View<const T> wy,
                               const View<const T> wz, T* dipoles) {
  const std::size_t n = charges.size;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    dipoles[i] = charges[i] * wx[i];
    dipoles[n + i] = charges[i] * wy[i];
    dipoles[2 * n + i] = charges[i] * wz[i];
  }
}

template <class T>
__global__ void charge_gradient_kernel(const ChargeGradientParts<T> p) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < p.n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p.out[i] = charge_gradient(p, i);
}

// At most kPmeBlocksPerSm blocks a multiprocessor of `device`.
std::size_t max_blocks(int device) {
  int sms = 0;
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "pmkit PME: device attributes");
  return std::size_t(sms) * kPmeBlocksPerSm;
}

template <class T>
class CudaPmeBackend final : public PmeBackend<T> {
 public:
  CudaPmeBackend(const std::vector<T>& influence, std::size_t mesh_size, const PmeSpectrum& geometry,
                 const ExecutionOptions& options)
      : device_(options.device), stream_(cuda::to_cuda_stream(options.stream)), geometry_(geometry) {
    const cuda::DeviceScope on_device(device_);
    influence_.reserve(influence.size(), "PmePlan: influence function");
    influence_.upload(influence);
    mesh_.reserve(mesh_size, "PmePlan: mesh");
    spectrum_.reserve(2 * influence.size(), "PmePlan: spectrum");
    sums_.reserve(kPmeSums, "PmePlan: energy sums");
    blocks_done_.reserve(1, "PmePlan: energy sums");
    cuda::check(cudaMemsetAsync(sums_.get(), 0, kPmeSums * sizeof(double), stream_), "pmkit PME: clear the sums");
    cuda::check(cudaMemsetAsync(blocks_done_.get(), 0, sizeof(unsigned), stream_), "pmkit PME: clear the sums");
    max_blocks_ = max_blocks(device_);
    spectrum_blocks_ = blocks_for(influence.size());
  }

  T* mesh() override { return mesh_.get(); }
  std::complex<T>* spectrum() override { return reinterpret_cast<std::complex<T>*>(spectrum_.get()); }
  T* particle_scratch(std::size_t n, int values) override {
    const cuda::DeviceScope on_device(device_);
    scratch_.reserve(static_cast<std::size_t>(values) * n, "PmePlan: particle scratch");
    return scratch_.get();
  }

  void real_space_virial(PairPlan<T, 3>& pairs, double alpha, View<const T> charges,
                         Span<View<T>> outputs) override {
    cuda::compute(pairs, EwaldRealSpaceVirial{pair_kernels::EwaldRealSpace<3>{alpha}}, {charges}, outputs);
  }

  void real_space_field(PairPlan<T, 3>& pairs, double alpha, Span<View<const T>> inputs,
                        Span<View<T>> outputs) override {
    cuda::compute(pairs, EwaldFieldDipole{pair_kernels::EwaldRealSpace<3>{alpha}}, inputs, outputs);
  }

  void dipoles(View<const T> charges, const std::array<View<const T>, 3>& weights, T* dipoles) override {
    const cuda::DeviceScope on_device(device_);
    for (int d = 0; d < 3; ++d) pointers_.require(weights[d].data, "PmePlan::charge_gradient_of_forces: weights", d);
    dipoles_kernel<T><<<blocks_for(charges.size), kPmeBlock, 0, stream_>>>(charges, weights[0], weights[1], weights[2],
                                                                           dipoles);
    cuda::check_launch("pmkit PME: dipoles");
  }

  void finish_charge_gradient(const ChargeGradientParts<T>& p) override {
    const cuda::DeviceScope on_device(device_);
    pointers_.require(p.out.data, "PmePlan::charge_gradient_of_forces: out", 0);
    charge_gradient_kernel<T><<<blocks_for(p.n), kPmeBlock, 0, stream_>>>(p);
    cuda::check_launch("pmkit PME: charge gradient");
  }

  void set_stream(StreamHandle stream) override { stream_ = cuda::to_cuda_stream(stream); }

  void convolve(bool virial) override {
    const cuda::DeviceScope on_device(device_);
    if (!sums_clear_)
      cuda::check(cudaMemsetAsync(sums_.get(), 0, kPmeSums * sizeof(double), stream_), "pmkit PME: clear the sums");
    sums_clear_ = false;
    convolve_kernel<T><<<spectrum_blocks_, kPmeBlock, 0, stream_>>>(
        spectrum_.get(), influence_.get(), static_cast<std::int64_t>(influence_.size()), geometry_, virial, sums_.get());
    cuda::check_launch("pmkit PME: convolve");
  }

  void finish(const PmeParts<T>& p) override {
    const cuda::DeviceScope on_device(device_);
    for (int d = 0; d < 3; ++d) pointers_.require(p.forces[d].data, "PmePlan::compute: forces", d);
    pointers_.require(p.potential.data, "PmePlan::compute: potential", 0);
    pointers_.require(p.energy.data, "PmePlan::compute: energy", 0);
    pointers_.require(p.virial.data, "PmePlan::compute: virial", 0);
    // The last kernel's last block writes the energy and clears the sums (finish_sums).
    const unsigned blocks = blocks_for(p.n);
    const bool potential = p.potential.data && p.n > 0;
    // Across ranks the sums go through the host between the forces and the last kernel,
    // which is then potential_kernel (with a zero count of charges where none are asked).
    const bool last_forces = !potential && !p.reduce;
    forces_kernel<T><<<blocks, kPmeBlock, 0, stream_>>>(p, sums_.get(), last_forces ? blocks_done_.get() : nullptr);
    cuda::check_launch("pmkit PME: forces");
    if (p.reduce) {
      // The next compute writes host_sums_ by a copy queued after this one reads it.
      cuda::check(cudaMemcpyAsync(host_sums_, sums_.get(), sizeof host_sums_, cudaMemcpyDeviceToHost, stream_),
                  "pmkit PME: the sums to the host");
      cuda::check(cudaStreamSynchronize(stream_), "pmkit PME: the sums to the host");
      (*p.reduce)(host_sums_, kPmeSums);
      cuda::check(cudaMemcpyAsync(sums_.get(), host_sums_, sizeof host_sums_, cudaMemcpyHostToDevice, stream_),
                  "pmkit PME: the sums from the host");
      PmeParts<T> last = p;
      if (!potential) last.n = 0;
      potential_kernel<T><<<blocks, kPmeBlock, 0, stream_>>>(last, sums_.get(), blocks_done_.get());
      cuda::check_launch("pmkit PME: potential");
    } else if (potential) {
      potential_kernel<T><<<blocks, kPmeBlock, 0, stream_>>>(p, sums_.get(), blocks_done_.get());
      cuda::check_launch("pmkit PME: potential");
    }
    sums_clear_ = true;
  }

 private:
  // Blocks for `count` items, at most max_blocks_ (the kernels loop over the rest).
  unsigned blocks_for(std::size_t count) const {
    const std::size_t needed = (count + kPmeBlock - 1) / kPmeBlock;
    return static_cast<unsigned>(std::max<std::size_t>(1, std::min(needed, max_blocks_)));
  }

  int device_;
  cudaStream_t stream_;
  PmeSpectrum geometry_;
  std::size_t max_blocks_ = 1;  // fixed by the device, read once
  unsigned spectrum_blocks_ = 1;
  cuda::DeviceBuffer<T> influence_, mesh_, spectrum_, scratch_;
  cuda::DeviceBuffer<double> sums_;
  cuda::DeviceBuffer<unsigned> blocks_done_;  // finish_sums' count of finished blocks
  // Whether the sums are zero: the last compute's finishing kernel cleared them. Not where a
  // compute stopped between its convolution and its last step (a refused argument):
  // convolve clears them then.
  bool sums_clear_ = true;
  double host_sums_[kPmeSums] = {};  // across ranks: the sums on their way through the host
  cuda::DevicePointerCheck pointers_;
};

}  // namespace

template <class T>
std::unique_ptr<PmeBackend<T>> make_cuda_pme_backend(const std::vector<T>& influence, std::size_t mesh_size,
                                                     const PmeSpectrum& spectrum, const ExecutionOptions& options) {
  return std::make_unique<CudaPmeBackend<T>>(influence, mesh_size, spectrum, options);
}

template std::unique_ptr<PmeBackend<float>> make_cuda_pme_backend<float>(const std::vector<float>&, std::size_t,
                                                                        const PmeSpectrum&, const ExecutionOptions&);
template std::unique_ptr<PmeBackend<double>> make_cuda_pme_backend<double>(const std::vector<double>&, std::size_t,
                                                                          const PmeSpectrum&, const ExecutionOptions&);

}  // namespace pmkit::detail
