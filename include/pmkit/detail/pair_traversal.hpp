#pragma once
// The CPU pair traversal, a template on the caller's pair kernel: PairPlan::compute
// instantiates it for the caller's kernel, the library (src/cpu/pair_backend.cpp) for the
// built-in ones. It walks the cell list that the CPU pair backend binned (HostPairCells).
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pmkit/detail/openmp.hpp"
#include "pmkit/pair_kernels.hpp"
#include "pmkit/view.hpp"

namespace pmkit::detail {

// Particles sorted by cell, their wrapped positions in that order, the distinct neighbour
// cells of every cell (3^D offsets, wrapped or clipped, deduplicated for periodic axes of
// fewer than three cells), and what the traversal needs of the box and the options.
template <class T, int D>
struct HostPairCells {
  std::array<int, D> ncell{};
  std::array<double, D> width{};
  std::array<double, D> length{};
  std::array<bool, D> periodic{};
  double cutoff = 0;
  int num_threads = 0;      // OpenMP threads asked for (0: OpenMP's default)
  bool half_shell = true;   // each pair once, per-thread output buffers
  std::size_t n = 0;
  std::vector<std::uint32_t> start;  // first sorted slot of each cell, plus the end
  std::vector<std::uint32_t> perm;   // sorted slot -> the caller's index
  std::vector<T> pos;                // sorted positions, pos[d * n + slot]
  std::vector<std::vector<int>> neighbours;
  std::vector<T> thread_outputs;     // half shell: one block of outputs per thread
  double compute_s = 0;              // wall time of the last traversal

  int cells() const {
    int c = 1;
    for (int d = 0; d < D; ++d) c *= ncell[d];
    return c;
  }
};

// outputs[k][p] = particle p's output k of the kernel over its pairs; `seconds` gets the
// wall time of the traversal, on every way out.
template <class T, int D, class Kernel>
void traverse_pairs(HostPairCells<T, D>& cl, const Kernel& kernel, Span<View<const T>> inputs,
                    Span<View<T>> outputs, double& seconds) {
  constexpr int kIn = Kernel::inputs > 0 ? Kernel::inputs : 1;
  constexpr int kOut = Kernel::outputs;
  struct Stopwatch {
    double& seconds;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Stopwatch() { seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  } stopwatch{seconds};
  const std::size_t n = cl.n;
  const int ncells = cl.cells();
  const int threads = openmp_threads(cl.num_threads);
  const T rc2 = static_cast<T>(cl.cutoff * cl.cutoff);
  std::array<T, D> length;
  const std::array<bool, D> periodic = cl.periodic;
  for (int d = 0; d < D; ++d) length[d] = static_cast<T>(cl.length[d]);
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

  // Walks this thread's share of the cells (an orphaned worksharing loop: call it inside a
  // parallel region) and calls visit(c, around, shifts, a, in_a, out_a) for each particle a
  // of a cell, its inputs loaded and its outputs zeroed.
  auto for_each_target = [&](auto&& visit) {
#pragma omp for schedule(dynamic, 16)
    for (int c = 0; c < ncells; ++c) {
      const std::vector<int>& around = cl.neighbours[c];
      NeighbourShifts shifts;
      image_shifts(c, shifts);
      for (std::uint32_t a = cl.start[c]; a < cl.start[c + 1]; ++a) {
        T in_a[kIn] = {}, out_a[kOut] = {};
        load_inputs(a, in_a);
        visit(c, around, shifts, a, in_a, out_a);
      }
    }
  };

  if (cl.half_shell) {
    const std::size_t block = n * kOut;
    cl.thread_outputs.assign(block * threads, T(0));
#pragma omp parallel num_threads(threads)
    {
      T* mine = cl.thread_outputs.data() + block * openmp_thread_id();
      for_each_target([&](int c, const std::vector<int>& around, const NeighbourShifts& shifts, std::uint32_t a,
                          const T (&in_a)[kIn], T (&out_a)[kOut]) {
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
      });
      // Sum the threads' blocks in thread order (reproducible for a thread count).
#pragma omp for schedule(static)
      for (std::int64_t s = 0; s < static_cast<std::int64_t>(n); ++s) {
        T sums[kOut] = {};
        for (int k = 0; k < kOut; ++k)
          for (int t = 0; t < threads; ++t) sums[k] += cl.thread_outputs[block * t + k * n + s];
        finish_outputs(kernel, sums);
        for (int k = 0; k < kOut; ++k) outputs[k][cl.perm[s]] = sums[k];
      }
    }
    return;
  }
  // Full shell: every particle gathers its own outputs; race-free without buffers.
#pragma omp parallel num_threads(threads)
  for_each_target([&](int, const std::vector<int>& around, const NeighbourShifts& shifts, std::uint32_t a,
                      const T (&in_a)[kIn], T (&out_a)[kOut]) {
    for (std::size_t o = 0; o < around.size(); ++o)
      for (std::uint32_t b = cl.start[around[o]]; b < cl.start[around[o] + 1]; ++b) {
        T r[D], r2;
        if (b == a || !separation(a, b, shifts[o], r, r2)) continue;
        T in_b[kIn] = {}, discard[kOut] = {};
        load_inputs(b, in_b);
        kernel(r, r2, in_a, in_b, out_a, discard);
      }
    finish_outputs(kernel, out_a);
    for (int k = 0; k < kOut; ++k) outputs[k][cl.perm[a]] = out_a[k];
  });
}

}  // namespace pmkit::detail
