#pragma once
// spread: P2M pass by pass (up to tuning::kPropsPerPass properties a launch), by the
// method resolved at set_points, asynchronously on the plan's stream.
#include <algorithm>
#include <string>

#include "cuda/plan/cuda_backend.cuh"

namespace pmkit::cuda {

// Every pass runs asynchronously on the stream; with host_arrays the call waits for its
// copies of the meshes back.
template <class T, int D>
void CudaBackend<T, D>::spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) {
  const DeviceScope on_device(options_.device);
  begin_timings();
  kernels::dispatch(kernel_, [&](auto k) { spread_all<decltype(k)>(props, meshes, mode); });
}

template <class T, int D>
std::string CudaBackend<T, D>::spread_method_name() const {
  if (method_ == SpreadMethod::CudaGlobalAtomics) return "cuda-global-atomics";
  if (method_ == SpreadMethod::CudaCellMoments)
    return "cuda-cell-moments (" + std::to_string(kFastWords<T>) + "x32-bit fixed point)";
  const int words = options_.deterministic ? kDeterministicWords<T> : kFastWords<T>;
  return std::string(options_.deterministic ? "cuda-shared-tiles-deterministic" : "cuda-shared-tiles") +
         " (" + std::to_string(words) + "x32-bit fixed point)";
}

// Fills a pass with up to `width` properties starting at `first`: device pointers as
// given, or staged copies of host arrays.
template <class T, int D>
PropPass<T> CudaBackend<T, D>::make_pass(Span<View<const T>> particle_arrays, Span<View<T>> mesh_arrays, std::size_t first,
                      int width, bool copy_particles_in, bool copy_meshes_in) {
  PropPass<T> pass{};
  pass.count = static_cast<int>(std::min<std::size_t>(width, particle_arrays.size() - first));
  const std::size_t n = current_.n;
  for (int j = 0; j < pass.count; ++j) {
    const View<const T>& prop = particle_arrays[first + j];
    const View<T>& mesh = mesh_arrays[first + j];
    if (options_.host_arrays) {
      T* staged_prop = buf_.staging_particles.get() + j * n;
      T* staged_mesh = buf_.staging_meshes.get() + j * layout_.size;
      if (copy_particles_in)
        copy_strided(staged_prop, 1, prop.data, prop.stride, n, cudaMemcpyHostToDevice, stream_, "copy to the device");
      if (copy_meshes_in)
        copy_strided(staged_mesh, 1, mesh.data, 1, layout_.size, cudaMemcpyHostToDevice, stream_, "copy to the device");
      pass.props[j] = staged_prop;
      pass.prop_stride[j] = 1;
      pass.meshes[j] = staged_mesh;
    } else {
      require_device(prop.data, "particle arrays", first + j);
      require_device(mesh.data, "meshes", first + j);
      pass.props[j] = prop.data;
      pass.prop_stride[j] = prop.stride;
      pass.meshes[j] = mesh.data;
    }
    if (options_.deterministic) pass.exact[j] = buf_.exact.get() + j * layout_.size;
  }
  pass.max_abs_bits = buf_.max_abs.get();
  pass.quad_flush = quad_flush_fits(pass, pass.count);
  return pass;
}

// float4 atomics along x (TileWindow quads): float, periodic x of 4k nodes, the pass's
// first `meshes` meshes aligned.
template <class T, int D>
bool CudaBackend<T, D>::quad_flush_fits(const PropPass<T>& pass, int meshes) const {
  const detail::Axis& x = layout_.axis[0];
  bool fits = sizeof(T) == 4 && x.kind == detail::AxisKind::Periodic && x.nodes % 4 == 0;
  for (int j = 0; j < meshes; ++j) fits = fits && reinterpret_cast<std::uintptr_t>(pass.meshes[j]) % 16 == 0;
  return fits;
}

template <class T, int D>
template <class K>
void CudaBackend<T, D>::spread_all(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) {
  const int width = method_ == SpreadMethod::CudaSharedTiles   ? tile_props_per_pass_
                    : method_ == SpreadMethod::CudaCellMoments ? cell_props_per_pass_
                                                               : tuning::kPropsPerPass;
  // The moves' scratch, before any mesh is touched (the first pass is the widest).
  const int first_pass = static_cast<int>(std::min<std::size_t>(width, props.size()));
  if (method_ == SpreadMethod::CudaSharedTiles && moves_props(K::support, first_pass)) {
    buf_.binned_values.reserve(current_.n * tuning::kPropsPerPass, "properties in binned order");
    if (current_.partition_levels == 2)
      buf_.mid_values.reserve(current_.n * tuning::kPropsPerPass, "properties in binned order");
  }
  for (std::size_t first = 0; first < props.size(); first += width) {
    const bool stage_meshes_in = options_.host_arrays && mode == Accumulate::Add && !options_.deterministic;
    if (options_.host_arrays) start_timer();
    PropPass<T> pass = make_pass(props, meshes, first, width, true,
                                 stage_meshes_in || (options_.deterministic && mode == Accumulate::Add));
    if (options_.host_arrays) timings_.transfer_s += stop_timer();
    if (options_.host_arrays) start_timer();
    launch_spread<K>(pass, mode);
    if (options_.host_arrays) {
      timings_.compute_s += stop_timer();
      start_timer();
      for (int j = 0; j < pass.count; ++j)
        copy_strided(meshes[first + j].data, 1, pass.meshes[j], 1, layout_.size, cudaMemcpyDeviceToHost, stream_,
                     "copy the mesh to the host");
      timings_.transfer_s += stop_timer();
    }
  }
}

template <class T, int D>
template <class K>
void CudaBackend<T, D>::launch_spread(const PropPass<T>& pass, Accumulate mode) {
  const std::size_t n = current_.n;
  const std::size_t mesh_bytes = static_cast<std::size_t>(layout_.size) * sizeof(T);
  if (!options_.deterministic && mode == Accumulate::Overwrite)
    for (int j = 0; j < pass.count; ++j) check(cudaMemsetAsync(pass.meshes[j], 0, mesh_bytes, stream_), "cudaMemset");
  if (options_.deterministic) {
    constexpr int W = kDeterministicWords<T>;
    check(cudaMemsetAsync(buf_.max_abs.get(), 0, tuning::kPropsPerPass * sizeof(unsigned long long), stream_), "cudaMemset");
    if (n > 0) {
      max_abs_kernel<T><<<std::min(blocks_for(n, 256), 1024u), 256, 0, stream_>>>(pass, n, buf_.max_abs.get());
      check_launch("pmkit::cuda::spread::max_abs");
      launch_tiles<K, W, true>(pass);
    }
    finalize_exact_kernel<T, W><<<blocks_for(layout_.size, 256), 256, 0, stream_>>>(pass, layout_.size, n, geo_.peak_weight,
                                                                       mode == Accumulate::Add);
    check_launch("pmkit::cuda::spread::finalize_exact");
    return;
  }
  if (n == 0) return;
  if (method_ == SpreadMethod::CudaGlobalAtomics) {
    if (!runs_whole()) return;
    spread_atomics_kernel<K, D, T><<<blocks_for(n, tuning::kPointThreads), tuning::kPointThreads, 0, stream_>>>(
        layout_, geo_, current_.particles.get(), nullptr, current_.perm.get(), ItemCount{n}, pass);
    check_launch("pmkit::cuda::spread::global_atomics");
  } else if (method_ == SpreadMethod::CudaCellMoments) {
    if constexpr (tuning::cell_moments_fit(K::support, D))
      if (runs_whole()) launch_cells<K>(pass);
  } else {
    launch_tiles<K, kFastWords<T>, false>(pass);
  }
  if (current_.has_away && runs_whole()) {  // update_points' away list
    const ItemCount away{n, current_.counts + kAwayCount};
    if constexpr (tuning::away_by_warps(K::support, D))
      spread_away_warps_kernel<K, D, T><<<warp_blocks_for(away_threads(), tuning::kPointThreads),
                                          tuning::kPointThreads, 0, stream_>>>(
          layout_, geo_, current_.away_particles.get(), current_.away_slot.get(), current_.perm.get(), away, pass);
    else
      spread_atomics_kernel<K, D, T><<<blocks_for(away_threads(), tuning::kPointThreads), tuning::kPointThreads, 0,
                                       stream_>>>(layout_, geo_, current_.away_particles.get(),
                                                  current_.away_slot.get(), current_.perm.get(), away, pass);
    check_launch("pmkit::cuda::spread::away");
  }
}

// Whether the tile spread moves a pass of `props` properties into binned order before
// its kernel (props_to_slots; tuning::spread_moves_props). props_to_slots also wants
// contiguous arrays; launch_tiles checks.
template <class T, int D>
bool CudaBackend<T, D>::moves_props(int support, int props) const {
  return tuning::spread_moves_props(current_.caller_order_binned, options_.deterministic, sizeof(T), current_.n,
                                    limits_.l2_bytes, current_.partition_levels, support, props);
}

// The pass's properties in binned order (in buf_.binned_values), moved as set_points'
// partition moved the records: block by block to the pass-1 places, then (two levels)
// piece by piece to the slots, each in its sort's order.
template <class T, int D>
PropPass<T> CudaBackend<T, D>::props_to_slots(const PropPass<T>& pass) {
  const std::size_t n = current_.n;
  const unsigned blocks = blocks_for(n, PartitionBlock<T>::kItems);
  T* binned = buf_.binned_values.get();
  const bool two_levels = current_.partition_levels == 2;
  props_to_places_kernel<T><<<blocks, tuning::kPartitionThreads, 0, stream_>>>(
      pass, current_.sorted_block.get(), two_levels ? current_.place.get() : current_.slot.get(), n,
      two_levels ? buf_.mid_values.get() : binned);
  check_launch("pmkit::cuda::spread::props_to_places");
  if (two_levels && current_.max_pieces > 0) {  // blocks past the pieces' count return at once
    props_to_slots_kernel<T><<<current_.max_pieces, tuning::kPartitionThreads, 0, stream_>>>(
        buf_.mid_values.get(), current_.pieces.get(), current_.sorted_piece.get(), current_.binned_of_place.get(),
        pass.count, n, binned);
    check_launch("pmkit::cuda::spread::props_to_slots");
  }
  PropPass<T> moved = pass;
  for (int j = 0; j < pass.count; ++j) {
    moved.props[j] = binned + j * n;
    moved.prop_stride[j] = 1;
  }
  return moved;
}

template <class T, int D>
template <int kSupport, bool kDeterministic>
PropPass<T> CudaBackend<T, D>::tile_pass(const PropPass<T>& caller_pass, int values, const std::uint32_t*& perm) {
  bool contiguous = true;
  for (int j = 0; j < values; ++j) contiguous = contiguous && caller_pass.prop_stride[j] == 1;
  const bool moved = contiguous && moves_props(kSupport, values);
  PropPass<T> pass = moved ? props_to_slots(caller_pass) : caller_pass;
  perm = moved ? nullptr : current_.perm.get();
  if (!kDeterministic && current_.max_heavy > 0) {  // fast float only (set_points)
    pass.heavy_slot = current_.heavy_slot.get();
    pass.heavy_windows = buf_.heavy_windows.get();
  }
  // Under a split, the selected part's tiles; a heavy tile's window then holds that
  // part's sums and the other windows stay clear, so finish_heavy_tiles adds no more.
  pass.parts = tile_parts();
  return pass;
}

template <class T, int D>
template <class K, bool kDeterministic>
void CudaBackend<T, D>::finish_heavy_tiles(const PropPass<T>& pass, int meshes) {
  const std::uint32_t heavy = kDeterministic ? 0 : current_.max_heavy;
  if (heavy == 0) return;
  finish_heavy_kernel<K, D, T><<<heavy, tuning::kSpreadThreads, 0, stream_>>>(
      layout_, geo_, current_.heavy_tiles.get(), current_.counts + kHeavyCount, pass, meshes);
  check_launch("pmkit::cuda::spread::finish_heavy");
}

template <class T, int D>
template <class K, int W, bool kDeterministic>
void CudaBackend<T, D>::launch_tiles(const PropPass<T>& caller_pass) {
  if (current_.n == 0) return;
  const std::uint32_t* perm;
  const PropPass<T> pass = tile_pass<K::support, kDeterministic>(caller_pass, caller_pass.count, perm);
  with_prop_count(pass.count, [&](auto np) {
    constexpr int NP = decltype(np)::value;
    const std::size_t shared = static_cast<std::size_t>(TileWindow<K, D>::kNodes) * W * NP * sizeof(int);
    auto kernel = spread_tiles_kernel<K, D, T, W, NP, kDeterministic>;
    opt_in_shared(kernel, shared);
    kernel<<<current_.max_chunks, tuning::kSpreadThreads, shared, stream_>>>(layout_, geo_, current_.chunks.get(),
                                                                    current_.particles.get(),
                                                                    taken_order(), perm, current_.n, pass);
    check_launch("pmkit::cuda::spread::shared_tiles");
  });
  finish_heavy_tiles<K, kDeterministic>(pass, pass.count);
}

template <class T, int D>
template <class K>
void CudaBackend<T, D>::launch_cells(const PropPass<T>& pass) {
  if (current_.n == 0) return;
  constexpr int W = kFastWords<T>;
  with_prop_count(pass.count, [&](auto np) {
    constexpr int NP = decltype(np)::value;
    const std::size_t shared = CellShared<K, D, T, W, NP>::kBytes;
    // The constructor sized the moments by this kernel's attributes, but the spread is
    // compiled in a unit of its own, whose instance of the kernel opts in here.
    auto kernel = spread_cells_kernel<K, D, T, W, NP>;
    opt_in_shared(kernel, shared);
    kernel<<<current_.max_spans, tuning::kCellThreads, shared, stream_>>>(
        layout_, geo_, current_.spans.get(), current_.particles.get(), current_.perm.get(), pass);
    check_launch("pmkit::cuda::spread::cell_moments");
  });
}

}  // namespace pmkit::cuda
