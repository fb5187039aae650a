// The deterministic spread's kernels on a CUDA rank (exact_spread.cuh), on the functions
// exact_spread.hpp shares with the CPU ranks: one thread a particle for the stencils and
// the deposits, a warp reduction for the largest values, a region walk for the rounding.
#include "distributed/cuda/exact_spread.cuh"

#include <algorithm>
#include <cstring>

#include "distributed/cuda/atomics.cuh"

namespace pmkit::distributed {

using cuda::check;

namespace {

// The deterministic spread's owned node: its fixed-point sum rounded into the block.
template <class T>
struct RoundNode {
  T* block;
  const ExactWords* local;
  double inverse_scale;
  bool add;
  __device__ void operator()(std::int64_t k, std::int64_t l) const { round_exact(local[l], inverse_scale, add, block[k]); }
};

template <class K, class T, int D>
__global__ void locate_exact_kernel(Columns<T, D> positions, std::int64_t n, Owners<D> owners,
                                    FirstCell<D> first, ExactStencils<T, D> out) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u[D];
  for (int d = 0; d < D; ++d) u[d] = owners.raw(d, static_cast<double>(positions.c[d][i]));
  int base[D];
  T s[D];
  exact_stencil<K, T, D>(u, first.cell, base, s);
  for (int d = 0; d < D; ++d) {
    out.base[d][i] = base[d];
    out.frac[d][i] = s[d];
  }
}

// The largest |q| as the bits of a double (their order is the values' for non-negative
// ones; a NaN's or an infinity's are above every finite value's): a warp's largest, then
// one atomic a warp. found[0]: the largest bits; found[1]: the first value not finite.
template <class T>
__global__ void largest_kernel(View<const T> q, std::int64_t n, unsigned long long* found) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  unsigned long long bits = 0;
  if (i < n) {
    const double v = fabs(static_cast<double>(q[i]));
    if (!isfinite(v)) atomicMin(found + 1, static_cast<unsigned long long>(i));
    bits = static_cast<unsigned long long>(__double_as_longlong(v));
  }
  for (int offset = 16; offset > 0; offset /= 2) bits = max(bits, __shfl_down_sync(0xffffffffu, bits, offset));
  if (threadIdx.x % 32 == 0 && bits != 0) atomicMax(found, bits);
}

// One thread a particle of `part` (its stencil inside or outside `interior`): its
// contributions to property q's fixed-point local mesh.
template <class K, class T, int D>
__global__ void deposit_exact_kernel(ExactStencils<T, D> stencils, std::int64_t n, View<const T> q, double scale,
                                     detail::Layout<D> local, detail::NodeBox<D> interior, detail::Part part,
                                     ExactWords* mesh) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int base[D];
  T s[D];
  for (int d = 0; d < D; ++d) {
    base[d] = stencils.base[d][i];
    s[d] = stencils.frac[d][i];
  }
  if (!detail::in_part(part, detail::stencil_inside<D>(interior, local, base, K::support))) return;
  const double value = static_cast<double>(q[i]);
  deposit_exact<K, T, D>(local, base, s, &value, &scale, 1,
                         [&](int, std::int64_t node, ExactWords w) { add_atomically(mesh + node, w); });
}

}  // namespace

template <class T, int D>
DeviceExactSpread<T, D>::DeviceExactSpread(const DeviceContext& context, const Kernel& kernel, const Owners<D>& owners,
                                           const FirstCell<D>& first_cell, const detail::Layout<D>& local,
                                           const DeviceRegion<D>& region, const detail::NodeBox<D>& interior,
                                           std::size_t halo_entries)
    : context_(context),
      kernel_(kernel),
      owners_(owners),
      first_cell_(first_cell),
      local_(local),
      local_size_(local.size),
      region_(region),
      halo_entries_(halo_entries),
      interior_(interior) {}

template <class T, int D>
ExactStencils<T, D> DeviceExactSpread<T, D>::exact_stencils() {
  ExactStencils<T, D> stencils;
  for (int d = 0; d < D; ++d) {
    stencils.base[d] = exact_base_[d].get();
    stencils.frac[d] = exact_frac_[d].get();
  }
  return stencils;
}

template <class T, int D>
void DeviceExactSpread<T, D>::locate(const std::array<View<const T>, D>& positions, std::size_t n) {
  cuda::DeviceScope scope(context_.device);
  Columns<T, D> columns;
  for (int d = 0; d < D; ++d) {
    exact_base_[d].reserve(std::max<std::size_t>(1, n), "deterministic stencils");
    exact_frac_[d].reserve(std::max<std::size_t>(1, n), "deterministic stencils");
    columns.c[d] = positions[d];
  }
  if (n == 0) return;
  kernels::dispatch(kernel_, [&](auto k) {
    locate_exact_kernel<decltype(k), T, D><<<blocks_for(n), kThreads, 0, context_.stream>>>(
        columns, n, owners_, first_cell_, exact_stencils());
  });
  cuda::check_launch("pmkit::DistributedPlan::locate_exact_kernel");
}

template <class T, int D>
void DeviceExactSpread<T, D>::largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs) {
  cuda::DeviceScope scope(context_.device);
  const std::size_t count = props.size();
  largest_.reserve(std::max<std::size_t>(1, 2 * count), "deterministic maxima");
  std::vector<unsigned long long> found(2 * count);
  for (std::size_t j = 0; j < count; ++j) found[2 * j + 1] = n;
  check(cudaMemcpyAsync(largest_.get(), found.data(), found.size() * sizeof(unsigned long long),
                        cudaMemcpyHostToDevice, context_.stream),
        "spread");
  for (std::size_t j = 0; j < count && n > 0; ++j)
    largest_kernel<T><<<blocks_for(n), kThreads, 0, context_.stream>>>(props[j], n, largest_.get() + 2 * j);
  cuda::check_launch("pmkit::DistributedPlan::largest_kernel");
  check(cudaMemcpyAsync(found.data(), largest_.get(), found.size() * sizeof(unsigned long long),
                        cudaMemcpyDeviceToHost, context_.stream),
        "spread");
  check(cudaStreamSynchronize(context_.stream), "spread");
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t bad = found[2 * j + 1];
    if (bad < n) {
      T v;
      check(cudaMemcpy(&v, props[j].data + bad * props[j].stride, sizeof(T), cudaMemcpyDeviceToHost), "spread");
      fail_not_finite(j, bad, static_cast<double>(v));
    }
    std::memcpy(&max_abs[j], &found[2 * j], sizeof(double));
  }
}

template <class T, int D>
void DeviceExactSpread<T, D>::reserve(int count) {
  cuda::DeviceScope scope(context_.device);
  exact_.reserve(static_cast<std::size_t>(count) * local_size_, "fixed-point local meshes");
  const std::size_t lists = std::max<std::size_t>(1, halo_entries_ * count);
  exact_send_.reserve(lists, "fixed-point ghost buffer");
  exact_recv_.reserve(lists, "fixed-point ghost buffer");
}

template <class T, int D>
void DeviceExactSpread<T, D>::spread(Span<View<const T>> props, std::size_t n, const std::vector<double>& scale,
                                     detail::Part part) {
  cuda::DeviceScope scope(context_.device);
  const std::size_t count = props.size();
  if (part != detail::Part::Interior)
    check(cudaMemsetAsync(exact_.get(), 0, count * local_size_ * sizeof(ExactWords), context_.stream), "spread");
  if (n == 0) return;
  const ExactStencils<T, D> stencils = exact_stencils();
  kernels::dispatch(kernel_, [&](auto k) {
    for (std::size_t j = 0; j < count; ++j)
      deposit_exact_kernel<decltype(k), T, D><<<blocks_for(n), kThreads, 0, context_.stream>>>(
          stencils, n, props[j], scale[j], local_, interior_, part, exact_.get() + j * local_size_);
  });
  cuda::check_launch("pmkit::DistributedPlan::deposit_exact_kernel");
}

template <class T, int D>
void DeviceExactSpread<T, D>::to_block(Span<View<T>> blocks, const std::vector<double>& inverse, Accumulate mode) {
  for_region(context_, region_, static_cast<int>(blocks.size()), [&](int j) {
    return RoundNode<T>{blocks[j].data, exact_.get() + j * local_size_, inverse[j], mode == Accumulate::Add};
  });
}

template class DeviceExactSpread<float, 2>;
template class DeviceExactSpread<float, 3>;
template class DeviceExactSpread<double, 2>;
template class DeviceExactSpread<double, 3>;

}  // namespace pmkit::distributed
