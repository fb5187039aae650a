// The PME plans of the extension module (_pmkit.PmePlan_float32, _pmkit.PmePlan_float64),
// PmeParameters and PmeOptions; pmkit.PmePlan picks a plan by dtype.
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <sstream>

#include "pmkit/pme.hpp"
#include "plans.hpp"

namespace pmkit::python {

namespace {

using namespace nb::literals;

template <class T>
class PmePlanBinding {
 public:
  PmePlanBinding(const std::array<double, 3>& box, const PmeParameters& params, const PmeOptions& options)
      : plan_(box, params, options), where_(placement(options.backend, false, options.device)) {}

  void set_points(const nb::list& positions, Stream stream, bool update) {
    bind_positions<T, 3>(plan_, positions, where_, stream, update);
  }

  // charges: one (N,) array; forces: one (N, 3) array or three of N; energy: none or one
  // (1,) float64 array; potential: none or one (N,) array; virial: none or one (6,)
  // float64 array.
  void compute(const nb::list& charges, const nb::list& forces, const nb::list& energy, const nb::list& potential,
               const nb::list& virial, bool reciprocal_only, Stream stream) {
    if (!plan_.has_points()) throw Error(ErrorCode::NotReady, "PmePlan::compute called before set_points");
    const Views<const T> q(charges, "charges", Layout::Particles, where_);
    require_count("charges", q.size(), 1, "arrays", "one (N,) array");
    const Views<T> f(forces, "forces", Layout::Components, where_);
    const auto fxyz = position_views<T, 3>(f, "forces");
    const Views<double> e(energy, "energy", Layout::Particles, where_);
    const Views<T> phi(potential, "potential", Layout::Particles, where_);
    const Views<double> w(virial, "virial", Layout::Particles, where_);
    const View<double> e_view = e.size() ? e[0] : View<double>();
    const View<T> phi_view = phi.size() ? phi[0] : View<T>();
    const View<double> w_view = w.size() ? w[0] : View<double>();
    follow_stream(plan_, where_.device, stream);
    nb::gil_scoped_release release;
    if (reciprocal_only)
      plan_.compute_reciprocal(q[0], fxyz, e_view, phi_view, w_view);
    else
      plan_.compute(q[0], fxyz, e_view, phi_view, w_view);
  }

  // set_points, then compute: one call from Python where a caller bins new positions for
  // every compute (pmkit.torch).
  void step(const nb::list& positions, const nb::list& charges, const nb::list& forces, const nb::list& energy,
            const nb::list& potential, const nb::list& virial, bool reciprocal_only, Stream stream) {
    set_points(positions, stream, false);
    compute(charges, forces, energy, potential, virial, reciprocal_only, stream);
  }

  // charges: one (N,) array; weights: one (N, 3) array or three of N; out: one (N,) array.
  void charge_gradient_of_forces(const nb::list& charges, const nb::list& weights, const nb::list& out,
                                 bool reciprocal_only, Stream stream) {
    if (!plan_.has_points())
      throw Error(ErrorCode::NotReady, "PmePlan::charge_gradient_of_forces called before set_points");
    const Views<const T> q(charges, "charges", Layout::Particles, where_);
    require_count("charges", q.size(), 1, "arrays", "one (N,) array");
    const Views<const T> w(weights, "weights", Layout::Components, where_);
    const auto wxyz = position_views<const T, 3>(w, "weights");
    const Views<T> result(out, "out", Layout::Particles, where_);
    require_count("out", result.size(), 1, "arrays", "one (N,) array");
    follow_stream(plan_, where_.device, stream);
    nb::gil_scoped_release release;
    plan_.charge_gradient_of_forces(q[0], wxyz, result[0], reciprocal_only);
  }

  void synchronize() {
    nb::gil_scoped_release release;
    plan_.synchronize();
  }
  const PmePlan<T>& plan() const { return plan_; }

 private:
  PmePlan<T> plan_;
  Placement where_;
};

template <class T>
void bind_pme_plan(nb::module_& m, const char* name) {
  using P = PmePlanBinding<T>;
  nb::class_<P>(m, name, "pmkit::PmePlan for one dtype; use pmkit.PmePlan.")
      .def(nb::init<const std::array<double, 3>&, const PmeParameters&, const PmeOptions&>(), "box"_a,
           "parameters"_a, "options"_a)
      .def("set_points", [](P& p, const nb::list& x, Stream s) { p.set_points(x, s, false); }, "positions"_a,
           "stream"_a.none())
      .def("update_points", [](P& p, const nb::list& x, Stream s) { p.set_points(x, s, true); }, "positions"_a,
           "stream"_a.none())
      .def("compute", &P::compute, "charges"_a, "forces"_a, "energy"_a, "potential"_a, "virial"_a,
           "reciprocal_only"_a, "stream"_a.none())
      .def("step", &P::step, "positions"_a, "charges"_a, "forces"_a, "energy"_a, "potential"_a, "virial"_a,
           "reciprocal_only"_a, "stream"_a.none(), "set_points, then compute.")
      .def("charge_gradient_of_forces", &P::charge_gradient_of_forces, "charges"_a, "weights"_a, "out"_a,
           "reciprocal_only"_a, "stream"_a.none())
      .def("synchronize", &P::synchronize, "Waits for the work queued on the plan's stream.")
      .def_prop_ro("num_points", [](const P& p) { return p.plan().num_points(); })
      .def_prop_ro("has_points", [](const P& p) { return p.plan().has_points(); })
      .def_prop_ro("box", [](const P& p) { return p.plan().box(); })
      .def_prop_ro("parameters", [](const P& p) { return p.plan().parameters(); })
      .def_prop_ro("options", [](const P& p) { return p.plan().options(); });
}

std::string describe(const PmeParameters& p) {
  std::ostringstream s;
  s.precision(17);
  s << "pmkit.PmeParameters(alpha=" << p.alpha << ", mesh=(" << p.mesh[0] << ", " << p.mesh[1] << ", " << p.mesh[2]
    << "), order=" << p.order << ", cutoff=" << p.cutoff << ")";
  return s.str();
}

}  // namespace

void bind_pme_plans(nb::module_& m) {
  nb::class_<PmeParameters>(m, "PmeParameters",
                            "pmkit::PmeParameters: the Ewald splitting alpha (1 / length), the mesh (nodes per axis, "
                            "x first), the B-spline order (4 to 8) and the real-space cutoff.")
      .def(nb::init<>())
      .def(
          "__init__",
          [](PmeParameters* p, double alpha, const std::array<std::int64_t, 3>& mesh, int order, double cutoff) {
            new (p) PmeParameters{alpha, mesh, order, cutoff};
          },
          "alpha"_a, "mesh"_a, "order"_a = 5, "cutoff"_a)
      .def_rw("alpha", &PmeParameters::alpha)
      .def_prop_rw(
          "mesh", [](const PmeParameters& p) { return nb::make_tuple(p.mesh[0], p.mesh[1], p.mesh[2]); },
          [](PmeParameters& p, const std::array<std::int64_t, 3>& mesh) { p.mesh = mesh; },
          "Mesh nodes per axis, x first.")
      .def_rw("order", &PmeParameters::order)
      .def_rw("cutoff", &PmeParameters::cutoff)
      .def_static("choose", &PmeParameters::choose, "box"_a, "cutoff"_a, "tolerance"_a, "order"_a = 5,
                  "The parameters OpenMM picks for an error tolerance (pmkit::PmeParameters::choose): alpha = "
                  "sqrt(-ln(2 tolerance)) / cutoff, and the mesh from alpha, the box and the tolerance.")
      .def("__eq__",
           [](const PmeParameters& a, const PmeParameters& b) {
             return a.alpha == b.alpha && a.mesh == b.mesh && a.order == b.order && a.cutoff == b.cutoff;
           })
      .def("__repr__", &describe);
  nb::class_<PmeOptions, ExecutionOptions>(m, "PmeOptions", "pmkit::PmeOptions of a PME plan.")
      .def(nb::init<>())
      .def_rw("coulomb_constant", &PmeOptions::coulomb_constant)
      .def_rw("deterministic", &PmeOptions::deterministic)
      .def_rw("max_away_fraction", &PmeOptions::max_away_fraction);
  bind_pme_plan<float>(m, "PmePlan_float32");
  bind_pme_plan<double>(m, "PmePlan_float64");
}

}  // namespace pmkit::python
