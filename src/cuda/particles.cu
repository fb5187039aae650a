// pmkit::Particles' arrays and passes on a CUDA device (core/particle_memory.hpp): all on
// the plan's stream, without a wait but where a value comes back to the host. A rejected
// position is recorded on the device (its slot, and the state buffer before the step);
// from then on the passes write nothing, so that the state before the step stays, until
// take_rejection reads and clears the record.
#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <string>

#include "core/particle_memory.hpp"
#include "cuda/kernels/fixed_point.cuh"
#include "pmkit/detail/cuda/step_deposit.cuh"
#include "cuda/runtime.hpp"

namespace pmkit::cuda {
namespace {

using detail::kNoRejection;

constexpr int kThreads = 256;

using Rejection = detail::StepRejection;

unsigned blocks(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

#define PMKIT_FOR_EACH_SLOT(k, n)                                                                   \
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < (n); \
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x)

template <class T>
__global__ void copy_in_kernel(T* to, const T* from, std::ptrdiff_t stride, std::size_t n) {
  PMKIT_FOR_EACH_SLOT(k, n) to[k] = from[static_cast<std::ptrdiff_t>(k) * stride];
}

template <class T>
__global__ void copy_out_kernel(T* to, std::ptrdiff_t stride, const T* from, const std::uint32_t* ids, std::size_t n) {
  PMKIT_FOR_EACH_SLOT(k, n) to[static_cast<std::ptrdiff_t>(ids[k]) * stride] = from[k];
}

__global__ void fill_ids_kernel(std::uint32_t* ids, std::size_t n) {
  PMKIT_FOR_EACH_SLOT(k, n) ids[k] = static_cast<std::uint32_t>(k);
}

template <class T, int D>
__global__ void check_positions_kernel(T* x, std::size_t n, detail::StepAxes<D> axes, Rejection* rejection,
                                       int good_buffer) {
  if (rejection->slot != kNoRejection) return;  // an earlier step's: its state stays
  PMKIT_FOR_EACH_SLOT(k, n) {
    bool good = true;
#pragma unroll
    for (int d = 0; d < D; ++d) good = detail::wrap_position(x[d * n + k], axes[d]) && good;
    if (!good) {
      rejection->good_buffer = good_buffer;
      atomicMin(&rejection->slot, static_cast<unsigned long long>(k));
    }
  }
}

template <class T>
__global__ void gather_kernel(const T* from, T* to, int arrays, const std::uint32_t* order, std::uint32_t* ids,
                              std::uint32_t* moved_ids, std::size_t n, const Rejection* rejection) {
  if (rejection->slot != kNoRejection) return;
  PMKIT_FOR_EACH_SLOT(k, n) {
    const std::uint32_t from_slot = order[k];
    for (int j = 0; j < arrays; ++j) to[j * n + k] = from[j * n + from_slot];
    moved_ids[k] = ids[from_slot];
  }
}

__global__ void copy_ids_kernel(std::uint32_t* ids, const std::uint32_t* moved_ids, std::size_t n,
                                const Rejection* rejection) {
  if (rejection->slot != kNoRejection) return;
  PMKIT_FOR_EACH_SLOT(k, n) ids[k] = moved_ids[k];
}

template <class T, int D>
__global__ void affine_gather_kernel(detail::Layout<D> layout, const T* x, detail::AffineMeshes<const T> meshes, T* out,
                                     std::size_t n, const Rejection* rejection) {
  if (rejection->slot != kNoRejection) return;
  PMKIT_FOR_EACH_SLOT(k, n) detail::affine_gather_particle<D>(layout, x, meshes, out, n, k);
}

// The affine deposit: one thread a binned particle, each block's particles (a tile's,
// or two tiles' in binned order) summed into a box of nodes in shared memory where it
// fits (detail::block_deposit).
constexpr int kSpreadThreads = 256;

template <class T, int D>
__global__ void __launch_bounds__(kSpreadThreads)
    affine_spread_kernel(detail::Layout<D> layout, const T* x, const T* q, detail::AffineMeshes<T> meshes,
                         std::size_t n, const Rejection* rejection) {
  if (rejection->slot != kNoRejection) return;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ int first[D], last[D];
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const bool active = k < n;
  T position[D];
#pragma unroll
  for (int d = 0; d < D; ++d) position[d] = x[d * n + (active ? k : 0)];
  const detail::AffineStencil<D, T> stencil(layout, position);
  const bool actives[1] = {active};
  int base[1][D];  // left as it is: the deposit below places its stencil from the position again
#pragma unroll
  for (int d = 0; d < D; ++d) base[0][d] = stencil.base[d];
  const double peak = detail::node_peak_weight<typename detail::AffineStencil<D, T>::K, D>();
  const auto bound = [&](int, double(&most)[detail::kMaxBoxMeshes]) {
#pragma unroll
    for (int m = 0; m < detail::kMaxBoxMeshes; ++m)
      if (m < meshes.count) {
        T slope[D];
        detail::read_affine_slope(q, meshes.count, n, k, m, slope);
        most[m] = peak * detail::affine_reach(layout, q[m * n + k], slope);
      }
  };
  detail::block_deposit<D>(layout, meshes.mesh, meshes.count, 3, actives, base, false, shared_bytes,
                           detail::kDepositBoxBytes, first, last, bound,
                           [&](const detail::Layout<D>& where, int, auto&& add) {
                             detail::affine_spread_stencil(detail::AffineStencil<D, T>(where, position), q,
                                                           meshes.count, n, k, add);
                           });
}

// The deterministic affine deposit: every node's contributions scaled by one power of
// two, rounded to 64-bit integers and summed with integer atomics (whose sums do not
// depend on the order), then converted once a node. The scale comes from a bound on
// any contribution (|a| + sum_d |b_d| 1.5 h_d: the weights are at most 1 and the offsets
// at most 1.5 h), found on the device: a non-negative double's bits order as the double.
template <class T, int D>
__global__ void affine_bound_kernel(detail::Layout<D> layout, const T* q, int count, std::size_t n,
                                    unsigned long long* bound, const Rejection* rejection) {
  if (rejection->slot != kNoRejection) return;
  double most = 0;
  PMKIT_FOR_EACH_SLOT(k, n) {
    for (int m = 0; m < count; ++m) {
      T slope[D];
      detail::read_affine_slope(q, count, n, k, m, slope);
      const double b = detail::affine_reach(layout, q[m * n + k], slope);
      most = isfinite(b) ? fmax(most, b) : INFINITY;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) most = fmax(most, __shfl_down_sync(0xffffffffu, most, offset));
  if (threadIdx.x % 32 == 0) atomicMax(bound, static_cast<unsigned long long>(__double_as_longlong(most)));
}

// The power of two that keeps n contributions of up to `bound` inside 62 bits.
__device__ __forceinline__ double exact_scale(const unsigned long long* bound, std::size_t n) {
  int log2n = 1;
  while ((std::size_t(1) << log2n) < n) ++log2n;
  return pow2_scale(__longlong_as_double(static_cast<long long>(*bound)), 62 - log2n);
}

template <class T, int D>
__global__ void affine_exact_kernel(detail::Layout<D> layout, const T* x, const T* q, int count, std::size_t n,
                                    long long* sums, std::int64_t mesh_size, const unsigned long long* bound,
                                    const Rejection* rejection) {
  if (rejection->slot != kNoRejection) return;
  const double scale = exact_scale(bound, n);
  PMKIT_FOR_EACH_SLOT(k, n)
  detail::affine_spread_particle<D>(layout, x, q, count, n, k, [&](int m, std::int64_t i, T value) {
    const long long v = llrint(static_cast<double>(value) * scale);
    atomicAdd(reinterpret_cast<unsigned long long*>(sums + m * mesh_size + i), static_cast<unsigned long long>(v));
  });
}

template <class T>
__global__ void affine_exact_finish_kernel(detail::AffineMeshes<T> meshes, const long long* sums,
                                           std::int64_t mesh_size, bool overwrite, std::size_t n,
                                           const unsigned long long* bound, const Rejection* rejection) {
  if (rejection->slot != kNoRejection) return;
  const double inverse = 1.0 / exact_scale(bound, n);
  const std::size_t values = static_cast<std::size_t>(mesh_size) * meshes.count;
  PMKIT_FOR_EACH_SLOT(j, values) {
    const int m = static_cast<int>(j / mesh_size);
    const std::int64_t i = static_cast<std::int64_t>(j) - m * mesh_size;
    const T value = static_cast<T>(static_cast<double>(sums[j]) * inverse);
    meshes.mesh[m][i] = overwrite ? value : meshes.mesh[m][i] + value;
  }
}

template <class T, int D>
class DeviceParticleMemory final : public detail::ParticleMemory<T, D> {
 public:
  DeviceParticleMemory(const Grid<D>& grid, const ExecutionOptions& options)
      : axes_(detail::step_axes(grid)), options_(&options) {
    const DeviceScope on_device(options.device);
    rejection_.reserve(1, "Particles: the rejection record");
    const Rejection none{kNoRejection, 0};
    check(cudaMemcpy(rejection_.get(), &none, sizeof none, cudaMemcpyHostToDevice), "Particles");
  }
  void reserve(std::size_t n, int arrays, int fields, int deposits) override {
    const DeviceScope on_device(options_->device);
    n_ = n;
    for (auto& s : state_) s.reserve(n * arrays, "Particles: the state");
    fields_.reserve(n * fields, "Particles: the interpolated fields");
    deposits_.reserve(n * deposits, "Particles: the deposits");
    ids_.reserve(n, "Particles: the ids");
    moved_ids_.reserve(n, "Particles: the ids");
    order_.reserve(n, "Particles: the binned order");
  }
  T* state(int buffer) override { return state_[buffer].get(); }
  T* fields() override { return fields_.get(); }
  T* deposits() override { return deposits_.get(); }
  std::uint32_t* ids() override { return ids_.get(); }
  std::uint32_t* order() override { return order_.get(); }
  Rejection* rejection() override { return rejection_.get(); }
  void clear(T* mesh, std::int64_t size) override {
    const DeviceScope on_device(options_->device);
    check(cudaMemsetAsync(mesh, 0, sizeof(T) * static_cast<std::size_t>(size), stream()), "pmkit::step (a deposit's mesh)");
  }
  void check_mesh(const void* data, const char* what, int index) override {
    checked_meshes_.require(data, (std::string("step: meshes.") + what).c_str(), static_cast<std::size_t>(index));
  }
  void copy_in(T* to, View<const T> from) override {
    if (n_ == 0) return;
    require_device(from.data, "Particles::assign's arrays", 0);
    const DeviceScope on_device(options_->device);
    copy_in_kernel<T><<<blocks(n_), kThreads, 0, stream()>>>(to, from.data, from.stride, n_);
    check_launch("pmkit::Particles::assign");
  }
  void copy_out(View<T> to, const T* from) override {
    if (n_ == 0) return;
    require_device(to.data, "Particles::copy_out's arrays", 0);
    const DeviceScope on_device(options_->device);
    copy_out_kernel<T><<<blocks(n_), kThreads, 0, stream()>>>(to.data, to.stride, from, ids_.get(), n_);
    check_launch("pmkit::Particles::copy_out");
  }
  void fill_ids() override {
    if (n_ == 0) return;
    const DeviceScope on_device(options_->device);
    fill_ids_kernel<<<blocks(n_), kThreads, 0, stream()>>>(ids_.get(), n_);
    check_launch("pmkit::Particles::assign");
  }
  unsigned long long check_positions(T* x, int good_buffer) override {
    if (n_ == 0) return kNoRejection;
    const DeviceScope on_device(options_->device);
    check_positions_kernel<T, D><<<blocks(n_), kThreads, 0, stream()>>>(x, n_, axes_, rejection_.get(), good_buffer);
    check_launch("pmkit::step::check_positions");
    return kNoRejection;
  }
  void gather(const T* from, T* to, int arrays) override {
    if (n_ == 0) return;
    const DeviceScope on_device(options_->device);
    gather_kernel<T><<<blocks(n_), kThreads, 0, stream()>>>(from, to, arrays, order_.get(), ids_.get(),
                                                             moved_ids_.get(), n_, rejection_.get());
    check_launch("pmkit::step::binned_order");
    copy_ids_kernel<<<blocks(n_), kThreads, 0, stream()>>>(ids_.get(), moved_ids_.get(), n_, rejection_.get());
    check_launch("pmkit::step::binned_order");
  }
  unsigned long long take_rejection(int& good_buffer) override {
    const DeviceScope on_device(options_->device);
    Rejection r{};
    check(cudaMemcpyAsync(&r, rejection_.get(), sizeof r, cudaMemcpyDeviceToHost, stream()), "Particles");
    check(cudaStreamSynchronize(stream()), "Particles");
    if (r.slot == kNoRejection) return kNoRejection;
    const Rejection none{kNoRejection, 0};
    check(cudaMemcpyAsync(rejection_.get(), &none, sizeof none, cudaMemcpyHostToDevice, stream()), "Particles");
    check(cudaStreamSynchronize(stream()), "Particles");
    good_buffer = r.good_buffer;
    return r.slot;
  }
  void affine_gather(const detail::Layout<D>& layout, const T* x, const detail::AffineMeshes<const T>& meshes,
                     T* out) override {
    if (n_ == 0) return;
    const DeviceScope on_device(options_->device);
    affine_gather_kernel<T, D><<<blocks(n_), kThreads, 0, stream()>>>(layout, x, meshes, out, n_, rejection_.get());
    check_launch("pmkit::step (the affine gather)");
  }
  void affine_spread(const detail::Layout<D>& layout, const T* x, const T* q, const detail::AffineMeshes<T>& meshes,
                     std::int64_t mesh_size, bool overwrite, bool exact) override {
    const DeviceScope on_device(options_->device);
    if (exact) return exact_spread(layout, x, q, meshes, mesh_size, overwrite);
    if (overwrite)
      for (int m = 0; m < meshes.count; ++m)
        check(cudaMemsetAsync(meshes.mesh[m], 0, sizeof(T) * static_cast<std::size_t>(mesh_size), stream()),
              "pmkit::step (the affine deposit's meshes)");
    if (n_ == 0) return;
    const std::size_t spread_blocks = (n_ + kSpreadThreads - 1) / kSpreadThreads;
    affine_spread_kernel<T, D><<<static_cast<unsigned>(spread_blocks), kSpreadThreads, detail::kDepositBoxBytes,
                                 stream()>>>(
        layout, x, q, meshes, n_, rejection_.get());
    check_launch("pmkit::step (the affine deposit)");
  }
  T read(const T* at) override { return read_one(at); }
  std::uint32_t read_id(std::size_t slot) override { return read_one(ids_.get() + slot); }

 private:
  cudaStream_t stream() const { return to_cuda_stream(options_->stream); }
  void exact_spread(const detail::Layout<D>& layout, const T* x, const T* q, const detail::AffineMeshes<T>& meshes,
                    std::int64_t mesh_size, bool overwrite) {
    const std::size_t values = static_cast<std::size_t>(mesh_size) * meshes.count;
    exact_sums_.reserve(values, "Particles: the deterministic affine deposit's sums");
    exact_bound_.reserve(1, "Particles: the deterministic affine deposit's bound");
    check(cudaMemsetAsync(exact_sums_.get(), 0, values * sizeof(long long), stream()), "Particles");
    check(cudaMemsetAsync(exact_bound_.get(), 0, sizeof(unsigned long long), stream()), "Particles");
    if (n_ > 0) {
      affine_bound_kernel<T, D><<<blocks(n_), kThreads, 0, stream()>>>(layout, q, meshes.count, n_,
                                                                       exact_bound_.get(), rejection_.get());
      check_launch("pmkit::step (the deterministic affine deposit's bound)");
      affine_exact_kernel<T, D><<<blocks(n_), kThreads, 0, stream()>>>(
          layout, x, q, meshes.count, n_, exact_sums_.get(), mesh_size, exact_bound_.get(), rejection_.get());
      check_launch("pmkit::step (the deterministic affine deposit)");
    }
    affine_exact_finish_kernel<T><<<blocks(values), kThreads, 0, stream()>>>(
        meshes, exact_sums_.get(), mesh_size, overwrite, n_, exact_bound_.get(), rejection_.get());
    check_launch("pmkit::step (the deterministic affine deposit's meshes)");
  }

  template <class V>
  V read_one(const V* at) {
    const DeviceScope on_device(options_->device);
    V value{};
    check(cudaMemcpyAsync(&value, at, sizeof value, cudaMemcpyDeviceToHost, stream()), "Particles");
    check(cudaStreamSynchronize(stream()), "Particles");
    return value;
  }

  detail::StepAxes<D> axes_;
  const ExecutionOptions* options_;  // the plan's, which follow its set_stream
  std::size_t n_ = 0;
  DeviceBuffer<T> state_[2], fields_, deposits_;
  DeviceBuffer<std::uint32_t> ids_, moved_ids_, order_;
  DeviceBuffer<Rejection> rejection_;
  DeviceBuffer<long long> exact_sums_;
  DeviceBuffer<unsigned long long> exact_bound_;
  DevicePointerCheck checked_meshes_;
};

}  // namespace
}  // namespace pmkit::cuda

namespace pmkit::detail {

template <class T, int D>
std::unique_ptr<ParticleMemory<T, D>> make_cuda_particle_memory(const Grid<D>& grid, const ExecutionOptions& options) {
  return std::make_unique<cuda::DeviceParticleMemory<T, D>>(grid, options);
}

template std::unique_ptr<ParticleMemory<float, 2>> make_cuda_particle_memory<float, 2>(const Grid<2>&,
                                                                                     const ExecutionOptions&);
template std::unique_ptr<ParticleMemory<float, 3>> make_cuda_particle_memory<float, 3>(const Grid<3>&,
                                                                                     const ExecutionOptions&);
template std::unique_ptr<ParticleMemory<double, 2>> make_cuda_particle_memory<double, 2>(const Grid<2>&,
                                                                                       const ExecutionOptions&);
template std::unique_ptr<ParticleMemory<double, 3>> make_cuda_particle_memory<double, 3>(const Grid<3>&,
                                                                                       const ExecutionOptions&);

}  // namespace pmkit::detail
