// The mesh plans of the extension module: one class per dtype and dimension
// (_pmkit.Plan_float32_3d, ...), which the Python class pmkit.Plan picks from.
#include "plans.hpp"

#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <string>

namespace pmkit::python {

Placement placement(Backend backend, bool host_arrays, int device) {
  Placement where;
  where.device = backend == Backend::Cuda && !host_arrays;
  where.device_id = device;
  return where;
}

template <class T, int D>
void MeshPlan<T, D>::set_points(const nb::list& positions, Stream stream, bool update) {
  bind_positions<T, D>(plan_, positions, where_, stream, update);
}

template <class T, int D>
template <class Call>
void MeshPlan<T, D>::run(const nb::list& inputs, const char* input_name, Layout input_layout, const nb::list& outputs,
                         Layout output_layout, Stream stream, Call call) {
  const Views<const T> in(inputs, input_name, input_layout, where_, mesh_shape_);
  const Views<T> out(outputs, "out", output_layout, where_, mesh_shape_);
  follow(stream);
  nb::gil_scoped_release release;
  call(in.span(), out.span());
}

template <class T, int D>
void MeshPlan<T, D>::spread(const nb::list& props, const nb::list& meshes, bool add, Stream stream) {
  run(props, "props", Layout::Particles, meshes, Layout::Mesh, stream, [&](auto in, auto out) {
    plan_.spread(in, out, add ? Accumulate::Add : Accumulate::Overwrite);
  });
}

template <class T, int D>
void MeshPlan<T, D>::interp(const nb::list& meshes, const nb::list& values, Stream stream) {
  run(meshes, "meshes", Layout::Mesh, values, Layout::Particles, stream,
      [&](auto in, auto out) { plan_.interp(in, out); });
}

template <class T, int D>
void MeshPlan<T, D>::interp_gradient(const nb::list& meshes, const nb::list& gradients, Stream stream) {
  run(meshes, "meshes", Layout::Mesh, gradients, Layout::Components, stream,
      [&](auto in, auto out) { plan_.interp_gradient(in, out); });
}

template <class T, int D>
void MeshPlan<T, D>::spread_gradient(const nb::list& vectors, const nb::list& meshes, bool add,
                                     Stream stream) {
  run(vectors, "vectors", Layout::Components, meshes, Layout::Mesh, stream, [&](auto in, auto out) {
    plan_.spread_gradient(in, out, add ? Accumulate::Add : Accumulate::Overwrite);
  });
}

template <class T, int D>
void MeshPlan<T, D>::binned_order(const nb::list& order_out, Stream stream) {
  const Views<std::uint32_t> out(order_out, "out", Layout::Particles, where_);
  require_count("out", out.size(), 1, "arrays", "one (N,) array of uint32");
  follow(stream);
  nb::gil_scoped_release release;
  plan_.binned_order(out[0]);
}

template <class T, int D>
void MeshPlan<T, D>::binned_positions(const nb::list& positions, Stream stream) {
  const Views<T> out(positions, "out", Layout::Components, where_);
  const auto xyz = position_views<T, D>(out, "out");
  follow(stream);
  nb::gil_scoped_release release;
  plan_.binned_positions(xyz);
}

template <class T, int D>
double MeshPlan<T, D>::time_calls(const std::string& method, const nb::list& inputs, const nb::list& outputs,
                                  int calls) {
  const bool spread = method == "spread", gradient = method == "interp_gradient";
  if (!spread && !gradient && method != "interp")
    throw nb::value_error(("time_calls: method '" + method + "'; expected spread, interp or interp_gradient").c_str());
  const Views<const T> in(inputs, "inputs", spread ? Layout::Particles : Layout::Mesh, where_, mesh_shape_);
  const Views<T> out(outputs, "out", spread ? Layout::Mesh : gradient ? Layout::Components : Layout::Particles, where_,
                     mesh_shape_);
  nb::gil_scoped_release release;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    if (spread)
      plan_.spread(in.span(), out.span());
    else if (gradient)
      plan_.interp_gradient(in.span(), out.span());
    else
      plan_.interp(in.span(), out.span());
  }
  plan_.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
}

namespace {

using namespace nb::literals;

template <class T, int D>
void bind_plan(nb::module_& m, const char* name) {
  using P = MeshPlan<T, D>;
  nb::class_<P>(m, name, "pmkit::Plan for one dtype and dimension; use pmkit.Plan.")
      .def(nb::init<const Grid<D>&, const Kernel&, const Options&>(), "grid"_a, "kernel"_a, "options"_a)
      .def("set_points", [](P& p, const nb::list& x, Stream s) { p.set_points(x, s, false); },
           "positions"_a, "stream"_a.none())
      .def("update_points", [](P& p, const nb::list& x, Stream s) { p.set_points(x, s, true); },
           "positions"_a, "stream"_a.none())
      .def("spread", &P::spread, "props"_a, "out"_a, "add"_a, "stream"_a.none())
      .def("interp", &P::interp, "meshes"_a, "out"_a, "stream"_a.none())
      .def("interp_gradient", &P::interp_gradient, "meshes"_a, "out"_a, "stream"_a.none())
      .def("spread_gradient", &P::spread_gradient, "vectors"_a, "out"_a, "add"_a, "stream"_a.none())
      .def("binned_order", &P::binned_order, "out"_a, "stream"_a.none())
      .def("binned_positions", &P::binned_positions, "out"_a, "stream"_a.none())
      .def("synchronize", &P::synchronize, "Waits for the work queued on the plan's stream.")
      .def("time_calls", &P::time_calls, "method"_a, "inputs"_a, "out"_a, "calls"_a,
           "Seconds per call of `method` run `calls` times from C++ (for benchmarks).")
      .def_prop_ro("mesh_shape", [](const P& p) { return p.mesh_shape(); })
      .def_prop_ro("mesh_size", [](const P& p) { return p.plan().mesh_size(); })
      .def_prop_ro("num_points", [](const P& p) { return p.plan().num_points(); })
      .def_prop_ro("has_points", [](const P& p) { return p.plan().has_points(); })
      .def_prop_ro("num_away", [](const P& p) { return p.plan().num_away(); })
      .def_prop_ro("kernel", [](const P& p) { return p.plan().kernel(); })
      .def_prop_ro("options", [](const P& p) { return p.plan().options(); })
      .def_prop_ro("spread_method", [](const P& p) { return p.plan().spread_method_name(); })
      .def_prop_ro("last_timings", [](const P& p) { return p.plan().last_timings(); });
}

}  // namespace

void bind_plans(nb::module_& m) {
  bind_plan<float, 2>(m, "Plan_float32_2d");
  bind_plan<float, 3>(m, "Plan_float32_3d");
  bind_plan<double, 2>(m, "Plan_float64_2d");
  bind_plan<double, 3>(m, "Plan_float64_3d");
}

template class MeshPlan<float, 2>;
template class MeshPlan<float, 3>;
template class MeshPlan<double, 2>;
template class MeshPlan<double, 3>;

}  // namespace pmkit::python
