#pragma once
// Launch shapes and the launch of one method for a kernel type, on the plan's stream.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "pmkit/detail/cuda/runtime.hpp"
#include "pmkit/detail/cuda/pair_compact_kernel.cuh"
#include "pmkit/detail/cuda/pair_half_shell_kernel.cuh"
#include "pmkit/detail/cuda/pair_pencil_kernel.cuh"
#include "pmkit/detail/cuda/pair_thread_kernel.cuh"
#include "pmkit/detail/pair_device.hpp"
#include "pmkit/pairs.hpp"

namespace pmkit::detail::pair_traversal {

// Targets per block of the x-pencil and the half shell, as Auto times them (the first is
// an explicit method's): fuller blocks and less staged halo against more blocks to
// spread (docs/tuning.md#kpenciltargets).
constexpr int kPencilTargets[3] = {256, 128, 512};
// The longest pencil: its cell-start table (9 rows) stays near 8 KB of shared memory
// (docs/tuning.md#kmaxpencillength).
constexpr int kMaxPencilLength = 224;
// Mean particles a cell from which a half-shell block's targets are whole warps: a full
// last warp against a cell more staged a row (docs/tuning.md#kwholewarpsfrom).
constexpr double kWholeWarpsFrom = 32;
// Mean particles a cell from which the 3D float x-pencil walks kDenseUnroll candidates a
// trip (docs/tuning.md#kdenseunroll).
constexpr double kDenseUnrollFrom = 32;
// Shared memory of a pencil block's stage and cell-start table: with the row table under
// 48 KB, no opt-in to more (docs/tuning.md#kstagebytes).
constexpr std::size_t kStageBytes = 44 * 1024;
// Threads a block of the thread-per-particle method (docs/tuning.md#kthreadblock).
constexpr int kThreadBlock = 128;

// Bytes of a pencil block's cell-start table (see PencilBlock).
template <int D>
constexpr std::size_t cell_starts_bytes(int pencil_length) {
  return kNeighbourRows<D> * cell_starts_per_row(pencil_length) * sizeof(std::uint32_t);
}

// `rows`: the neighbouring rows the method stages (3^(D-1), or the half shell's 5 or 2);
// `whole_warps`: the half shell's blocks take whole warps of targets where cells are dense.
template <class T, int D>
PencilShape pencil_shape(const DevicePairView<T, D>& cells, int length, int targets_per_block,
                         std::size_t bytes_per_source, int rows, bool whole_warps) {
  const double per_cell = std::max(cells.mean_per_cell(), 0.5);
  const int nx = cells.geometry.ncell[0];
  PencilShape s;
  if (length <= 0) {  // x-pencil: enough cells for the targets wanted, balanced along the row
    const int want = std::clamp(static_cast<int>(targets_per_block / per_cell + 0.5), 2, nx);
    const int pencils = (nx + want - 1) / want;
    length = (nx + pencils - 1) / pencils;
  }
  s.length = std::max(1, std::min({length, nx, kMaxPencilLength}));
  // Whole warps: the block's last warp runs on into the next pencil's first cell, which
  // it stages too, instead of a partly filled last warp that costs a full one's shuffles
  // and atomics.
  s.extend = whole_warps && s.length > 1 && per_cell >= kWholeWarpsFrom ? 1 : 0;
  const int targets = static_cast<int>(s.length * per_cell * 1.25 + 31) / 32 * 32;
  s.threads = std::clamp(targets, 64, 512);
  const int staged = static_cast<int>(rows * (s.length + s.extend + 2) * per_cell * 1.3 + 31) / 32 * 32;
  const int max_capacity =
      static_cast<int>((kStageBytes - cell_starts_bytes<D>(s.length + s.extend)) / bytes_per_source);
  s.capacity = std::clamp(staged, s.threads, std::max(s.threads, max_capacity));
  return s;
}

// The compacted methods' shape (kParts = 1: the compacted x-pencil with `targets_per_block`;
// otherwise the row split: a cell a pencil, 32 targets a pass, as many blocks a cell as
// its mean count needs), the stage cut so that the parts' partial sums fit beside it.
template <class T, int D>
CompactShape compact_shape(const DevicePairView<T, D>& cells, int parts, int targets_per_block,
                           std::size_t bytes_per_source, int outputs) {
  CompactShape s;
  if (parts == 1) {
    s.pencil = pencil_shape(cells, 0, targets_per_block, bytes_per_source, kNeighbourRows<D>, false);
    s.lanes = s.pencil.threads;
  } else {
    s.pencil = pencil_shape(cells, 1, 32, bytes_per_source, kNeighbourRows<D>, false);
    s.lanes = 32;
    s.chunks = std::max(1, static_cast<int>(std::ceil(cells.mean_per_cell() / 32)));
  }
  const std::size_t partials = std::size_t(parts - 1) * outputs * s.lanes * sizeof(T);
  const std::size_t room = kStageBytes - cell_starts_bytes<D>(s.pencil.length) - partials - kCompactPadding<T, D>;
  s.pencil.capacity = std::max(32, std::min(s.pencil.capacity, static_cast<int>(room / bytes_per_source)));
  return s;
}

// One launch of a compacted method (kParts as compact_pencil_kernel).
template <int kParts, class T, int D, class Kernel>
void launch_compact(const DevicePairView<T, D>& cells, const Kernel& kernel, int targets_per_block,
                    const Args<T, D, inputs_of<Kernel>(), Kernel::outputs>& args, cudaStream_t stream) {
  const std::size_t bytes_per_source = sizeof(PackedPosition<T, D>) + Kernel::inputs * sizeof(T);
  const CompactShape shape = compact_shape(cells, kParts, targets_per_block, bytes_per_source, Kernel::outputs);
  const int nx = cells.geometry.ncell[0];
  const std::size_t rows = cells.cells / static_cast<std::size_t>(nx);
  const auto blocks = static_cast<unsigned>(rows * ((nx + shape.pencil.length - 1) / shape.pencil.length) *
                                            static_cast<std::size_t>(shape.chunks));
  const std::size_t shared = compact_shared_bytes<T, D>(shape, bytes_per_source, kParts, Kernel::outputs);
  compact_pencil_kernel<T, D, Kernel, kParts><<<blocks, kParts * shape.lanes, shared, stream>>>(args, kernel, shape);
  cuda::check_launch(kParts == 1 ? "pmkit PairPlan: compacted pencil kernel" : "pmkit PairPlan: row-split kernel");
}

// A launch of a method: its x-pencil targets per block and register budget (pencil and
// half shell only).
struct Variant {
  int pencil_targets;
  bool few_registers;
};

// One launch of `method` for the kernel on the plan's stream (the half shell: its sums
// zeroed, its kernel and its scatter).
template <class T, int D, class Kernel>
void launch(DevicePairs<T, D>& dev, const DevicePairView<T, D>& cells, const Kernel& kernel, PairMethod method,
            Variant variant, const Args<T, D, inputs_of<Kernel>(), Kernel::outputs>& args) {
  if (cells.n == 0) return;
  cudaStream_t stream = cuda::to_cuda_stream(cells.stream);
  if (method == PairMethod::CudaThreadPerParticle) {
    const unsigned blocks = static_cast<unsigned>((cells.n + kThreadBlock - 1) / kThreadBlock);
    thread_per_particle_kernel<T, D, Kernel, 1><<<blocks, kThreadBlock, 0, stream>>>(args, kernel);
    cuda::check_launch("pmkit PairPlan: thread-per-particle kernel");
    return;
  }
  if (method == PairMethod::CudaThreeThreadsPerParticle) {
    const unsigned blocks = static_cast<unsigned>((cells.n + 31) / 32);
    thread_per_particle_kernel<T, D, Kernel, 3><<<blocks, 3 * 32, 0, stream>>>(args, kernel);
    cuda::check_launch("pmkit PairPlan: three-threads-per-particle kernel");
    return;
  }
  if (method == PairMethod::CudaCompactPencil) return launch_compact<1>(cells, kernel, variant.pencil_targets, args, stream);
  if (method == PairMethod::CudaRowSplit)
    return launch_compact<kNeighbourRows<D>>(cells, kernel, variant.pencil_targets, args, stream);
  // Only the kernel's own inputs: a kernel without any (Lennard-Jones) stages 16 bytes a
  // float source, not 20, and more blocks fit an SM.
  const std::size_t bytes_per_source = sizeof(PackedPosition<T, D>) + Kernel::inputs * sizeof(T);
  const bool half = method == PairMethod::CudaHalfShell;
  const int staged_rows = half ? kHalfShellRows<D> : kNeighbourRows<D>;
  const PencilShape shape = pencil_shape(cells, method == PairMethod::CudaBlockPerCell ? 1 : 0,
                                         variant.pencil_targets, bytes_per_source, staged_rows, half);
  const int nx = cells.geometry.ncell[0];
  const std::size_t rows = cells.cells / static_cast<std::size_t>(nx);
  const unsigned blocks = static_cast<unsigned>(rows * ((nx + shape.length - 1) / shape.length));
  const std::size_t shared = shape.capacity * bytes_per_source + cell_starts_bytes<D>(shape.length + shape.extend);
  if (!half) {
    constexpr bool kMayUnroll = D == 3 && std::is_same_v<T, float>;
    const bool dense = kMayUnroll && method == PairMethod::CudaXPencil && cells.mean_per_cell() >= kDenseUnrollFrom;
    with_register_budget<T>(variant.few_registers, [&](auto few) {
      constexpr bool kFew = decltype(few)::value;
      if (dense)
        pencil_kernel<T, D, Kernel, kFew, kMayUnroll ? kDenseUnroll : 4>
            <<<blocks, shape.threads, shared, stream>>>(args, kernel, shape);
      else
        pencil_kernel<T, D, Kernel, kFew, 4><<<blocks, shape.threads, shared, stream>>>(args, kernel, shape);
    });
    cuda::check_launch("pmkit PairPlan: pencil kernel");
    return;
  }
  T* sums = dev.zeroed_sums(Kernel::outputs);
  with_register_budget<T>(variant.few_registers, [&](auto few) {
    half_shell_kernel<T, D, Kernel, decltype(few)::value>
        <<<blocks, shape.threads, shared, stream>>>(args, kernel, shape, sums);
  });
  cuda::check_launch("pmkit PairPlan: half-shell kernel");
  scatter_sums_kernel<<<static_cast<unsigned>((cells.n + 255) / 256), 256, 0, stream>>>(
      args, kernel, static_cast<const T*>(sums));
  cuda::check_launch("pmkit PairPlan: half-shell scatter");
}

}  // namespace pmkit::detail::pair_traversal
