#pragma once
// The particle step: the fields interpolated at every particle, the caller's update of
// each particle, and the re-binning of the moved particles, on particles that the plan
// keeps in its binned order from step to step; optionally a deposit at the new
// positions of quantities the update computes (a material point method's G2P, update
// and P2G), with APIC's affine gather and deposit on the quadratic B-spline
// (StepParticle; examples/mpm is MLS-MPM on them).
//
//   struct Push {                                  // a leapfrog push in a potential
//     static constexpr int properties = 3;         // vx, vy, vz
//     static constexpr int gradients = 1;          // grad phi
//     float qm_dt, dt;
//     PMKIT_HD void operator()(pmkit::StepParticleFor<float, 3, Push>& p) const {
//       for (int d = 0; d < 3; ++d) {
//         p.prop[d] -= qm_dt * p.gradient[0][d];
//         p.x[d] += dt * p.prop[d];
//       }
//     }
//   };
//   pmkit::Particles<float, 3> particles(plan, 3);
//   particles.assign({x, y, z}, {vx, vy, vz});     // copied in, binned, put in binned order
//   pmkit::step(particles, Push{...}, {{}, {phi}});        // CPU plan, any C++ file
//   pmkit::cuda::step(particles, Push{...}, {{}, {phi}});  // either plan, a file nvcc compiles
//                                                          // (pmkit/cuda/particle_step.cuh)
//
// Particles owns the particle arrays, in the plan's memory (device memory on a CUDA
// plan), in the plan's binned order: a full re-binning moves every array with the
// binning in the same call (and the plan takes the moved order as its own), and the update writes into a second set of arrays, so that a
// step that the update leaves with a bad position keeps the state before it. The caller
// reads the arrays through positions(), property() and ids() (binned order), or copies
// them out in the order they were assigned in (copy_out).
//
// The functor's contract is in docs/api.md ("The particle step").
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "pmkit/config.hpp"
#include "pmkit/detail/step_gather.hpp"
#include "pmkit/kernels.hpp"
#include "pmkit/plan.hpp"

namespace pmkit {

namespace detail {
// A functor's count `Update::name`, or 0 where it declares none.
#define PMKIT_STEP_COUNT(name)                                                       \
  template <class U, class = void>                                                   \
  struct step_##name : std::integral_constant<int, 0> {};                            \
  template <class U>                                                                 \
  struct step_##name<U, std::void_t<decltype(U::name)>> : std::integral_constant<int, U::name> {};
PMKIT_STEP_COUNT(properties)
PMKIT_STEP_COUNT(values)
PMKIT_STEP_COUNT(gradients)
PMKIT_STEP_COUNT(deposits)
PMKIT_STEP_COUNT(affine_values)
PMKIT_STEP_COUNT(affine_deposits)
#undef PMKIT_STEP_COUNT
}  // namespace detail

// What an update functor declares (each a static constexpr int, 0 where absent): the
// values each particle carries besides its position, the meshes interpolated at it, the
// meshes whose gradient is interpolated at it, the quantities it deposits, the meshes
// interpolated with their first moment (the affine gather) and the quantities deposited
// with a slope (the affine deposit). The affine transfers need the plan's kernel to be
// the quadratic B-spline, Kernel::bspline(3).
template <class Update>
struct StepCounts {
  static constexpr int properties = detail::step_properties<Update>::value;
  static constexpr int values = detail::step_values<Update>::value;
  static constexpr int gradients = detail::step_gradients<Update>::value;
  static constexpr int deposits = detail::step_deposits<Update>::value;
  static constexpr int affine_values = detail::step_affine_values<Update>::value;
  static constexpr int affine_deposits = detail::step_affine_deposits<Update>::value;
  static_assert(properties >= 0 && values >= 0 && gradients >= 0 && deposits >= 0 && affine_values >= 0 &&
                    affine_deposits >= 0,
                "a step's counts are not negative");
  static_assert(affine_values <= 8 && affine_deposits <= 8, "a step has at most 8 affine meshes of each kind");
  static_assert(values <= 8 && gradients <= 8 && deposits <= 8,
                "a step takes at most 8 meshes of values, 8 of gradients and 8 of deposits");
};

// One particle as the update functor sees it. Arrays of a count 0 have one unused entry.
// With w_i the kernel's weight of node i at the particle and x_i the node's position
// (the periodic image nearest the particle):
//   affine_value[m] = sum_i w_i f_i, affine_moment[m][d] = sum_i w_i f_i (x_i - x)_d
// for f = meshes.affine_values[m] at x before the update (an APIC/MLS-MPM G2P reads the
// grid velocity's components and forms C = 4 / h^2 affine_moment), and
//   meshes.affine_deposits[a] gets w_i (affine_deposit[a] + sum_d affine_slope[a][d] (x_i - x)_d)
// at the new x (a P2G of mass, a = m, and of affine momentum, a = m v_c, slope = row c of
// m C - dt V 4 / h^2 stress).
template <class T, int D, int P, int V, int G, int Q, int AV = 0, int AQ = 0>
struct StepParticle {
  T x[D];                        // in: the position; out: the new position
  T prop[P > 0 ? P : 1];         // in: the properties; out: the new properties
  T value[V > 0 ? V : 1];        // in: value[i], meshes.values[i] interpolated at x
  T gradient[G > 0 ? G : 1][D];  // in: gradient[i][d], d/dx_d of meshes.gradients[i] at x
  T deposit[Q > 0 ? Q : 1];      // out: spread onto meshes.deposits[i] at the new x (0 on entry)
  T affine_value[AV > 0 ? AV : 1];      // in: meshes.affine_values[m] interpolated at x
  T affine_moment[AV > 0 ? AV : 1][D];  // in: its first moment about x (above)
  T affine_deposit[AQ > 0 ? AQ : 1];    // out: the value deposited on meshes.affine_deposits[a] (0 on entry)
  T affine_slope[AQ > 0 ? AQ : 1][D];   // out: its slope along the node offset (0 on entry)
  std::uint32_t id;              // in: the particle's index in the arrays given to assign
};
template <class T, int D, class Update>
using StepParticleFor = StepParticle<T, D, StepCounts<Update>::properties, StepCounts<Update>::values,
                                     StepCounts<Update>::gradients, StepCounts<Update>::deposits,
                                     StepCounts<Update>::affine_values, StepCounts<Update>::affine_deposits>;

// The counts a step passes to Particles' common part.
struct StepShape {
  int properties = 0, values = 0, gradients = 0, deposits = 0, affine_values = 0, affine_deposits = 0;
  template <class Update>
  static constexpr StepShape of() {
    using C = StepCounts<Update>;
    return {C::properties, C::values, C::gradients, C::deposits, C::affine_values, C::affine_deposits};
  }
};

// The meshes of one step, in the plan's memory: interpolated (values: interp;
// gradients: interp_gradient; affine_values: with their first moments) at the positions
// before the update, and the deposits' meshes (deposits: spread; affine_deposits: the
// affine deposit; both at the positions after it, with deposit_mode). Each mesh has the
// plan's mesh_size() values. The affine deposit sums in the particles' binned order on
// the CPU; on a CUDA plan with atomics, in deterministic mode in integers (the same bits
// on every run). The Spans do not own their lists: braced lists in the step's call live
// through it, but a StepMeshes kept for later calls takes arrays that outlive them.
template <class T>
struct StepMeshes {
  Span<View<const T>> values = {};
  Span<View<const T>> gradients = {};
  Span<View<T>> deposits = {};
  Accumulate deposit_mode = Accumulate::Overwrite;
  Span<View<const T>> affine_values = {};
  Span<View<T>> affine_deposits = {};
};

namespace detail {
// A position that a step's update left bad, recorded on a device: the first bad slot
// (kNoRejection: none), and the state buffer that holds the particles before that step.
struct StepRejection {
  unsigned long long slot;
  int good_buffer;
};
constexpr unsigned long long kNoRejection = ~0ull;

// What the update pass reads and writes, contiguous arrays of n in binned order.
template <class T>
struct StepArrays {
  std::size_t n = 0;
  const T* in = nullptr;  // the positions (D arrays), then the properties
  T* out = nullptr;       // the same for the new state
  // Where the plan's interp calls ran (StepGather::fused false): the values (one array a
  // mesh), then D arrays a gradient mesh, then an array an affine value, then D arrays
  // an affine moment.
  const T* fields = nullptr;
  // One array a deposited quantity, then one an affine deposit, then D a slope.
  T* deposits = nullptr;
  const std::uint32_t* ids = nullptr;
  // Device memory on a CUDA plan: the record of a bad position (its slot kNoRejection
  // while there is none; once a step has left one, the passes write nothing), and the
  // state buffer this step starts from, which a rejection keeps.
  StepRejection* rejection = nullptr;
  int good_buffer = 0;
};

// The fields that the plan's interp calls wrote for slot k.
template <int D, class Update, class T, class Particle>
PMKIT_HD PMKIT_FORCEINLINE void load_fields(const StepArrays<T>& a, std::size_t k, Particle& p) {
  using C = StepCounts<Update>;
  const std::size_t n = a.n;
  PMKIT_UNROLL
  for (int i = 0; i < C::values; ++i) p.value[i] = a.fields[i * n + k];
  PMKIT_UNROLL
  for (int i = 0; i < C::gradients; ++i) {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) p.gradient[i][d] = a.fields[(C::values + D * i + d) * n + k];
  }
  constexpr int affine_fields = C::values + D * C::gradients;
  PMKIT_UNROLL
  for (int m = 0; m < C::affine_values; ++m) {
    p.affine_value[m] = a.fields[(affine_fields + m) * n + k];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d)
      p.affine_moment[m][d] = a.fields[(affine_fields + C::affine_values + D * m + d) * n + k];
  }
}

// One particle's step: its state loaded, its fields interpolated (kFused: from the
// meshes at its position, kernel K) or loaded, the functor, its new position checked and
// wrapped, its new state stored (its deposits stay in p). Returns whether the new
// position is good (a bad one is stored as the update left it).
template <class K, bool kFused, class T, int D, class Update>
PMKIT_HD PMKIT_FORCEINLINE bool update_particle(const StepArrays<T>& a, const StepGather<T, D>& g, std::size_t k,
                                                const Update& update, StepParticleFor<T, D, Update>& p) {
  using C = StepCounts<Update>;
  const std::size_t n = a.n;
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) p.x[d] = a.in[d * n + k];
  PMKIT_UNROLL
  for (int i = 0; i < C::properties; ++i) p.prop[i] = a.in[(D + i) * n + k];
  if constexpr (kFused)
    gather_fields<K, C::values, C::gradients, C::affine_values>(g, p);
  else
    load_fields<D, Update>(a, k, p);
  PMKIT_UNROLL
  for (int i = 0; i < C::deposits; ++i) p.deposit[i] = T(0);
  PMKIT_UNROLL
  for (int i = 0; i < C::affine_deposits; ++i) {
    p.affine_deposit[i] = T(0);
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) p.affine_slope[i][d] = T(0);
  }
  p.id = a.ids[k];
  update(p);
  bool good = true;
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) good = wrap_position(p.x[d], g.axes[d]) && good;
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) a.out[d * n + k] = p.x[d];
  PMKIT_UNROLL
  for (int i = 0; i < C::properties; ++i) a.out[(D + i) * n + k] = p.prop[i];
  return good;
}

// A particle's deposits into the arrays that the library's deposit passes read.
template <class T, int D, class Update>
PMKIT_HD PMKIT_FORCEINLINE void store_deposits(const StepArrays<T>& a, std::size_t k,
                                               const StepParticleFor<T, D, Update>& p) {
  using C = StepCounts<Update>;
  const std::size_t n = a.n;
  PMKIT_UNROLL
  for (int i = 0; i < C::deposits; ++i) a.deposits[i * n + k] = p.deposit[i];
  PMKIT_UNROLL
  for (int i = 0; i < C::affine_deposits; ++i) {
    a.deposits[(C::deposits + i) * n + k] = p.affine_deposit[i];
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d)
      a.deposits[(C::deposits + C::affine_deposits + D * i + d) * n + k] = p.affine_slope[i][d];
  }
}

// Refuses a plan whose kernel is not among Ks, the kernels a step is compiled for (none
// listed: every kernel), before the step moves anything.
template <class... Ks>
void require_compiled_kernel(const Kernel& kernel, const char* step) {
  if constexpr (sizeof...(Ks) > 0) {
    if (((kernel == kernels::kernel_of(Ks{})) || ...)) return;
    std::string listed;
    ((listed += (listed.empty() ? "" : ", ") + kernels::kernel_of(Ks{}).name()), ...);
    fail(ErrorCode::Unsupported, step, ": the plan's kernel is ", kernel.name(), " but the step is compiled for ",
         listed, " only (its template arguments)");
  }
}

// Calls f(K{}) for the run-time kernel among Ks (none listed: kernels::dispatch, every
// kernel); require_compiled_kernel has refused any other.
template <class... Ks, class F>
void dispatch_compiled(const Kernel& kernel, F&& f) {
  if constexpr (sizeof...(Ks) == 0)
    kernels::dispatch(kernel, f);
  else
    static_cast<void>(((kernel == kernels::kernel_of(Ks{}) ? (f(Ks{}), true) : false) || ...));
}

// Calls f(K{}, fused, deposit) (std::true_type or std::false_type) for the pass: K the
// plan's kernel where the pass interpolates or deposits with it (one instantiation for
// each of Ks, or each plan kernel where none is listed), else one instantiation; deposit
// only where kMayDeposit (a device's pass) and the step's meshes take the deposits in
// the pass.
template <class Update, bool kMayDeposit, class... Ks, class T, int D, class F>
void with_step_kernel(const Kernel& kernel, const StepGather<T, D>& g, F&& f) {
  using C = StepCounts<Update>;
  if (!g.fused) return f(kernels::BSpline<2>{}, std::false_type{}, std::false_type{});
  const bool deposit = g.fused_deposits && C::deposits + C::affine_deposits > 0;
  const auto with = [&](auto k) {
    if constexpr (kMayDeposit) {
      if (deposit) return f(k, std::true_type{}, std::true_type{});
    }
    f(k, std::true_type{}, std::false_type{});
  };
  if (C::values > 0 || C::gradients > 0 || (deposit && C::deposits > 0))
    dispatch_compiled<Ks...>(kernel, with);
  else
    with(kernels::BSpline<2>{});
}

template <class T, int D>
class ParticleMemory;
struct ParticlesAccess;
}  // namespace detail

template <class T, int D>
class Particles {
 public:
  // Particles of `properties` values each (besides the position) on `plan`, which must
  // outlive them. The plan's points then belong to the particles: a step checks that the
  // plan holds as many points as there are particles (NotReady), and other positions of
  // that count binned between steps would give the step their fields.
  Particles(Plan<T, D>& plan, int properties);
  ~Particles();
  Particles(Particles&&) noexcept;
  Particles& operator=(Particles&&) noexcept;
  Particles(const Particles&) = delete;
  Particles& operator=(const Particles&) = delete;

  // Copies the caller's positions (D views of one length) and `properties` views of that
  // length in (the plan's memory), bins them and puts them in binned order. ids() then
  // gives each particle's index in these arrays. Positions are wrapped into the domain
  // on periodic axes; a non-finite one, or one outside a bounded axis, is an error
  // naming the particle (CPU: thrown here, after which the particles are empty until
  // the next assign; CUDA: reported by the plan later, as for set_points).
  void assign(const typename Plan<T, D>::Positions& positions, Span<View<const T>> properties);
  std::size_t size() const { return n_; }
  int num_properties() const { return properties_; }
  // The current state in binned order, in the plan's memory: positions wrapped into the
  // domain on periodic axes. Valid until the next step or assign.
  std::array<View<const T>, D> positions() const;
  View<const T> property(int i) const;
  View<const std::uint32_t> ids() const;
  // The current state in the order of assign's arrays: positions[d][ids[k]] =
  // positions()[d][k], the same for the properties. In the plan's memory.
  void copy_out(const std::array<View<T>, D>& positions, Span<View<T>> properties) const;
  // CUDA: waits for the queued steps and throws the error of a position an update left
  // bad, with the state restored to the one before that step. CPU: returns at once (a
  // step checks before it returns).
  void synchronize();
  Plan<T, D>& plan() const { return *plan_; }

 private:
  friend struct detail::ParticlesAccess;
  detail::StepArrays<T> begin_step(const StepMeshes<T>& meshes, const StepShape& shape,
                                   detail::StepGather<T, D>& gather);
  void end_step(const StepMeshes<T>& meshes, unsigned long long bad_slot);
  unsigned long long share_on_host(unsigned long long (*range)(const void*, std::size_t, std::size_t),
                                   const void* context) const;
  T* state(int buffer) const;
  void put_in_binned_order(int from);
  void bind();
  template <class F>
  void guard(F&& call);
  [[noreturn]] void reject(std::size_t slot, int bad_buffer, bool in_step);
  void recover();
  bool on_device() const { return plan_->options().backend == Backend::Cuda; }

  Plan<T, D>* plan_;
  int properties_;
  std::size_t n_ = 0;
  int current_ = 0;  // the state buffer (0 or 1) that holds the particles
  StepShape shape_;
  bool deposits_in_pass_ = false;  // the step's pass deposits (a CUDA plan's fast mode)
  std::unique_ptr<detail::ParticleMemory<T, D>> memory_;
};

namespace detail {
struct ParticlesAccess {
  template <class T, int D>
  static StepArrays<T> begin(Particles<T, D>& p, const StepMeshes<T>& meshes, const StepShape& shape,
                             StepGather<T, D>& gather) {
    return p.begin_step(meshes, shape, gather);
  }
  // bad_slot: the first slot the host's pass found bad, or kNoRejection (a device's pass
  // records its own).
  template <class T, int D>
  static void end(Particles<T, D>& p, const StepMeshes<T>& meshes, unsigned long long bad_slot) {
    p.end_step(meshes, bad_slot);
  }

  // The slots [0, n) in ranges over the library's threads (the plan's num_threads):
  // range(context, begin, end) on each; the least of their returns.
  template <class T, int D>
  static unsigned long long share(const Particles<T, D>& p,
                                  unsigned long long (*range)(const void*, std::size_t, std::size_t),
                                  const void* context) {
    return p.share_on_host(range, context);
  }
};

// The step's pass on the host: the library's threads each take a range of slots, so
// that the caller's file needs no OpenMP. Returns the first slot whose new position is
// bad, or kNoRejection.
template <class K, bool kFused, class T, int D, class Update>
unsigned long long host_update(const Particles<T, D>& particles, const StepArrays<T>& a, const StepGather<T, D>& g,
                               const Update& update) {
  struct Context {
    const StepArrays<T>* a;
    const StepGather<T, D>* g;
    const Update* update;
  } context{&a, &g, &update};
  return ParticlesAccess::share(
      particles,
      [](const void* c, std::size_t begin, std::size_t end) {
        const Context& ctx = *static_cast<const Context*>(c);
        for (std::size_t k = begin; k < end; ++k) {
          StepParticleFor<T, D, Update> p;
          if (!update_particle<K, kFused>(*ctx.a, *ctx.g, k, *ctx.update, p)) return static_cast<unsigned long long>(k);
          store_deposits<T, D, Update>(*ctx.a, k, p);
        }
        return kNoRejection;
      },
      &context);
}
}  // namespace detail

// One step on a CPU plan, one pass over the particles in binned order: at each particle
// the fields (meshes.values, meshes.gradients, meshes.affine_values) interpolated at its
// position, `update`, and its new position checked (finite, inside bounded axes;
// NonFinitePosition or OutOfBounds naming the particle, the state kept as it was) and
// wrapped into the domain on periodic axes; then the plan's update_points, the deposits
// at the new positions, and the particles put back in binned order where the update
// re-binned them. The fields are those of the plan's interp calls to the bit. The counts
// of `meshes` are the functor's (SizeMismatch). A CUDA plan takes pmkit::cuda::step, in
// pmkit/cuda/particle_step.cuh (Unsupported here). The pass is compiled for every plan
// kernel; a caller whose plans use only some names them, pmkit::step<kernels::Linear,
// kernels::MP4>(particles, update, meshes), which compiles less, and a plan of another
// kernel is then refused (Unsupported) before the step moves anything.
template <class... Kernels, class T, int D, class Update>
void step(Particles<T, D>& particles, const Update& update, const StepMeshes<T>& meshes = {}) {
  if (particles.plan().options().backend != Backend::Cpu)
    detail::fail(ErrorCode::Unsupported,
                 "pmkit::step runs the update on the host, so on a CPU plan; on a CUDA plan include "
                 "pmkit/cuda/particle_step.cuh in a file compiled by nvcc and call pmkit::cuda::step");
  detail::require_compiled_kernel<Kernels...>(particles.plan().kernel(), "pmkit::step");
  detail::StepGather<T, D> g;
  const detail::StepArrays<T> a = detail::ParticlesAccess::begin(particles, meshes, StepShape::of<Update>(), g);
  unsigned long long bad = detail::kNoRejection;
  detail::with_step_kernel<Update, false, Kernels...>(particles.plan().kernel(), g, [&](auto k, auto fused, auto) {
    bad = detail::host_update<decltype(k), decltype(fused)::value, T, D>(particles, a, g, update);
  });
  detail::ParticlesAccess::end(particles, meshes, bad);
}

}  // namespace pmkit
