#pragma once
// interp_gradient and spread_gradient: a pass per mesh (its D components fill a pass's
// kPropsPerPass >= D particle arrays), by the paths interp and spread take, on the
// plan's stream, asynchronously on device arrays (host_arrays: the call waits for its
// copies back).
#include <algorithm>
#include <cstdint>

#include "cuda/plan/cuda_backend.cuh"
#include "cuda/plan/peak_weight.hpp"

namespace pmkit::cuda {

static_assert(tuning::kPropsPerPass >= 3, "a pass holds a mesh's D components");

template <class T, int D>
InverseSpacing<T, D> CudaBackend<T, D>::inverse_spacing() const {
  InverseSpacing<T, D> inverse{};
  for (int d = 0; d < D; ++d) {
    inverse.d[d] = 1.0 / layout_.axis[d].spacing;
    inverse.t[d] = static_cast<T>(inverse.d[d]);
  }
  return inverse;
}

// The pass of mesh `mesh`: its array and its D particle arrays (vectors[D*mesh + d]),
// device pointers as given or staged copies of host arrays (the particle arrays copied
// in for spread_gradient, the mesh where stage_mesh_in). interp_gradient's outputs are
// set by its caller.
template <class T, int D>
PropPass<T> CudaBackend<T, D>::gradient_pass(Span<View<const T>> vectors, Span<View<T>> meshes, std::size_t mesh,
                                             bool stage_mesh_in) {
  PropPass<T> pass{};
  pass.count = D;
  const std::size_t n = current_.n;
  if (options_.host_arrays) {
    pass.meshes[0] = buf_.staging_meshes.get();
    if (stage_mesh_in)
      copy_strided(pass.meshes[0], 1, meshes[mesh].data, 1, layout_.size, cudaMemcpyHostToDevice, stream_,
                   "copy to the device");
  } else {
    pass.meshes[0] = meshes[mesh].data;
  }
  for (int d = 0; d < D && !vectors.empty(); ++d) {
    const View<const T>& v = vectors[D * mesh + d];
    if (options_.host_arrays) {
      T* staged = buf_.staging_particles.get() + d * n;
      copy_strided(staged, 1, v.data, v.stride, n, cudaMemcpyHostToDevice, stream_, "copy to the device");
      pass.props[d] = staged;
      pass.prop_stride[d] = 1;
    } else {
      pass.props[d] = v.data;
      pass.prop_stride[d] = v.stride;
    }
  }
  if (options_.deterministic) pass.exact[0] = buf_.exact.get();
  pass.max_abs_bits = buf_.max_abs.get();
  pass.quad_flush = quad_flush_fits(pass, 1);
  return pass;
}

// ---------------------------------------------------------------------------------
// interp_gradient

// Every device pointer is checked before any pass runs, so a bad one writes nothing.
template <class T, int D>
void CudaBackend<T, D>::interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) {
  const DeviceScope on_device(options_.device);
  begin_timings();
  if (!options_.host_arrays) {
    for (std::size_t i = 0; i < meshes.size(); ++i) require_device(meshes[i].data, "meshes", i);
    for (std::size_t i = 0; i < gradients.size(); ++i) require_device(gradients[i].data, "gradients", i);
  }
  kernels::dispatch(kernel_, [&](auto k) { interp_gradient_all<decltype(k)>(meshes, gradients); });
}

template <class T, int D>
template <class K>
void CudaBackend<T, D>::interp_gradient_all(Span<View<const T>> meshes, Span<View<T>> gradients) {
  const std::size_t n = current_.n;
  buf_.binned_values.reserve(n * std::max(tuning::kPropsPerPass, GradientOutput<T, D>::kSlotWidth), "interp scratch");
  // The mesh views as writable ones for gradient_pass, which only reads them here.
  std::vector<View<T>> mesh_views;
  for (const View<const T>& m : meshes) mesh_views.emplace_back(const_cast<T*>(m.data), m.size, m.stride);
  interp_one_pass_ = meshes.size() == 1;
  for (std::size_t i = 0; i < meshes.size(); ++i) {
    if (options_.host_arrays) start_timer();
    PropPass<T> pass = gradient_pass({}, mesh_views, i, true);
    for (int d = 0; d < D; ++d) {
      const View<T>& out = gradients[D * i + d];
      pass.values[d] = options_.host_arrays ? buf_.staging_particles.get() + d * n : out.data;
      pass.value_stride[d] = options_.host_arrays ? 1 : out.stride;
    }
    if (options_.host_arrays) {
      timings_.transfer_s += stop_timer();
      start_timer();
    }
    launch_interp_gradient<K>(pass);
    if (options_.host_arrays) {
      timings_.compute_s += stop_timer();
      start_timer();
      for (int d = 0; d < D; ++d)
        copy_strided(gradients[D * i + d].data, gradients[D * i + d].stride, pass.values[d], 1, n,
                     cudaMemcpyDeviceToHost, stream_, "copy gradients to the host");
      timings_.transfer_s += stop_timer();
    }
  }
}

// interp's paths (launch_interp) with the gradient kernels: one mesh, D outputs a
// particle, unbinned from slot-major slots (GradientOutput, unbin_gradient_kernel).
template <class T, int D>
template <class K>
void CudaBackend<T, D>::launch_interp_gradient(const PropPass<T>& pass) {
  const std::size_t n = current_.n;
  if (n == 0) return;
  const GradientOutput<T, D> out{interp_output(D, 1)};
  const InverseSpacing<T, D> inverse = inverse_spacing();
  // update_points' away list (the tiles skip its particles: either order gives the same
  // outputs).
  if (current_.has_away && runs_whole()) {
    const ItemCount away{n, current_.counts + kAwayCount};
    if constexpr (tuning::away_by_warps(K::support, D))
      interp_gradient_away_warps_kernel<K, D, T><<<warp_blocks_for(away_threads(), tuning::kPointThreads),
                                                   tuning::kPointThreads, 0, stream_>>>(
          layout_, geo_, current_.away_particles.get(), current_.away_slot.get(), away, pass, out, inverse);
    else
      interp_gradient_kernel<K, D, T><<<blocks_for(away_threads(), tuning::kPointThreads), tuning::kPointThreads, 0,
                                        stream_>>>(layout_, geo_, current_.away_particles.get(),
                                                   current_.away_slot.get(), away, pass, out, inverse);
    check_launch("pmkit::cuda::interp_gradient::away");
  }
  if (interp_by_tiles<K>(1)) {
    const std::size_t shared = interp_tiles_shared_bytes<K, D, T, 1>();
    auto kernel =
        out.direct.perm ? interp_gradient_tiles_kernel<K, D, T, true> : interp_gradient_tiles_kernel<K, D, T, false>;
    opt_in_shared(kernel, shared);
    PropPass<T> tiles = pass;
    tiles.parts = tile_parts();
    kernel<<<current_.max_chunks, tuning::kSpreadThreads, shared, stream_>>>(
        layout_, geo_, current_.chunks.get(), current_.particles.get(), taken_order(), tiles, out, inverse);
    check_launch("pmkit::cuda::interp_gradient::shared_tiles");
  } else if (runs_whole()) {
    interp_gradient_kernel<K, D, T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
        layout_, geo_, current_.particles.get(), nullptr, ItemCount{n}, pass, out, inverse);
    check_launch("pmkit::cuda::interp_gradient::gather");
  }
  if (out.direct.perm || part_ == detail::Part::Interior) return;  // the boundary part unbins both
  bool interleaved = true;  // the D outputs are the D strided views of one array
  for (int d = 0; d < D; ++d) interleaved = interleaved && pass.values[d] == pass.values[0] + d && pass.value_stride[d] == D;
  auto unbin = interleaved ? unbin_gradient_kernel<T, D, true> : unbin_gradient_kernel<T, D, false>;
  unbin<<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(pass, out.direct.binned, n,
                                                                                   current_.slot.get());
  check_launch("pmkit::cuda::interp_gradient::unbin");
}

// ---------------------------------------------------------------------------------
// spread_gradient

template <class T, int D>
void CudaBackend<T, D>::spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) {
  const DeviceScope on_device(options_.device);
  begin_timings();
  if (!options_.host_arrays) {
    for (std::size_t i = 0; i < vectors.size(); ++i) require_device(vectors[i].data, "vectors", i);
    for (std::size_t i = 0; i < meshes.size(); ++i) require_device(meshes[i].data, "meshes", i);
  }
  kernels::dispatch(kernel_, [&](auto k) { spread_gradient_all<decltype(k)>(vectors, meshes, mode); });
}

template <class T, int D>
template <class K>
void CudaBackend<T, D>::spread_gradient_all(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) {
  // The moves' scratch, before any mesh is touched (as spread_all).
  if (method_ == SpreadMethod::CudaSharedTiles && moves_props(K::support, D)) {
    buf_.binned_values.reserve(current_.n * tuning::kPropsPerPass, "vectors in binned order");
    if (current_.partition_levels == 2)
      buf_.mid_values.reserve(current_.n * tuning::kPropsPerPass, "vectors in binned order");
  }
  for (std::size_t i = 0; i < meshes.size(); ++i) {
    if (options_.host_arrays) start_timer();
    const PropPass<T> pass = gradient_pass(vectors, meshes, i, options_.host_arrays && mode == Accumulate::Add);
    if (options_.host_arrays) {
      timings_.transfer_s += stop_timer();
      start_timer();
    }
    launch_spread_gradient<K>(pass, mode);
    if (options_.host_arrays) {
      timings_.compute_s += stop_timer();
      start_timer();
      copy_strided(meshes[i].data, 1, pass.meshes[0], 1, layout_.size, cudaMemcpyDeviceToHost, stream_,
                   "copy the mesh to the host");
      timings_.transfer_s += stop_timer();
    }
  }
}

// spread's methods (launch_spread) for one mesh: the tiles (fast or deterministic), or
// global atomics, where spread takes them and for cell moments (which have no gradient
// form); update_points' away list by global atomics.
template <class T, int D>
template <class K>
void CudaBackend<T, D>::launch_spread_gradient(const PropPass<T>& pass, Accumulate mode) {
  const std::size_t n = current_.n;
  const std::size_t mesh_bytes = static_cast<std::size_t>(layout_.size) * sizeof(T);
  const InverseSpacing<T, D> inverse = inverse_spacing();
  if (!options_.deterministic && mode == Accumulate::Overwrite)
    check(cudaMemsetAsync(pass.meshes[0], 0, mesh_bytes, stream_), "cudaMemset");
  if (options_.deterministic) {
    constexpr int W = kDeterministicWords<T>;
    check(cudaMemsetAsync(buf_.max_abs.get(), 0, sizeof(unsigned long long), stream_), "cudaMemset");
    if (n > 0) {
      max_gradient_magnitude_kernel<T, D><<<std::min(blocks_for(n, 256), 1024u), 256, 0, stream_>>>(
          pass, n, inverse, buf_.max_abs.get());
      check_launch("pmkit::cuda::spread_gradient::max_magnitude");
      launch_gradient_tiles<K, W, true>(pass);
    }
    PropPass<T> one_mesh = pass;  // finalize_exact_kernel takes a mesh per count
    one_mesh.count = 1;
    finalize_exact_kernel<T, W><<<blocks_for(layout_.size, 256), 256, 0, stream_>>>(
        one_mesh, layout_.size, n, peak_gradient_, mode == Accumulate::Add);
    check_launch("pmkit::cuda::spread_gradient::finalize_exact");
    return;
  }
  if (n == 0) return;
  if (method_ == SpreadMethod::CudaSharedTiles) {
    launch_gradient_tiles<K, kFastWords<T>, false>(pass);
  } else if (runs_whole()) {
    spread_gradient_atomics_kernel<K, D, T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
        layout_, geo_, current_.particles.get(), nullptr, current_.perm.get(), ItemCount{n}, pass, inverse);
    check_launch("pmkit::cuda::spread_gradient::global_atomics");
  }
  if (current_.has_away && runs_whole()) {
    const ItemCount away{n, current_.counts + kAwayCount};
    spread_gradient_atomics_kernel<K, D, T><<<blocks_for(away_threads(), tuning::kPointThreads),
                                              tuning::kPointThreads, 0, stream_>>>(
        layout_, geo_, current_.away_particles.get(), current_.away_slot.get(), current_.perm.get(), away, pass,
        inverse);
    check_launch("pmkit::cuda::spread_gradient::away");
  }
}

// launch_tiles with the gradient's kernel: the D components moved into binned order
// where spread would move D properties (props_to_slots), one accumulator.
template <class T, int D>
template <class K, int W, bool kDeterministic>
void CudaBackend<T, D>::launch_gradient_tiles(const PropPass<T>& caller_pass) {
  if (current_.n == 0) return;
  const std::uint32_t* perm;
  const PropPass<T> pass = tile_pass<K::support, kDeterministic>(caller_pass, D, perm);
  const std::size_t shared = static_cast<std::size_t>(TileWindow<K, D>::kNodes) * W * sizeof(int);
  auto kernel = spread_gradient_tiles_kernel<K, D, T, W, kDeterministic>;
  opt_in_shared(kernel, shared);
  kernel<<<current_.max_chunks, tuning::kSpreadThreads, shared, stream_>>>(
      layout_, geo_, current_.chunks.get(), current_.particles.get(), taken_order(), perm, current_.n, pass,
      peak_gradient_, inverse_spacing());
  check_launch("pmkit::cuda::spread_gradient::shared_tiles");
  finish_heavy_tiles<K, kDeterministic>(pass, 1);
}

}  // namespace pmkit::cuda
