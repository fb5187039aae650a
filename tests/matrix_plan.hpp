#pragma once
// The mesh plan as the backend matrix's bodies use it: MatrixPlan takes and returns host
// arrays on every variant; on a device-memory variant (Memory::Device) it copies each
// call's arrays to the device, calls the plan with device pointers and copies the
// outputs back (DeviceStage), so one body tests the plan's device-pointer path too.
#include <algorithm>
#include <memory>
#include <vector>

#include "test_support.hpp"
#if defined(PMKIT_WITH_CUDA)
#include "cuda_support.hpp"
#endif

namespace pmkit::test {

#if defined(PMKIT_WITH_CUDA)
// The host arrays of one call in device memory. Views into overlapping host memory share
// one device copy of the union (in-place and interleaved views keep their aliasing); a
// view of no elements gets a device pointer of its own, a null view stays null. After
// the call, download() copies back every range that a mutable view wrote into (also
// after a call that threw, so that "outputs untouched" checks see the device's bytes).
class DeviceStage {
 public:
  template <class T>
  void add(View<T> v) {
    if (!v.data || v.size == 0) return;
    const auto* lo = reinterpret_cast<const unsigned char*>(v.data);
    const std::size_t bytes = ((v.size - 1) * static_cast<std::size_t>(v.stride) + 1) * sizeof(T);
    ranges_.push_back({lo, lo + bytes, !std::is_const<T>::value, nullptr});
  }
  template <class T>
  void add(Span<View<T>> views) {
    for (const auto& v : views) add(v);
  }
  template <class T, std::size_t D>
  void add(const std::array<View<T>, D>& views) {
    for (const auto& v : views) add(v);
  }

  // Merges the overlapping ranges, allocates and uploads them.
  void upload() {
    std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
    std::vector<Range> merged;
    for (const Range& r : ranges_) {
      if (!merged.empty() && r.lo < merged.back().hi) {
        merged.back().hi = std::max(merged.back().hi, r.hi);
        merged.back().written = merged.back().written || r.written;
      } else {
        merged.push_back(r);
      }
    }
    ranges_ = std::move(merged);
    for (Range& r : ranges_) {
      const std::size_t bytes = static_cast<std::size_t>(r.hi - r.lo);
      r.device = std::make_shared<DeviceBuffer<unsigned char>>(bytes, "DeviceStage");
      cuda::check(cudaMemcpy(r.device->get(), r.lo, bytes, cudaMemcpyHostToDevice), "DeviceStage upload");
    }
    // Landed before any plan's stream reads it (see DeviceBuffer::upload).
    cuda::check(cudaStreamSynchronize(nullptr), "DeviceStage upload");
  }

  template <class T>
  View<T> device(View<T> v) const {
    if (!v.data) return v;
    if (v.size == 0) {
      empty_.push_back(std::make_shared<DeviceBuffer<unsigned char>>(sizeof(T), "DeviceStage"));
      return View<T>(reinterpret_cast<T*>(empty_.back()->get()), 0, v.stride);
    }
    const auto* lo = reinterpret_cast<const unsigned char*>(v.data);
    for (const Range& r : ranges_)
      if (lo >= r.lo && lo < r.hi) return View<T>(reinterpret_cast<T*>(r.device->get() + (lo - r.lo)), v.size, v.stride);
    ADD_FAILURE() << "DeviceStage: a view that was not added";
    return v;
  }
  template <class T>
  std::vector<View<T>> device(Span<View<T>> views) const {
    std::vector<View<T>> out;
    for (const auto& v : views) out.push_back(device(v));
    return out;
  }
  template <class T, std::size_t D>
  std::array<View<T>, D> device(const std::array<View<T>, D>& views) const {
    std::array<View<T>, D> out;
    for (std::size_t d = 0; d < D; ++d) out[d] = device(views[d]);
    return out;
  }

  void download() const {
    cuda::check(cudaDeviceSynchronize(), "DeviceStage");
    for (const Range& r : ranges_)
      if (r.written)
        cuda::check(cudaMemcpy(const_cast<unsigned char*>(r.lo), r.device->get(), static_cast<std::size_t>(r.hi - r.lo),
                               cudaMemcpyDeviceToHost),
                    "DeviceStage download");
  }

 private:
  struct Range {
    const unsigned char* lo;
    const unsigned char* hi;
    bool written;
    std::shared_ptr<DeviceBuffer<unsigned char>> device;
  };
  std::vector<Range> ranges_;
  mutable std::vector<std::shared_ptr<DeviceBuffer<unsigned char>>> empty_;
};
#endif

// Calls f with the arguments as the plan takes them: as given (host memory), or staged
// through device memory and copied back, whether f returns or throws.
template <class F, class... Args>
void with_memory(bool on_device, F&& f, const Args&... args) {
  if (!on_device) return f(args...);
#if defined(PMKIT_WITH_CUDA)
  DeviceStage stage;
  (stage.add(args), ...);
  stage.upload();
  try {
    f(stage.device(args)...);
  } catch (...) {
    stage.download();
    throw;
  }
  stage.download();
#else
  ADD_FAILURE() << "device memory in a build without CUDA";
#endif
}

template <class T, int D>
class MatrixPlan {
 public:
  using Positions = typename Plan<T, D>::Positions;

  MatrixPlan(const Grid<D>& grid, const Kernel& kernel, const Options& options)
      : plan_(grid, kernel, options), device_(options.backend == Backend::Cuda && !options.host_arrays) {}
  MatrixPlan(const Grid<D>& grid, const Kernel& kernel, const Variant& variant)
      : MatrixPlan(grid, kernel, options_of<Options>(variant)) {}

  // On device memory the plan checks positions on the device and reports a rejection
  // later; synchronize brings it to the call, as on the host, while the staged arrays
  // it names still exist.
  void set_points(const Positions& p) {
    with_memory(device_, [&](const Positions& x) {
      plan_.set_points(x);
      if (device_) plan_.synchronize();
    }, p);
  }
  void update_points(const Positions& p) {
    with_memory(device_, [&](const Positions& x) {
      plan_.update_points(x);
      if (device_) plan_.synchronize();
    }, p);
  }
  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode = Accumulate::Overwrite) {
    with_memory(device_, [&](Span<View<const T>> q, Span<View<T>> m) { plan_.spread(q, m, mode); }, props, meshes);
  }
  void interp(Span<View<const T>> meshes, Span<View<T>> values) {
    with_memory(device_, [&](Span<View<const T>> m, Span<View<T>> v) { plan_.interp(m, v); }, meshes, values);
  }
  void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) {
    with_memory(device_, [&](Span<View<const T>> m, Span<View<T>> g) { plan_.interp_gradient(m, g); }, meshes,
                gradients);
  }
  void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode = Accumulate::Overwrite) {
    with_memory(device_, [&](Span<View<const T>> v, Span<View<T>> m) { plan_.spread_gradient(v, m, mode); }, vectors,
                meshes);
  }
  void binned_order(View<std::uint32_t> order) const {
    with_memory(device_, [&](View<std::uint32_t> o) { plan_.binned_order(o); }, order);
  }
  void binned_positions(const std::array<View<T>, D>& offsets) const {
    with_memory(device_, [&](const std::array<View<T>, D>& o) { plan_.binned_positions(o); }, offsets);
  }
  void permute_to_binned(Span<View<T>> arrays) {
    with_memory(device_, [&](Span<View<T>> a) { plan_.permute_to_binned(a); }, arrays);
  }
  void permute_to_binned(Span<View<const T>> from, Span<View<T>> to) {
    with_memory(device_, [&](Span<View<const T>> f, Span<View<T>> t) { plan_.permute_to_binned(f, t); }, from, to);
  }

  const Grid<D>& grid() const { return plan_.grid(); }
  const Kernel& kernel() const { return plan_.kernel(); }
  const Options& options() const { return plan_.options(); }
  std::array<std::int64_t, D> mesh_shape() const { return plan_.mesh_shape(); }
  std::int64_t mesh_size() const { return plan_.mesh_size(); }
  bool has_points() const { return plan_.has_points(); }
  std::size_t num_away() const { return plan_.num_away(); }
  std::size_t num_points() const { return plan_.num_points(); }
  std::string spread_method_name() const { return plan_.spread_method_name(); }
  // Whether the calls stage their arrays through device memory.
  bool device_memory() const { return device_; }
  Plan<T, D>& plan() { return plan_; }

 private:
  Plan<T, D> plan_;
  bool device_;
};

}  // namespace pmkit::test
