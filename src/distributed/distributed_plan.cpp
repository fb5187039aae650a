// The DistributedPlan front end: the decomposition, every argument checked and agreed by
// all ranks, the local plan's calls and the phases' timings; what a rank does with its
// meshes and particles (ghost exchange, deterministic spread, migration) is its rank
// backend's (rank_backend.hpp: host/ for CPU ranks, cuda/ for CUDA ranks).
#include <cmath>
#include <string>
#include <vector>

#include "core/arguments.hpp"
#include "core/backend.hpp"
#include "pmkit/detail/layout.hpp"
#include "core/make_backend.hpp"
#include "distributed/collective.hpp"
#include "distributed/decomposition.hpp"
#include "distributed/exact_spread.hpp"
#include "distributed/migration.hpp"
#include "distributed/owners.hpp"
#include "distributed/rank_backend.hpp"
#include "distributed/region.hpp"
#include "pmkit/distributed.hpp"

namespace pmkit {

using detail::check_particle_arrays;
using detail::check_positions;
using detail::fail;
using distributed::agree;
using distributed::agree_on_count;

namespace {

// Particles on a rank below which Overlap::Auto runs the exchanges after the local work:
// the split's second launch and events (CUDA ranks) or second window flush (CPU ranks)
// then cost about what the exchange they hide does (docs/tuning.md#koverlapminparticles).
constexpr std::size_t kOverlapMinParticles = 32768;

template <class M>
void check_block_arrays(const char* what, const Span<M>& arrays, std::int64_t size) {
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (static_cast<std::int64_t>(arrays[i].size) != size)
      fail(ErrorCode::SizeMismatch, what, "[", i, "].size = ", arrays[i].size, " but this rank's block has ", size,
           " nodes (DistributedPlan::block_size)");
    if (arrays[i].data == nullptr) fail(ErrorCode::InvalidArgument, what, "[", i, "].data is null");
    if (arrays[i].stride != 1)
      fail(ErrorCode::InvalidArgument, what, "[", i, "].stride = ", arrays[i].stride, ": blocks must be contiguous");
  }
}

}  // namespace

template <class T, int D>
struct DistributedPlan<T, D>::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  Grid<D> grid;
  Kernel kernel;
  Options options;
  detail::Layout<D> global_layout;
  std::unique_ptr<distributed::Decomposition<D>> decomposition;
  distributed::Owners<D> owners{};  // tables in *decomposition
  Block<D> block;
  distributed::Region<D> region;
  detail::Layout<D> local_layout;
  std::unique_ptr<Plan<T, D>> local;
  // One rank: the local plan runs on the grid itself, whose mesh is the rank's block, so
  // that spread and interp take the caller's blocks as its meshes, with no ghost layers
  // to copy, fold or exchange (the deterministic spread keeps its own fixed-point path).
  bool whole = false;
  // The local plan's particles split by the block's owned nodes (core/split.hpp), and
  // whether the exchanges overlap the interior work (set_overlap).
  bool split = false;
  Overlap overlap = Overlap::Auto;
  std::unique_ptr<distributed::RankBackend<T, D>> backend;  // the host or the device rank
  std::vector<double> max_abs;  // deterministic: each property's largest |q| on this rank
  std::size_t n = 0;
  bool has_points = false;
  bool migrated = false;  // a migrate gave or took particles of this rank since the binning
  // The last call's timings: migrate's measured, the others' from the backend's marks
  // (read when asked: a CUDA rank's marks are events on its stream).
  DistributedTimings timings;
  bool marked = false;
  bool whole_marks = false;  // the last call marked 0 and 5 only (one rank: all compute)

  Impl(const Grid<D>& g, const Kernel& k, const Options& o) : grid(g), kernel(k), options(o) {}
  ~Impl() {
    backend.reset();  // before the communicator it sends on
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }

  std::int64_t local_size() const { return local_layout.size; }
  std::int64_t block_size() const {
    std::int64_t s = 1;
    for (auto e : block.shape) s *= e;
    return s;
  }

  // Particle i at x, which set_points refuses (owners.hpp's is_stranger): the error that
  // says why. A coordinate that is not finite or lies outside its axis' domain (a
  // periodic one's is [origin, origin + L): migrate wraps positions into it), else the
  // rank whose block holds it.
  [[noreturn]] void reject_stranger(const double (&x)[D], std::size_t i) const {
    double u[D];
    T placed[D];
    if (distributed::locate<T, D>(owners, x, false, u, placed)) {
      const int owner = owners.rank_of(u);
      fail(ErrorCode::InvalidArgument, "particle ", i, " at (", x[0], ", ", x[1], D == 3 ? ", " : "",
           D == 3 ? std::to_string(x[D - 1]) : "", ") lies in the block of rank ", owner, ", not of rank ", rank,
           ": call migrate first");
    }
    for (int d = 0; d < D; ++d) {
      const detail::Axis& a = global_layout.axis[d];
      if (!std::isfinite(x[d]))
        fail(ErrorCode::NonFinitePosition, "positions[", d, "][", i, "] = ", x[d], ": particle positions must be finite");
      const bool periodic = a.kind == detail::AxisKind::Periodic;
      if (!distributed::in_domain(a, a.unwrapped_coordinate(x[d])))
        fail(ErrorCode::OutOfBounds, "positions[", d, "][", i, "] = ", x[d], " lies outside the ",
             periodic ? "periodic" : "bounded", " grid [", a.origin, ", ", a.origin + a.cells * a.spacing,
             periodic ? ")" : "]", " of dimension ", d, periodic ? ": call migrate, which wraps positions into it" : "");
    }
    fail(ErrorCode::InvalidArgument, "particle ", i, " was refused but its position looks valid");
  }

  // set_points and update_points: the first particle outside the block, if any, fails
  // with its position named (except where the backend leaves update_points' check to
  // the local plan's binning, which needs no wait); then the local plan's binning (update: kept where the
  // particles moved little) and (deterministic) the stencils. update_points takes the
  // particles of the last set_points or update_points, moved, or those a migrate since
  // left this rank, which it bins in full.
  void take_points(const Positions& positions, std::size_t count, bool update) {
    if (update) {
      if (!has_points) fail(ErrorCode::NotReady, "update_points called before set_points");
      if (count != n && !migrated)
        fail(ErrorCode::SizeMismatch, "update_points got ", count, " particles but this rank's last set_points or ",
             "update_points had ", n, " and no migrate changed them since: update_points takes the same ",
             "particles, moved, or those migrate returned");
      update = !migrated;
    }
    std::array<double, D> position{};
    const bool checked_here = !(update && backend->update_checked_by_binning());
    const std::size_t first = checked_here ? backend->first_stranger(positions, count, position) : count;
    if (first < count) {
      double x[D];
      for (int d = 0; d < D; ++d) x[d] = position[d];
      reject_stranger(x, first);
    }
    if (update) local->update_points(positions);
    else local->set_points(positions);
    if (options.deterministic) backend->locate_exact(positions, count);
    n = count;
    has_points = true;
    migrated = false;
  }

  // Room for `count` local meshes, of fixed-point sums for the deterministic spread.
  void reserve_meshes(std::size_t count, bool exact_sums) {
    if (exact_sums) backend->exact_meshes(static_cast<int>(count));
    else backend->meshes(static_cast<int>(count));
  }

  std::vector<View<T>> local_views(std::size_t count) {
    T* first = backend->meshes(static_cast<int>(count));
    std::vector<View<T>> v;
    for (std::size_t j = 0; j < count; ++j)
      v.emplace_back(first + j * local_size(), static_cast<std::size_t>(local_size()));
    return v;
  }

  // Marks k = 0..5 of a call's phases on the backend's clock: the local work before the
  // exchange from 0 to 1, its start from 1 to 2, the interior work while the messages
  // travel from 2 to 3 (none without overlap), the exchange's end from 3 to 4, the work
  // after it from 4 to 5 (last_timings reads them).
  void mark(int k) {
    backend->mark(k);
    marked = true;
    whole_marks = false;
  }
  // One rank's call: the local plan's work between marks 0 and 5, nothing else.
  template <class Work>
  void marked_whole(Work&& work) {
    mark(0);
    work();
    mark(5);
    whole_marks = true;
  }

  // Whether this call runs its exchange during the interior work: several ranks, and the
  // option (Auto: enough particles on this rank for the split to pay). Each rank decides
  // alone: its messages are the same either way.
  bool overlapped(bool parts) const {
    if (whole || !parts || overlap == Overlap::Never) return false;
    return overlap == Overlap::Always || n >= kOverlapMinParticles;
  }

  // The local plan's calls take `part` of the particles.
  void select(detail::Part part) { detail::PlanAccess<T, D>::backend(*local).select(part); }
  // Every particle again for the local plan's calls at the end of a split call's scope,
  // an error's included.
  struct AllAgain {
    Impl* plan;
    ~AllAgain() {
      if (plan) plan->select(detail::Part::All);
    }
  };
  // The interior work between an exchange's halves: an error there (a position the local
  // plan's binning rejected, reported late) still finishes the exchange, whose messages
  // the peers wait for, before it propagates.
  template <class Work>
  void between_halves(distributed::HaloPass pass, int count, Work&& work) {
    try {
      work();
    } catch (...) {
      backend->halo_finish(pass, count);
      throw;
    }
  }

  // spread and spread_gradient: local_call spreads `count` meshes into the local meshes,
  // then the ghost sums go to their owners and the owned nodes into the caller's blocks;
  // on one rank local_call spreads into the caller's blocks themselves. Overlapped: the
  // boundary particles first, the exchange started, the interior particles while it runs.
  template <class Call>
  void spread_local(int count, Span<View<T>> blocks, Accumulate mode, Call&& local_call) {
    if (whole) {
      marked_whole([&] { local_call(*local, blocks, mode); });
      return;
    }
    mark(0);
    const bool parts = overlapped(split);
    const AllAgain all_again{parts ? this : nullptr};
    const std::vector<View<T>> meshes = local_views(count);
    if (parts) select(detail::Part::Boundary);
    local_call(*local, meshes, Accumulate::Overwrite);
    mark(1);
    backend->halo_start(distributed::HaloPass::Sum, count);
    mark(2);
    if (parts) {
      select(detail::Part::Interior);
      between_halves(distributed::HaloPass::Sum, count, [&] { local_call(*local, meshes, Accumulate::Add); });
    }
    mark(3);
    backend->halo_finish(distributed::HaloPass::Sum, count);
    mark(4);
    backend->local_to_block(blocks, mode);
    mark(5);
  }

  // The checks of spread and spread_gradient (`inputs_per_mesh` particle arrays for each
  // mesh), agreed by all ranks, and the local meshes reserved.
  void check_spread(const char* call, Span<View<const T>> inputs, Span<View<T>> blocks, int inputs_per_mesh) {
    agree_on_count(comm, call, "meshes", blocks.size(), [&] {
      if (!has_points) fail(ErrorCode::NotReady, call, " called before set_points");
      if (inputs.size() != inputs_per_mesh * blocks.size())
        fail(ErrorCode::SizeMismatch, call, " got ", inputs.size(), " particle arrays but ", blocks.size(),
             " meshes: ", inputs_per_mesh, " per mesh");
      if (options.deterministic && inputs_per_mesh != 1)
        fail(ErrorCode::Unsupported, call, ": the deterministic distributed plan spreads values only");
      check_particle_arrays(inputs_per_mesh == 1 ? "props" : "vectors", inputs, n);
      check_block_arrays("meshes", blocks, block_size());
      if (options.deterministic) {
        max_abs.assign(inputs.size(), 0.0);
        backend->largest_values(inputs, n, max_abs);
      }
      if (options.deterministic || !whole) reserve_meshes(blocks.size(), options.deterministic);
    });
  }

  // interp and interp_gradient (`outputs_per_mesh` outputs for each mesh): checks, the
  // blocks into the local meshes and their ghost layers filled, then the local plan's call.
  template <class Call>
  void gather(const char* call, Span<View<const T>> blocks, Span<View<T>> outputs, int outputs_per_mesh,
              Call&& local_call) {
    agree_on_count(comm, call, "meshes", blocks.size(), [&] {
      if (!has_points) fail(ErrorCode::NotReady, call, " called before set_points");
      if (outputs.size() != outputs_per_mesh * blocks.size())
        fail(ErrorCode::SizeMismatch, call, " got ", blocks.size(), " meshes but ", outputs.size(), " output arrays: ",
             outputs_per_mesh, " per mesh");
      check_block_arrays("meshes", blocks, block_size());
      check_particle_arrays(outputs_per_mesh == 1 ? "values" : "gradients", outputs, n);
      if (!whole) reserve_meshes(blocks.size(), false);
    });
    if (blocks.empty()) return;
    if (whole) {
      marked_whole([&] { local_call(*local, blocks); });
      return;
    }
    mark(0);
    const int count = static_cast<int>(blocks.size());
    const bool parts = overlapped(split);
    const AllAgain all_again{parts ? this : nullptr};
    backend->block_to_local(blocks);
    mark(1);
    backend->halo_start(distributed::HaloPass::Fill, count);
    mark(2);
    const std::vector<View<T>> local_meshes = local_views(blocks.size());
    const std::vector<View<const T>> filled(local_meshes.begin(), local_meshes.end());
    if (parts) {
      select(detail::Part::Interior);
      between_halves(distributed::HaloPass::Fill, count, [&] { local_call(*local, filled); });
    }
    mark(3);
    backend->halo_finish(distributed::HaloPass::Fill, count);
    mark(4);
    if (parts) select(detail::Part::Boundary);
    local_call(*local, filled);
    mark(5);
  }

  // The deterministic spread: global scales, fixed-point deposits, integer ghost sums.
  void spread_exact(Span<View<const T>> props, Span<View<T>> blocks, Accumulate mode) {
    mark(0);
    const int count = static_cast<int>(props.size());
    std::vector<double> scale(count), inverse(count);
    unsigned long long total = n;
    MPI_Allreduce(MPI_IN_PLACE, max_abs.data(), count, MPI_DOUBLE, MPI_MAX, comm);
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
    for (int j = 0; j < count; ++j) {
      scale[j] = distributed::exact_scale(max_abs[j], total, kernel.support(), D);
      inverse[j] = 1.0 / scale[j];
    }
    const bool parts = overlapped(true);
    backend->spread_exact(props, n, scale, parts ? detail::Part::Boundary : detail::Part::All);
    mark(1);
    backend->halo_start(distributed::HaloPass::ExactSum, count);
    mark(2);
    if (parts)
      between_halves(distributed::HaloPass::ExactSum, count,
                     [&] { backend->spread_exact(props, n, scale, detail::Part::Interior); });
    mark(3);
    backend->halo_finish(distributed::HaloPass::ExactSum, count);
    mark(4);
    backend->exact_to_block(blocks, inverse, mode);
    mark(5);
  }
};

template <class T, int D>
DistributedPlan<T, D>::DistributedPlan(MPI_Comm comm, const Grid<D>& grid, Kernel kernel, Options options,
                                       const RankGrid<D>& split, Transport transport)
    : impl_(std::make_unique<Impl>(grid, kernel, options)) {
  Impl& s = *impl_;
  int size;
  MPI_Comm_size(comm, &size);
  std::array<int, D> ranks = split.ranks;
  distributed::MakeRank<T, D> make_rank = nullptr;
  agree(comm, "DistributedPlan", [&] {
    validate(grid, kernel.ghost_width());
    make_rank = detail::make_backend(
        options, "options", [] { return &distributed::make_host_rank<T, D>; },
        [] { return &distributed::make_device_rank<T, D>; });
    if (options.backend == Backend::Cuda && options.host_arrays)
      fail(ErrorCode::Unsupported, "options.host_arrays on CUDA ranks: a distributed plan takes device arrays");
    int fixed = 1;
    for (int d = 0; d < D; ++d) {
      if (ranks[d] < 0)
        fail(ErrorCode::InvalidArgument, "split.ranks[", d, "] = ", ranks[d], ": a count of ranks, or 0 for MPI's choice");
      if (ranks[d] > 0) fixed *= ranks[d];
    }
    if (size % fixed != 0)
      fail(ErrorCode::InvalidArgument, "split.ranks fixes ", fixed, " ranks, which does not divide the ", size,
           " ranks of the communicator");
    MPI_Dims_create(size, D, ranks.data());
    // The deterministic spread's fixed-point meshes keep every axis bounded.
    s.decomposition = std::make_unique<distributed::Decomposition<D>>(
        grid, kernel.ghost_width(), RankGrid<D>{ranks, split.cuts}, size, !options.deterministic);
  });
  std::array<int, D> periods{};
  MPI_Cart_create(comm, D, ranks.data(), periods.data(), 0, &s.comm);
  MPI_Comm_rank(s.comm, &s.rank);
  MPI_Comm_size(s.comm, &s.size);
  s.global_layout = detail::make_layout(grid, kernel.ghost_width());
  s.owners = distributed::host_owners(*s.decomposition, s.global_layout);
  s.block = s.decomposition->block(s.rank);
  const Grid<D> local_grid = s.decomposition->local_grid(grid, s.rank);
  s.local_layout = detail::make_layout(local_grid, kernel.ghost_width());
  for (int d = 0; d < D; ++d) {
    const distributed::AxisSplit& a = s.decomposition->axis(d);
    const int c = s.block.coords[d];
    s.region.start[d] = a.owned_begin(c) - a.local_begin(c);
    s.region.shape[d] = s.block.shape[d];
    s.region.local[d] = a.local_nodes(c);
  }
  s.whole = s.size == 1;
  agree(s.comm, "DistributedPlan", [&] {
    Options local_options = options;
    local_options.deterministic = false;
    s.local = std::make_unique<Plan<T, D>>(s.whole ? grid : local_grid, kernel, local_options);
    if (!s.whole) s.split = detail::PlanAccess<T, D>::backend(*s.local).set_interior(s.region.interior());
  });
  const distributed::RankSetup<D> setup{*s.decomposition, s.region, s.global_layout, s.local_layout,
                                        s.comm,           kernel,   s.options,       transport};
  agree(s.comm, "DistributedPlan", [&] { s.backend = make_rank(setup); });
}

template <class T, int D>
DistributedPlan<T, D>::~DistributedPlan() = default;
template <class T, int D>
DistributedPlan<T, D>::DistributedPlan(DistributedPlan&&) noexcept = default;
template <class T, int D>
DistributedPlan<T, D>& DistributedPlan<T, D>::operator=(DistributedPlan&&) noexcept = default;

template <class T, int D>
std::size_t DistributedPlan<T, D>::migrate(const MutablePositions& positions, Span<View<T>> props, std::size_t count) {
  Impl& s = *impl_;
  const double t0 = MPI_Wtime();
  bool changed = false;
  const std::size_t moved = s.backend->migrate(positions, props, count, changed);
  s.migrated = s.migrated || changed;
  s.timings = {0, 0, MPI_Wtime() - t0};
  s.marked = false;
  return moved;
}

template <class T, int D>
void DistributedPlan<T, D>::synchronize() {
  Impl& s = *impl_;
  agree(s.comm, "synchronize", [&] {
    s.backend->raise_deferred();
    s.local->synchronize();
  });
}

template <class T, int D>
void DistributedPlan<T, D>::set_points(const Positions& positions) {
  Impl& s = *impl_;
  agree(s.comm, "set_points", [&] { s.take_points(positions, check_positions<T, D>(positions), false); });
}

template <class T, int D>
void DistributedPlan<T, D>::update_points(const Positions& positions) {
  Impl& s = *impl_;
  agree(s.comm, "update_points", [&] { s.take_points(positions, check_positions<T, D>(positions), true); });
}

template <class T, int D>
void DistributedPlan<T, D>::permute_to_binned(Span<View<const T>> from, Span<View<T>> to) {
  Impl& s = *impl_;
  if (!s.has_points) fail(ErrorCode::NotReady, "permute_to_binned called before set_points");
  if (s.migrated)
    fail(ErrorCode::NotReady, "permute_to_binned: a migrate changed this rank's particles since the last set_points ",
         "or update_points, so there is no binned order of them; call update_points first");
  s.local->permute_to_binned(from, to);
  s.has_points = false;  // the binning's order refers to the arrays as they were
}

template <class T, int D>
void DistributedPlan<T, D>::spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) {
  Impl& s = *impl_;
  s.check_spread("spread", props, meshes, 1);
  if (props.empty()) return;
  if (s.options.deterministic)
    s.spread_exact(props, meshes, mode);
  else
    s.spread_local(static_cast<int>(meshes.size()), meshes, mode,
                   [&](Plan<T, D>& local, Span<View<T>> out, Accumulate m) { local.spread(props, out, m); });
}

template <class T, int D>
void DistributedPlan<T, D>::spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) {
  Impl& s = *impl_;
  s.check_spread("spread_gradient", vectors, meshes, D);
  if (meshes.empty()) return;
  s.spread_local(static_cast<int>(meshes.size()), meshes, mode,
                 [&](Plan<T, D>& local, Span<View<T>> out, Accumulate m) { local.spread_gradient(vectors, out, m); });
}

template <class T, int D>
void DistributedPlan<T, D>::interp(Span<View<const T>> meshes, Span<View<T>> values) {
  impl_->gather("interp", meshes, values, 1, [&](Plan<T, D>& local, Span<View<const T>> filled) {
    local.interp(filled, values);
  });
}

template <class T, int D>
void DistributedPlan<T, D>::interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) {
  impl_->gather("interp_gradient", meshes, gradients, D, [&](Plan<T, D>& local, Span<View<const T>> filled) {
    local.interp_gradient(filled, gradients);
  });
}

template <class T, int D>
const Grid<D>& DistributedPlan<T, D>::grid() const { return impl_->grid; }
template <class T, int D>
const Kernel& DistributedPlan<T, D>::kernel() const { return impl_->kernel; }
template <class T, int D>
const Options& DistributedPlan<T, D>::options() const { return impl_->options; }
template <class T, int D>
const Block<D>& DistributedPlan<T, D>::block() const { return impl_->block; }
template <class T, int D>
std::int64_t DistributedPlan<T, D>::block_size() const { return impl_->block_size(); }
template <class T, int D>
std::size_t DistributedPlan<T, D>::num_points() const { return impl_->n; }
template <class T, int D>
int DistributedPlan<T, D>::rank() const { return impl_->rank; }
template <class T, int D>
int DistributedPlan<T, D>::size() const { return impl_->size; }
template <class T, int D>
DistributedTimings DistributedPlan<T, D>::last_timings() const {
  const Impl& s = *impl_;
  if (!s.marked) return s.timings;
  const distributed::RankBackend<T, D>& b = *s.backend;
  if (s.whole_marks) return {b.between(0, 5), 0, 0, 0};
  const double interior = b.between(2, 3);
  return {b.between(0, 1) + interior + b.between(4, 5), b.between(1, 2) + b.between(3, 4), 0, interior};
}
template <class T, int D>
void DistributedPlan<T, D>::set_overlap(Overlap overlap) {
  if (overlap != Overlap::Auto && overlap != Overlap::Always && overlap != Overlap::Never)
    fail(ErrorCode::InvalidArgument, "set_overlap: overlap = ", static_cast<int>(overlap),
         ": Overlap::Auto, Always or Never");
  impl_->overlap = overlap;
}
template <class T, int D>
Overlap DistributedPlan<T, D>::overlap() const { return impl_->overlap; }
template <class T, int D>
Transport DistributedPlan<T, D>::transport() const { return impl_->backend->transport(); }

template <class T, int D>
int DistributedPlan<T, D>::owner(const std::array<double, D>& position) const {
  const Impl& s = *impl_;
  double x[D], u[D];
  T placed[D];
  for (int d = 0; d < D; ++d) x[d] = static_cast<double>(static_cast<T>(position[d]));
  return distributed::locate<T, D>(s.owners, x, true, u, placed) ? s.owners.rank_of(u) : -1;
}

template class DistributedPlan<float, 2>;
template class DistributedPlan<float, 3>;
template class DistributedPlan<double, 2>;
template class DistributedPlan<double, 3>;

}  // namespace pmkit
