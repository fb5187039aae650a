// The pair plans of the extension module: one class per dtype and dimension
// (_pmkit.PairPlan_float32_3d, ...) with the built-in kernels; pmkit.PairPlan picks one.
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "pmkit/pairs.hpp"
#include "plans.hpp"

namespace pmkit::python {

namespace {

using namespace nb::literals;

template <class T, int D>
class PairPlanBinding {
 public:
  PairPlanBinding(const Box<D>& box, double cutoff, const PairOptions& options)
      : plan_(box, cutoff, options), where_(placement(options.backend, false, options.device)) {}

  void set_points(const nb::list& positions, Stream stream) {
    const Views<const T> views(positions, "positions", Layout::Components, where_);
    const auto xyz = position_views<const T, D>(views, "positions");
    follow_stream(plan_, where_.device, stream);
    nb::gil_scoped_release release;
    plan_.set_points(xyz);
  }
  void set_points_of(const MeshPlan<T, D>& mesh, Stream stream) {
    follow_stream(plan_, where_.device, stream);
    nb::gil_scoped_release release;
    plan_.set_points(mesh.plan());
  }
  template <class Kernel>
  void compute(const Kernel& kernel, const nb::list& outputs, Stream stream) {
    const Views<T> out(outputs, "out", Layout::Components, where_);
    follow_stream(plan_, where_.device, stream);
    nb::gil_scoped_release release;
    plan_.compute(kernel, {}, out.span());
  }
  // Waits for the plan's stream and reports a position the device rejected.
  void synchronize() {
    nb::gil_scoped_release release;
    plan_.synchronize();
  }
  const PairPlan<T, D>& plan() const { return plan_; }

 private:
  PairPlan<T, D> plan_;
  Placement where_;
};

template <class T, int D>
void bind_pair_plan(nb::module_& m, const char* name) {
  using P = PairPlanBinding<T, D>;
  nb::class_<P>(m, name, "pmkit::PairPlan for one dtype and dimension; use pmkit.PairPlan.")
      .def(nb::init<const Box<D>&, double, const PairOptions&>(), "box"_a, "cutoff"_a, "options"_a)
      .def("set_points", &P::set_points, "positions"_a, "stream"_a.none())
      .def("set_points_of", &P::set_points_of, "mesh_plan"_a, "stream"_a.none())
      .def("lennard_jones",
           [](P& p, double epsilon, double sigma, double cutoff, double softening, const nb::list& out,
              Stream stream) {
             pair_kernels::LennardJones<D> kernel;
             kernel.epsilon = epsilon;
             kernel.sigma = sigma;
             kernel.cutoff = cutoff;
             kernel.softening = softening;
             p.compute(kernel, out, stream);
           },
           "epsilon"_a, "sigma"_a, "cutoff"_a, "softening"_a, "out"_a, "stream"_a.none())
      .def("neighbour_count",
           [](P& p, const nb::list& out, Stream stream) {
             p.compute(pair_kernels::NeighbourCount{}, out, stream);
           },
           "out"_a, "stream"_a.none())
      .def("synchronize", &P::synchronize, "Waits for the work queued on the plan's stream.")
      .def_prop_ro("num_points", [](const P& p) { return p.plan().num_points(); })
      .def_prop_ro("has_points", [](const P& p) { return p.plan().has_points(); })
      .def_prop_ro("cells", [](const P& p) { return p.plan().cells(); })
      .def_prop_ro("cutoff", [](const P& p) { return p.plan().cutoff(); })
      .def_prop_ro("options", [](const P& p) { return p.plan().options(); })
      .def_prop_ro("last_method", [](const P& p) { return std::string(to_string(p.plan().last_method())); })
      .def_prop_ro("last_timings", [](const P& p) { return p.plan().last_timings(); });
}

}  // namespace

void bind_pair_plans(nb::module_& m) {
  bind_pair_plan<float, 2>(m, "PairPlan_float32_2d");
  bind_pair_plan<float, 3>(m, "PairPlan_float32_3d");
  bind_pair_plan<double, 2>(m, "PairPlan_float64_2d");
  bind_pair_plan<double, 3>(m, "PairPlan_float64_3d");
}

}  // namespace pmkit::python
