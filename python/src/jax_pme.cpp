// pmkit.jax's PME as XLA FFI handlers around pmkit::PmePlan, on the CPU and on the CUDA
// stream XLA gives.
//
//   pme:                   positions (N, 3), charges (N,), cells (S, 3)
//                          -> energies (S,), potentials (N,), forces (N, 3)[, virials (S, 6)]
//   pme_charge_gradient:   positions (N, 3), charges (N,), cells (S, 3), weights (N, 3)
//                          -> d/dq of sum_i weights_i . F_i, (N,)
//
// The N charges are S systems, each `sizes[s]` consecutive charges (one system of N
// where `sizes` is empty) in its orthorhombic cell of box lengths cells[s]. Under vmap
// (vmap_method "expand_dims") every buffer has the results' leading batch axes, each of
// the results' extent or 1 (broadcast), as the mesh handlers take them (jax_ffi.cpp).
// Energies and virials come in the positions' dtype.
//
// Each system runs on a PmePlan cached per cell, parameters (given, or chosen by
// PmeParameters::choose from the cutoff, tolerance and order), options, dtype, system
// size and device; each dtype's cache keeps the last kMaxPlans plans used, so that
// a cell that changes every call (a barostat, a cell being trained) does not grow it
// without bound. The cells are read on the host (the plans need them there): on the GPU
// that is one copy and wait before the plans run, and the energies and virials come
// back through the host to be written in the positions' dtype.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device_streams.hpp"
#include "jax_ffi.hpp"
#include "jax_ffi_shared.hpp"
#include "pmkit/pme.hpp"

namespace nb = nanobind;

namespace pmkit::python {
namespace {

using namespace jax_ffi;

constexpr std::size_t kMaxPlans = 128;

enum class PmeOp { Compute, ChargeGradient };

const char* pme_op_name(PmeOp op) { return op == PmeOp::Compute ? "pme" : "pme_charge_gradient"; }

struct Place {
  Backend backend = Backend::Cpu;
  int device = 0;
  StreamHandle stream = nullptr;
  ffi::ScratchAllocator* scratch = nullptr;  // CUDA: device memory for the energies and virials
};

// The attributes every call carries (pmkit/jax.py, _PmeSettings._attributes). alpha 0:
// the parameters of each cell by PmeParameters::choose(cell, cutoff, tolerance, order).
struct PmeAttributes {
  double alpha = 0;
  ffi::Span<const std::int64_t> mesh;
  std::int64_t order = 5;
  double cutoff = 0;
  double tolerance = 0;
  double coulomb_constant = 1;
  std::int64_t reciprocal_only = 0;
  std::int64_t threads = 0;
  std::int64_t deterministic = 0;
  ffi::Span<const std::int64_t> sizes;
};

ffi::Error decode(const ffi::Dictionary& attrs, PmeAttributes& a) {
  ffi::Error error = ffi::Error::Success();
  take(attrs, "alpha", a.alpha, error);
  take(attrs, "mesh", a.mesh, error);
  take(attrs, "order", a.order, error);
  take(attrs, "cutoff", a.cutoff, error);
  take(attrs, "tolerance", a.tolerance, error);
  take(attrs, "coulomb_constant", a.coulomb_constant, error);
  take(attrs, "reciprocal_only", a.reciprocal_only, error);
  take(attrs, "threads", a.threads, error);
  take(attrs, "deterministic", a.deterministic, error);
  take(attrs, "sizes", a.sizes, error);
  if (error.failure()) return error;
  if (a.mesh.size() != 3) return invalid("pmkit.jax.pme: attribute mesh has " + std::to_string(a.mesh.size()) +
                                         " values; it takes 3 (x, y, z)");
  for (auto size : a.sizes) {
    if (size < 0) return invalid("pmkit.jax.pme: sizes has a negative system size " + std::to_string(size));
  }
  return ffi::Error::Success();
}

PmeParameters parameters_of(const PmeAttributes& a, const std::array<double, 3>& box) {
  if (a.alpha == 0) return PmeParameters::choose(box, a.cutoff, a.tolerance, static_cast<int>(a.order));
  return PmeParameters{a.alpha, {a.mesh[0], a.mesh[1], a.mesh[2]}, static_cast<int>(a.order), a.cutoff};
}

template <class T>
struct CachedPme {
  CachedPme(const std::array<double, 3>& box, const PmeParameters& params, const PmeOptions& options)
      : plan(box, params, options) {}
  std::mutex mutex;
  PmePlan<T> plan;
};

// The plans by key, least recently used first out.
template <class T>
class PmeCache {
 public:
  static PmeCache& instance() {
    static PmeCache cache;
    return cache;
  }
  std::shared_ptr<CachedPme<T>> get(const Place& place, const PmeAttributes& a, const std::array<double, 3>& box,
                                    std::int64_t n) {
    const PmeParameters params = parameters_of(a, box);
    std::string key;
    const std::int64_t scalars[] = {static_cast<std::int64_t>(place.backend), place.device, n, params.order,
                                    a.threads, a.deterministic};
    append_bytes(key, scalars, 6);
    append_bytes(key, params.mesh.data(), 3);
    const double reals[] = {box[0], box[1], box[2], params.alpha, params.cutoff, a.coulomb_constant};
    append_bytes(key, reals, 6);
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = plans_.find(key);
    if (found != plans_.end()) {
      order_.splice(order_.end(), order_, found->second.second);
      return found->second.first;
    }
    PmeOptions options;
    options.backend = place.backend;
    options.device = place.device;
    options.stream = place.stream;
    options.num_threads = static_cast<int>(a.threads);
    options.deterministic = a.deterministic != 0;
    options.coulomb_constant = a.coulomb_constant;
    auto plan = std::make_shared<CachedPme<T>>(box, params, options);
    order_.push_back(key);
    plans_.emplace(key, std::make_pair(plan, std::prev(order_.end())));
    while (plans_.size() > kMaxPlans) {
      plans_.erase(order_.front());
      order_.pop_front();
    }
    return plan;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_.clear();
    order_.clear();
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return plans_.size();
  }

 private:
  std::mutex mutex_;
  std::list<std::string> order_;
  std::map<std::string, std::pair<std::shared_ptr<CachedPme<T>>, std::list<std::string>::iterator>> plans_;
};

// Copies between the handler's memory (host, or the device's on the GPU) and the host.
void to_host(const Place& place, void* host, const void* data, std::size_t bytes) {
  if (place.backend == Backend::Cpu) {
    std::memcpy(host, data, bytes);
  } else {
    copy_device_to_host(host, data, bytes, place.stream, place.device);
  }
}

void from_host(const Place& place, void* data, const void* host, std::size_t bytes) {
  if (place.backend == Backend::Cpu) {
    std::memcpy(data, host, bytes);
  } else {
    copy_host_to_device(data, host, bytes, place.stream, place.device);
  }
}

// The x, y and z components of (count, 3) vectors in C order.
template <class E>
std::array<View<E>, 3> components(E* data, std::int64_t count) {
  const auto n = static_cast<std::size_t>(count);
  return {View<E>(data, n, 3), View<E>(data + 1, n, 3), View<E>(data + 2, n, 3)};
}

// The buffers of a call: inputs, then results in order.
struct Buffers {
  ffi::AnyBuffer positions, charges, cells;
  std::vector<ffi::AnyBuffer> extra;    // pme_charge_gradient: the weights
  std::vector<ffi::AnyBuffer> results;  // pme: energies, potentials, forces[, virials]; or the gradient
};

template <class T>
ffi::Error run(PmeOp op, const Place& place, const PmeAttributes& a, const Buffers& io) {
  const char* name = pme_op_name(op);
  const auto x_dims = io.positions.dimensions();
  if (x_dims.size() < 2 || x_dims[x_dims.size() - 1] != 3) {
    return invalid(std::string("pmkit.jax.") + name + ": positions has shape " + shape_text(x_dims) +
                   "; expected (N, 3)");
  }
  const std::size_t k = x_dims.size() - 2;
  const std::int64_t n = x_dims[k];
  // The batch axes are those of the per-charge result: potentials (pme) or the gradient.
  const auto per_charge = io.results[op == PmeOp::Compute ? 1 : 0].dimensions();
  if (per_charge.size() != k + 1) {
    return invalid(std::string("pmkit.jax.") + name + ": the result has shape " + shape_text(per_charge) +
                   "; expected the positions' batch axes then (N,)");
  }
  const ffi::Span<const std::int64_t> batch(per_charge.begin(), k);
  std::vector<std::int64_t> sizes(a.sizes.begin(), a.sizes.end());
  if (sizes.empty()) sizes.push_back(n);
  const auto systems = static_cast<std::int64_t>(sizes.size());
  std::int64_t total = 0;
  for (auto size : sizes) total += size;
  if (total != n) {
    return invalid(std::string("pmkit.jax.") + name + ": sizes add up to " + std::to_string(total) +
                   "; the positions have " + std::to_string(n) + " charges");
  }
  if (auto e = check_tail("positions", x_dims, k, {n, 3}, batch); e.failure()) return e;
  if (auto e = check_tail("charges", io.charges.dimensions(), k, {n}, batch); e.failure()) return e;
  if (auto e = check_tail("cell", io.cells.dimensions(), k, {systems, 3}, batch); e.failure()) return e;
  if (op == PmeOp::ChargeGradient) {
    if (auto e = check_tail("weights", io.extra[0].dimensions(), k, {n, 3}, batch); e.failure()) return e;
    if (auto e = check_tail("the result", per_charge, k, {n}, batch); e.failure()) return e;
  } else {
    const char* names[] = {"the energies", "the potentials", "the forces", "the virials"};
    const std::vector<std::int64_t> tails[] = {{systems}, {n}, {n, 3}, {systems, 6}};
    for (std::size_t i = 0; i < io.results.size(); ++i) {
      if (auto e = check_tail(names[i], io.results[i].dimensions(), k, tails[i], batch); e.failure()) return e;
    }
  }

  // The cells, on the host.
  const auto cell_dims = io.cells.dimensions();
  std::vector<std::int64_t> cell_shape(cell_dims.begin(), cell_dims.end());
  std::vector<T> cells(static_cast<std::size_t>(product(cell_shape)));
  to_host(place, cells.data(), io.cells.untyped_data(), cells.size() * sizeof(T));
  for (T length : cells) {
    if (!(std::isfinite(static_cast<double>(length)) && length > 0)) {
      return invalid(std::string("pmkit.jax.") + name + ": cell has a box length that is not positive and finite");
    }
  }

  const auto x_offsets = batch_offsets(x_dims, batch, n * 3);
  const auto q_offsets = batch_offsets(io.charges.dimensions(), batch, n);
  const auto c_offsets = batch_offsets(cell_dims, batch, systems * 3);
  const auto w_offsets =
      op == PmeOp::ChargeGradient ? batch_offsets(io.extra[0].dimensions(), batch, n * 3) : x_offsets;
  const auto entries = static_cast<std::int64_t>(x_offsets.size());
  const T* x = static_cast<const T*>(io.positions.untyped_data());
  const T* q = static_cast<const T*>(io.charges.untyped_data());

  // Energies and virials, (entries, systems) and (entries, systems, 6), as the plans write
  // them (float64): host memory, or the device's on the GPU.
  const bool virial = op == PmeOp::Compute && io.results.size() == 4;
  const std::size_t scalars = static_cast<std::size_t>(entries * systems) * (virial ? 7 : 1);
  std::vector<double> host(op == PmeOp::Compute ? scalars : 0, 0.0);
  double* scalar_out = host.data();
  if (op == PmeOp::Compute && place.backend == Backend::Cuda && scalars) {
    auto memory = place.scratch->Allocate(scalars * sizeof(double), alignof(double));
    if (!memory.has_value()) return ffi::Error::Internal("pmkit.jax.pme: no scratch memory for the energies");
    scalar_out = static_cast<double*>(*memory);
    from_host(place, scalar_out, host.data(), scalars * sizeof(double));  // zeros for empty systems
  }
  double* energy_out = scalar_out;
  double* virial_out = scalar_out + entries * systems;

  std::map<const CachedPme<T>*, const T*> bound;  // the positions each plan holds in this call
  for (std::int64_t b = 0; b < entries; ++b) {
    std::int64_t start = 0;
    for (std::int64_t s = 0; s < systems; start += sizes[s], ++s) {
      const std::int64_t count = sizes[s];
      if (count == 0) continue;
      const T* c = cells.data() + c_offsets[b] + 3 * s;
      auto cached = PmeCache<T>::instance().get(place, a, {double(c[0]), double(c[1]), double(c[2])}, count);
      std::lock_guard<std::mutex> lock(cached->mutex);
      PmePlan<T>& plan = cached->plan;
      if (place.backend == Backend::Cuda && plan.options().stream != place.stream) plan.set_stream(place.stream);
      const T* xs = x + x_offsets[b] + 3 * start;
      if (bound[cached.get()] != xs) {
        plan.set_points(components(xs, count));
        bound[cached.get()] = xs;
      }
      const View<const T> charges(q + q_offsets[b] + start, count);
      const bool reciprocal = a.reciprocal_only != 0;
      if (op == PmeOp::ChargeGradient) {
        const T* w = static_cast<const T*>(io.extra[0].untyped_data()) + w_offsets[b] + 3 * start;
        T* out = static_cast<T*>(io.results[0].untyped_data()) + b * n + start;
        plan.charge_gradient_of_forces(charges, components(w, count), View<T>(out, count), reciprocal);
        continue;
      }
      T* phi = static_cast<T*>(io.results[1].untyped_data()) + b * n + start;
      T* f = static_cast<T*>(io.results[2].untyped_data()) + (b * n + start) * 3;
      const auto forces = components(f, count);
      const std::int64_t system = b * systems + s;
      const View<double> energy(energy_out + system, 1);
      const View<double> w = virial ? View<double>(virial_out + 6 * system, 6) : View<double>();
      if (reciprocal) {
        plan.compute_reciprocal(charges, forces, energy, View<T>(phi, count), w);
      } else {
        plan.compute(charges, forces, energy, View<T>(phi, count), w);
      }
    }
  }
  if (op == PmeOp::ChargeGradient) {
    // A system of no charges has no gradient to write; the others wrote theirs.
    return ffi::Error::Success();
  }
  // An empty system's potentials and forces have no elements: nothing to clear. The
  // energies and virials in the positions' dtype.
  if (place.backend == Backend::Cuda && scalars) to_host(place, host.data(), scalar_out, scalars * sizeof(double));
  std::vector<T> converted(host.begin(), host.end());
  const std::size_t energies = static_cast<std::size_t>(entries * systems);
  from_host(place, io.results[0].untyped_data(), converted.data(), energies * sizeof(T));
  if (virial) from_host(place, io.results[3].untyped_data(), converted.data() + energies, 6 * energies * sizeof(T));
  return ffi::Error::Success();
}

template <PmeOp op>
ffi::Error call(const Place& place, const ffi::Dictionary& attrs, ffi::AnyBuffer positions, ffi::AnyBuffer charges,
                ffi::AnyBuffer cells, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  const std::string prefix = std::string("pmkit.jax.") + pme_op_name(op) + ": ";
  PmeAttributes a;
  if (auto e = decode(attrs, a); e.failure()) return e;
  Buffers io{positions, charges, cells, {}, {}};
  const std::size_t inputs = op == PmeOp::Compute ? 0 : 1;
  if (args.size() != inputs) {
    return invalid(prefix + std::to_string(3 + args.size()) + " inputs; it takes " + std::to_string(3 + inputs));
  }
  for (std::size_t i = 0; i < inputs; ++i) {
    auto arg = args.get<ffi::AnyBuffer>(i);
    if (arg.has_error()) return arg.error();
    io.extra.push_back(*arg);
  }
  const bool counted = op == PmeOp::Compute ? (rets.size() == 3 || rets.size() == 4) : rets.size() == 1;
  if (!counted) {
    return invalid(prefix + std::to_string(rets.size()) + " results; it writes " +
                   (op == PmeOp::Compute ? "3 (energies, potentials, forces) or 4 (and virials)" : "1"));
  }
  for (std::size_t i = 0; i < rets.size(); ++i) {
    auto result = rets.get<ffi::AnyBuffer>(i);
    if (result.has_error()) return result.error();
    io.results.push_back(*result.value());
  }
  const auto dtype = positions.element_type();
  bool same = dtype == ffi::DataType::F32 || dtype == ffi::DataType::F64;
  for (const auto& buffer : {charges, cells}) same = same && buffer.element_type() == dtype;
  for (const auto& buffer : io.extra) same = same && buffer.element_type() == dtype;
  for (const auto& buffer : io.results) same = same && buffer.element_type() == dtype;
  if (!same) return invalid(prefix + "positions, charges, cell and results must all be float32 or all float64");
  // No exception leaves a handler: a pmkit::Error (bad parameters, a rejected position,
  // on the GPU perhaps of an earlier call) is XLA's InvalidArgument.
  try {
    return dtype == ffi::DataType::F32 ? run<float>(op, place, a, io) : run<double>(op, place, a, io);
  } catch (const Error& e) {
    return invalid(prefix + e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(prefix + e.what());
  }
}

template <PmeOp op>
ffi::Error cpu_call(ffi::Dictionary attrs, ffi::AnyBuffer positions, ffi::AnyBuffer charges, ffi::AnyBuffer cells,
                    ffi::RemainingArgs args, ffi::RemainingRets rets) {
  return call<op>(Place{}, attrs, positions, charges, cells, args, rets);
}

template <PmeOp op>
ffi::Error cuda_call(void* stream, std::int32_t device, ffi::ScratchAllocator scratch, ffi::Dictionary attrs,
                     ffi::AnyBuffer positions, ffi::AnyBuffer charges, ffi::AnyBuffer cells, ffi::RemainingArgs args,
                     ffi::RemainingRets rets) {
  return call<op>(Place{Backend::Cuda, device, stream, &scratch}, attrs, positions, charges, cells, args, rets);
}

template <PmeOp op>
nb::tuple pme_handlers() {
  // Positions, charges and cells, then the weights (pme_charge_gradient).
  return capsules<BufferBinding<3, true>, &cpu_call<op>, &cuda_call<op>>();
}

}  // namespace

void add_pme_handlers(nb::dict& handlers) {
  handlers[pme_op_name(PmeOp::Compute)] = pme_handlers<PmeOp::Compute>();
  handlers[pme_op_name(PmeOp::ChargeGradient)] = pme_handlers<PmeOp::ChargeGradient>();
}

void clear_pme_plans() {
  PmeCache<float>::instance().clear();
  PmeCache<double>::instance().clear();
}

std::size_t cached_pme_plans() { return PmeCache<float>::instance().size() + PmeCache<double>::instance().size(); }

}  // namespace pmkit::python
