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
// Options::stream, in order. On device arrays no call waits for the host: the binning's
// counts are decided on the device (launches sized by bounds), and a rejected position
// comes back with the call's status (status.cuh), reported by a later call or by
// synchronize. So every call can be captured into a CUDA graph. With host_arrays the
// calls wait for their copies back, and report a rejection at once. The exceptions:
// the one-pass scatter of tuning::kRunsReadBackParticles or more (eager) waits for its
// count of runs; num_away and last_timings wait for the values they return.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/checks.hpp"
#include "cuda/plan/resources.cuh"
#include "cuda/plan/status.cuh"
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
  std::size_t num_away() const override;
  bool binning_kept() const override { return binning_kept_; }
  void raise_device_errors(bool wait) override;
  bool has_binning() const override { return !binning_lost_; }
  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) override;
  void interp(Span<View<const T>> meshes, Span<View<T>> values) override;
  void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) override;
  void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) override;
  void binned_order(View<std::uint32_t> order) const override;
  void permute_to_binned(Span<View<const T>> from, Span<View<T>> to) override;
  void adopt_binned_order() override;
  void binned_positions(const std::array<View<T>, D>& offsets) const override;
  std::string spread_method_name() const override;
  Timings last_timings() const override;
  void set_stream(StreamHandle stream) override {
    if (to_cuda_stream(stream) == stream_) return;  // every Python call asks; most change nothing
    const DeviceScope on_device(options_.device);
    handover_.order(stream_, to_cuda_stream(stream));
    stream_ = to_cuda_stream(stream);
    options_.stream = stream;
  }
  // The split (core/split.hpp) of the fast spread on device arrays: the tile kernels take
  // the tiles of the selected part (TileParts, a function of the tile's place: nothing
  // per binning); the other kernels (global atomics, cell moments, the per-particle
  // interp, update_points' away list) take their particles in the boundary part.
  bool set_interior(const detail::NodeBox<D>& interior) override {
    if (options_.deterministic || options_.host_arrays) return false;
    interior_ = interior;
    return true;
  }
  void select(detail::Part part) override { part_ = part; }

 private:
  // The selected part's tiles (TileParts): per axis the tiles all of whose stencils lie in
  // the interior box (one a tile's first node - kLead to its last + S - 1 - kLead).
  TileParts tile_parts() const {
    TileParts parts;
    parts.part = part_;
    if (part_ == detail::Part::All) return parts;
    const int edge = BinGeometry<D>::kEdge, support = kernel_.support(), lead = (support - 1) / 2;
    for (int d = 0; d < D; ++d) {
      detail::NodeBox<D> axis_box{};  // the interior box along axis d alone
      for (int e = 0; e < D; ++e) {
        axis_box.lo[e] = e == d ? interior_.lo[d] : detail::NodeBox<D>::whole_lo();
        axis_box.hi[e] = e == d ? interior_.hi[d] : detail::NodeBox<D>::whole_hi();
      }
      parts.lo[d] = geo_.tiles[d];
      parts.hi[d] = 0;
      for (int t = 0; t < geo_.tiles[d]; ++t) {
        int first[D] = {};
        first[d] = t * edge - lead;
        if (!detail::stencil_inside<D>(axis_box, layout_, first, edge + support - 1)) continue;
        parts.lo[d] = std::min(parts.lo[d], t);
        parts.hi[d] = std::max(parts.hi[d], t + 1);
      }
    }
    return parts;
  }
  // Whether a kernel that takes every particle (or the away list) runs in the selected
  // part: in all but the interior one.
  bool runs_whole() const { return part_ != detail::Part::Interior; }

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
  void begin_timings() {
    timings_ = {};
    call_timed_ = false;
  }
  // A binning call's device time, read when last_timings asks for it (no wait here);
  // none under stream capture.
  bool start_call_timer() {
    if (BinningStatus<T, D>::capturing(stream_)) return false;
    call_timer_.start(stream_);
    return true;
  }
  void stop_call_timer() {
    call_timer_.stop(stream_);
    call_timed_ = true;
  }

  // set_points.cuh
  void reserve_binning(Binned<T>& b, std::size_t n, bool may_partition);
  void scan(const std::uint32_t* count, std::uint32_t* start, std::size_t items);
  void probe_binned_order(std::size_t n, const PositionArrays<T, D>& pos);
  bool binned_in_one_block(std::size_t n) const;
  int run_key_bits() const;
  void reserve_runs(std::size_t runs);
  void small_binning(Binned<T>& b, std::size_t n, const PositionArrays<T, D>& pos);
  void one_pass_scatter(Binned<T>& b, std::size_t n, const PositionArrays<T, D>& pos);
  const std::uint32_t* partition_scatter(Binned<T>& b, std::size_t n, const PositionArrays<T, D>& pos,
                                         Groups groups);
  void cut_tiles(const std::uint32_t* tile_start, std::uint32_t cap, bool even, Chunk* out, std::uint32_t capacity,
                 std::uint32_t* total);
  void interleave(Binned<T>& b, int partition_levels);
  void find_heavy_tiles(Binned<T>& b);
  void reserve_heavy_windows(std::uint32_t heavy_tiles);
  void finish_binning_call(bool full_binning, const PositionArrays<T, D>& pos, int status_row, bool probed);
  void take_status(const BinningCall<T, D>& call, const StatusRead& read);
  [[noreturn]] void reject_particle(const BinningCall<T, D>& call, unsigned long long index);
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
  // The chunks' count as the host last read it, or its bound.
  double window_use() const {
    const std::uint32_t chunks = known_chunks_ > 0 ? std::min(known_chunks_, current_.max_chunks) : current_.max_chunks;
    return tuning::window_use(current_.n, chunks, stencil_per_window_node_);
  }
  // The away kernels' grid: threads for twice the away particles last read (at least a
  // few blocks, at most one a particle), walking the device's count in grid-stride loops.
  std::size_t away_threads() const {
    return std::min<std::size_t>(current_.n, std::max<std::size_t>(2 * known_away_, 4096));
  }
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
  bool small_binning_fits_ = false;  // the device has the one-block binning's shared memory
  int tile_props_per_pass_ = 0;
  int cell_props_per_pass_ = 0;         // 0: cell moments not asked for
  double stencil_per_window_node_ = 0;  // S^D / tile window nodes (window_use)
  SpreadMethod method_ = SpreadMethod::CudaGlobalAtomics;
  std::vector<const void*> opted_in_;            // kernels opt_in_shared has raised (each to its one size)
  mutable DevicePointerCheck checked_pointers_;  // the caller's arrays found to be device memory
  Timings timings_;
  EventTimer timer_;
  EventTimer call_timer_;
  bool call_timed_ = false;
  StreamHandover handover_;  // set_stream's ordering of the new stream after the old

  // The binning in use, and the one set_points builds with host_arrays (so that a
  // rejection leaves the binning in use). On device arrays set_points builds in place,
  // so that the binning's buffers stay where graphs captured them.
  Binned<T> current_, spare_;
  Binned<T>& building() { return options_.host_arrays ? spare_ : current_; }
  PlanBuffers<T> buf_;
  DeviceBuffer<T> permuted_;  // permute_to_binned's scratch (and host_arrays' staging)
  BinningStatus<T, D> status_;
  // From the status readings: the next update_points re-bins in full (more than
  // max_away_fraction were away); the latest counts; the probe's latest answer; a
  // rejected position reported, after which the plan needs set_points.
  bool rebin_next_ = false;
  std::uint32_t known_chunks_ = 0;
  std::size_t known_away_ = 0;
  bool caller_order_binned_ = false;
  bool binning_lost_ = false;
  bool binning_kept_ = false;  // the last update_points kept the binning (Plan::binning_kept)
  BinningCall<T, D> captured_call_;  // the last binning call queued under stream capture
  detail::NodeBox<D> interior_{};    // set_interior's box
  detail::Part part_ = detail::Part::All;  // the particles spread and interp take (select)
  bool interp_one_pass_ = true;  // the interp call's outputs fit one pass (its binned values: interp_output)
};

}  // namespace pmkit::cuda
