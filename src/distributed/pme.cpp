// The DistributedPmePlan front end: the box, parameters and options checked and agreed by
// all ranks; the reciprocal pipeline (core/pme_pipeline.hpp) on a DistributedPlan whose
// blocks are a DistributedRealFft's slabs, with PmePlan's backend on the rank's spectrum
// slab; the real space on the rank's charges and ghosts (pme_ghosts.hpp); the sums added
// over the ranks in the backend's last step.
#include <memory>
#include <vector>

#include "core/pme_pipeline.hpp"
#include "distributed/collective.hpp"
#include "distributed/pme_ghosts.hpp"
#include "pmkit/distributed_fft.hpp"
#include "pmkit/distributed_pme.hpp"
#include "pmkit/pairs.hpp"

#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
#include "pmkit/cuda/runtime.hpp"
#endif

namespace pmkit {

using detail::fail;
using distributed::agree;

namespace {

// The values every rank must pass alike, each with its name.
std::vector<std::pair<const char*, double>> shared_settings(const std::array<double, 3>& box, const PmeParameters& p,
                                                            const PmeOptions& o) {
  return {{"box[0]", box[0]},
          {"box[1]", box[1]},
          {"box[2]", box[2]},
          {"params.alpha", p.alpha},
          {"params.cutoff", p.cutoff},
          {"params.mesh[0]", double(p.mesh[0])},
          {"params.mesh[1]", double(p.mesh[1])},
          {"params.mesh[2]", double(p.mesh[2])},
          {"params.order", double(p.order)},
          {"options.coulomb_constant", o.coulomb_constant},
          {"options.deterministic", o.deterministic ? 1.0 : 0.0},
          {"options.backend", double(static_cast<int>(o.backend))}};
}

// Fails on every rank where a shared setting differs between the ranks.
void check_same_on_ranks(MPI_Comm comm, const std::array<double, 3>& box, const PmeParameters& p,
                         const PmeOptions& o) {
  const auto settings = shared_settings(box, p, o);
  const int k = static_cast<int>(settings.size());
  std::vector<double> range(2 * k);
  for (int i = 0; i < k; ++i) range[i] = settings[i].second, range[k + i] = -settings[i].second;
  MPI_Allreduce(MPI_IN_PLACE, range.data(), 2 * k, MPI_DOUBLE, MPI_MAX, comm);
  for (int i = 0; i < k; ++i)
    if (range[i] != -range[k + i])
      fail(ErrorCode::InvalidArgument, "DistributedPmePlan: ", settings[i].first, " differs between the ranks (",
           -range[k + i], " to ", range[i], "): every rank passes the same box, parameters and options");
}

// The backend's view of the FFT's spectrum slab.
detail::PmeSpectrum slab_spectrum(const std::array<double, 3>& box, const PmeParameters& p, const SpectrumSlab<3>& slab) {
  detail::PmeSpectrum s = detail::PmeSpectrum::whole(box, p.mesh, p.alpha);
  for (int d = 0; d < 3; ++d) {
    s.first[d] = slab.first[d];
    s.shape[d] = slab.shape[d];
    s.order[d] = slab.order[d];
  }
  return s;
}

// Every rank's z slab of the box, from the FFT's real slabs.
std::vector<double> z_slabs(MPI_Comm comm, const Block<3>& block, double spacing) {
  int size;
  MPI_Comm_size(comm, &size);
  const double mine[2] = {double(block.first_cell[2]) * spacing,
                          double(block.first_cell[2] + block.cells[2]) * spacing};
  std::vector<double> slabs(2 * size);
  MPI_Allgather(mine, 2, MPI_DOUBLE, slabs.data(), 2, MPI_DOUBLE, comm);
  return slabs;
}

// Waits for a CUDA rank's stream (profiling's laps); CPU ranks' calls return done.
void wait_for_stream(const ExecutionOptions& o) {
#if defined(PMKIT_WITH_CUDA)
  if (o.backend == Backend::Cuda) {
    const cuda::DeviceScope on_device(o.device);
    cuda::check(cudaStreamSynchronize(cuda::to_cuda_stream(o.stream)), "DistributedPmePlan: profiling");
  }
#else
  (void)o;
#endif
}

// The sums of the backend's last step, added over the ranks.
class RankSums final : public detail::PmeSumReduction {
 public:
  explicit RankSums(MPI_Comm comm) : comm_(comm) {}
  void operator()(double* sums, int count) const override {
    MPI_Allreduce(MPI_IN_PLACE, sums, count, MPI_DOUBLE, MPI_SUM, comm_);
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

namespace detail {

// What a DistributedPmePlan owns: the FFT, the mesh plan on its slabs, the backend on
// the rank's spectrum slab, the pair plan and the ghosts, and a communicator of its own
// for the sums and the ghosts' messages.
template <class T>
class DistributedPmeState {
 public:
  DistributedPmeState(MPI_Comm comm, const std::array<double, 3>& box, const PmeParameters& p, const PmeOptions& o,
                      Transport transport)
      : fft(comm, p.mesh, FftOptions{o}, transport),
        mesh(comm, pme_grid(box, p), Kernel::bspline(p.order), pme_mesh_options(o), fft.rank_grid(), transport) {
    MPI_Comm_dup(comm, &own);
    try {
      agree(own, "DistributedPmePlan", [&] {
        backend = make_pme_backend<T>(box, p, slab_spectrum(box, p, fft.spectrum_slab()),
                                      static_cast<std::size_t>(fft.real_size()), o);
        pairs = std::make_unique<PairPlan<T, 3>>(Box<3>::periodic(box), p.cutoff, PairOptions{o});
      });
      ghosts = std::make_unique<distributed::PmeGhosts<T>>(
          own, z_slabs(own, mesh.block(), box[2] / double(p.mesh[2])), box[2], p.cutoff, o);
      sums = std::make_unique<RankSums>(own);
    } catch (...) {
      MPI_Comm_free(&own);
      throw;
    }
  }
  ~DistributedPmeState() {
    ghosts.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&own);
  }

  DistributedRealFft<T, 3> fft;
  DistributedPlan<T, 3> mesh;
  MPI_Comm own = MPI_COMM_NULL;
  std::unique_ptr<PmeBackend<T>> backend;
  std::unique_ptr<PairPlan<T, 3>> pairs;
  std::unique_ptr<distributed::PmeGhosts<T>> ghosts;
  std::unique_ptr<RankSums> sums;
  bool has_points = false;
  bool profiling = false;
  DistributedPmeTimings timings;
};

}  // namespace detail

template <class T>
DistributedPmePlan<T>::DistributedPmePlan(MPI_Comm comm, const std::array<double, 3>& box,
                                          const PmeParameters& params, PmeOptions options, Transport transport)
    : box_(box), params_(params), options_(options) {
  agree(comm, "DistributedPmePlan", [&] {
    detail::check_pme_parameters(box, params);
    detail::check_pme_options(options);
  });
  check_same_on_ranks(comm, box, params, options);
  state_ = std::make_unique<detail::DistributedPmeState<T>>(comm, box, params, options, transport);
}

template <class T>
DistributedPmePlan<T>::~DistributedPmePlan() = default;
template <class T>
DistributedPmePlan<T>::DistributedPmePlan(DistributedPmePlan&&) noexcept = default;
template <class T>
DistributedPmePlan<T>& DistributedPmePlan<T>::operator=(DistributedPmePlan&&) noexcept = default;

template <class T>
const Block<3>& DistributedPmePlan<T>::block() const {
  return state_->mesh.block();
}
template <class T>
int DistributedPmePlan<T>::owner(const std::array<double, 3>& position) const {
  return state_->mesh.owner(position);
}
template <class T>
std::size_t DistributedPmePlan<T>::num_points() const {
  return state_->mesh.num_points();
}
template <class T>
bool DistributedPmePlan<T>::has_points() const {
  return state_->has_points;
}
template <class T>
int DistributedPmePlan<T>::rank() const {
  return state_->mesh.rank();
}
template <class T>
int DistributedPmePlan<T>::size() const {
  return state_->mesh.size();
}
template <class T>
Transport DistributedPmePlan<T>::transport() const {
  return state_->mesh.transport();
}
template <class T>
std::size_t DistributedPmePlan<T>::num_ghosts() const {
  return state_->ghosts->ghosts();
}

template <class T>
void DistributedPmePlan<T>::set_profiling(bool on) {
  state_->profiling = on;
}
template <class T>
DistributedPmeTimings DistributedPmePlan<T>::last_timings() const {
  return state_->timings;
}

template <class T>
std::size_t DistributedPmePlan<T>::migrate(const MutablePositions& positions, Span<View<T>> props,
                                           std::size_t count) {
  const std::size_t n = state_->mesh.migrate(positions, props, count);
  state_->timings.migrate_s = state_->mesh.last_timings().migrate_s;
  return n;
}

template <class T>
void DistributedPmePlan<T>::set_points(const Positions& positions) {
  state_->mesh.set_points(positions);
  state_->ghosts->set_positions(positions);
  state_->has_points = true;
}

template <class T>
void DistributedPmePlan<T>::update_points(const Positions& positions) {
  state_->mesh.update_points(positions);
  state_->ghosts->set_positions(positions);
}

template <class T>
void DistributedPmePlan<T>::synchronize() {
  state_->mesh.synchronize();
  agree(state_->own, "DistributedPmePlan::synchronize", [&] { state_->pairs->synchronize(); });
}

template <class T>
void DistributedPmePlan<T>::compute(View<const T> charges, const Forces& forces, View<double> energy,
                                    View<T> potential, View<double> virial) {
  run(true, charges, forces, energy, potential, virial);
}

template <class T>
void DistributedPmePlan<T>::compute_reciprocal(View<const T> charges, const Forces& forces, View<double> energy,
                                               View<T> potential, View<double> virial) {
  run(false, charges, forces, energy, potential, virial);
}

template <class T>
void DistributedPmePlan<T>::run(bool real_space, View<const T> charges, const Forces& forces, View<double> energy,
                                View<T> potential, View<double> virial) {
  detail::DistributedPmeState<T>& s = *state_;
  const char* call = real_space ? "DistributedPmePlan::compute" : "DistributedPmePlan::compute_reciprocal";
  const std::size_t n = s.mesh.num_points();
  // Whether any rank asks for the potential: all then interpolate it (a collective call).
  std::array<long long, 1> potential_asked = {potential.data || potential.size};
  const bool with_potential = distributed::agree_on_max(
      s.own, call,
      [&] {
        if (!s.has_points) fail(ErrorCode::NotReady, call, " called before set_points");
        detail::check_pme_arrays(call, n, charges, forces, energy, potential, virial);
      },
      potential_asked)[0] != 0;

  // Profiling: each phase's seconds into `into`, after a wait for this rank's work.
  DistributedPmeTimings& t = s.timings;
  t = DistributedPmeTimings{t.migrate_s};
  double last = MPI_Wtime();
  auto lap = [&](double& into) {
    if (!s.profiling) return;
    wait_for_stream(options_);
    const double now = MPI_Wtime();
    into += now - last;
    last = now;
  };
  auto mark = [&](detail::PmePhase phase) {
    switch (phase) {
      case detail::kPmeSpread: return lap(t.spread_s);
      case detail::kPmeForward:
        lap(t.fft_s);
        if (s.profiling) t.fft_exchange_s += s.fft.last_timings().exchange_s;
        return;
      case detail::kPmeConvolve: return lap(t.convolve_s);
      case detail::kPmeInverse:
        lap(t.fft_s);
        if (s.profiling) t.fft_exchange_s += s.fft.last_timings().exchange_s;
        return;
      case detail::kPmeGather: return lap(t.gather_s);
    }
  };
  detail::PmeParts<T> parts =
      detail::pme_reciprocal(*s.backend, s.mesh, s.fft, true, static_cast<std::size_t>(s.fft.real_size()), n, charges,
                             forces, energy, potential, virial, options_.coulomb_constant, with_potential, mark);
  if (real_space) {
    s.ghosts->exchange(charges);
    lap(t.ghosts_s);
    s.pairs->set_points(s.ghosts->positions());
    const std::size_t stride = s.ghosts->count();
    T* real = s.ghosts->outputs(4 + 6);
    detail::pme_real_space(*s.backend, *s.pairs, params_.alpha, s.ghosts->charges(), real, real + 4 * stride, stride,
                           parts);
    detail::pme_self_terms(box_, params_.alpha, parts);
    lap(t.real_space_s);
  }
  // One rank's sums are the totals: its compute then waits for nothing.
  parts.reduce = s.mesh.size() > 1 ? s.sums.get() : nullptr;
  s.backend->finish(parts);
  lap(t.finish_s);
}

template class DistributedPmePlan<float>;
template class DistributedPmePlan<double>;

}  // namespace pmkit
