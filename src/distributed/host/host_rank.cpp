// The host rank (host_rank.hpp): copies between blocks and local meshes row by row, the
// ghost exchange and the migration on host arrays, and the deterministic spread in slabs
// of two colours over OpenMP threads, by parts (the split of core/split.hpp by the
// block's owned nodes).
#include "distributed/host/host_rank.hpp"

#include <algorithm>
#include <cmath>

#include "cpu/openmp.hpp"
#include "distributed/migration.hpp"

namespace pmkit::distributed {

namespace {

int rank_in(MPI_Comm comm) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

}  // namespace

template <class T, int D>
HostRank<T, D>::HostRank(const RankSetup<D>& setup)
    : comm_(setup.comm),
      rank_(rank_in(setup.comm)),
      kernel_(setup.kernel),
      num_threads_(setup.options.num_threads),
      decomposition_(setup.decomposition),
      owners_(host_owners(decomposition_, setup.global)),
      region_(setup.region),
      global_(setup.global),
      local_(setup.local),
      halo_(decomposition_, rank_, setup.comm) {
  for (int d = 0; d < D; ++d) first_cell_[d] = decomposition_.block(rank_).first_cell[d];
}

template <class T, int D>
T* HostRank<T, D>::meshes(int count) {
  const std::size_t values = static_cast<std::size_t>(count) * static_cast<std::size_t>(local_.size);
  if (meshes_.size() < values) meshes_.resize(values);
  return meshes_.data();
}

template <class T, int D>
void HostRank<T, D>::block_to_local(Span<View<const T>> blocks) {
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const T* in = blocks[j].data;
    T* out = meshes_.data() + j * local_.size;
    region_.for_each_row([&](std::int64_t b, std::int64_t l, std::int64_t len) {
      std::copy(in + b, in + b + len, out + l);
    });
  }
}

template <class T, int D>
void HostRank<T, D>::local_to_block(Span<View<T>> blocks, Accumulate mode) {
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const T* in = meshes_.data() + j * local_.size;
    T* out = blocks[j].data;
    region_.for_each_row([&](std::int64_t b, std::int64_t l, std::int64_t len) {
      if (mode == Accumulate::Overwrite) std::copy(in + l, in + l + len, out + b);
      else for (std::int64_t e = 0; e < len; ++e) out[b + e] += in[l + e];
    });
  }
}

template <class T, int D>
void HostRank<T, D>::halo_start(HaloPass pass, int count) {
  if (pass == HaloPass::ExactSum) halo_.start(exact_.data(), count, local_.size, true);
  else halo_.start(meshes_.data(), count, local_.size, pass == HaloPass::Sum);
}

template <class T, int D>
void HostRank<T, D>::halo_finish(HaloPass pass, int count) {
  if (pass == HaloPass::ExactSum) halo_.finish(exact_.data(), count, local_.size, true);
  else halo_.finish(meshes_.data(), count, local_.size, pass == HaloPass::Sum);
}

template <class T, int D>
std::size_t HostRank<T, D>::first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                                           std::array<double, D>& position) {
  const Columns<T, D> columns = columns_of<T, D>(positions);
  for (std::size_t i = 0; i < n; ++i)
    if (is_stranger<T, D>(columns, static_cast<std::int64_t>(i), owners_, rank_)) {
      for (int d = 0; d < D; ++d) position[d] = static_cast<double>(positions[d][i]);
      return i;
    }
  return n;
}

template <class T, int D>
std::size_t HostRank<T, D>::migrate(const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count,
                                    bool& changed) {
  return distributed::migrate<T, D>(comm_, positions, props, count, owners_, global_, changed);
}

// The stencils, then the particles by the first plane their stencils reach along the
// last axis (a counting sort), for the slabs of spread_exact; kept only once all is made.
template <class T, int D>
void HostRank<T, D>::locate_exact(const std::array<View<const T>, D>& positions, std::size_t n) {
  std::array<std::vector<int>, D> base;
  std::array<std::vector<T>, D> frac;
  std::vector<std::uint8_t> inside(n);
  const detail::NodeBox<D> interior = region_.interior();
  for (int d = 0; d < D; ++d) {
    base[d].resize(n);
    frac[d].resize(n);
  }
  kernels::dispatch(kernel_, [&](auto k) {
    for (std::size_t i = 0; i < n; ++i) {
      double u[D];
      for (int d = 0; d < D; ++d) u[d] = owners_.raw(d, static_cast<double>(positions[d][i]));
      int b[D];
      T s[D];
      exact_stencil<decltype(k), T, D>(u, first_cell_, b, s);
      for (int d = 0; d < D; ++d) {
        base[d][i] = b[d];
        frac[d][i] = s[d];
      }
      inside[i] = detail::stencil_inside<D>(interior, local_, b, decltype(k)::support) ? 1 : 0;
    }
  });
  const int g = kernel_.ghost_width();
  std::vector<std::size_t> plane_start(region_.local[D - 1] + 1, 0);
  for (std::size_t i = 0; i < n; ++i) ++plane_start[base[D - 1][i] + g + 1];
  for (std::size_t k = 1; k < plane_start.size(); ++k) plane_start[k] += plane_start[k - 1];
  std::vector<std::uint32_t> order(n);
  std::vector<std::size_t> next(plane_start.begin(), plane_start.end() - 1);
  for (std::size_t i = 0; i < n; ++i) order[next[base[D - 1][i] + g]++] = static_cast<std::uint32_t>(i);
  base_.swap(base);
  frac_.swap(frac);
  inside_.swap(inside);
  plane_start_.swap(plane_start);
  order_.swap(order);
}

template <class T, int D>
void HostRank<T, D>::largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs) {
  for (std::size_t j = 0; j < props.size(); ++j)
    for (std::size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(props[j][i]);
      if (!std::isfinite(v)) fail_not_finite(j, i, v);
      max_abs[j] = std::max(max_abs[j], std::fabs(v));
    }
}

template <class T, int D>
void HostRank<T, D>::exact_meshes(int count) {
  const std::size_t values = static_cast<std::size_t>(count) * static_cast<std::size_t>(local_.size);
  if (exact_.size() < values) exact_.resize(values);
}

// Slabs of S planes in two colours, as CpuSlabs: a particle whose stencil starts in slab
// c writes slabs c and c + 1 only, so the slabs of one colour run in parallel. Integer
// sums: the result does not depend on which thread adds what, or when.
template <class T, int D>
void HostRank<T, D>::spread_exact(Span<View<const T>> props, std::size_t, const std::vector<double>& scale,
                                  detail::Part part) {
  const int count = static_cast<int>(props.size());
  if (part != detail::Part::Interior) std::fill(exact_.begin(), exact_.begin() + count * local_.size, Exact(0));
  std::vector<Exact*> targets(count);
  for (int j = 0; j < count; ++j) targets[j] = exact_.data() + j * local_.size;
  const int S = kernel_.support();
  const int planes = static_cast<int>(region_.local[D - 1]);
  const int slabs = (planes + S - 1) / S;
  const int threads = detail::openmp_threads(num_threads_);
  kernels::dispatch(kernel_, [&](auto k) {
    for (int colour = 0; colour < 2; ++colour) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
      for (int c = colour; c < slabs; c += 2) {
        std::vector<double> q(count);
        for (std::size_t idx = plane_start_[c * S]; idx < plane_start_[std::min((c + 1) * S, planes)]; ++idx) {
          const std::size_t i = order_[idx];
          if (!detail::in_part(part, inside_[i] != 0)) continue;
          int b[D];
          T s[D];
          for (int d = 0; d < D; ++d) {
            b[d] = base_[d][i];
            s[d] = frac_[d][i];
          }
          for (int j = 0; j < count; ++j) q[j] = static_cast<double>(props[j][i]);
          deposit_exact<decltype(k), T, D>(
              local_, b, s, q.data(), scale.data(), count,
              [&](int j, std::int64_t node, ExactWords w) { targets[j][node] += to_exact(w); });
        }
      }
    }
  });
}

template <class T, int D>
void HostRank<T, D>::exact_to_block(Span<View<T>> blocks, const std::vector<double>& inverse, Accumulate mode) {
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const Exact* in = exact_.data() + j * local_.size;
    T* out = blocks[j].data;
    const double inv = inverse[j];
    const bool add = mode == Accumulate::Add;
    region_.for_each_row([&](std::int64_t b, std::int64_t l, std::int64_t len) {
      for (std::int64_t e = 0; e < len; ++e) round_exact(words_of(in[l + e]), inv, add, out[b + e]);
    });
  }
}

// Nothing is queued: every call has finished when it returns, and the clock is MPI's.
template <class T, int D>
void HostRank<T, D>::mark(int k) {
  marks_[k] = MPI_Wtime();
}

template <class T, int D>
double HostRank<T, D>::between(int a, int b) const {
  return marks_[b] - marks_[a];
}

PMKIT_DEFINE_RANK_FACTORY(make_host_rank, HostRank)

}  // namespace pmkit::distributed
