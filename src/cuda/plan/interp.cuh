#pragma once
// interp: M2P pass by pass, asynchronously on the plan's stream, outputs in the
// caller's order.
#include <algorithm>

#include "cuda/plan/cuda_backend.cuh"

namespace pmkit::cuda {

// Every pass runs asynchronously on the stream; with host_arrays the call waits for its
// copies of the values back.
template <class T, int D>
void CudaBackend<T, D>::interp(Span<View<const T>> meshes, Span<View<T>> values) {
  const DeviceScope on_device(options_.device);
  begin_timings();
  kernels::dispatch(kernel_, [&](auto k) { interp_all<decltype(k)>(meshes, values); });
}

// Where interp's outputs go: straight to the caller's order where they fit in L2 with
// the meshes read, or where the caller's order is the binned one (the stores then run
// along it; tuning::interp_direct_pays), else to binned slots and then unbinned
// (unbin_kernel). `outputs` values a particle, from `meshes` meshes.
template <class T, int D>
InterpOutput<T> CudaBackend<T, D>::interp_output(int outputs, int meshes) const {
  const std::size_t n = current_.n;
  const double outputs_bytes = static_cast<double>(n) * outputs * sizeof(T);
  const double meshes_bytes = static_cast<double>(layout_.size) * meshes * sizeof(T);
  // Under a split the boundary part, which follows the interior one (select), unbins
  // both parts' outputs where one pass holds the call's outputs; else each part writes
  // its own straight to the caller's order.
  const bool direct = (part_ != detail::Part::All && !interp_one_pass_) ||
                      tuning::interp_direct_pays(outputs_bytes, meshes_bytes, limits_.l2_bytes,
                                                 current_.caller_order_binned);
  return InterpOutput<T>{buf_.binned_values.get(), n, direct ? current_.perm.get() : nullptr};
}

// Tiles (the window in shared memory) where blocks hold enough particles to repay
// loading it (tuning::interp_by_tiles); else one thread per particle gathering from the
// mesh. Scalar windows of `meshes` meshes (the smallest a tile can take) decide whether
// tiles fit at all.
template <class T, int D>
template <class K>
bool CudaBackend<T, D>::interp_by_tiles(int meshes) const {
  const std::size_t scalar_shared = static_cast<std::size_t>(TileWindow<K, D>::kNodes) * meshes * sizeof(T);
  return tuning::interp_by_tiles(window_use(), scalar_shared, static_cast<std::size_t>(limits_.shared_optin));
}

// Both paths write binned order into buf_.binned_values (then unbin_kernel fills the
// outputs), or the caller's order directly (InterpOutput).
template <class T, int D>
template <class K>
void CudaBackend<T, D>::launch_interp(const PropPass<T>& pass) {
  const std::size_t n = current_.n;
  if (n == 0) return;
  const InterpOutput<T> out = interp_output(pass.count, pass.count);
  const bool direct = out.perm != nullptr;
  // update_points' away list (the tiles skip its particles: either order gives the same
  // outputs).
  if (current_.has_away && runs_whole()) {
    const ItemCount away{n, current_.counts + kAwayCount};
    if constexpr (tuning::away_by_warps(K::support, D))
      interp_away_warps_kernel<K, D, T><<<warp_blocks_for(away_threads(), tuning::kPointThreads),
                                          tuning::kPointThreads, 0, stream_>>>(
          layout_, geo_, current_.away_particles.get(), current_.away_slot.get(), away, pass, out);
    else
      interp_kernel<K, D, T><<<blocks_for(away_threads(), tuning::kPointThreads), tuning::kPointThreads, 0,
                               stream_>>>(layout_, geo_, current_.away_particles.get(), current_.away_slot.get(),
                                          away, pass, out);
    check_launch("pmkit::cuda::interp::away");
  }
  if (interp_by_tiles<K>(pass.count)) {
    with_prop_count(pass.count, [&](auto np) {
      constexpr int NP = decltype(np)::value;
      const std::size_t shared = interp_tiles_shared_bytes<K, D, T, NP>();
      auto kernel = direct ? interp_tiles_kernel<K, D, T, NP, true> : interp_tiles_kernel<K, D, T, NP, false>;
      opt_in_shared(kernel, shared);
      PropPass<T> tiles = pass;
      tiles.parts = tile_parts();
      kernel<<<current_.max_chunks, tuning::kSpreadThreads, shared, stream_>>>(
          layout_, geo_, current_.chunks.get(), current_.particles.get(), taken_order(), n, tiles, out);
      check_launch("pmkit::cuda::interp::shared_tiles");
    });
  } else if (runs_whole()) {
    interp_kernel<K, D, T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
        layout_, geo_, current_.particles.get(), nullptr, ItemCount{n}, pass, out);
    check_launch("pmkit::cuda::interp::gather");
  }
  if (direct || part_ == detail::Part::Interior) return;  // the boundary part unbins both
  unbin_kernel<T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(pass, out.binned, n,
                                                                                  current_.slot.get());
  check_launch("pmkit::cuda::interp::unbin");
}

template <class T, int D>
template <class K>
void CudaBackend<T, D>::interp_all(Span<View<const T>> meshes, Span<View<T>> values) {
  const std::size_t n = current_.n;
  buf_.binned_values.reserve(n * tuning::kPropsPerPass, "interp scratch");
  interp_one_pass_ = meshes.size() <= static_cast<std::size_t>(tuning::kPropsPerPass);
  for (std::size_t first = 0; first < meshes.size(); first += tuning::kPropsPerPass) {
    PropPass<T> pass{};
    pass.count = static_cast<int>(std::min<std::size_t>(tuning::kPropsPerPass, meshes.size() - first));
    if (options_.host_arrays) start_timer();
    for (int j = 0; j < pass.count; ++j) {
      const View<const T>& mesh = meshes[first + j];
      const View<T>& out = values[first + j];
      if (options_.host_arrays) {
        T* staged_mesh = buf_.staging_meshes.get() + j * layout_.size;
        copy_strided(staged_mesh, 1, mesh.data, 1, layout_.size, cudaMemcpyHostToDevice, stream_, "copy to the device");
        pass.meshes[j] = staged_mesh;
        pass.values[j] = buf_.staging_particles.get() + j * n;
        pass.value_stride[j] = 1;
      } else {
        require_device(mesh.data, "meshes", first + j);
        require_device(out.data, "values", first + j);
        pass.meshes[j] = const_cast<T*>(mesh.data);  // read only in interp
        pass.values[j] = out.data;
        pass.value_stride[j] = out.stride;
      }
    }
    if (options_.host_arrays) {
      timings_.transfer_s += stop_timer();
      start_timer();
    }
    launch_interp<K>(pass);
    if (options_.host_arrays) {
      timings_.compute_s += stop_timer();
      start_timer();
      for (int j = 0; j < pass.count; ++j)
        copy_strided(values[first + j].data, values[first + j].stride, pass.values[j], 1, n,
                     cudaMemcpyDeviceToHost, stream_, "copy values to the host");
      timings_.transfer_s += stop_timer();
    }
  }
}

}  // namespace pmkit::cuda
