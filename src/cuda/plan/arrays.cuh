#pragma once
// The caller's arrays: device checks, the staged copies of host arrays (host_arrays),
// and the binning handed out (binned_order, binned_positions).
#include "cuda/plan/cuda_backend.cuh"

namespace pmkit::cuda {

// A copy on the stream; into host memory (host_arrays) the call waits for it.
template <class T, int D>
void CudaBackend<T, D>::binned_order(View<std::uint32_t> order) const {
  const DeviceScope on_device(options_.device);
  if (!options_.host_arrays) require_device(order.data, "order", 0);
  copy_strided(order.data, order.stride, current_.perm.get(), 1, current_.n,
               options_.host_arrays ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice, stream_, "binned_order");
  if (options_.host_arrays) check(cudaStreamSynchronize(stream_), "binned_order");
}

// The binning of the last full binning kept, its caller indices renumbered to the slots
// (adopt_order_kernel): what set_points of the permuted positions would build, a stable
// sort that leaves them in place, without sorting them again. The records, chunks and
// tile kernels' order are by slot and stay; no partition moves are left to replay, and
// the caller's order is the binned one.
template <class T, int D>
void CudaBackend<T, D>::adopt_binned_order() {
  const DeviceScope on_device(options_.device);
  Binned<T>& b = current_;
  if (b.n == 0 || b.max_chunks == 0) return;
  adopt_order_kernel<<<b.max_chunks, 256, 0, stream_>>>(b.chunks.get(), b.perm.get(), b.slot.get(), b.tile_of.get());
  check_launch("pmkit::cuda::adopt_binned_order");
  b.partition_levels = 0;
  b.caller_order_binned = true;
  b.identity_order = true;
}

// Device arrays out of place gathered by the binned order straight into their outputs,
// up to tuning::kPermuteArrays a launch (each launch reads the order once). The others,
// in place or host arrays (staged in and out; the call then waits), one at a time into
// scratch and copied over.
template <class T, int D>
void CudaBackend<T, D>::permute_to_binned(Span<View<const T>> from, Span<View<T>> to) {
  const DeviceScope on_device(options_.device);
  const std::size_t n = current_.n;
  auto direct = [&](std::size_t i) { return !options_.host_arrays && from[i].data != to[i].data; };
  bool scratch = false;
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (!options_.host_arrays) {
      require_device(from[i].data, "from", i);
      require_device(to[i].data, "arrays", i);
    }
    scratch = scratch || !direct(i);
  }
  // Scratch before any write: a failed allocation changes nothing.
  if (scratch) permuted_.reserve((options_.host_arrays ? 2 : 1) * n, "permute_to_binned scratch");
  auto launch = [&](PermuteBatch<T>& batch) {
    if (batch.count == 0) return;
    permute_kernel<T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
        current_.perm.get(), n, batch);
    check_launch("pmkit::cuda::permute_to_binned");
    batch.count = 0;
  };
  PermuteBatch<T> batch;
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (!direct(i)) continue;
    batch.add(from[i].data, from[i].stride, to[i].data, to[i].stride);
    if (batch.full()) launch(batch);
  }
  launch(batch);
  if (!scratch) return;
  T* moved = permuted_.get();
  T* staged = options_.host_arrays ? moved + n : nullptr;
  const cudaMemcpyKind back = options_.host_arrays ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (direct(i)) continue;
    const T* source = from[i].data;
    std::ptrdiff_t source_stride = from[i].stride;
    if (staged) {
      copy_strided(staged, 1, source, source_stride, n, cudaMemcpyHostToDevice, stream_, "permute_to_binned");
      source = staged;
      source_stride = 1;
    }
    batch.add(source, source_stride, moved, 1);
    launch(batch);
    copy_strided(to[i].data, to[i].stride, moved, 1, n, back, stream_, "permute_to_binned");
  }
  if (options_.host_arrays) check(cudaStreamSynchronize(stream_), "permute_to_binned");
}

// Kernels on the stream; into host memory (host_arrays) the call waits for the copies.
template <class T, int D>
void CudaBackend<T, D>::binned_positions(const std::array<View<T>, D>& offsets) const {
  const DeviceScope on_device(options_.device);
  const std::size_t n = current_.n;
  if (n == 0) return;
  // host_arrays: written on the device, then copied (a rare call: scratch of its own).
  DeviceBuffer<T> staged;
  OffsetArrays<T, D> out;
  if (options_.host_arrays) staged.reserve(D * n, "binned_positions staging");
  for (int d = 0; d < D; ++d) {
    if (!options_.host_arrays) require_device(offsets[d].data, "positions", d);
    out.data[d] = options_.host_arrays ? staged.get() + d * n : offsets[d].data;
    out.stride[d] = options_.host_arrays ? 1 : offsets[d].stride;
  }
  binned_offsets_kernel<T, D><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
      layout_, geo_, current_.particles.get(), nullptr, ItemCount{n}, out);
  check_launch("pmkit::cuda::binned_positions");
  if (current_.has_away) {
    binned_offsets_kernel<T, D><<<blocks_for(away_threads(), tuning::kPointThreads), tuning::kPointThreads, 0,
                                  stream_>>>(layout_, geo_, current_.away_particles.get(), current_.away_slot.get(),
                                             ItemCount{n, current_.counts + kAwayCount}, out);
    check_launch("pmkit::cuda::binned_positions::away");
  }
  if (!options_.host_arrays) return;
  for (int d = 0; d < D; ++d)
    copy_strided(offsets[d].data, offsets[d].stride, staged.get() + d * n, 1, n, cudaMemcpyDeviceToHost, stream_,
                 "binned_positions");
  check(cudaStreamSynchronize(stream_), "binned_positions");
}

template <class T, int D>
template <class P>
void CudaBackend<T, D>::require_device(const P* ptr, const char* what, std::size_t index) const {
  checked_pointers_.require(ptr, what, index, " (or set options.host_arrays = true to pass host arrays)");
}

// The positions as device arrays: the caller's, or staged copies of host arrays (the
// copy's time goes to timings_.transfer_s).
template <class T, int D>
PositionArrays<T, D> CudaBackend<T, D>::device_positions(std::size_t n, const std::array<View<const T>, D>& positions) {
  PositionArrays<T, D> pos{};
  if (options_.host_arrays) start_timer();
  for (int d = 0; d < D; ++d) {
    if (options_.host_arrays) {
      T* staged = buf_.staging_positions.get() + d * n;
      copy_strided(staged, 1, positions[d].data, positions[d].stride, n, cudaMemcpyHostToDevice, stream_,
                   "copy positions to the device");
      pos.data[d] = staged;
      pos.stride[d] = 1;
    } else {
      require_device(positions[d].data, "positions", d);
      pos.data[d] = positions[d].data;
      pos.stride[d] = positions[d].stride;
    }
  }
  if (options_.host_arrays) timings_.transfer_s += stop_timer();
  return pos;
}

}  // namespace pmkit::cuda
