// The distributed plans of the extension module: one class per dtype and dimension
// (_pmkit.DistributedPlan_float32_3d, ...) on the MPI communicator of an mpi4py
// communicator, which pmkit.DistributedPlan picks from; in a build without MPI only
// built_with_mpi(), False.
//
// Every call is collective, and so is the conversion of its arguments: a rank whose
// arrays are refused (wrong dtype, memory or shape) raises, and the other ranks, which
// would otherwise wait in the plan's first message, raise the same kind of error naming
// that rank and its message. One all-reduce per call settles it (its cost is a
// microsecond-scale message, next to the plan's own agreements).
#include "plans.hpp"

#if defined(PMKIT_PYTHON_MPI)
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mpi.h>

#include <exception>
#include <functional>

#include "device_streams.hpp"
#include "pmkit/distributed.hpp"
#endif

namespace pmkit::python {

#if defined(PMKIT_PYTHON_MPI)

namespace {

using namespace nb::literals;

// What a rank's argument conversion raised: its kind (none, TypeError, ValueError,
// pmkit.Error with `code`, another error) and message.
struct Failure {
  enum Kind : int { None = 0, Type = 1, Value = 2, Pmkit = 3, Other = 4 };
  int kind = None;
  int code = 0;
  std::string message;
};

Failure failure_of_current_exception() {
  Failure f;
  try {
    throw;
  } catch (const Error& e) {
    f = {Failure::Pmkit, static_cast<int>(e.code()), e.what()};
  } catch (const nb::builtin_exception& e) {
    const bool type = e.type() == nb::exception_type::type_error, value = e.type() == nb::exception_type::value_error;
    f = {type ? Failure::Type : value ? Failure::Value : Failure::Other, 0, e.what()};
  } catch (const nb::python_error& e) {
    const bool type = e.matches(PyExc_TypeError), value = e.matches(PyExc_ValueError);
    f = {type ? Failure::Type : value ? Failure::Value : Failure::Other, 0, e.what()};
  } catch (const std::exception& e) {
    f = {Failure::Other, 0, e.what()};
  }
  const std::string prefix = "pmkit: ";
  if (f.message.compare(0, prefix.size(), prefix) == 0) f.message.erase(0, prefix.size());
  return f;
}

// Agrees over `comm` whether any rank failed: returns where none did; else a rank that
// failed itself returns true (its caller raises its own error) and the others throw the
// lowest failing rank's kind of error, naming `call`, that rank and its message.
bool agree(MPI_Comm comm, const char* call, Failure failure) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int first = failure.kind != Failure::None ? rank : size;
  int header[3] = {failure.kind, failure.code, static_cast<int>(failure.message.size())};
  std::string message = failure.message;
  {
    nb::gil_scoped_release release;  // other Python threads run while the ranks agree
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first < size) {
      MPI_Bcast(header, 3, MPI_INT, first, comm);
      message.resize(static_cast<std::size_t>(header[2]));
      MPI_Bcast(message.data(), header[2], MPI_CHAR, first, comm);
    }
  }
  if (first == size) return false;
  if (failure.kind != Failure::None) return true;
  const std::string text = std::string(call) + " failed on rank " + std::to_string(first) + ": " + message;
  switch (header[0]) {
    case Failure::Type: throw nb::type_error(text.c_str());
    case Failure::Value: throw nb::value_error(text.c_str());
    case Failure::Pmkit: throw Error(static_cast<ErrorCode>(header[1]), text);
    default: throw std::runtime_error(text);
  }
}

// Runs `convert` (the arguments' conversion) and agrees whether it failed on any rank:
// this rank's own exception is rethrown as it was.
void agree_on(MPI_Comm comm, const char* call, const std::function<void()>& convert) {
  std::exception_ptr own;
  Failure failure;
  try {
    convert();
  } catch (...) {
    own = std::current_exception();
    failure = failure_of_current_exception();
  }
  if (agree(comm, call, failure)) std::rethrow_exception(own);
}

// A communicator of the binding's own (a duplicate, for its agreements), freed with it
// unless MPI is finalized by then.
class OwnedComm {
 public:
  explicit OwnedComm(MPI_Comm comm) { MPI_Comm_dup(comm, &comm_); }
  ~OwnedComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  }
  OwnedComm(const OwnedComm&) = delete;
  OwnedComm& operator=(const OwnedComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// The MPI_Comm stored at `address` (mpi4py's MPI._addressof(comm)), checked to be a
// usable intracommunicator of an initialised MPI.
MPI_Comm communicator_at(std::uintptr_t address) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    detail::fail(ErrorCode::InvalidArgument, "comm: MPI is ", finalized ? "finalized" : "not initialized",
                 " in the MPI library pmkit is linked with; mpi4py initializes it on `from mpi4py import MPI` "
                 "(if it did, mpi4py loaded another MPI library than pmkit's)");
  if (address == 0) detail::fail(ErrorCode::InvalidArgument, "comm: no communicator");
  const MPI_Comm comm = *reinterpret_cast<const MPI_Comm*>(address);
  if (comm == MPI_COMM_NULL) detail::fail(ErrorCode::InvalidArgument, "comm is MPI.COMM_NULL; give an intracommunicator");
  int inter = 0;
  MPI_Comm_test_inter(comm, &inter);
  if (inter) detail::fail(ErrorCode::InvalidArgument, "comm is an intercommunicator; give an intracommunicator");
  return comm;
}

// The communicator at `address`, agreed: the constructor's first message, which a rank
// whose Python checks of the arguments failed makes through agree_construction.
MPI_Comm agreed_communicator(std::uintptr_t address) {
  const MPI_Comm comm = communicator_at(address);
  agree(comm, "DistributedPlan", Failure{});
  return comm;
}

template <class T, int D>
class DistributedPlanBinding {
 public:
  DistributedPlanBinding(std::uintptr_t comm, const Grid<D>& grid, const Kernel& kernel, const Options& options,
                         const RankGrid<D>& split, Transport transport)
      : own_(agreed_communicator(comm)),
        plan_(own_.get(), grid, kernel, options, split, transport),
        where_(placement(options.backend, false, options.device)),
        block_shape_(c_order<D>(plan_.block_shape())),
        bridge_(options.device) {}

  void set_points(const nb::list& positions, Stream stream, bool update) {
    std::optional<Views<const T>> views;
    agree_on(own_.get(), update ? "update_points" : "set_points",
             [&] { position_views<const T, D>(views.emplace(positions, "positions", Layout::Components, where_), "positions"); });
    const auto xyz = position_views<const T, D>(*views, "positions");
    on_stream(stream, [&] { update ? plan_.update_points(xyz) : plan_.set_points(xyz); });
    has_points_ = true;
  }

  std::size_t migrate(const nb::list& positions, const nb::list& props, std::size_t count, Stream stream) {
    std::optional<Views<T>> xyz_views, prop_views;
    agree_on(own_.get(), "migrate", [&] {
      position_views<T, D>(xyz_views.emplace(positions, "positions", Layout::Components, where_), "positions");
      prop_views.emplace(props, "props", Layout::Particles, where_);
    });
    const auto xyz = position_views<T, D>(*xyz_views, "positions");
    std::size_t kept = 0;
    on_stream(stream, [&] { kept = plan_.migrate(xyz, prop_views->span(), count); });
    return kept;
  }

  template <class Call>
  void run(const char* call, const nb::list& inputs, const char* input_name, Layout input_layout,
           const nb::list& outputs, Layout output_layout, Stream stream, Call work) {
    std::optional<Views<const T>> in;
    std::optional<Views<T>> out;
    agree_on(own_.get(), call, [&] {
      in.emplace(inputs, input_name, input_layout, where_, block_shape_);
      out.emplace(outputs, "out", output_layout, where_, block_shape_);
    });
    on_stream(stream, [&] { work(in->span(), out->span()); });
  }

  // A failure of the Python layer's checks on this rank, agreed with the others (which
  // raise); returns on the ranks that failed themselves.
  void agree_failure(int kind, int code, const std::string& message) {
    agree(own_.get(), "DistributedPlan", Failure{kind == Failure::None ? Failure::Other : kind, code, message});
  }
  void synchronize() {
    nb::gil_scoped_release release;
    if (where_.device) synchronize_stream(plan_.options().stream, where_.device_id);
  }

  DistributedPlan<T, D>& plan() { return plan_; }
  const DistributedPlan<T, D>& plan() const { return plan_; }
  const std::vector<std::int64_t>& block_shape() const { return block_shape_; }
  bool has_points() const { return has_points_; }

 private:
  // Runs `work` without the GIL, on the plan's stream ordered after the caller's work and
  // before the caller's later work (device_streams.hpp).
  template <class Work>
  void on_stream(Stream stream, Work work) {
    const bool bridged = where_.device && stream;
    const StreamHandle caller = bridged ? reinterpret_cast<StreamHandle>(*stream) : StreamHandle{};
    nb::gil_scoped_release release;
    if (bridged) bridge_.enter(caller, plan_.options().stream);
    work();
    if (bridged) bridge_.leave(caller, plan_.options().stream);
  }

  OwnedComm own_;
  DistributedPlan<T, D> plan_;
  Placement where_;
  std::vector<std::int64_t> block_shape_;
  StreamBridge bridge_;
  bool has_points_ = false;
};

template <class T, int D>
void bind_distributed_plan(nb::module_& m, const char* name) {
  using P = DistributedPlanBinding<T, D>;
  nb::class_<P>(m, name, "pmkit::DistributedPlan for one dtype and dimension; use pmkit.DistributedPlan.")
      .def("__init__",
           [](P* self, std::uintptr_t comm, const Grid<D>& grid, const Kernel& kernel, const Options& options,
              const std::array<int, D>& ranks, const std::array<std::vector<std::int64_t>, D>& cuts,
              Transport transport) {
             new (self) P(comm, grid, kernel, options, RankGrid<D>{ranks, cuts}, transport);
           },
           "comm_address"_a, "grid"_a, "kernel"_a, "options"_a, "ranks"_a, "cuts"_a, "transport"_a)
      .def("set_points", [](P& p, const nb::list& x, Stream s) { p.set_points(x, s, false); }, "positions"_a,
           "stream"_a.none())
      .def("update_points", [](P& p, const nb::list& x, Stream s) { p.set_points(x, s, true); }, "positions"_a,
           "stream"_a.none())
      .def("migrate", &P::migrate, "positions"_a, "props"_a, "count"_a, "stream"_a.none())
      .def("spread",
           [](P& p, const nb::list& props, const nb::list& out, bool add, Stream s) {
             p.run("spread", props, "props", Layout::Particles, out, Layout::Mesh, s, [&](auto in, auto blocks) {
               p.plan().spread(in, blocks, add ? Accumulate::Add : Accumulate::Overwrite);
             });
           },
           "props"_a, "out"_a, "add"_a, "stream"_a.none())
      .def("interp",
           [](P& p, const nb::list& meshes, const nb::list& out, Stream s) {
             p.run("interp", meshes, "meshes", Layout::Mesh, out, Layout::Particles, s,
                   [&](auto blocks, auto values) { p.plan().interp(blocks, values); });
           },
           "meshes"_a, "out"_a, "stream"_a.none())
      .def("interp_gradient",
           [](P& p, const nb::list& meshes, const nb::list& out, Stream s) {
             p.run("interp_gradient", meshes, "meshes", Layout::Mesh, out, Layout::Components, s,
                   [&](auto blocks, auto gradients) { p.plan().interp_gradient(blocks, gradients); });
           },
           "meshes"_a, "out"_a, "stream"_a.none())
      .def("spread_gradient",
           [](P& p, const nb::list& vectors, const nb::list& out, bool add, Stream s) {
             p.run("spread_gradient", vectors, "vectors", Layout::Components, out, Layout::Mesh, s,
                   [&](auto in, auto blocks) {
                     p.plan().spread_gradient(in, blocks, add ? Accumulate::Add : Accumulate::Overwrite);
                   });
           },
           "vectors"_a, "out"_a, "add"_a, "stream"_a.none())
      .def("agree_failure", &P::agree_failure, "kind"_a, "code"_a, "message"_a,
           "Agrees a failure of this rank's Python checks with the other ranks, which raise.")
      .def("synchronize", &P::synchronize, "Waits for the work queued on the plan's stream.")
      .def("owner", [](const P& p, const std::array<double, D>& x) { return p.plan().owner(x); }, "position"_a)
      .def_prop_ro("block_shape", [](const P& p) { return p.block_shape(); })
      .def_prop_ro("block_size", [](const P& p) { return p.plan().block_size(); })
      .def_prop_ro("block", [](const P& p) { return p.plan().block(); })
      .def_prop_ro("num_points", [](const P& p) { return p.plan().num_points(); })
      .def_prop_ro("has_points", [](const P& p) { return p.has_points(); })
      .def_prop_ro("rank", [](const P& p) { return p.plan().rank(); })
      .def_prop_ro("size", [](const P& p) { return p.plan().size(); })
      .def_prop_ro("kernel", [](const P& p) { return p.plan().kernel(); })
      .def_prop_ro("options", [](const P& p) { return p.plan().options(); })
      .def_prop_ro("transport", [](const P& p) { return p.plan().transport(); })
      .def_prop_ro("last_timings", [](const P& p) { return p.plan().last_timings(); });
}

template <int D>
void bind_block(nb::module_& m, const char* name) {
  using B = Block<D>;
  nb::class_<B>(m, name, "pmkit::Block: where one rank sits in the decomposition (x first).")
      .def_ro("ranks", &B::ranks)
      .def_ro("coords", &B::coords)
      .def_ro("first_cell", &B::first_cell)
      .def_ro("cells", &B::cells)
      .def_ro("first_node", &B::first_node)
      .def_ro("shape", &B::shape);
}

}  // namespace

void bind_distributed_plans(nb::module_& m) {
  using namespace nb::literals;
  m.def("built_with_mpi", [] { return true; }, "True when this build contains the distributed plan (MPI).");
  m.def("agree_construction",
        [](std::uintptr_t address, int kind, int code, const std::string& message) {
          agree(communicator_at(address), "DistributedPlan", Failure{kind, code, message});
        },
        "comm_address"_a, "kind"_a, "code"_a, "message"_a,
        "Agrees a failure of this rank's checks of a DistributedPlan's arguments with the other ranks, which raise.");
  m.def("mpi_library_version",
        [] {
          char version[MPI_MAX_LIBRARY_VERSION_STRING];
          int length = 0;
          MPI_Get_library_version(version, &length);
          return std::string(version, static_cast<std::size_t>(length));
        },
        "MPI_Get_library_version of the MPI library pmkit is linked with.");
  nb::enum_<Transport>(m, "Transport")
      .value("Auto", Transport::Auto)
      .value("Nccl", Transport::Nccl)
      .value("HostMpi", Transport::HostMpi);
  nb::class_<DistributedTimings>(m, "DistributedTimings", "Seconds of the last collective call, by phase.")
      .def_ro("compute_s", &DistributedTimings::compute_s)
      .def_ro("exchange_s", &DistributedTimings::exchange_s)
      .def_ro("migrate_s", &DistributedTimings::migrate_s);
  bind_block<2>(m, "Block2");
  bind_block<3>(m, "Block3");
  bind_distributed_plan<float, 2>(m, "DistributedPlan_float32_2d");
  bind_distributed_plan<float, 3>(m, "DistributedPlan_float32_3d");
  bind_distributed_plan<double, 2>(m, "DistributedPlan_float64_2d");
  bind_distributed_plan<double, 3>(m, "DistributedPlan_float64_3d");
}

#else

void bind_distributed_plans(nb::module_& m) {
  m.def("built_with_mpi", [] { return false; }, "True when this build contains the distributed plan (MPI).");
}

#endif

}  // namespace pmkit::python
