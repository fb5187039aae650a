#pragma once
// The interface every backend implements behind pmkit::Plan. The Plan front end has
// already checked lengths, strides and state when these are called.
#include <array>
#include <memory>
#include <string>

#include "core/split.hpp"
#include "pmkit/plan.hpp"

namespace pmkit::detail {

template <class T, int D>
class Backend {
 public:
  virtual ~Backend() = default;
  // Validates positions (finite, inside bounded axes) and bins them. Throws and keeps
  // the previous binning on error (CUDA on device arrays: raise_device_errors reports it).
  virtual void set_points(std::size_t n, const std::array<View<const T>, D>& positions) = 0;
  // The same n particles at new positions. By default a full binning.
  virtual void update_points(std::size_t n, const std::array<View<const T>, D>& positions) {
    set_points(n, positions);
  }
  virtual std::size_t num_away() const { return 0; }
  // Whether the last update_points kept the last full binning (Plan::binning_kept).
  virtual bool binning_kept() const { return false; }
  virtual void binned_order(View<std::uint32_t> order) const = 0;
  // to[i][k] = from[i][order[k]] for each array (Plan::permute_to_binned); in place where
  // to[i] and from[i] start at the same element.
  virtual void permute_to_binned(Span<View<const T>> from, Span<View<T>> to) = 0;
  // The caller's particles have been put in the binned order of the last full binning
  // (x'[k] = x[order[k]]): the binning takes them as they are now, its order becomes the
  // identity (Plan::adopt_binned_order), and nothing is binned again.
  virtual void adopt_binned_order() = 0;
  // Each particle's position relative to the grid origin, as binned (Plan::binned_positions).
  virtual void binned_positions(const std::array<View<T>, D>& offsets) const = 0;
  virtual void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) = 0;
  virtual void interp(Span<View<const T>> meshes, Span<View<T>> values) = 0;
  // gradients[D*i + d]: component d for meshes[i] (Plan::interp_gradient).
  virtual void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) = 0;
  // vectors[D*i + d]: component d of the vectors spread onto meshes[i] (Plan::spread_gradient).
  virtual void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) = 0;
  virtual std::string spread_method_name() const = 0;
  virtual Timings last_timings() const { return {}; }
  // CUDA: later calls run on `stream`, after the work queued so far on the previous one
  // (Plan::set_stream). The CPU backend has no stream.
  virtual void set_stream(StreamHandle) {}
  // Throws the error of a position an earlier call rejected on the device: without
  // `wait`, of the calls whose status has come back; with it, of every call queued
  // (Plan::synchronize). The CPU backend checks before its calls return.
  virtual void raise_device_errors(bool /*wait*/) {}
  // False once a rejection has been reported, until the next set_points.
  virtual bool has_binning() const { return true; }
  // The split of the particles by `interior` (split.hpp), kept for every later binning;
  // returns whether this backend runs parts. Where it returns false, select is not called.
  virtual bool set_interior(const NodeBox<D>& /*interior*/) { return false; }
  // The part of the particles that later spread, interp and gradient calls take (All
  // until called). spread's Overwrite then clears the whole mesh, whatever the part. A
  // split call is its two parts in a row, with the same arguments: spread and
  // spread_gradient the boundary part then the interior one, interp and interp_gradient
  // the interior part then the boundary one (the ghost values arrive in between); a
  // backend may leave work common to both parts to the second (CUDA: interp's unbinning).
  virtual void select(Part /*part*/) {}
};

// The plan's entry points that only the library calls: its backend, for a distributed
// plan's split (distributed_plan.cpp); the adoption of the particles' binned order, for
// the particle step's full re-bin (particles.cpp).
template <class T, int D>
struct PlanAccess {
  static Backend<T, D>& backend(Plan<T, D>& plan) { return *plan.backend_; }
  static void adopt_binned_order(Plan<T, D>& plan) { plan.adopt_binned_order(); }
};

template <class T, int D>
std::unique_ptr<Backend<T, D>> make_cpu_backend(const Grid<D>& grid, const Kernel& kernel,
                                                const Options& options);
template <class T, int D>
std::unique_ptr<Backend<T, D>> make_cuda_backend(const Grid<D>& grid, const Kernel& kernel,
                                                 const Options& options);

}  // namespace pmkit::detail
