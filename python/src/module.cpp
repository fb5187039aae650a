// pmkit._pmkit: the C++ library's types for the Python package (python/pmkit), which
// wraps them in Python's idiom. The grids, kernels, options and enums are bound as they
// are; the plans take lists of arrays (arrays.hpp) and the caller's stream (streams.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/string.h>

#include <cstdint>

#include "pmkit/pmkit.hpp"
#include "plans.hpp"
#ifdef PMKIT_PYTHON_JAX
#include "jax_ffi.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <int D>
void bind_geometry(nb::module_& m, const char* grid_name, const char* box_name) {
  using G = pmkit::Grid<D>;
  nb::class_<G>(m, grid_name, "pmkit::Grid: origin, spacing, cells and boundary per axis (x first), and the ghosts.")
      .def(nb::init<>())
      .def_rw("origin", &G::origin)
      .def_rw("spacing", &G::spacing)
      .def_rw("cells", &G::cells)
      .def_rw("boundary", &G::boundary)
      .def_rw("ghosts", &G::ghosts);
  using B = pmkit::Box<D>;
  nb::class_<B>(m, box_name, "pmkit::Box: origin, length and boundary per axis (x first).")
      .def(nb::init<>())
      .def_rw("origin", &B::origin)
      .def_rw("length", &B::length)
      .def_rw("boundary", &B::boundary);
}

// The stream handle of the options as an integer (a cudaStream_t's value; 0: the default).
std::uintptr_t get_stream(const pmkit::ExecutionOptions& o) { return reinterpret_cast<std::uintptr_t>(o.stream); }
void set_stream(pmkit::ExecutionOptions& o, std::uintptr_t s) { o.stream = reinterpret_cast<pmkit::StreamHandle>(s); }

}  // namespace

NB_MODULE(_pmkit, m) {
  m.doc() = "The compiled core of pmkit; use the package pmkit.";
  m.attr("__version__") = PMKIT_VERSION_STRING;
  m.def("built_with_cuda", &pmkit::built_with_cuda, "True when this build contains the CUDA backend.");

  nb::enum_<pmkit::ErrorCode>(m, "ErrorCode", "The stable code of a pmkit.Error (pmkit::ErrorCode).")
      .value("Ok", pmkit::ErrorCode::Ok)
      .value("InvalidArgument", pmkit::ErrorCode::InvalidArgument)
      .value("SizeMismatch", pmkit::ErrorCode::SizeMismatch)
      .value("NonFinitePosition", pmkit::ErrorCode::NonFinitePosition)
      .value("OutOfBounds", pmkit::ErrorCode::OutOfBounds)
      .value("NotReady", pmkit::ErrorCode::NotReady)
      .value("OutOfMemory", pmkit::ErrorCode::OutOfMemory)
      .value("Unsupported", pmkit::ErrorCode::Unsupported)
      .value("Device", pmkit::ErrorCode::Device);

  // pmkit.Error: every pmkit::Error, with its code as the attribute `code`.
  static nb::object error_type = nb::steal(PyErr_NewExceptionWithDoc(
      "pmkit.Error", "A pmkit::Error of the C++ library: the message names the argument and value; `code` is its ErrorCode.",
      PyExc_RuntimeError, nullptr));
  m.attr("Error") = error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const pmkit::Error& e) {
      nb::object error = error_type(e.what());
      error.attr("code") = nb::cast(e.code());
      PyErr_SetObject(error_type.ptr(), error.ptr());
    }
  });

  nb::enum_<pmkit::Backend>(m, "Backend").value("Cpu", pmkit::Backend::Cpu).value("Cuda", pmkit::Backend::Cuda);
  nb::enum_<pmkit::Boundary>(m, "Boundary")
      .value("Periodic", pmkit::Boundary::Periodic)
      .value("Bounded", pmkit::Boundary::Bounded);
  nb::enum_<pmkit::Ghosts>(m, "Ghosts").value("Fold", pmkit::Ghosts::Fold).value("Keep", pmkit::Ghosts::Keep);
  nb::enum_<pmkit::SpreadMethod>(m, "SpreadMethod")
      .value("Auto", pmkit::SpreadMethod::Auto)
      .value("CpuSlabs", pmkit::SpreadMethod::CpuSlabs)
      .value("CpuPrivateMeshes", pmkit::SpreadMethod::CpuPrivateMeshes)
      .value("CudaGlobalAtomics", pmkit::SpreadMethod::CudaGlobalAtomics)
      .value("CudaSharedTiles", pmkit::SpreadMethod::CudaSharedTiles)
      .value("CudaCellMoments", pmkit::SpreadMethod::CudaCellMoments);
  nb::enum_<pmkit::PairMethod>(m, "PairMethod")
      .value("Auto", pmkit::PairMethod::Auto)
      .value("CudaThreadPerParticle", pmkit::PairMethod::CudaThreadPerParticle)
      .value("CudaThreeThreadsPerParticle", pmkit::PairMethod::CudaThreeThreadsPerParticle)
      .value("CudaBlockPerCell", pmkit::PairMethod::CudaBlockPerCell)
      .value("CudaXPencil", pmkit::PairMethod::CudaXPencil)
      .value("CudaHalfShell", pmkit::PairMethod::CudaHalfShell)
      .value("CudaCompactPencil", pmkit::PairMethod::CudaCompactPencil)
      .value("CudaRowSplit", pmkit::PairMethod::CudaRowSplit);

  nb::class_<pmkit::Kernel>(m, "Kernel",
                            "An interpolation kernel: Kernel('mp4'), Kernel.bspline(4), ... (names: linear or cic, "
                            "tsc, mp4, bspline2 .. bspline8).")
      .def(nb::new_([](const std::string& name) { return pmkit::Kernel::from_name(name); }), "name"_a)
      .def_static("linear", &pmkit::Kernel::linear)
      .def_static("tsc", &pmkit::Kernel::tsc)
      .def_static("mp4", &pmkit::Kernel::mp4)
      .def_static("bspline", &pmkit::Kernel::bspline, "order"_a)
      .def_prop_ro("name", &pmkit::Kernel::name)
      .def_prop_ro("support", &pmkit::Kernel::support, "Nodes a particle reaches per dimension.")
      .def_prop_ro("ghost_width", &pmkit::Kernel::ghost_width,
                   "Nodes a particle reaches past the last interior node on either side.")
      .def_prop_ro("accuracy_order", &pmkit::Kernel::accuracy_order)
      .def("__eq__", [](const pmkit::Kernel& a, const pmkit::Kernel& b) { return a == b; })
      .def("__hash__", [](const pmkit::Kernel& k) { return std::hash<std::string>()(k.name()); })
      .def("__repr__", [](const pmkit::Kernel& k) { return "pmkit.Kernel('" + k.name() + "')"; });

  bind_geometry<2>(m, "Grid2", "Box2");
  bind_geometry<3>(m, "Grid3", "Box3");

  nb::class_<pmkit::ExecutionOptions>(m, "ExecutionOptions",
                                      "pmkit::ExecutionOptions: where a plan runs, shared by every plan's options.")
      .def(nb::init<>())
      .def_rw("backend", &pmkit::ExecutionOptions::backend)
      .def_rw("device", &pmkit::ExecutionOptions::device)
      .def_prop_rw("stream", &get_stream, &set_stream)
      .def_rw("num_threads", &pmkit::ExecutionOptions::num_threads);
  nb::class_<pmkit::Options, pmkit::ExecutionOptions>(m, "Options", "pmkit::Options of a mesh plan.")
      .def(nb::init<>())
      .def_rw("spread_method", &pmkit::Options::spread_method)
      .def_rw("deterministic", &pmkit::Options::deterministic)
      .def_rw("host_arrays", &pmkit::Options::host_arrays)
      .def_rw("max_away_fraction", &pmkit::Options::max_away_fraction);
  nb::class_<pmkit::PairOptions, pmkit::ExecutionOptions>(m, "PairOptions", "pmkit::PairOptions of a pair plan.")
      .def(nb::init<>())
      .def_rw("half_shell", &pmkit::PairOptions::half_shell)
      .def_rw("method", &pmkit::PairOptions::method);
  nb::class_<pmkit::Timings>(m, "Timings", "Seconds of the last call's phases.")
      .def_ro("transfer_s", &pmkit::Timings::transfer_s)
      .def_ro("compute_s", &pmkit::Timings::compute_s);

  pmkit::python::bind_plans(m);
  pmkit::python::bind_pair_plans(m);
  pmkit::python::bind_ffts(m);
  pmkit::python::bind_distributed_plans(m);
  pmkit::python::bind_pme_plans(m);
#ifdef PMKIT_PYTHON_JAX
  pmkit::python::bind_jax(m);
#endif
}
