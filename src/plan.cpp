// The Plan front end: argument checks common to all backends, then the backend call.
#include "core/arguments.hpp"
#include "core/backend.hpp"
#include "core/make_backend.hpp"
#include "pmkit/plan.hpp"

#include <vector>

namespace pmkit {

using detail::check_particle_arrays;
using detail::check_positions;
using detail::fail;
using detail::require_apart;

template <class T, int D>
Plan<T, D>::Plan(const Grid<D>& grid, Kernel kernel, Options options)
    : grid_(grid), kernel_(kernel), options_(options) {
  validate(grid, kernel.ghost_width());
  if (!(options.max_away_fraction >= 0.0 && options.max_away_fraction <= 1.0))
    fail(ErrorCode::InvalidArgument, "options.max_away_fraction = ", options.max_away_fraction,
         ": a fraction of the particles, in [0, 1]");
  backend_ = detail::make_backend(
      options, "options", [&] { return detail::make_cpu_backend<T, D>(grid, kernel, options); },
      [&] { return detail::make_cuda_backend<T, D>(grid, kernel, options); });
}

template <class T, int D>
template <class F>
void Plan<T, D>::call_backend(F&& call) const {
  try {
    call();
  } catch (...) {
    if (!backend_->has_binning()) has_points_ = false;
    throw;
  }
}

template <class T, int D>
void Plan<T, D>::raise_device_errors(bool wait) const {
  call_backend([&] { backend_->raise_device_errors(wait); });
}

template <class T, int D>
void Plan<T, D>::synchronize() const {
  raise_device_errors(true);
}

template <class T, int D>
Plan<T, D>::~Plan() = default;
template <class T, int D>
Plan<T, D>::Plan(Plan&&) noexcept = default;
template <class T, int D>
Plan<T, D>& Plan<T, D>::operator=(Plan&&) noexcept = default;


template <class T, int D>
void Plan<T, D>::set_points(const Positions& positions) {
  raise_device_errors(false);
  const std::size_t n = check_positions<T, D>(positions);
  call_backend([&] { backend_->set_points(n, positions); });
  num_points_ = n;
  has_points_ = true;
}

template <class T, int D>
void Plan<T, D>::update_points(const Positions& positions) {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "update_points called before set_points");
  const std::size_t n = check_positions<T, D>(positions);
  if (n != num_points_)
    fail(ErrorCode::SizeMismatch, "update_points got ", n, " particles but the plan has ", num_points_,
         ": update_points moves the same particles; use set_points for a new set");
  call_backend([&] { backend_->update_points(n, positions); });
}

template <class T, int D>
std::size_t Plan<T, D>::num_away() const {
  return backend_->num_away();
}

template <class T, int D>
bool Plan<T, D>::binning_kept() const {
  return backend_->binning_kept();
}


namespace {
template <class M>
void check_mesh_arrays(const char* what, const Span<M>& arrays, std::int64_t size) {
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (static_cast<std::int64_t>(arrays[i].size) != size)
      fail(ErrorCode::SizeMismatch, what, "[", i, "].size = ", arrays[i].size,
           " but the mesh has ", size, " nodes (Plan::mesh_size)");
    if (arrays[i].data == nullptr) fail(ErrorCode::InvalidArgument, what, "[", i, "].data is null");
    if (arrays[i].stride != 1)
      fail(ErrorCode::InvalidArgument, what, "[", i, "].stride = ", arrays[i].stride,
           ": mesh arrays must be contiguous");
  }
}
}  // namespace

template <class T, int D>
void Plan<T, D>::binned_order(View<std::uint32_t> order) const {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "binned_order called before set_points");
  check_particle_arrays("order", Span<View<std::uint32_t>>(&order, 1), num_points_);
  if (num_points_ == 0) return;
  backend_->binned_order(order);
}

template <class T, int D>
void Plan<T, D>::permute_to_binned(Span<View<T>> arrays) {
  std::vector<View<const T>> from(arrays.begin(), arrays.end());
  permute_to_binned(Span<View<const T>>(from), arrays);
}

template <class T, int D>
void Plan<T, D>::permute_to_binned(Span<View<const T>> from, Span<View<T>> to) {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "permute_to_binned called before set_points");
  if (from.size() != to.size())
    fail(ErrorCode::SizeMismatch, "permute_to_binned got ", from.size(), " arrays to read and ", to.size(),
         " to write");
  check_particle_arrays("arrays", to, num_points_);
  check_particle_arrays("from", from, num_points_);
  for (std::size_t i = 0; i < to.size() && num_points_ > 0; ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (to[i].data == to[j].data)
        fail(ErrorCode::InvalidArgument, "arrays[", i, "] and arrays[", j,
             "] start at the same element: each array is permuted once");
  for (std::size_t i = 0; i < to.size() && num_points_ > 0; ++i)
    for (std::size_t j = 0; j < to.size(); ++j)
      if (j != i && static_cast<const T*>(to[i].data) == from[j].data)
        fail(ErrorCode::InvalidArgument, "arrays[", i, "] starts where from[", j,
             "] does: an output would overwrite another array's input");
  if (num_points_ > 0 && !to.empty()) backend_->permute_to_binned(from, to);
  // The binning's order refers to the arrays as they were.
  has_points_ = false;
}

template <class T, int D>
void Plan<T, D>::adopt_binned_order() {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "adopt_binned_order called before set_points");
  if (num_points_ > 0) call_backend([&] { backend_->adopt_binned_order(); });
}

template <class T, int D>
void Plan<T, D>::binned_positions(const std::array<View<T>, D>& offsets) const {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "binned_positions called before set_points");
  check_particle_arrays("positions", Span<View<T>>(offsets.data(), D), num_points_);
  if (num_points_ == 0) return;
  backend_->binned_positions(offsets);
}

template <class T, int D>
void Plan<T, D>::spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "spread called before set_points");
  if (props.size() != meshes.size())
    fail(ErrorCode::SizeMismatch, "spread got ", props.size(), " properties but ", meshes.size(),
         " meshes: one mesh per property");
  check_particle_arrays("props", props, num_points_);
  check_mesh_arrays("meshes", meshes, mesh_size());
  require_apart("spread", "props", props, "meshes", meshes, static_cast<std::size_t>(mesh_size()));
  if (props.empty()) return;
  backend_->spread(props, meshes, mode);
}

template <class T, int D>
void Plan<T, D>::interp(Span<View<const T>> meshes, Span<View<T>> values) {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "interp called before set_points");
  if (meshes.size() != values.size())
    fail(ErrorCode::SizeMismatch, "interp got ", meshes.size(), " meshes but ", values.size(),
         " output arrays: one output per mesh");
  check_mesh_arrays("meshes", meshes, mesh_size());
  check_particle_arrays("values", values, num_points_);
  require_apart("interp", "values", values, "meshes", meshes, static_cast<std::size_t>(mesh_size()));
  if (meshes.empty() || num_points_ == 0) return;
  backend_->interp(meshes, values);
}

template <class T, int D>
void Plan<T, D>::interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "interp_gradient called before set_points");
  if (gradients.size() != D * meshes.size())
    fail(ErrorCode::SizeMismatch, "interp_gradient got ", meshes.size(), " meshes but ", gradients.size(),
         " output arrays: ", D, " per mesh (gradients[", D, "*i + d] is component d for meshes[i])");
  check_mesh_arrays("meshes", meshes, mesh_size());
  check_particle_arrays("gradients", gradients, num_points_);
  require_apart("interp_gradient", "gradients", gradients, "meshes", meshes, static_cast<std::size_t>(mesh_size()));
  if (meshes.empty() || num_points_ == 0) return;
  backend_->interp_gradient(meshes, gradients);
}

template <class T, int D>
void Plan<T, D>::spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) {
  raise_device_errors(false);
  if (!has_points_) fail(ErrorCode::NotReady, "spread_gradient called before set_points");
  if (vectors.size() != D * meshes.size())
    fail(ErrorCode::SizeMismatch, "spread_gradient got ", vectors.size(), " vector components but ", meshes.size(),
         " meshes: ", D, " per mesh (vectors[", D, "*i + d] is component d for meshes[i])");
  check_particle_arrays("vectors", vectors, num_points_);
  check_mesh_arrays("meshes", meshes, mesh_size());
  require_apart("spread_gradient", "vectors", vectors, "meshes", meshes, static_cast<std::size_t>(mesh_size()));
  if (meshes.empty()) return;
  backend_->spread_gradient(vectors, meshes, mode);
}

template <class T, int D>
std::string Plan<T, D>::spread_method_name() const {
  return backend_->spread_method_name();
}

template <class T, int D>
Timings Plan<T, D>::last_timings() const {
  return backend_->last_timings();
}

template <class T, int D>
void Plan<T, D>::set_stream(StreamHandle stream) {
  backend_->set_stream(stream);
  options_.stream = stream;
}

template class Plan<float, 2>;
template class Plan<float, 3>;
template class Plan<double, 2>;
template class Plan<double, 3>;

}  // namespace pmkit
