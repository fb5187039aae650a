// The CUDA pair backend: the device cell list (cells.cu bins it), the services the
// traversal templates use (DevicePairs: inputs in sorted order, scratch, events, the Auto
// choice per kernel type), and the built-in kernels' compute (their traversal is compiled
// in builtin_float.cu and builtin_double.cu).
#include <map>
#include <memory>

#include "core/pair_backend.hpp"
#include "cuda/pairs/cells.hpp"
#include "pmkit/detail/pair_device.hpp"

namespace pmkit::detail {
namespace {

template <class T>
__global__ void gather_inputs_kernel(const View<const T> in0, const View<const T> in1, const View<const T> in2,
                                     const View<const T> in3, int count, const std::uint32_t* __restrict__ perm,
                                     std::uint32_t n, T* __restrict__ sorted) {
  const std::uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const std::uint32_t src = perm[s];
  const View<const T> views[4] = {in0, in1, in2, in3};
  for (int k = 0; k < count; ++k) sorted[std::size_t(k) * n + s] = views[k][src];
}

template <class T, int D>
class CudaPairBackend final : public PairBackend<T, D>, public DevicePairs<T, D> {
 public:
  using Positions = std::array<View<const T>, D>;

  CudaPairBackend(const Box<D>& box, double cutoff, const PairCellGrid<D>& grid, const PairOptions& options)
      : method_(options.method) {
    cells_.device = options.device;
    cells_.stream = cuda::to_cuda_stream(options.stream);
    cells_.cells = grid.cells;
    PairGeometry<T, D>& g = cells_.geometry;
    for (int d = 0; d < D; ++d) {
      g.ncell[d] = grid.ncell[d];
      g.length[d] = static_cast<T>(box.length[d]);
      g.origin[d] = static_cast<T>(box.origin[d]);
      g.inv_width[d] = static_cast<T>(grid.ncell[d] / box.length[d]);
      g.periodic[d] = box.boundary[d] == Boundary::Periodic;
    }
    g.cutoff = static_cast<T>(cutoff);
    g.cutoff2 = static_cast<T>(cutoff * cutoff);
  }

  void set_points(const Positions& positions) override {
    report_pair_rejection(cells_, false);
    device_pair_bin<T, D>(cells_, positions);
  }

  void set_points(const Plan<T, D>& mesh) override {
    report_pair_rejection(cells_, false);
    const std::size_t n = mesh.num_points();
    const cuda::DeviceScope on_device(cells_.device);
    mesh_offsets_.reserve(D * n, "PairPlan::set_points(mesh plan): offsets");
    mesh_order_.reserve(n, "PairPlan::set_points(mesh plan): order");
    // The mesh plan writes the offsets and the order on its stream, after this plan's
    // last binning has read them, and this plan's binning reads them after: events, no
    // host wait (nothing where the two plans share a stream).
    cudaStream_t mesh_stream = cuda::to_cuda_stream(mesh.options().stream);
    to_mesh_.order(cells_.stream, mesh_stream);
    const Positions offsets = binned_points(mesh, mesh_offsets_.get(), mesh_order_.get());
    from_mesh_.order(mesh_stream, cells_.stream);
    device_pair_bin<T, D>(cells_, offsets, mesh_order_.get());
  }
  void report_errors(bool wait) override { report_pair_rejection(cells_, wait); }

  std::size_t num_points() const override { return cells_.n; }
  bool has_points() const override { return cells_.ready; }
  void compute(const pair_kernels::LennardJones<D>& kernel, Span<View<const T>> in, Span<View<T>> out) override {
    device_pair_compute<T, D>(*this, kernel, method_, in, out);
  }
  void compute(const pair_kernels::NeighbourCount& kernel, Span<View<const T>> in, Span<View<T>> out) override {
    device_pair_compute<T, D>(*this, kernel, method_, in, out);
  }
  void compute(const pair_kernels::EwaldRealSpace<D>& kernel, Span<View<const T>> in, Span<View<T>> out) override {
    device_pair_compute<T, D>(*this, kernel, method_, in, out);
  }
  DevicePairs<T, D>* device_pairs() override { return this; }
  PairMethod last_method() const override { return last_method_; }
  Timings last_timings() const override { return {0.0, timer_.seconds("PairPlan::compute")}; }
  void set_stream(StreamHandle stream) override {
    if (cuda::to_cuda_stream(stream) == cells_.stream) return;  // every Python call asks; most change nothing
    const cuda::DeviceScope on_device(cells_.device);
    handover_.order(cells_.stream, cuda::to_cuda_stream(stream));
    cells_.stream = cuda::to_cuda_stream(stream);
  }

  // DevicePairs
  DevicePairView<T, D> view() const override {
    DevicePairView<T, D> v;
    v.geometry = cells_.geometry;
    v.pos = cells_.pos.get();
    v.start = cells_.start.get();
    v.perm = cells_.perm.get();
    v.corner_index = cells_.corner_lists ? cells_.corner_index.get() : nullptr;
    v.corner_start = cells_.corner_lists ? cells_.corner_start.get() : nullptr;
    v.n = cells_.n;
    v.cells = cells_.cells;
    v.device = cells_.device;
    v.stream = cuda::stream_handle(cells_.stream);
    return v;
  }
  void require_device(const void* ptr, const char* what, std::size_t index) override {
    cells_.device_pointers.require(ptr, what, index);
  }
  const T* gather_inputs(Span<View<const T>> inputs, int count) override {
    const std::size_t n = cells_.n;
    if (count == 0 || n == 0) return nullptr;
    sorted_inputs_.reserve(count * n, "PairPlan::compute: sorted inputs");
    const View<const T> none;
    auto in = [&](int k) { return k < count ? inputs[k] : none; };
    gather_inputs_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, cells_.stream>>>(
        in(0), in(1), in(2), in(3), count, cells_.perm.get(), static_cast<std::uint32_t>(n), sorted_inputs_.get());
    cuda::check_launch("pmkit PairPlan: gather inputs");
    return sorted_inputs_.get();
  }
  void reserve_sums(int count) override {
    sorted_outputs_.reserve(static_cast<std::size_t>(count) * cells_.n, "PairPlan::compute: half-shell sums");
  }
  T* zeroed_sums(int count) override {
    const std::size_t values = static_cast<std::size_t>(count) * cells_.n;
    reserve_sums(count);
    cuda::check(cudaMemsetAsync(sorted_outputs_.get(), 0, values * sizeof(T), cells_.stream),
                "pmkit PairPlan: zero the half-shell sums");
    return sorted_outputs_.get();
  }
  // Not while the stream is captured into a graph: an event recorded there marks a place
  // in the graph, not a time (last_timings keeps the last eager compute's).
  void start_timer() override {
    timing_ = !stream_capturing(cells_.stream);
    if (timing_) timer_.start(cells_.stream);
  }
  void stop_timer() override {
    if (timing_) timer_.stop(cells_.stream);
  }
  double traversal_seconds() override { return timer_.seconds("PairPlan::compute"); }
  const PairChoice* choice(std::type_index kernel) const override {
    auto found = chosen_.find(kernel);
    return found == chosen_.end() ? nullptr : &found->second;
  }
  void remember(std::type_index kernel, const PairChoice& choice) override { chosen_[kernel] = choice; }
  void set_last_method(PairMethod method) override { last_method_ = method; }

 private:
  DevicePairCells<T, D> cells_;
  PairMethod method_;
  PairMethod last_method_ = PairMethod::Auto;  // until a compute has run
  // Scratch of compute: the inputs gathered into sorted order, and the half shell's sums
  // in sorted order (its atomics then hit consecutive addresses).
  cuda::DeviceBuffer<T> sorted_inputs_, sorted_outputs_;
  // set_points(mesh plan): the mesh plan's binned offsets (D arrays) and binned order.
  cuda::DeviceBuffer<T> mesh_offsets_;
  cuda::DeviceBuffer<std::uint32_t> mesh_order_;
  std::map<std::type_index, PairChoice> chosen_;
  // Device time of the last traversal: recorded without waiting (compute is
  // asynchronous), read on demand.
  cuda::EventTimer timer_;
  bool timing_ = false;  // whether the traversal under way is timed
  cuda::StreamHandover handover_;  // set_stream's ordering of the new stream after the old
  // set_points(mesh plan): the mesh plan's stream after this plan's, and back.
  cuda::StreamHandover to_mesh_, from_mesh_;
};

}  // namespace

template <class T, int D>
std::unique_ptr<PairBackend<T, D>> make_cuda_pair_backend(const Box<D>& box, double cutoff,
                                                          const PairCellGrid<D>& grid, const PairOptions& options) {
  return std::make_unique<CudaPairBackend<T, D>>(box, cutoff, grid, options);
}

PMKIT_INSTANTIATE_PAIR_BACKEND(make_cuda_pair_backend)

}  // namespace pmkit::detail
