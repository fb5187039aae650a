#pragma once
// CudaBackend: pmkit::Plan on a CUDA device. The class is declared here; its phases are
// defined apart, as cuFINUFFT splits a plan:
//   make_plan.cuh   the constructor: device limits, binning geometry, method sizing;
//   set_points.cuh  set_points and update_points (the binning);
//   spread.cuh      spread (P2M) and its methods' launches;
//   interp.cuh      interp (M2P);
//   gradient.cuh    interp_gradient and spread_gradient (the gradient at the particles
//                   and its adjoint);
//   arrays.cuh      the caller's arrays: device checks, host staging, binned_order and
//                   binned_positions.
// Every run-time decision is a function in cuda/tuning/method_choice.hpp; the kernels are
// in cuda/kernels/; the buffers in resources.cuh.
//
// Streams: every kernel, copy, memset, scan and event of a plan runs on
// Options::stream, in order. set_points and update_points wait for the stream once at
// their end (they return the rejection of a bad position as an exception, and size the
// chunks from a count read back); spread and interp on device arrays return without
// waiting; with host_arrays they wait for their copies back. binned_order into device
// memory does not wait; into host memory (host_arrays) it does, as binned_positions.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/checks.hpp"
#include "cuda/plan/resources.cuh"
#include "cuda/tuning/method_choice.hpp"

namespace pmkit::cuda {

using detail::fail;

// Words of fixed point per accumulator node: float keeps 30 bits per block (per-block
// scale) or 41 (global scale); double needs 62 either way.
template <class T>
constexpr int kFastWords = sizeof(T) == 4 ? 1 : 3;
template <class T>
constexpr int kDeterministicWords = sizeof(T) == 4 ? 2 : 3;

template <class T, int D>
class CudaBackend final : public detail::Backend<T, D> {
 public:
  CudaBackend(const Grid<D>& grid, const Kernel& kernel, const Options& options);

  void set_points(std::size_t n, const std::array<View<const T>, D>& positions) override;
  void update_points(std::size_t n, const std::array<View<const T>, D>& positions) override;
  std::size_t num_away() const override { return current_.num_away; }
  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) override;
  void interp(Span<View<const T>> meshes, Span<View<T>> values) override;
  void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) override;
  void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) override;
  void binned_order(View<std::uint32_t> order) const override;
  void permute_to_binned(Span<View<const T>> from, Span<View<T>> to) override;
  void binned_positions(const std::array<View<T>, D>& offsets) const override;
  std::string spread_method_name() const override;
  Timings last_timings() const override { return timings_; }
  void set_stream(StreamHandle stream) override {
    if (to_cuda_stream(stream) == stream_) return;  // every Python call asks; most change nothing
    const DeviceScope on_device(options_.device);
    handover_.order(stream_, to_cuda_stream(stream));
    stream_ = to_cuda_stream(stream);
    options_.stream = stream;
  }

 private:
  // Shared memory of the partition's blocks: pass 1, and pass 2 (its caller indices too).
  static constexpr std::size_t kPartitionShared = sizeof(typename PartitionBlock<T>::Shared);
  static constexpr std::size_t kPlaceShared =
      kPartitionShared + (PartitionBlock<T>::kItems + PartitionBlock<T>::kMaxKeys) * sizeof(std::uint32_t);

  // make_plan.cuh
  void size_cell_moments();
  void check_method() const;
  template <class Kernel>
  void opt_in_shared(Kernel* kernel, std::size_t bytes);
  void start_timer() { timer_.start(stream_); }
  double stop_timer() {  // waits for the stream up to here
    timer_.stop(stream_);
    return timer_.seconds("kernel execution");
  }

  // set_points.cuh
  void reserve_binning(std::size_t n, bool may_partition);
  void scan(const std::uint32_t* count, std::uint32_t* start, std::size_t items);
  bool in_binned_order(std::size_t n, const PositionArrays<T, D>& pos);
  void one_pass_scatter(std::size_t n, const PositionArrays<T, D>& pos);
  const std::uint32_t* partition_scatter(std::size_t n, const PositionArrays<T, D>& pos, Groups groups,
                                         std::size_t max_pieces);
  void cut_tiles(const std::uint32_t* tile_start, std::uint32_t cap, bool even, Chunk* out,
                 std::uint32_t* total);
  void interleave(std::size_t max_chunks, int partition_levels);
  void find_heavy_tiles();
  void reserve_heavy_windows(std::uint32_t heavy_tiles);
  void reject_if_bad(const PositionArrays<T, D>& pos, unsigned long long bad);
  void resolve_method();

  // spread.cuh
  template <class K>
  void spread_all(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode);
  PropPass<T> make_pass(Span<View<const T>> particle_arrays, Span<View<T>> mesh_arrays, std::size_t first,
                        int width, bool copy_particles_in, bool copy_meshes_in);
  template <class K>
  void launch_spread(const PropPass<T>& pass, Accumulate mode);
  bool moves_props(int support, int props) const;
  PropPass<T> props_to_slots(const PropPass<T>& pass);
  bool quad_flush_fits(const PropPass<T>& pass, int meshes) const;
  // What a tile spread's kernel reads (launch_tiles, launch_gradient_tiles): the pass's
  // `values` particle arrays moved into binned order where that pays (perm set to null:
  // read by slot; else the binned order's perm), with the heavy tiles' windows in fast
  // float mode; then the heavy windows' sums to the pass's first `meshes` meshes after
  // the kernel.
  template <int kSupport, bool kDeterministic>
  PropPass<T> tile_pass(const PropPass<T>& caller_pass, int values, const std::uint32_t*& perm);
  template <class K, bool kDeterministic>
  void finish_heavy_tiles(const PropPass<T>& pass, int meshes);
  template <class K, int W, bool kDeterministic>
  void launch_tiles(const PropPass<T>& caller_pass);
  template <class K>
  void launch_cells(const PropPass<T>& pass);

  // interp.cuh
  template <class K>
  void interp_all(Span<View<const T>> meshes, Span<View<T>> values);
  template <class K>
  void launch_interp(const PropPass<T>& pass);
  InterpOutput<T> interp_output(int outputs, int meshes) const;
  template <class K>
  bool interp_by_tiles(int meshes) const;

  // gradient.cuh
  InverseSpacing<T, D> inverse_spacing() const;
  PropPass<T> gradient_pass(Span<View<const T>> vectors, Span<View<T>> meshes, std::size_t mesh, bool stage_mesh_in);
  template <class K>
  void interp_gradient_all(Span<View<const T>> meshes, Span<View<T>> gradients);
  template <class K>
  void launch_interp_gradient(const PropPass<T>& pass);
  template <class K>
  void spread_gradient_all(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode);
  template <class K>
  void launch_spread_gradient(const PropPass<T>& pass, Accumulate mode);
  template <class K, int W, bool kDeterministic>
  void launch_gradient_tiles(const PropPass<T>& caller_pass);

  // arrays.cuh
  template <class P>
  void require_device(const P* ptr, const char* what, std::size_t index) const;
  PositionArrays<T, D> device_positions(std::size_t n, const std::array<View<const T>, D>& positions);

  // The order the tile kernels take each chunk's particles in; null: arrival order.
  const std::uint16_t* taken_order() const { return interleaved_ ? current_.order.get() : nullptr; }
  double window_use() const { return tuning::window_use(current_.n, current_.num_chunks, stencil_per_window_node_); }
  // Whether set_points cuts spans for cell moments: only where they are asked for (Auto
  // never takes them; the constructor sized them, or refused the plan).
  bool cells_wanted() const { return cell_props_per_pass_ > 0; }
  // Whether set_points finds the heavy tiles: the fast float tile spread's (flush_heavy).
  bool heavy_tiles_wanted() const { return sizeof(T) == 4 && !options_.deterministic; }

  detail::Layout<D> layout_;
  Kernel kernel_;
  Options options_;
  cudaStream_t stream_;
  DeviceLimits limits_;
  // set_points writes a bank-interleaved order for the tile kernels (kernels/tiles.cuh).
  bool interleaved_;
  BinGeometry<D> geo_{};
  double peak_gradient_ = 0;  // bounds spread_gradient's contributions (peak_weight.hpp), set once a plan
  Groups groups_{};  // the partition's pass-1 groups (fixed by the geometry)
  int tile_props_per_pass_ = 0;
  int cell_props_per_pass_ = 0;         // 0: cell moments not asked for
  double stencil_per_window_node_ = 0;  // S^D / tile window nodes (window_use)
  SpreadMethod method_ = SpreadMethod::CudaGlobalAtomics;
  std::vector<const void*> opted_in_;            // kernels opt_in_shared has raised (each to its one size)
  mutable DevicePointerCheck checked_pointers_;  // the caller's arrays found to be device memory
  Timings timings_;
  EventTimer timer_;
  StreamHandover handover_;  // set_stream's ordering of the new stream after the old

  Binned<T> current_, spare_;  // the binning in use, and the one set_points builds
  bool update_rebinned_ = false;  // the last update_points ended in a full binning
  PlanBuffers<T> buf_;
  DeviceBuffer<T> permuted_;  // permute_to_binned's scratch (and host_arrays' staging)
  std::unique_ptr<HostStatus, FreeHost> host_;
};

}  // namespace pmkit::cuda
