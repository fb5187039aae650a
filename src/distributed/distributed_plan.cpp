// The DistributedPlan front end: the decomposition, argument checks agreed by all ranks,
// then the local plan's work and the ghost exchange (halo.hpp), the deterministic spread
// (exact_spread.hpp) and the migration (migration.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/arguments.hpp"
#include "cpu/openmp.hpp"
#include "core/layout.hpp"
#include "distributed/collective.hpp"
#include "distributed/decomposition.hpp"
#include "distributed/exact_spread.hpp"
#include "distributed/halo.hpp"
#include "distributed/migration.hpp"
#include "distributed/region.hpp"
#if defined(PMKIT_WITH_CUDA)
#include "distributed/device_rank.hpp"
#endif
#include "pmkit/distributed.hpp"

namespace pmkit {

using detail::check_particle_arrays;
using detail::check_positions;
using detail::fail;
using distributed::agree;
using distributed::Exact;

namespace {

// Every rank passes the same value (a count of arrays), or every rank fails.
void agree_on_count(MPI_Comm comm, const char* call, const char* what, std::size_t value) {
  long long range[2] = {-static_cast<long long>(value), static_cast<long long>(value)};
  MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG_LONG, MPI_MAX, comm);
  if (-range[0] != range[1])
    fail(ErrorCode::SizeMismatch, call, ": the ranks pass different numbers of ", what, " (", -range[0], " to ",
         range[1], "): every rank passes the same number");
}

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
  Block<D> block;
  distributed::Region<D> region;
  detail::Layout<D> local_layout;
  std::unique_ptr<Plan<T, D>> local;
  std::unique_ptr<distributed::Halo> halo;
#if defined(PMKIT_WITH_CUDA)
  std::unique_ptr<distributed::DeviceRank<T, D>> device;  // CUDA ranks
#endif
  std::vector<T> meshes;       // local meshes (block and ghosts), one per property
  std::vector<Exact> exact;    // deterministic: the fixed-point local meshes
  std::vector<double> max_abs;  // deterministic: each property's largest |q| on this rank
  // Deterministic: each particle's stencil (base in local logical nodes, local coordinate).
  std::array<std::vector<int>, D> base;
  std::array<std::vector<T>, D> frac;
  std::vector<std::uint32_t> order;       // the particles by their stencils' first plane
  std::vector<std::size_t> plane_start;   // where each plane's particles start in `order`
  std::size_t n = 0;
  bool has_points = false;
  DistributedTimings timings;

  Impl(const Grid<D>& g, const Kernel& k, const Options& o) : grid(g), kernel(k), options(o) {}
  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }

  std::int64_t local_size() const { return local_layout.size; }
  bool on_device() const {
#if defined(PMKIT_WITH_CUDA)
    return device != nullptr;
#else
    return false;
#endif
  }
  std::int64_t block_size() const {
    std::int64_t s = 1;
    for (auto e : block.shape) s *= e;
    return s;
  }

  // The rank owning raw grid coordinates u (each in [0, cells]).
  int owner_of(const double (&u)[D]) const {
    std::array<int, D> c{};
    for (int d = 0; d < D; ++d) c[d] = decomposition->axis(d).owner_of_coordinate(u[d]);
    return decomposition->rank_of(c);
  }

  // Particle i's raw coordinates from its position x, checked: finite and in [0, cells]
  // on every axis (a periodic one too: migrate wraps positions there), and in this rank's
  // block.
  void owned_coordinates(const double (&x)[D], std::size_t i, double (&u)[D]) const {
    for (int d = 0; d < D; ++d) {
      const detail::Axis& a = global_layout.axis[d];
      u[d] = distributed::raw_coordinate(a, x[d]);
      if (!std::isfinite(x[d]))
        fail(ErrorCode::NonFinitePosition, "positions[", d, "][", i, "] = ", x[d], ": particle positions must be finite");
      if (!(u[d] >= 0 && u[d] <= a.cells))
        fail(ErrorCode::OutOfBounds, "positions[", d, "][", i, "] = ", x[d], " lies outside the grid [", a.origin, ", ",
             a.origin + a.cells * a.spacing, "] of dimension ", d,
             a.kind == detail::AxisKind::Periodic ? " (migrate wraps periodic positions into it)" : "");
    }
    const int owner = owner_of(u);
    if (owner != rank)
      fail(ErrorCode::InvalidArgument, "particle ", i, " at (", x[0], ", ", x[1], D == 3 ? ", " : "",
           D == 3 ? std::to_string(x[D - 1]) : "", ") lies in the block of rank ", owner, ", not of rank ", rank,
           ": call migrate first");
  }

  void set_points(const Positions& positions, std::size_t count) {
    std::array<std::vector<int>, D> new_base;
    std::array<std::vector<T>, D> new_frac;
    std::int64_t first_cell[D];
    for (int d = 0; d < D; ++d) first_cell[d] = block.first_cell[d];
    if (options.deterministic && !on_device())
      for (int d = 0; d < D; ++d) {
        new_base[d].resize(count);
        new_frac[d].resize(count);
      }
#if defined(PMKIT_WITH_CUDA)
    if (device) {
      std::array<double, D> position{};
      const std::size_t first = device->first_stranger(positions, count, position);
      if (first < count) {
        double x[D], u[D];
        for (int d = 0; d < D; ++d) x[d] = position[d];
        owned_coordinates(x, first, u);
      }
      if (options.deterministic) device->locate_exact(positions, count);
    }
#endif
    for (std::size_t i = 0; i < count && !on_device(); ++i) {
      double x[D], u[D];
      for (int d = 0; d < D; ++d) x[d] = static_cast<double>(positions[d][i]);
      owned_coordinates(x, i, u);
      if (options.deterministic)
        kernels::dispatch(kernel, [&](auto k) {
          int b[D];
          T s[D];
          distributed::exact_stencil<decltype(k), T, D>(u, first_cell, b, s);
          for (int d = 0; d < D; ++d) {
            new_base[d][i] = b[d];
            new_frac[d][i] = s[d];
          }
        });
    }
    // Deterministic: the particles by the first plane their stencils reach along the last
    // axis (a counting sort), for the slabs of spread_exact.
    std::vector<std::size_t> new_plane_start;
    std::vector<std::uint32_t> new_order;
    if (options.deterministic && !on_device()) {
      const int g = kernel.ghost_width();
      new_plane_start.assign(region.local[D - 1] + 1, 0);
      for (std::size_t i = 0; i < count; ++i) ++new_plane_start[new_base[D - 1][i] + g + 1];
      for (std::size_t k = 1; k < new_plane_start.size(); ++k) new_plane_start[k] += new_plane_start[k - 1];
      new_order.resize(count);
      std::vector<std::size_t> next(new_plane_start.begin(), new_plane_start.end() - 1);
      for (std::size_t i = 0; i < count; ++i) new_order[next[new_base[D - 1][i] + g]++] = static_cast<std::uint32_t>(i);
    }
    local->set_points(positions);
    base.swap(new_base);
    frac.swap(new_frac);
    plane_start.swap(new_plane_start);
    order.swap(new_order);
    n = count;
    has_points = true;
  }

  // Room for `count` local meshes, of fixed-point sums for the deterministic spread.
  void reserve_meshes(std::size_t count, bool exact_sums) {
    const std::size_t values = count * static_cast<std::size_t>(local_size());
#if defined(PMKIT_WITH_CUDA)
    if (device) {
      if (exact_sums) device->exact_meshes(static_cast<int>(count));
      else device->meshes(static_cast<int>(count));
      return;
    }
#endif
    if (exact_sums && exact.size() < values) exact.resize(values);
    if (!exact_sums && meshes.size() < values) meshes.resize(values);
  }

  // The first of the local meshes (count of them, one after another).
  T* local_meshes(std::size_t count) {
#if defined(PMKIT_WITH_CUDA)
    if (device) return device->meshes(static_cast<int>(count));
#endif
    (void)count;  // reserve_meshes made room on the host
    return meshes.data();
  }
  std::vector<View<T>> local_views(std::size_t count) {
    T* first = local_meshes(count);
    std::vector<View<T>> v;
    for (std::size_t j = 0; j < count; ++j)
      v.emplace_back(first + j * local_size(), static_cast<std::size_t>(local_size()));
    return v;
  }
  // Waits for a CUDA rank's stream, so that the phases' times are the device's.
  void synchronize() {
#if defined(PMKIT_WITH_CUDA)
    if (device) device->synchronize();
#endif
  }

  // Block -> local meshes (owned nodes), then the ghost layers from their owners.
  void fill_local_meshes(Span<View<const T>> blocks) {
#if defined(PMKIT_WITH_CUDA)
    if (device) {
      std::vector<const T*> pointers;
      for (const auto& b : blocks) pointers.push_back(b.data);
      const double t0 = MPI_Wtime();
      device->block_to_local(pointers.data(), static_cast<int>(blocks.size()));
      synchronize();
      const double t1 = MPI_Wtime();
      device->halo_fill(static_cast<int>(blocks.size()));
      synchronize();
      timings.compute_s += t1 - t0;
      timings.exchange_s += MPI_Wtime() - t1;
      return;
    }
#endif
    double t0 = MPI_Wtime();
    for (std::size_t j = 0; j < blocks.size(); ++j) {
      const T* in = blocks[j].data;
      T* out = meshes.data() + j * local_size();
      region.for_each_row([&](std::int64_t b, std::int64_t l, std::int64_t len) {
        std::copy(in + b, in + b + len, out + l);
      });
    }
    double t1 = MPI_Wtime();
    halo->fill(meshes.data(), static_cast<int>(blocks.size()), local_size());
    timings.compute_s += t1 - t0;
    timings.exchange_s += MPI_Wtime() - t1;
  }

  // spread and spread_gradient: local_call spreads `count` meshes into the local meshes,
  // then the ghost sums go to their owners and the owned nodes into the caller's blocks.
  template <class Call>
  void spread_local(int count, Span<View<T>> blocks, Accumulate mode, Call&& local_call) {
    const double t0 = MPI_Wtime();
    local_call(*local, local_views(count));
    synchronize();
    const double t1 = MPI_Wtime();
#if defined(PMKIT_WITH_CUDA)
    if (device) {
      device->halo_sum(count);
      synchronize();
      const double t2 = MPI_Wtime();
      std::vector<T*> pointers;
      for (const auto& b : blocks) pointers.push_back(b.data);
      device->local_to_block(pointers.data(), count, mode);
      synchronize();
      timings = {t1 - t0 + MPI_Wtime() - t2, t2 - t1, 0};
      return;
    }
#endif
    halo->sum(meshes.data(), count, local_size());
    const double t2 = MPI_Wtime();
    for (int j = 0; j < count; ++j) {
      const T* in = meshes.data() + j * local_size();
      T* out = blocks[j].data;
      region.for_each_row([&](std::int64_t b, std::int64_t l, std::int64_t len) {
        if (mode == Accumulate::Overwrite) std::copy(in + l, in + l + len, out + b);
        else for (std::int64_t e = 0; e < len; ++e) out[b + e] += in[l + e];
      });
    }
    timings = {t1 - t0 + MPI_Wtime() - t2, t2 - t1, 0};
  }

  // Deterministic: each property's largest |q| on this rank into max_abs; a value that is
  // not finite fails, named.
  void largest_values(Span<View<const T>> props) {
    max_abs.assign(props.size(), 0.0);
#if defined(PMKIT_WITH_CUDA)
    if (device) {
      device->largest_values(props, n, max_abs);
      return;
    }
#endif
    for (std::size_t j = 0; j < props.size(); ++j)
      for (std::size_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(props[j][i]);
        if (!std::isfinite(v)) distributed::fail_not_finite(j, i, v);
        max_abs[j] = std::max(max_abs[j], std::fabs(v));
      }
  }

  // The checks of spread and spread_gradient (`inputs_per_mesh` particle arrays for each
  // mesh), agreed by all ranks, and the local meshes reserved.
  void check_spread(const char* call, Span<View<const T>> inputs, Span<View<T>> blocks, int inputs_per_mesh) {
    agree_on_count(comm, call, "meshes", blocks.size());
    agree(comm, call, [&] {
      if (!has_points) fail(ErrorCode::NotReady, call, " called before set_points");
      if (inputs.size() != inputs_per_mesh * blocks.size())
        fail(ErrorCode::SizeMismatch, call, " got ", inputs.size(), " particle arrays but ", blocks.size(),
             " meshes: ", inputs_per_mesh, " per mesh");
      if (options.deterministic && inputs_per_mesh != 1)
        fail(ErrorCode::Unsupported, call, ": the deterministic distributed plan spreads values only");
      check_particle_arrays(inputs_per_mesh == 1 ? "props" : "vectors", inputs, n);
      check_block_arrays("meshes", blocks, block_size());
      if (options.deterministic) largest_values(inputs);
      reserve_meshes(blocks.size(), options.deterministic);
    });
  }

  // interp and interp_gradient (`outputs_per_mesh` outputs for each mesh): checks, the
  // blocks into the local meshes and their ghost layers filled, then the local plan's call.
  template <class Call>
  void gather(const char* call, Span<View<const T>> blocks, Span<View<T>> outputs, int outputs_per_mesh,
              Call&& local_call) {
    agree_on_count(comm, call, "meshes", blocks.size());
    agree(comm, call, [&] {
      if (!has_points) fail(ErrorCode::NotReady, call, " called before set_points");
      if (outputs.size() != outputs_per_mesh * blocks.size())
        fail(ErrorCode::SizeMismatch, call, " got ", blocks.size(), " meshes but ", outputs.size(), " output arrays: ",
             outputs_per_mesh, " per mesh");
      check_block_arrays("meshes", blocks, block_size());
      check_particle_arrays(outputs_per_mesh == 1 ? "values" : "gradients", outputs, n);
      reserve_meshes(blocks.size(), false);
    });
    if (blocks.empty()) return;
    timings = {};
    fill_local_meshes(blocks);
    const double t0 = MPI_Wtime();
    const std::vector<View<T>> filled = local_views(blocks.size());
    local_call(*local, std::vector<View<const T>>(filled.begin(), filled.end()));
    synchronize();
    timings.compute_s += MPI_Wtime() - t0;
  }

  // The deterministic spread: global scales, fixed-point deposits, integer ghost sums.
  void spread_exact(Span<View<const T>> props, Span<View<T>> blocks, Accumulate mode) {
    const double t0 = MPI_Wtime();
    const int count = static_cast<int>(props.size());
    std::vector<double> scale(count), inverse(count);
    unsigned long long total = n;
    MPI_Allreduce(MPI_IN_PLACE, max_abs.data(), count, MPI_DOUBLE, MPI_MAX, comm);
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
    for (int j = 0; j < count; ++j) {
      scale[j] = distributed::exact_scale(max_abs[j], total, kernel.support(), D);
      inverse[j] = 1.0 / scale[j];
    }
#if defined(PMKIT_WITH_CUDA)
    if (device) {
      device->spread_exact(props, n, scale);
      synchronize();
      const double t1 = MPI_Wtime();
      device->halo_sum_exact(count);
      synchronize();
      const double t2 = MPI_Wtime();
      std::vector<T*> pointers;
      for (const auto& b : blocks) pointers.push_back(b.data);
      device->exact_to_block(pointers.data(), count, inverse, mode);
      synchronize();
      timings = {t1 - t0 + MPI_Wtime() - t2, t2 - t1, 0};
      return;
    }
#endif
    std::fill(exact.begin(), exact.begin() + count * local_size(), Exact(0));
    std::vector<Exact*> targets(count);
    for (int j = 0; j < count; ++j) targets[j] = exact.data() + j * local_size();
    // Slabs of S planes in two colours, as CpuSlabs: a particle whose stencil starts in
    // slab c writes slabs c and c + 1 only, so the slabs of one colour run in parallel.
    // Integer sums: the result does not depend on which thread adds what, or when.
    const int S = kernel.support();
    const int planes = static_cast<int>(region.local[D - 1]);
    const int slabs = (planes + S - 1) / S;
    const int threads = options.num_threads > 0 ? options.num_threads : cpu::default_threads();
    kernels::dispatch(kernel, [&](auto k) {
      for (int colour = 0; colour < 2; ++colour) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int c = colour; c < slabs; c += 2) {
          std::vector<double> q(count);
          for (std::size_t idx = plane_start[c * S]; idx < plane_start[std::min((c + 1) * S, planes)]; ++idx) {
            const std::size_t i = order[idx];
            int b[D];
            T s[D];
            for (int d = 0; d < D; ++d) {
              b[d] = base[d][i];
              s[d] = frac[d][i];
            }
            for (int j = 0; j < count; ++j) q[j] = static_cast<double>(props[j][i]);
            distributed::deposit_exact<decltype(k), T, D>(
                local_layout, b, s, q.data(), scale.data(), count,
                [&](int j, std::int64_t node, distributed::ExactWords w) { targets[j][node] += distributed::to_exact(w); });
          }
        }
      }
    });
    const double t1 = MPI_Wtime();
    halo->sum(exact.data(), count, local_size());
    const double t2 = MPI_Wtime();
    for (int j = 0; j < count; ++j) {
      const Exact* in = targets[j];
      T* out = blocks[j].data;
      const double inv = inverse[j];
      const bool add = mode == Accumulate::Add;
      region.for_each_row([&](std::int64_t b, std::int64_t l, std::int64_t len) {
        for (std::int64_t e = 0; e < len; ++e) distributed::round_exact(distributed::words_of(in[l + e]), inv, add, out[b + e]);
      });
    }
    timings = {t1 - t0 + MPI_Wtime() - t2, t2 - t1, 0};
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
  agree(comm, "DistributedPlan", [&] {
    validate(grid, kernel.ghost_width());
    if (options.backend == Backend::Cuda) {
#if !defined(PMKIT_WITH_CUDA)
      fail(ErrorCode::Unsupported,
           "options.backend = Cuda: this build of pmkit has no CUDA backend (configure with PMKIT_CUDA=ON and a CUDA "
           "compiler)");
#endif
      if (options.host_arrays)
        fail(ErrorCode::Unsupported, "options.host_arrays on CUDA ranks: a distributed plan takes device arrays");
    }
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
    s.decomposition = std::make_unique<distributed::Decomposition<D>>(grid, kernel.ghost_width(),
                                                                      RankGrid<D>{ranks, split.cuts}, size);
  });
  std::array<int, D> periods{};
  MPI_Cart_create(comm, D, ranks.data(), periods.data(), 0, &s.comm);
  MPI_Comm_rank(s.comm, &s.rank);
  MPI_Comm_size(s.comm, &s.size);
  s.global_layout = detail::make_layout(grid, kernel.ghost_width());
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
  agree(s.comm, "DistributedPlan", [&] {
    Options local_options = options;
    local_options.deterministic = false;
    s.local = std::make_unique<Plan<T, D>>(local_grid, kernel, local_options);
  });
  s.halo = std::make_unique<distributed::Halo>(*s.decomposition, s.rank, s.comm);
#if defined(PMKIT_WITH_CUDA)
  if (options.backend == Backend::Cuda)
    agree(s.comm, "DistributedPlan", [&] {
      s.device = std::make_unique<distributed::DeviceRank<T, D>>(*s.decomposition, *s.halo, s.region, s.global_layout,
                                                                 s.local_layout, s.comm, kernel, options, transport);
    });
#else
  (void)transport;
#endif
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
  agree_on_count(s.comm, "migrate", "property arrays", props.size());
#if defined(PMKIT_WITH_CUDA)
  if (s.device) {
    const std::size_t moved = s.device->migrate(positions, props, count);
    s.timings = {0, 0, MPI_Wtime() - t0};
    return moved;
  }
#endif
  const std::size_t result = distributed::migrate<T, D>(
      s.comm, positions, props, count, [&](const double (&u)[D]) { return s.owner_of(u); }, s.global_layout);
  s.timings = {0, 0, MPI_Wtime() - t0};
  return result;
}

template <class T, int D>
void DistributedPlan<T, D>::set_points(const Positions& positions) {
  Impl& s = *impl_;
  agree(s.comm, "set_points", [&] { s.set_points(positions, check_positions<T, D>(positions)); });
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
                   [&](Plan<T, D>& local, Span<View<T>> filled) { local.spread(props, filled); });
}

template <class T, int D>
void DistributedPlan<T, D>::spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) {
  Impl& s = *impl_;
  s.check_spread("spread_gradient", vectors, meshes, D);
  if (meshes.empty()) return;
  s.spread_local(static_cast<int>(meshes.size()), meshes, mode,
                 [&](Plan<T, D>& local, Span<View<T>> filled) { local.spread_gradient(vectors, filled); });
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
DistributedTimings DistributedPlan<T, D>::last_timings() const { return impl_->timings; }
template <class T, int D>
Transport DistributedPlan<T, D>::transport() const {
#if defined(PMKIT_WITH_CUDA)
  if (impl_->device) return impl_->device->transport();
#endif
  return Transport::HostMpi;
}

template <class T, int D>
int DistributedPlan<T, D>::owner(const std::array<double, D>& position) const {
  const Impl& s = *impl_;
  double u[D];
  for (int d = 0; d < D; ++d) {
    if (!distributed::wrapped_coordinate(s.global_layout.axis[d], position[d], u[d])) return -1;
  }
  return s.owner_of(u);
}

template class DistributedPlan<float, 2>;
template class DistributedPlan<float, 3>;
template class DistributedPlan<double, 2>;
template class DistributedPlan<double, 3>;

}  // namespace pmkit
