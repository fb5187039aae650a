// pmkit::Particles: the particle step's arrays and every part of a step but the caller's
// update (pmkit/particle_step.hpp); the host's arrays (HostParticleMemory).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/arguments.hpp"
#include "core/backend.hpp"
#include "core/particle_memory.hpp"
#include "cpu/openmp.hpp"
#include "pmkit/particle_step.hpp"

namespace pmkit {

using detail::fail;
using detail::kNoRejection;

namespace detail {

template <class T, int D>
class HostParticleMemory final : public ParticleMemory<T, D> {
 public:
  // threads: the plan's (Options::num_threads resolved), so that the step's loops use the
  // team the plan's own loops use.
  HostParticleMemory(const Grid<D>& grid, int threads) : axes_(step_axes(grid)), threads_(threads) {}
  void reserve(std::size_t n, int arrays, int fields, int deposits) override {
    n_ = n;
    for (auto& s : state_) s.resize(n * arrays);
    fields_.resize(n * fields);
    deposits_.resize(n * deposits);
    ids_.resize(n);
    moved_ids_.resize(n);
    order_.resize(n);
  }
  T* state(int buffer) override { return state_[buffer].data(); }
  T* fields() override { return fields_.data(); }
  T* deposits() override { return deposits_.data(); }
  std::uint32_t* ids() override { return ids_.data(); }
  std::uint32_t* order() override { return order_.data(); }
  StepRejection* rejection() override { return nullptr; }
  void check_mesh(const void*, const char*, int) override {}
  void clear(T* mesh, std::int64_t size) override { std::fill(mesh, mesh + size, T(0)); }
  void copy_in(T* to, View<const T> from) override {
    for (std::size_t k = 0; k < n_; ++k) to[k] = from[k];
  }
  void copy_out(View<T> to, const T* from) override {
    for (std::size_t k = 0; k < n_; ++k) to[ids_[k]] = from[k];
  }
  void fill_ids() override {
    for (std::size_t k = 0; k < n_; ++k) ids_[k] = static_cast<std::uint32_t>(k);
  }
  unsigned long long check_positions(T* x, int) override {
    const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(n_);
    unsigned long long first = kNoRejection;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads_) reduction(min : first)
#endif
    for (std::ptrdiff_t k = 0; k < n; ++k)
      for (int d = 0; d < D; ++d)
        if (!wrap_position(x[d * n + k], axes_[d])) first = std::min<unsigned long long>(first, k);
    return first;
  }
  void gather(const T* from, T* to, int arrays) override {
    const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(n_);
    for (int j = 0; j < arrays; ++j) {
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads_)
#endif
      for (std::ptrdiff_t k = 0; k < n; ++k) to[j * n + k] = from[j * n + order_[k]];
    }
    for (std::size_t k = 0; k < n_; ++k) moved_ids_[k] = ids_[order_[k]];
    std::swap(ids_, moved_ids_);
  }
  unsigned long long take_rejection(int&) override { return kNoRejection; }
  void affine_gather(const Layout<D>& layout, const T* x, const AffineMeshes<const T>& meshes, T* out) override {
    const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(n_);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads_)
#endif
    for (std::ptrdiff_t k = 0; k < n; ++k) affine_gather_particle<D>(layout, x, meshes, out, n_, k);
  }
  // In binned order on one thread: the same sums on every run and thread count.
  void affine_spread(const Layout<D>& layout, const T* x, const T* q, const AffineMeshes<T>& meshes,
                     std::int64_t mesh_size, bool overwrite, bool) override {
    if (overwrite)
      for (int m = 0; m < meshes.count; ++m) std::fill(meshes.mesh[m], meshes.mesh[m] + mesh_size, T(0));
    for (std::size_t k = 0; k < n_; ++k)
      affine_spread_particle<D>(layout, x, q, meshes.count, n_, k,
                                [&](int m, std::int64_t i, T value) { meshes.mesh[m][i] += value; });
  }
  T read(const T* at) override { return *at; }
  std::uint32_t read_id(std::size_t slot) override { return ids_[slot]; }

 private:
  StepAxes<D> axes_;
  int threads_;
  std::size_t n_ = 0;
  std::vector<T> state_[2], fields_, deposits_;
  std::vector<std::uint32_t> ids_, moved_ids_, order_;
};

template <class T, int D>
std::unique_ptr<ParticleMemory<T, D>> make_host_particle_memory(const Grid<D>& grid, int threads) {
  return std::make_unique<HostParticleMemory<T, D>>(grid, threads);
}

}  // namespace detail

template <class T, int D>
Particles<T, D>::Particles(Plan<T, D>& plan, int properties) : plan_(&plan), properties_(properties) {
  if (properties < 0)
    fail(ErrorCode::InvalidArgument, "Particles: properties = ", properties, ": values a particle, 0 or more");
  if (plan.options().host_arrays)
    fail(ErrorCode::Unsupported,
         "Particles: the plan has options.host_arrays; the particles live in the device's memory, so the plan "
         "takes device arrays (host_arrays = false)");
  if (on_device()) {
#if defined(PMKIT_WITH_CUDA)
    memory_ = detail::make_cuda_particle_memory<T, D>(plan.grid(), plan.options());
#else
    fail(ErrorCode::Unsupported, "Particles: the plan's backend is CUDA, which this build of pmkit lacks");
#endif
  } else {
    memory_ = detail::make_host_particle_memory<T, D>(plan.grid(), detail::openmp_threads(plan.options().num_threads));
  }
}

template <class T, int D>
Particles<T, D>::~Particles() = default;
template <class T, int D>
Particles<T, D>::Particles(Particles&&) noexcept = default;
template <class T, int D>
Particles<T, D>& Particles<T, D>::operator=(Particles&&) noexcept = default;

template <class T, int D>
T* Particles<T, D>::state(int buffer) const {
  return memory_->state(buffer);
}

template <class T, int D>
std::array<View<const T>, D> Particles<T, D>::positions() const {
  std::array<View<const T>, D> x;
  for (int d = 0; d < D; ++d) x[d] = View<const T>(state(current_) + d * n_, n_);
  return x;
}

template <class T, int D>
View<const T> Particles<T, D>::property(int i) const {
  if (i < 0 || i >= properties_)
    fail(ErrorCode::InvalidArgument, "Particles::property(", i, "): the particles have ", properties_,
         " properties, 0 to ", properties_ - 1);
  return View<const T>(state(current_) + (D + i) * n_, n_);
}

template <class T, int D>
View<const std::uint32_t> Particles<T, D>::ids() const {
  return View<const std::uint32_t>(memory_->ids(), n_);
}

// The plan bins the current positions; the particles' order becomes the binning's.
template <class T, int D>
void Particles<T, D>::bind() {
  std::array<View<const T>, D> x = positions();
  plan_->set_points(x);
}

// The state in buffer `from` (which the plan has just binned in full) into the plan's
// binned order, in the other buffer, which becomes the current one; the plan then takes
// that order as its own (its binning's caller indices become the slots) instead of
// binning the permuted positions again, which would give the same binning.
template <class T, int D>
void Particles<T, D>::put_in_binned_order(int from) {
  plan_->binned_order(View<std::uint32_t>(memory_->order(), n_));
  memory_->gather(state(from), state(1 - from), D + properties_);
  current_ = 1 - from;
  detail::PlanAccess<T, D>::adopt_binned_order(*plan_);
}

template <class T, int D>
void Particles<T, D>::assign(const typename Plan<T, D>::Positions& positions, Span<View<const T>> properties) {
  const std::size_t n = detail::check_positions<T, D>(positions);
  if (static_cast<int>(properties.size()) != properties_)
    fail(ErrorCode::SizeMismatch, "Particles::assign: properties has ", properties.size(), " views but the particles have ",
         properties_, " properties");
  detail::check_particle_arrays("properties", properties, n);
  if (n >= 0xffffffffu) fail(ErrorCode::InvalidArgument, "Particles::assign: ", n, " particles; fewer than 2^32 - 1");
  n_ = n;
  memory_->reserve(n, D + properties_, 0, 0);
  current_ = 0;
  for (int d = 0; d < D; ++d) memory_->copy_in(state(0) + d * n, positions[d]);
  for (int i = 0; i < properties_; ++i) memory_->copy_in(state(0) + (D + i) * n, properties[i]);
  memory_->fill_ids();
  // Wrapped as a step's positions are (a position the plan rejects is reported by the
  // plan: on the device a rejection recorded here is cleared first).
  const unsigned long long bad = memory_->check_positions(state(0), 0);
  if (bad != kNoRejection) {
    try {
      reject(static_cast<std::size_t>(bad), 0, false);
    } catch (const Error&) {
      n_ = 0;  // no particles until the next assign
      throw;
    }
  }
  if (on_device()) {
    int good = 0;
    memory_->take_rejection(good);
  }
  bind();
  put_in_binned_order(0);
}

template <class T, int D>
void Particles<T, D>::copy_out(const std::array<View<T>, D>& positions, Span<View<T>> properties) const {
  for (int d = 0; d < D; ++d)
    if (positions[d].size != n_ || !positions[d].data)
      fail(ErrorCode::SizeMismatch, "Particles::copy_out: positions[", d, "] has ", positions[d].size,
           " values (or no data) but there are ", n_, " particles");
  if (static_cast<int>(properties.size()) != properties_)
    fail(ErrorCode::SizeMismatch, "Particles::copy_out: properties has ", properties.size(),
         " views but the particles have ", properties_, " properties");
  detail::check_particle_arrays("properties", properties, n_);
  for (int d = 0; d < D; ++d) memory_->copy_out(positions[d], state(current_) + d * n_);
  for (int i = 0; i < properties_; ++i) memory_->copy_out(properties[i], state(current_) + (D + i) * n_);
}

// A plan call of a step: where it reports an error on a CUDA plan, the rejection that
// the particles recorded (if any) is the error, and the state is restored.
template <class T, int D>
template <class F>
void Particles<T, D>::guard(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    if (on_device()) recover();
    throw;
  }
}

// The error of the particle at `slot` of buffer `bad_buffer`, its first bad coordinate
// named: one that a step's update left (the particles keep the state before the step),
// or one given to assign.
template <class T, int D>
void Particles<T, D>::reject(std::size_t slot, int bad_buffer, bool in_step) {
  const std::uint32_t id = memory_->read_id(slot);
  const char* lead = in_step ? "step: the update left particle " : "Particles::assign: particle ";
  const char* tail = in_step ? "; the particles keep the state before the step" : "";
  const T* x = state(bad_buffer);
  const auto axes = detail::step_axes(plan_->grid());
  for (int d = 0; d < D; ++d) {
    T value = memory_->read(x + d * n_ + slot);
    const T original = value;
    if (detail::wrap_position(value, axes[d])) continue;
    if (!std::isfinite(static_cast<double>(original)))
      fail(ErrorCode::NonFinitePosition, lead, id, " (binned slot ", slot, ") at x[", d, "] = ", original, tail);
    fail(ErrorCode::OutOfBounds, lead, id, " (binned slot ", slot, ") at x[", d, "] = ", original,
         ", outside the bounded axis [", axes[d].origin, ", ", axes[d].origin + axes[d].extent, "]", tail);
  }
  fail(ErrorCode::NonFinitePosition, lead, id, " (binned slot ", slot, ") at a bad position", tail);
}

// On a CUDA plan, after an error or a wait: where a step recorded a rejection, the state
// before that step becomes the current one, the plan bins it again and the rejection is
// thrown; else nothing.
template <class T, int D>
void Particles<T, D>::recover() {
  int good = current_;
  const unsigned long long slot = memory_->take_rejection(good);
  if (slot == kNoRejection) return;
  // The plan's own reports of the bad positions (the bad step's, and a later step's
  // update_points of the arrays it left), one a call.
  for (int report = 0; report < 4; ++report) {
    try {
      plan_->synchronize();
      break;
    } catch (const Error&) {
    }
  }
  current_ = good;
  bind();
  reject(static_cast<std::size_t>(slot), 1 - good, true);
}

template <class T, int D>
void Particles<T, D>::synchronize() {
  if (!on_device()) return;
  try {
    plan_->synchronize();
  } catch (const Error&) {
    recover();
    throw;
  }
  recover();
}

// The affine meshes of a step as the passes take them: each of the plan's mesh_size()
// values, contiguous.
template <class T, int D, class V>
detail::AffineMeshes<V> affine_meshes(const Plan<T, D>& plan, const char* what, Span<View<V>> meshes) {
  detail::AffineMeshes<V> out;
  out.count = static_cast<int>(meshes.size());
  for (int m = 0; m < out.count; ++m) {
    const View<V>& mesh = meshes[m];
    if (!mesh.data || mesh.stride != 1 || mesh.size != static_cast<std::size_t>(plan.mesh_size()))
      fail(ErrorCode::SizeMismatch, "step: meshes.", what, "[", m, "] has ", mesh.size, " values of stride ",
           mesh.stride, " (or no data); the plan's meshes are ", plan.mesh_size(), " contiguous values");
    out.mesh[m] = mesh.data;
  }
  return out;
}

// Each of `meshes` in the memory the step's pass reads and writes (ParticleMemory::check_mesh).
template <class T, int D, class V>
void check_in_memory(detail::ParticleMemory<T, D>& memory, const char* what, const detail::AffineMeshes<V>& meshes) {
  for (int m = 0; m < meshes.count; ++m) memory.check_mesh(meshes.mesh[m], what, m);
}

// The meshes the step's pass interpolates or deposits on (each the plan's mesh_size() contiguous
// values, in the plan's memory) into `out`.
template <class T, int D, class V>
void fused_meshes(const Plan<T, D>& plan, detail::ParticleMemory<T, D>& memory, const char* what,
                  Span<View<V>> meshes, V* (&out)[detail::kMaxStepMeshes]) {
  const detail::AffineMeshes<V> checked = affine_meshes(plan, what, meshes);
  check_in_memory(memory, what, checked);
  for (int m = 0; m < checked.count; ++m) out[m] = checked.mesh[m];
}

// Whether a deposit's mesh shares memory with a mesh the step reads: then the pass
// cannot deposit while other particles still read (the deposits run after it).
template <class T, int D>
bool deposits_overlap_reads(const Plan<T, D>& plan, const StepMeshes<T>& meshes) {
  const std::uintptr_t bytes = sizeof(T) * static_cast<std::uintptr_t>(plan.mesh_size());
  const auto at = [](const T* p) { return reinterpret_cast<std::uintptr_t>(p); };
  for (auto written : {meshes.deposits, meshes.affine_deposits})
    for (const View<T>& w : written)
      for (auto read : {meshes.values, meshes.gradients, meshes.affine_values})
        for (const View<const T>& r : read)
          if (w.data && r.data && at(w.data) < at(r.data) + bytes && at(r.data) < at(w.data) + bytes) return true;
  return false;
}

template <class T, int D>
detail::StepArrays<T> Particles<T, D>::begin_step(const StepMeshes<T>& meshes, const StepShape& shape,
                                                  detail::StepGather<T, D>& gather) {
  if (shape.properties != properties_)
    fail(ErrorCode::InvalidArgument, "step: the update declares ", shape.properties,
         " properties but the particles have ", properties_);
  const auto count = [](const char* what, std::size_t given, int declared) {
    if (given != static_cast<std::size_t>(declared))
      fail(ErrorCode::SizeMismatch, "step: meshes.", what, " has ", given, " meshes but the update declares ", declared);
  };
  count("values", meshes.values.size(), shape.values);
  count("gradients", meshes.gradients.size(), shape.gradients);
  count("deposits", meshes.deposits.size(), shape.deposits);
  count("affine_values", meshes.affine_values.size(), shape.affine_values);
  count("affine_deposits", meshes.affine_deposits.size(), shape.affine_deposits);
  const bool affine = shape.affine_values > 0 || shape.affine_deposits > 0;
  if (affine && !(plan_->kernel() == Kernel::bspline(3)))
    fail(ErrorCode::Unsupported, "step: the affine transfers (affine_values, affine_deposits) take the quadratic "
         "B-spline, Kernel::bspline(3); the plan's kernel is ", plan_->kernel().name());
  if (!plan_->has_points() || plan_->num_points() != n_)
    fail(ErrorCode::NotReady, "step: the plan holds ", plan_->has_points() ? plan_->num_points() : 0,
         " points but the particles are ", n_, ": assign the particles (and leave the plan's points to them)");
  const detail::Layout<D> layout = detail::make_layout(plan_->grid(), plan_->kernel().ghost_width());
  gather.layout = layout;
  gather.axes = detail::step_axes(plan_->grid());
  for (int d = 0; d < D; ++d) gather.spacing[d] = static_cast<T>(layout.axis[d].spacing);
  // The pass interpolates, but in a CUDA plan's deterministic mode: there the plan's
  // interp calls give the fields, the bits of the unfused calls. On CUDA it deposits
  // too, but in deterministic mode (the plan's spread and the exact affine deposit give
  // the same bits on every run).
  gather.fused = !(on_device() && plan_->options().deterministic);
  gather.fused_deposits = gather.fused && on_device() && shape.deposits + shape.affine_deposits > 0 &&
                          !deposits_overlap_reads(*plan_, meshes);
  const int plain_fields = shape.values + D * shape.gradients;
  const int fields = gather.fused ? 0 : plain_fields + (1 + D) * shape.affine_values;
  const int deposits = gather.fused_deposits ? 0 : shape.deposits + (1 + D) * shape.affine_deposits;
  memory_->reserve(n_, D + properties_, fields, deposits);
  shape_ = shape;
  deposits_in_pass_ = gather.fused_deposits;
  // Checked before the step moves anything.
  gather.affine_deposits = affine_meshes(*plan_, "affine_deposits", meshes.affine_deposits);
  if (gather.fused_deposits) {
    fused_meshes(*plan_, *memory_, "deposits", meshes.deposits, gather.deposits);
    check_in_memory(*memory_, "affine_deposits", gather.affine_deposits);
    if (meshes.deposit_mode == Accumulate::Overwrite) {
      for (int m = 0; m < shape.deposits; ++m) memory_->clear(gather.deposits[m], plan_->mesh_size());
      for (int m = 0; m < gather.affine_deposits.count; ++m)
        memory_->clear(gather.affine_deposits.mesh[m], plan_->mesh_size());
    }
  }
  if (gather.fused) {
    fused_meshes(*plan_, *memory_, "values", meshes.values, gather.values);
    fused_meshes(*plan_, *memory_, "gradients", meshes.gradients, gather.gradients);
    gather.affine = affine_meshes(*plan_, "affine_values", meshes.affine_values);
    check_in_memory(*memory_, "affine_values", gather.affine);
  } else {
    T* out = memory_->fields();
    if (shape.values > 0) {
      std::vector<View<T>> views;
      for (int i = 0; i < shape.values; ++i) views.emplace_back(out + i * n_, n_);
      guard([&] { plan_->interp(meshes.values, Span<View<T>>(views)); });
    }
    if (shape.gradients > 0) {
      std::vector<View<T>> views;
      for (int i = 0; i < D * shape.gradients; ++i) views.emplace_back(out + (shape.values + i) * n_, n_);
      guard([&] { plan_->interp_gradient(meshes.gradients, Span<View<T>>(views)); });
    }
    if (shape.affine_values > 0 && n_ > 0)
      memory_->affine_gather(layout, state(current_), affine_meshes(*plan_, "affine_values", meshes.affine_values),
                             out + plain_fields * n_);
  }
  detail::StepArrays<T> a;
  a.n = n_;
  a.in = state(current_);
  a.out = state(1 - current_);
  a.fields = memory_->fields();
  a.deposits = memory_->deposits();
  a.ids = memory_->ids();
  a.rejection = memory_->rejection();
  a.good_buffer = current_;
  return a;
}

template <class T, int D>
unsigned long long Particles<T, D>::share_on_host(unsigned long long (*range)(const void*, std::size_t, std::size_t),
                                                  const void* context) const {
  const std::size_t threads = static_cast<std::size_t>(detail::openmp_threads(plan_->options().num_threads));
  const std::size_t parts = std::max<std::size_t>(1, std::min(threads, n_ / 1024 + 1));
  const std::ptrdiff_t count = static_cast<std::ptrdiff_t>(parts);
  unsigned long long first = kNoRejection;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(static_cast<int>(parts)) schedule(static, 1) reduction(min : first)
#endif
  for (std::ptrdiff_t part = 0; part < count; ++part) {
    const std::size_t p = static_cast<std::size_t>(part);
    first = std::min(first, range(context, n_ * p / parts, n_ * (p + 1) / parts));
  }
  return first;
}

// After the step's pass, which checked and wrapped the new positions (bad_slot: the
// host's first bad one; a device records its own).
template <class T, int D>
void Particles<T, D>::end_step(const StepMeshes<T>& meshes, unsigned long long bad_slot) {
  const int next = 1 - current_;
  if (bad_slot != kNoRejection) reject(static_cast<std::size_t>(bad_slot), next, true);
  std::array<View<const T>, D> x;
  for (int d = 0; d < D; ++d) x[d] = View<const T>(state(next) + d * n_, n_);
  guard([&] { plan_->update_points(x); });
  if (shape_.deposits > 0 && !deposits_in_pass_) {
    std::vector<View<const T>> q;
    for (int i = 0; i < shape_.deposits; ++i) q.emplace_back(memory_->deposits() + i * n_, n_);
    guard([&] { plan_->spread(Span<View<const T>>(q), meshes.deposits, meshes.deposit_mode); });
  }
  if (shape_.affine_deposits > 0 && !deposits_in_pass_)
    memory_->affine_spread(detail::make_layout(plan_->grid(), plan_->kernel().ghost_width()), state(next),
                           memory_->deposits() + shape_.deposits * n_,
                           affine_meshes(*plan_, "affine_deposits", meshes.affine_deposits), plan_->mesh_size(),
                           meshes.deposit_mode == Accumulate::Overwrite, plan_->options().deterministic);
  if (plan_->binning_kept()) {
    current_ = next;
  } else {
    guard([&] { put_in_binned_order(next); });
  }
}

template class Particles<float, 2>;
template class Particles<float, 3>;
template class Particles<double, 2>;
template class Particles<double, 3>;

}  // namespace pmkit
