#pragma once
// Implementation of PairPlan (included by pairs.hpp): the cell list and the traversal,
// in a header because the pair kernel is the caller's type.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>

#include "pmkit/detail/openmp.hpp"
#ifdef PMKIT_WITH_CUDA
#include "pmkit/cuda/pair_cells.hpp"
#endif

namespace pmkit {
namespace detail {

// Particles sorted by cell (a counting sort), their wrapped positions in that order, and
// the distinct neighbour cells of every cell (3^D offsets, wrapped or clipped, deduplicated
// for periodic axes of fewer than three cells).
template <class T, int D>
struct CellList {
  std::array<int, D> ncell{};
  std::array<double, D> width{};
  std::size_t n = 0;
  std::vector<std::uint32_t> start;  // first sorted slot of each cell, plus the end
  std::vector<std::uint32_t> perm;   // sorted slot -> the caller's index
  std::vector<T> pos;                // sorted positions, pos[d * n + slot]
  std::vector<std::vector<int>> neighbours;
  std::vector<T> thread_outputs;     // half shell: one block of outputs per thread
  bool ready = false;                // set_points has succeeded at least once
#ifdef PMKIT_WITH_CUDA
  std::unique_ptr<DevicePairCells<T, D>> device;  // the CUDA backend's cells
#endif

  int cells() const {
    int c = 1;
    for (int d = 0; d < D; ++d) c *= ncell[d];
    return c;
  }
};

// Cell lists number particles with 32-bit slots (the last value kept free).
inline void check_pair_point_count(std::size_t n) {
  if (n >= std::numeric_limits<std::uint32_t>::max())
    fail(ErrorCode::Unsupported, "set_points with ", n, " particles: at most 2^32 - 2");
}

}  // namespace detail

template <class T, int D>
PairPlan<T, D>::PairPlan(const Box<D>& box, double cutoff, PairOptions options)
    : box_(box), cutoff_(cutoff), options_(options) {
  using detail::fail;
  if (!(cutoff > 0) || !std::isfinite(cutoff))
    fail(ErrorCode::InvalidArgument, "cutoff = ", cutoff, ": the cutoff radius must be positive and finite");
  if (options.num_threads < 0)
    fail(ErrorCode::InvalidArgument, "options.num_threads = ", options.num_threads);
  if (options.backend == Backend::Cpu && options.method != PairMethod::Auto)
    fail(ErrorCode::InvalidArgument, "options.method = ", to_string(options.method),
         " is a CUDA method; the CPU backend takes PairMethod::Auto");
  cells_ = std::make_unique<detail::CellList<T, D>>();
  std::int64_t total = 1;
  for (int d = 0; d < D; ++d) {
    if (!(box.length[d] > 0) || !std::isfinite(box.length[d]) || !std::isfinite(box.origin[d]))
      fail(ErrorCode::InvalidArgument, "box.length[", d, "] = ", box.length[d], ", box.origin[", d,
           "] = ", box.origin[d], ": the box needs a positive, finite size and a finite origin");
    if (box.boundary[d] == Boundary::Periodic && cutoff > 0.5 * box.length[d])
      fail(ErrorCode::InvalidArgument, "cutoff = ", cutoff, " is larger than half the periodic box length ",
           box.length[d], " of dimension ", d, " (the minimum image would be ambiguous)");
    const double cells = std::floor(box.length[d] / cutoff);
    if (cells > 1 << 20) fail(ErrorCode::InvalidArgument, "cutoff = ", cutoff, ": more than 2^20 cells per dimension");
    cells_->ncell[d] = std::max(1, static_cast<int>(cells));
    cells_->width[d] = box.length[d] / cells_->ncell[d];
    total *= cells_->ncell[d];
  }
  if (total > (std::int64_t(1) << 31)) fail(ErrorCode::InvalidArgument, "cutoff = ", cutoff, ": too many cells");
  if (options.backend == Backend::Cuda) {
#ifdef PMKIT_WITH_CUDA
    auto dev = std::make_unique<detail::DevicePairCells<T, D>>();
    dev->device = options.device;
    dev->cells = static_cast<std::size_t>(total);
    auto& g = dev->geometry;
    for (int d = 0; d < D; ++d) {
      g.ncell[d] = cells_->ncell[d];
      g.length[d] = static_cast<T>(box.length[d]);
      g.origin[d] = static_cast<T>(box.origin[d]);
      g.inv_width[d] = static_cast<T>(cells_->ncell[d] / box.length[d]);
      g.periodic[d] = box.boundary[d] == Boundary::Periodic;
    }
    g.cutoff = static_cast<T>(cutoff);
    g.cutoff2 = static_cast<T>(cutoff * cutoff);
    cells_->device = std::move(dev);
    return;  // the device traversal derives neighbours from cell coordinates
#else
    fail(ErrorCode::Unsupported, "PairOptions::backend = Cuda, but this build of pmkit has no CUDA backend");
#endif
  }
  // Neighbour cells of every cell, once each.
  auto& nb = cells_->neighbours;
  nb.resize(static_cast<std::size_t>(total));
  for (int c = 0; c < total; ++c) {
    int coord[D];
    for (int d = 0, rest = c; d < D; ++d) {
      coord[d] = rest % cells_->ncell[d];
      rest /= cells_->ncell[d];
    }
    int offsets = 1;
    for (int d = 0; d < D; ++d) offsets *= 3;
    for (int o = 0; o < offsets; ++o) {
      int other = 0, stride = 1;
      bool valid = true;
      for (int d = 0, rest = o; d < D; ++d, rest /= 3) {
        int k = coord[d] + rest % 3 - 1;
        const int m = cells_->ncell[d];
        if (k < 0 || k >= m) {
          if (box.boundary[d] == Boundary::Bounded) valid = false;
          k = (k + m) % m;
        }
        other += k * stride;
        stride *= m;
      }
      if (valid && std::find(nb[c].begin(), nb[c].end(), other) == nb[c].end()) nb[c].push_back(other);
    }
  }
}

template <class T, int D>
PairPlan<T, D>::~PairPlan() = default;
template <class T, int D>
PairPlan<T, D>::PairPlan(PairPlan&&) noexcept = default;
template <class T, int D>
PairPlan<T, D>& PairPlan<T, D>::operator=(PairPlan&&) noexcept = default;

template <class T, int D>
std::size_t PairPlan<T, D>::num_points() const {
  return cells_->n;
}
template <class T, int D>
bool PairPlan<T, D>::has_points() const {
  return cells_->ready;
}
template <class T, int D>
PairMethod PairPlan<T, D>::last_method() const {
#ifdef PMKIT_WITH_CUDA
  if (cells_->device) return cells_->device->last_method;
#endif
  return PairMethod::Auto;
}
template <class T, int D>
Timings PairPlan<T, D>::last_timings() const {
#ifdef PMKIT_WITH_CUDA
  if (cells_->device) {
    Timings t = timings_;
    t.compute_s = cells_->device->kernel_seconds();  // waits for the last compute
    return t;
  }
#endif
  return timings_;
}
template <class T, int D>
std::array<int, D> PairPlan<T, D>::cells() const {
  return cells_->ncell;
}

template <class T, int D>
void PairPlan<T, D>::set_points(const Positions& positions) {
  using detail::fail;
  const std::size_t n = positions[0].size;
  for (int d = 0; d < D; ++d) {
    if (positions[d].size != n)
      fail(ErrorCode::SizeMismatch, "positions[", d, "].size = ", positions[d].size, " but positions[0].size = ", n);
    if (n > 0 && positions[d].data == nullptr) fail(ErrorCode::InvalidArgument, "positions[", d, "].data is null");
  }
  detail::check_pair_point_count(n);
#ifdef PMKIT_WITH_CUDA
  detail::CellList<T, D>& cl = *cells_;
  if (cl.device) {
    detail::device_pair_bin<T, D>(*cl.device, positions);
    cl.n = n;
    cl.ready = true;
    return;
  }
#endif
  bin_on_host(positions, box_.origin, nullptr);
}

template <class T, int D>
void PairPlan<T, D>::set_points(const Plan<T, D>& mesh) {
  using detail::fail;
  if (!mesh.has_points())
    fail(ErrorCode::NotReady, "PairPlan::set_points(mesh plan): the mesh plan has no points (call its set_points first)");
  const Grid<D>& grid = mesh.grid();
  auto boundary_name = [](Boundary b) { return b == Boundary::Periodic ? "periodic" : "bounded"; };
  auto backend_name = [](Backend b) { return b == Backend::Cuda ? "CUDA" : "CPU"; };
  for (int d = 0; d < D; ++d) {
    const double length = double(grid.cells[d]) * grid.spacing[d];
    const double tolerance = 1e-12 * std::max(length, std::abs(grid.origin[d]));
    if (grid.boundary[d] != box_.boundary[d] || std::abs(length - box_.length[d]) > tolerance ||
        std::abs(grid.origin[d] - box_.origin[d]) > tolerance)
      fail(ErrorCode::InvalidArgument, "PairPlan::set_points(mesh plan): dimension ", d,
           " of the mesh plan's domain is [", grid.origin[d], ", ", grid.origin[d] + length, "] (",
           boundary_name(grid.boundary[d]), "), of the pair plan's box [",
           box_.origin[d], ", ", box_.origin[d] + box_.length[d], "] (",
           boundary_name(box_.boundary[d]), "): they must be the same box");
  }
  if (mesh.options().backend != options_.backend)
    fail(ErrorCode::InvalidArgument, "PairPlan::set_points(mesh plan): the mesh plan runs on the ",
         backend_name(mesh.options().backend), " backend, the pair plan on the ", backend_name(options_.backend),
         " backend");
  const std::size_t n = mesh.num_points();
  detail::check_pair_point_count(n);
  // The mesh plan's binned offsets into offsets[d * n + k] and its binned order into
  // order (memory of the pair plan's backend), as the positions to bin.
  auto take_binned = [&](T* offsets, std::uint32_t* order) {
    std::array<View<T>, D> out;
    Positions positions;
    for (int d = 0; d < D; ++d) positions[d] = out[d] = View<T>(offsets + d * n, n);
    mesh.binned_positions(out);
    mesh.binned_order(View<std::uint32_t>(order, n));
    return positions;
  };
#ifdef PMKIT_WITH_CUDA
  detail::CellList<T, D>& cl = *cells_;
  if (cl.device) {
    if (mesh.options().device != options_.device)
      fail(ErrorCode::InvalidArgument, "PairPlan::set_points(mesh plan): the mesh plan is on device ",
           mesh.options().device, ", the pair plan on device ", options_.device);
    if (mesh.options().host_arrays)
      fail(ErrorCode::Unsupported, "PairPlan::set_points(mesh plan): the mesh plan takes host arrays "
           "(Options::host_arrays), the CUDA pair plan device memory; pass the positions instead");
    detail::DevicePairCells<T, D>& dev = *cl.device;
    const cuda::DeviceScope on_device(options_.device);
    dev.mesh_offsets.reserve(D * n, "PairPlan::set_points(mesh plan): offsets");
    dev.mesh_order.reserve(n, "PairPlan::set_points(mesh plan): order");
    detail::device_pair_bin<T, D>(dev, take_binned(dev.mesh_offsets.get(), dev.mesh_order.get()),
                                  dev.mesh_order.get());
    cl.n = n;
    cl.ready = true;
    return;
  }
#endif
  std::vector<T> offsets(D * n);
  std::vector<std::uint32_t> order(n);
  bin_on_host(take_binned(offsets.data(), order.data()), std::array<double, D>{}, order.data());
}

template <class T, int D>
void PairPlan<T, D>::bin_on_host(const Positions& positions, const std::array<double, D>& origin,
                                 const std::uint32_t* order) {
  using detail::fail;
  const std::size_t n = positions[0].size;
  detail::CellList<T, D>& cl = *cells_;
  // Particle i's wrapped coordinates (into wrapped[d * n + i]) and cell; the dimension
  // whose coordinate is rejected (not finite, or outside a bounded axis), else -1.
  std::vector<T> wrapped(D * n);
  auto locate = [&](std::size_t i, std::uint32_t& cell_out) -> int {
    int cell = 0;
    for (int d = D - 1; d >= 0; --d) {
      const double x = positions[d][i];
      if (!std::isfinite(x)) return d;
      double u = x - origin[d];
      if (box_.boundary[d] == Boundary::Periodic) {
        u -= box_.length[d] * std::floor(u / box_.length[d]);
        if (u >= box_.length[d]) u = 0;
      } else if (order) {  // a mesh plan's offset: inside, up to the rounding to T
        u = std::min(std::max(u, 0.0), box_.length[d]);
      } else if (u < 0 || u > box_.length[d]) {
        return d;
      }
      wrapped[d * n + i] = static_cast<T>(u);
      const int k = std::min(cl.ncell[d] - 1, static_cast<int>(u / cl.width[d]));
      cell = cell * cl.ncell[d] + k;
    }
    cell_out = static_cast<std::uint32_t>(cell);
    return -1;
  };
  // A counting sort in parallel: the particles in `threads` contiguous shares, each
  // share's cells counted, then placed at offsets that put share t's particles of a cell
  // after those of shares < t. That is the serial counting sort's order (by index within
  // a cell), whatever the thread count. Per-share counts are kept below 2^24 entries.
  const std::size_t ncells = static_cast<std::size_t>(cl.cells());
  int threads = std::max(1, std::min<int>(detail::openmp_threads(options_.num_threads),
                                          static_cast<int>(std::min<std::size_t>(n / 8192 + 1, 1024))));
  while (threads > 1 && ncells * static_cast<std::size_t>(threads) > (std::size_t(1) << 24)) --threads;
  // share(t, lo, hi) for every share t of particles [lo, hi), in parallel; taken share by
  // share, so that a team smaller than asked still does them all.
  auto for_each_share = [&](auto&& share) {
#pragma omp parallel num_threads(threads)
    for (int t = detail::openmp_thread_id(); t < threads; t += detail::openmp_team_size())
      share(t, n * t / threads, n * (t + 1) / threads);
  };
  std::vector<std::uint32_t> cell_of(n), offset(ncells * threads, 0);
  std::vector<std::size_t> first_bad(threads, n);
  for_each_share([&](int t, std::size_t lo, std::size_t hi) {
    std::uint32_t* count = offset.data() + ncells * t;
    for (std::size_t i = lo; i < hi; ++i) {
      if (locate(i, cell_of[i]) >= 0) {
        first_bad[t] = i;
        break;
      }
      ++count[cell_of[i]];
    }
  });
  const std::size_t bad = *std::min_element(first_bad.begin(), first_bad.end());
  if (bad < n) {  // the first rejected particle in the caller's order, as the serial loop would name it
    std::uint32_t unused;
    const int d = locate(bad, unused);
    const double x = positions[d][bad];
    if (!std::isfinite(x))
      fail(ErrorCode::NonFinitePosition, "positions[", d, "][", bad, "] = ", x, ": particle positions must be finite");
    fail(ErrorCode::OutOfBounds, "positions[", d, "][", bad, "] = ", x, " lies outside the bounded box [",
         box_.origin[d], ", ", box_.origin[d] + box_.length[d], "] of dimension ", d);
  }
  std::vector<std::uint32_t> start(ncells + 1, 0);
  std::uint32_t running = 0;
  for (std::size_t c = 0; c < ncells; ++c) {
    start[c] = running;
    for (int t = 0; t < threads; ++t) {
      const std::uint32_t count = offset[ncells * t + c];
      offset[ncells * t + c] = running;
      running += count;
    }
  }
  start[ncells] = running;
  std::vector<std::uint32_t> perm(n);
  std::vector<T> pos(D * n);
  for_each_share([&](int t, std::size_t lo, std::size_t hi) {
    std::uint32_t* cursor = offset.data() + ncells * t;
    for (std::size_t i = lo; i < hi; ++i) {
      const std::uint32_t slot = cursor[cell_of[i]]++;
      perm[slot] = order ? order[i] : static_cast<std::uint32_t>(i);
      for (int d = 0; d < D; ++d) pos[d * n + slot] = wrapped[d * n + i];
    }
  });
  cl.n = n;
  cl.start.swap(start);
  cl.perm.swap(perm);
  cl.pos.swap(pos);
  cl.ready = true;
}

template <class T, int D>
void PairPlan<T, D>::check_compute(std::size_t inputs, std::size_t outputs, Span<View<const T>> in,
                                   Span<View<T>> out) const {
  using detail::fail;
  if (!has_points()) fail(ErrorCode::NotReady, "compute called before set_points");
  if (in.size() != inputs)
    fail(ErrorCode::SizeMismatch, "the pair kernel reads ", inputs, " inputs but ", in.size(), " were given");
  if (out.size() != outputs)
    fail(ErrorCode::SizeMismatch, "the pair kernel writes ", outputs, " outputs but ", out.size(), " were given");
  const std::size_t n = num_points();
  for (std::size_t k = 0; k < in.size(); ++k)
    if (in[k].size != n || (n > 0 && in[k].data == nullptr))
      fail(ErrorCode::SizeMismatch, "inputs[", k, "].size = ", in[k].size, " but the plan has ", n, " particles");
  for (std::size_t k = 0; k < out.size(); ++k)
    if (out[k].size != n || (n > 0 && out[k].data == nullptr))
      fail(ErrorCode::SizeMismatch, "outputs[", k, "].size = ", out[k].size, " but the plan has ", n, " particles");
}

template <class T, int D>
template <class Kernel>
void PairPlan<T, D>::compute(const Kernel& kernel, Span<View<const T>> inputs, Span<View<T>> outputs) {
  constexpr int kIn = Kernel::inputs > 0 ? Kernel::inputs : 1;
  constexpr int kOut = Kernel::outputs;
  check_compute(Kernel::inputs, kOut, inputs, outputs);
  detail::CellList<T, D>& cl = *cells_;
#ifdef PMKIT_WITH_CUDA
  if (cl.device) {
    detail::device_pair_compute<T, D, Kernel>(*cl.device, kernel, options_.method, inputs, outputs);
    return;  // its device time is read by last_timings()
  }
#endif
  // Wall time of the CPU traversal, taken on every way out of this function.
  struct Stopwatch {
    double& seconds;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Stopwatch() { seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  } stopwatch{timings_.compute_s};
  const std::size_t n = cl.n;
  const int ncells = cl.cells();
  const int threads = detail::openmp_threads(options_.num_threads);
  const T rc2 = static_cast<T>(cutoff_ * cutoff_);
  std::array<T, D> length;
  std::array<bool, D> periodic;
  for (int d = 0; d < D; ++d) {
    length[d] = static_cast<T>(box_.length[d]);
    periodic[d] = box_.boundary[d] == Boundary::Periodic;
  }
  // With three or more cells on every periodic axis, each neighbour cell is one periodic
  // image, whose shift is known per pair of cells: no division and rounding per pair.
  // Fewer cells (a neighbour may be two images at once): the minimum image per pair.
  bool cell_shifts = true;
  for (int d = 0; d < D; ++d) cell_shifts = cell_shifts && (!periodic[d] || cl.ncell[d] >= 3);
  // shift[o][d] such that a particle b of the o-th neighbour of cell c is seen at
  // x_b + shift[o] from cell c.
  using NeighbourShifts = T[D == 3 ? 27 : 9][D];
  auto image_shifts = [&](int c, NeighbourShifts& shift) {
    const std::vector<int>& around = cl.neighbours[c];
    for (std::size_t o = 0; o < around.size(); ++o)
      for (int d = 0, rest_c = c, rest_o = around[o]; d < D; ++d) {
        const int kc = rest_c % cl.ncell[d], ko = rest_o % cl.ncell[d];
        rest_c /= cl.ncell[d];
        rest_o /= cl.ncell[d];
        shift[o][d] = 0;
        if (cell_shifts && periodic[d]) shift[o][d] = ko - kc > 1 ? -length[d] : kc - ko > 1 ? length[d] : T(0);
      }
  };
  // Separation of sorted slots a and b (b seen at its image x_b + shift); false at or
  // beyond the cutoff.
  auto separation = [&](std::size_t a, std::size_t b, const T (&shift)[D], T (&r)[D], T& r2) {
    r2 = 0;
    for (int d = 0; d < D; ++d) {
      T v = cl.pos[d * n + a] - cl.pos[d * n + b] - shift[d];
      if (!cell_shifts && periodic[d]) v -= length[d] * std::round(v / length[d]);
      r[d] = v;
      r2 += v * v;
    }
    return r2 < rc2;
  };
  auto load_inputs = [&](std::size_t slot, T (&in)[kIn]) {
    for (int k = 0; k < Kernel::inputs; ++k) in[k] = inputs[k][cl.perm[slot]];
  };

  if (options_.half_shell) {
    const std::size_t block = n * kOut;
    cl.thread_outputs.assign(block * threads, T(0));
#pragma omp parallel num_threads(threads)
    {
      T* mine = cl.thread_outputs.data() + block * detail::openmp_thread_id();
#pragma omp for schedule(dynamic, 16)
      for (int c = 0; c < ncells; ++c) {
        const std::vector<int>& around = cl.neighbours[c];
        NeighbourShifts shifts;
        image_shifts(c, shifts);
        for (std::uint32_t a = cl.start[c]; a < cl.start[c + 1]; ++a) {
          T in_a[kIn] = {}, out_a[kOut] = {};
          load_inputs(a, in_a);
          for (std::size_t o = 0; o < around.size(); ++o) {
            const int other = around[o];
            if (other < c) continue;  // each unordered pair of cells once
            const std::uint32_t first = other == c ? a + 1 : cl.start[other];
            for (std::uint32_t b = first; b < cl.start[other + 1]; ++b) {
              T r[D], r2;
              if (!separation(a, b, shifts[o], r, r2)) continue;
              T in_b[kIn] = {}, out_b[kOut] = {};
              load_inputs(b, in_b);
              kernel(r, r2, in_a, in_b, out_a, out_b);
              for (int k = 0; k < kOut; ++k) mine[k * n + b] += out_b[k];
            }
          }
          for (int k = 0; k < kOut; ++k) mine[k * n + a] += out_a[k];
        }
      }
      // Sum the threads' blocks in thread order (reproducible for a thread count).
#pragma omp for schedule(static)
      for (std::int64_t s = 0; s < static_cast<std::int64_t>(n); ++s) {
        T sums[kOut] = {};
        for (int k = 0; k < kOut; ++k)
          for (int t = 0; t < threads; ++t) sums[k] += cl.thread_outputs[block * t + k * n + s];
        detail::finish_outputs(kernel, sums);
        for (int k = 0; k < kOut; ++k) outputs[k][cl.perm[s]] = sums[k];
      }
    }
    return;
  }
  // Full shell: every particle gathers its own outputs; race-free without buffers.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
  for (int c = 0; c < ncells; ++c) {
    const std::vector<int>& around = cl.neighbours[c];
    NeighbourShifts shifts;
    image_shifts(c, shifts);
    for (std::uint32_t a = cl.start[c]; a < cl.start[c + 1]; ++a) {
      T in_a[kIn] = {}, out_a[kOut] = {};
      load_inputs(a, in_a);
      for (std::size_t o = 0; o < around.size(); ++o)
        for (std::uint32_t b = cl.start[around[o]]; b < cl.start[around[o] + 1]; ++b) {
          T r[D], r2;
          if (b == a || !separation(a, b, shifts[o], r, r2)) continue;
          T in_b[kIn] = {}, discard[kOut] = {};
          load_inputs(b, in_b);
          kernel(r, r2, in_a, in_b, out_a, discard);
        }
      detail::finish_outputs(kernel, out_a);
      for (int k = 0; k < kOut; ++k) outputs[k][cl.perm[a]] = out_a[k];
    }
  }
}

}  // namespace pmkit
