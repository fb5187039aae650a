// The mesh plan's operations as XLA FFI handlers (pmkit.jax): spread, interp,
// interp_gradient and spread_gradient on the buffers XLA passes, without copies, on the
// CPU and on the CUDA stream XLA gives.
//
// A call takes two buffers, the positions (N, D) and the input, and writes its results,
// all of one dtype in C order:
//
//   spread:          values  (F, N)        -> meshes  (F, *mesh_shape)
//   interp:          meshes  (F, *mesh)    -> values  (F, N)
//   interp_gradient: meshes  (F, *mesh)    -> vectors (F, N, D)
//   spread_gradient: vectors (F, N, D)     -> meshes  (F, *mesh_shape)
//   interp_both:     meshes  (F, *mesh)    -> values  (F, N) and vectors (F, N, D),
//                    interp and interp_gradient on one binning (spread's derivative)
//
// Under vmap (vmap_method "expand_dims") every buffer has the same number of leading
// batch axes as the result, each of the result's extent or 1 (broadcast). The handler
// bins the positions of each batch entry once and runs the fields of all the entries
// that share those positions in one plan call: one call for unbatched positions.
//
// The grid, kernel and options come as attributes. Plans are cached per grid, kernel,
// options, dtype, particle count and device, so that a steady loop of calls allocates
// nothing; every call bins its positions (set_points), as XLA's buffers say nothing of
// whether the positions are those of an earlier call.
#include "jax_ffi.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jax_ffi_shared.hpp"
#include "pmkit/plan.hpp"

namespace ffi = xla::ffi;
namespace nb = nanobind;

namespace pmkit::python {
namespace {

using namespace jax_ffi;

enum class Op { Spread, Interp, InterpGradient, SpreadGradient, InterpBoth };

const char* op_name(Op op) {
  switch (op) {
    case Op::Spread: return "spread";
    case Op::Interp: return "interp";
    case Op::InterpGradient: return "interp_gradient";
    case Op::SpreadGradient: return "spread_gradient";
    default: return "interp_both";
  }
}

// What a buffer holds per field: N particle values, N vectors of D, or a mesh.
enum class Kind { Values, Vectors, Meshes };

Kind input_kind(Op op) {
  if (op == Op::Spread) return Kind::Values;
  if (op == Op::SpreadGradient) return Kind::Vectors;
  return Kind::Meshes;
}

// The plan calls of an operation, each with the kind of its result, in result order.
std::vector<std::pair<Op, Kind>> steps(Op op) {
  switch (op) {
    case Op::Spread:
    case Op::SpreadGradient: return {{op, Kind::Meshes}};
    case Op::Interp: return {{op, Kind::Values}};
    case Op::InterpGradient: return {{op, Kind::Vectors}};
    default: return {{Op::Interp, Kind::Values}, {Op::InterpGradient, Kind::Vectors}};
  }
}

// Where a call runs: the backend, the CUDA device and stream XLA gives.
struct Place {
  Backend backend = Backend::Cpu;
  int device = 0;
  StreamHandle stream = nullptr;
};

// The attributes every call carries (pmkit/jax.py, _attributes).
struct Attributes {
  std::string_view kernel;
  ffi::Span<const std::int64_t> cells;
  ffi::Span<const double> spacing;
  ffi::Span<const double> origin;
  ffi::Span<const std::int64_t> bounded;  // per axis: 1 bounded, 0 periodic
  std::int64_t keep_ghosts = 0;
  std::int64_t deterministic = 0;
  std::int64_t threads = 0;
};

// The cache key of a plan: everything its construction reads, and the particle count.
std::string plan_key(const Place& place, const Attributes& a, std::int64_t n) {
  std::string key(a.kernel);
  key.push_back('\0');
  const std::int64_t scalars[] = {static_cast<std::int64_t>(place.backend), place.device, n, a.keep_ghosts,
                                  a.deterministic, a.threads};
  append_bytes(key, scalars, 6);
  append_bytes(key, a.cells.begin(), a.cells.size());
  append_bytes(key, a.spacing.begin(), a.spacing.size());
  append_bytes(key, a.origin.begin(), a.origin.size());
  append_bytes(key, a.bounded.begin(), a.bounded.size());
  return key;
}

template <int D>
Grid<D> grid_of(const Attributes& a) {
  Grid<D> grid;
  for (int d = 0; d < D; ++d) {
    grid.cells[d] = a.cells[d];
    grid.spacing[d] = a.spacing[d];
    grid.origin[d] = a.origin[d];
    grid.boundary[d] = a.bounded[d] ? Boundary::Bounded : Boundary::Periodic;
  }
  grid.ghosts = a.keep_ghosts ? Ghosts::Keep : Ghosts::Fold;
  return grid;
}

// A cached plan and the lock that one call holds while it uses it.
template <class T, int D>
struct CachedPlan {
  CachedPlan(const Grid<D>& grid, const Kernel& kernel, const Options& options) : plan(grid, kernel, options) {}
  std::mutex mutex;
  Plan<T, D> plan;
};

template <class T, int D>
class PlanCache {
 public:
  static PlanCache& instance() {
    static PlanCache cache;
    return cache;
  }
  std::shared_ptr<CachedPlan<T, D>> get(const Place& place, const Attributes& a, std::int64_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = plans_[plan_key(place, a, n)];
    if (!slot) {
      Options options;
      options.backend = place.backend;
      options.device = place.device;
      options.stream = place.stream;
      options.num_threads = static_cast<int>(a.threads);
      options.deterministic = a.deterministic != 0;
      slot = std::make_shared<CachedPlan<T, D>>(grid_of<D>(a), Kernel::from_name(std::string(a.kernel)), options);
    }
    return slot;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_.clear();
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return plans_.size();
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<CachedPlan<T, D>>> plans_;
};

void clear_plans() {
  PlanCache<float, 2>::instance().clear();
  PlanCache<float, 3>::instance().clear();
  PlanCache<double, 2>::instance().clear();
  PlanCache<double, 3>::instance().clear();
  clear_pme_plans();
}

std::size_t cached_plans() {
  return PlanCache<float, 2>::instance().size() + PlanCache<float, 3>::instance().size() +
         PlanCache<double, 2>::instance().size() + PlanCache<double, 3>::instance().size() + cached_pme_plans();
}

// The shape of one field's buffer of a kind, and its number of elements.
template <int D>
std::vector<std::int64_t> field_shape(Kind kind, std::int64_t n, const std::vector<std::int64_t>& mesh_shape) {
  if (kind == Kind::Values) return {n};
  if (kind == Kind::Vectors) return {n, D};
  return mesh_shape;
}

template <class T, int D>
ffi::Error run(Op op, const Place& place, const Attributes& a, ffi::AnyBuffer positions, ffi::AnyBuffer input,
               const std::vector<ffi::AnyBuffer>& results) {
  const auto calls = steps(op);
  const Kind in_kind = input_kind(op);
  const auto x_dims = positions.dimensions();
  if (x_dims.size() < 2) return invalid("pmkit.jax: positions has shape " + shape_text(x_dims) + "; expected (N, D)");
  const std::size_t k = x_dims.size() - 2;  // batch axes
  const auto first = results[0].dimensions();
  if (first.size() <= k) return invalid("pmkit.jax: the result has shape " + shape_text(first) + ", too few axes");
  const ffi::Span<const std::int64_t> batch(first.begin(), k);
  const std::int64_t n = x_dims[k];
  const std::int64_t fields = first[k];

  // Check the shapes before a plan is made or a buffer is read.
  std::vector<std::int64_t> mesh_shape;  // C order
  {
    const auto shape = pmkit::mesh_shape(grid_of<D>(a), Kernel::from_name(std::string(a.kernel)).ghost_width());
    mesh_shape.assign(shape.rbegin(), shape.rend());
  }
  auto tail = [&](Kind kind) {
    std::vector<std::int64_t> t{fields};
    const auto shape = field_shape<D>(kind, n, mesh_shape);
    t.insert(t.end(), shape.begin(), shape.end());
    return t;
  };
  if (auto e = check_tail("positions", x_dims, k, {n, D}, batch); e.failure()) return e;
  if (auto e = check_tail("the input", input.dimensions(), k, tail(in_kind), batch); e.failure()) return e;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (auto e = check_tail("the result", results[i].dimensions(), k, tail(calls[i].second), batch); e.failure()) {
      return e;
    }
  }

  auto cached = PlanCache<T, D>::instance().get(place, a, n);
  std::lock_guard<std::mutex> lock(cached->mutex);
  Plan<T, D>& plan = cached->plan;
  if (place.backend == Backend::Cuda && plan.options().stream != place.stream) plan.set_stream(place.stream);

  // A field's views: particle values (N), a mesh, or D strided components of vectors (N, D).
  const std::int64_t mesh_size = product(mesh_shape);
  auto add_views = [&](auto& views, auto* base, Kind kind) {
    for (std::int64_t f = 0; f < fields; ++f) {
      if (kind == Kind::Meshes) {
        views.emplace_back(base + f * mesh_size, static_cast<std::size_t>(mesh_size));
      } else if (kind == Kind::Vectors) {
        for (int d = 0; d < D; ++d) views.emplace_back(base + f * n * D + d, static_cast<std::size_t>(n), D);
      } else {
        views.emplace_back(base + f * n, static_cast<std::size_t>(n));
      }
    }
  };
  auto entry = [&](Kind kind) { return fields * product(field_shape<D>(kind, n, mesh_shape)); };
  const T* x = static_cast<const T*>(positions.untyped_data());
  const T* in = static_cast<const T*>(input.untyped_data());
  const auto x_offsets = batch_offsets(x_dims, batch, n * D);
  const auto in_offsets = batch_offsets(input.dimensions(), batch, entry(in_kind));
  std::vector<View<const T>> ins;
  std::vector<std::vector<View<T>>> outs(calls.size());
  auto flush = [&]() {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const Op step = calls[i].first;
      if (step == Op::Spread) plan.spread(ins, outs[i]);
      if (step == Op::Interp) plan.interp(ins, outs[i]);
      if (step == Op::InterpGradient) plan.interp_gradient(ins, outs[i]);
      if (step == Op::SpreadGradient) plan.spread_gradient(ins, outs[i]);
      outs[i].clear();
    }
    ins.clear();
  };
  std::int64_t bound = -1;  // the positions' offset the plan holds
  for (std::size_t b = 0; b < x_offsets.size(); ++b) {
    if (x_offsets[b] != bound) {
      if (!ins.empty()) flush();
      typename Plan<T, D>::Positions xs;
      for (int d = 0; d < D; ++d) xs[d] = View<const T>(x + x_offsets[b] + d, static_cast<std::size_t>(n), D);
      plan.set_points(xs);
      bound = x_offsets[b];
    }
    add_views(ins, in + in_offsets[b], in_kind);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      T* out = static_cast<T*>(results[i].untyped_data());
      add_views(outs[i], out + static_cast<std::int64_t>(b) * entry(calls[i].second), calls[i].second);
    }
  }
  if (!ins.empty()) flush();
  return ffi::Error::Success();
}

ffi::Error decode(const ffi::Dictionary& attrs, Attributes& a) {
  ffi::Error error = ffi::Error::Success();
  take(attrs, "kernel", a.kernel, error);
  take(attrs, "cells", a.cells, error);
  take(attrs, "spacing", a.spacing, error);
  take(attrs, "origin", a.origin, error);
  take(attrs, "bounded", a.bounded, error);
  take(attrs, "keep_ghosts", a.keep_ghosts, error);
  take(attrs, "deterministic", a.deterministic, error);
  take(attrs, "threads", a.threads, error);
  if (error.failure()) return error;
  const std::size_t dim = a.cells.size();
  if ((dim != 2 && dim != 3) || a.spacing.size() != dim || a.origin.size() != dim || a.bounded.size() != dim) {
    return invalid("pmkit.jax: cells, spacing, origin and bounded must have 2 or 3 values each, one per axis");
  }
  return ffi::Error::Success();
}

template <Op op>
ffi::Error call(const Place& place, const ffi::Dictionary& attrs, ffi::AnyBuffer positions, ffi::AnyBuffer input,
                ffi::RemainingRets rets) {
  Attributes a;
  if (auto e = decode(attrs, a); e.failure()) return e;
  const std::size_t count = steps(op).size();
  if (rets.size() != count) {
    return invalid(std::string("pmkit.jax.") + op_name(op) + ": " + std::to_string(rets.size()) +
                   " results; it writes " + std::to_string(count));
  }
  std::vector<ffi::AnyBuffer> results;
  for (std::size_t i = 0; i < count; ++i) {
    auto result = rets.get<ffi::AnyBuffer>(i);
    if (result.has_error()) return result.error();
    results.push_back(*result.value());
  }
  const auto dtype = positions.element_type();
  bool same = input.element_type() == dtype && (dtype == ffi::DataType::F32 || dtype == ffi::DataType::F64);
  for (const auto& result : results) same = same && result.element_type() == dtype;
  if (!same) {
    return invalid(std::string("pmkit.jax.") + op_name(op) +
                   ": positions, input and results must all be float32 or all float64");
  }
  const bool f32 = dtype == ffi::DataType::F32;
  // No exception leaves a handler: a pmkit::Error (a plan's construction or call, a
  // position rejected now or, on the GPU, by an earlier call) is XLA's InvalidArgument.
  try {
    if (a.cells.size() == 2) {
      return f32 ? run<float, 2>(op, place, a, positions, input, results)
                 : run<double, 2>(op, place, a, positions, input, results);
    }
    return f32 ? run<float, 3>(op, place, a, positions, input, results)
               : run<double, 3>(op, place, a, positions, input, results);
  } catch (const Error& e) {
    return invalid(std::string("pmkit.jax.") + op_name(op) + ": " + e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string("pmkit.jax.") + op_name(op) + ": " + e.what());
  }
}

template <Op op>
ffi::Error cpu_call(ffi::Dictionary attrs, ffi::AnyBuffer positions, ffi::AnyBuffer input, ffi::RemainingRets rets) {
  return call<op>(Place{}, attrs, positions, input, rets);
}

template <Op op>
ffi::Error cuda_call(void* stream, std::int32_t device, ffi::ScratchAllocator, ffi::Dictionary attrs,
                     ffi::AnyBuffer positions, ffi::AnyBuffer input, ffi::RemainingRets rets) {
  return call<op>(Place{Backend::Cuda, device, stream}, attrs, positions, input, rets);
}

template <Op op>
nb::tuple handlers() {
  // The positions and the input; one result, or two for interp_both.
  return capsules<BufferBinding<2, false>, &cpu_call<op>, &cuda_call<op>>();
}

}  // namespace

void bind_jax(nb::module_& m) {
  m.def(
      "jax_handlers",
      []() {
        nb::dict d;
        d[op_name(Op::Spread)] = handlers<Op::Spread>();
        d[op_name(Op::Interp)] = handlers<Op::Interp>();
        d[op_name(Op::InterpGradient)] = handlers<Op::InterpGradient>();
        d[op_name(Op::SpreadGradient)] = handlers<Op::SpreadGradient>();
        d[op_name(Op::InterpBoth)] = handlers<Op::InterpBoth>();
        add_pme_handlers(d);
        return d;
      },
      "The XLA FFI handlers of pmkit.jax: {operation: (CPU handler, CUDA handler)} as PyCapsules.");
  m.def("jax_clear_plans", &clear_plans, "Frees the plans that pmkit.jax's handlers keep.");
  m.def("jax_cached_plans", &cached_plans, "The number of plans that pmkit.jax's handlers keep.");
}

}  // namespace pmkit::python
