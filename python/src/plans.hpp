#pragma once
// The mesh plan as the extension module holds it: pmkit::Plan<T, D> with the Python-side
// arguments (lists of arrays) turned into views, run on the caller's stream.
#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "pmkit/plan.hpp"
#include "streams.hpp"

namespace pmkit::python {

Placement placement(Backend backend, bool host_arrays, int device);

// The plan's mesh shape in C order (the last axis is x): the shape of a mesh array.
template <int D>
std::vector<std::int64_t> c_order(const std::array<std::int64_t, D>& shape) {
  return std::vector<std::int64_t>(shape.rbegin(), shape.rend());
}

// The caller's current CUDA stream, or none (streams.hpp).
using Stream = std::optional<std::uintptr_t>;

template <class T, int D>
class MeshPlan {
 public:
  MeshPlan(const Grid<D>& grid, const Kernel& kernel, const Options& options)
      : plan_(grid, kernel, options),
        where_(placement(options.backend, options.host_arrays, options.device)),
        mesh_shape_(c_order<D>(plan_.mesh_shape())) {}

  void set_points(const nb::list& positions, Stream stream, bool update);
  void spread(const nb::list& props, const nb::list& meshes, bool add, Stream stream);
  void interp(const nb::list& meshes, const nb::list& values, Stream stream);
  void interp_gradient(const nb::list& meshes, const nb::list& gradients, Stream stream);
  void spread_gradient(const nb::list& vectors, const nb::list& meshes, bool add, Stream stream);
  void binned_order(const nb::list& order, Stream stream);
  void binned_positions(const nb::list& positions, Stream stream);
  // Waits for the plan's stream and reports a position the device rejected.
  void synchronize() const {
    nb::gil_scoped_release release;
    plan_.synchronize();
  }
  // Seconds per call of `calls` calls of `method` ("spread", "interp" or
  // "interp_gradient") from C++ on views made once, waiting for the plan's stream at the
  // end: the same call as from Python without Python, for bench/python_bench.py.
  double time_calls(const std::string& method, const nb::list& inputs, const nb::list& outputs, int calls);

  const Plan<T, D>& plan() const { return plan_; }
  const Placement& where() const { return where_; }
  const std::vector<std::int64_t>& mesh_shape() const { return mesh_shape_; }
  // The plan on the caller's stream (streams.hpp).
  void follow(Stream stream) { follow_stream(plan_, where_.device, stream); }

 private:
  // One call from input arrays to output arrays: their views, the plan on the caller's
  // stream, the GIL released around call(inputs, outputs).
  template <class Call>
  void run(const nb::list& inputs, const char* input_name, Layout input_layout, const nb::list& outputs,
           Layout output_layout, Stream stream, Call call);

  Plan<T, D> plan_;
  Placement where_;
  std::vector<std::int64_t> mesh_shape_;
};

// The D position views of one argument: an (N, D) array or D arrays of N.
template <class E, int D>
std::array<View<E>, D> position_views(const Views<E>& views, const char* what) {
  require_count(what, views.size(), D, "coordinate arrays",
                "one per dimension: an (N, D) array or D arrays of N");
  std::array<View<E>, D> result;
  for (int d = 0; d < D; ++d) result[d] = views[d];
  return result;
}

// set_points, or update_points where `update`, of a plan (Plan or PmePlan) on the
// positions of a Python argument, on the caller's stream.
template <class T, int D, class AnyPlan>
void bind_positions(AnyPlan& plan, const nb::list& positions, const Placement& where, Stream stream, bool update) {
  const Views<const T> views(positions, "positions", Layout::Components, where);
  const auto xyz = position_views<const T, D>(views, "positions");
  follow_stream(plan, where.device, stream);
  nb::gil_scoped_release release;
  if (update)
    plan.update_points(xyz);
  else
    plan.set_points(xyz);
}

void bind_plans(nb::module_& m);
void bind_pair_plans(nb::module_& m);
void bind_ffts(nb::module_& m);
void bind_distributed_plans(nb::module_& m);
void bind_pme_plans(nb::module_& m);

}  // namespace pmkit::python
