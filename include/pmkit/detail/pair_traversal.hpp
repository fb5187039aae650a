#pragma once
// The CPU pair traversal for any pair kernel, split where the library's threads take
// over. This header has the work of one cell, a template on the kernel (KernelPairs):
// PairPlan::compute instantiates it for the caller's kernel, the library for the built-in
// ones. The CPU pair backend (src/cpu/pair_backend.cpp) binned the cell list
// (HostPairCells) and walks its cells on its OpenMP threads (HostPairs::traverse), one
// call through HostPairWork per cell. No OpenMP here: a consumer compiles this header with
// any compiler flags, and the plan's num_threads decides the threads.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pmkit/pair_kernels.hpp"
#include "pmkit/view.hpp"

namespace pmkit::detail {

// Particles sorted by cell, their wrapped positions in that order, the distinct neighbour
// cells of every cell (3^D offsets, wrapped or clipped, deduplicated for periodic axes of
// fewer than three cells), and what the traversal needs of the box.
template <class T, int D>
struct HostPairCells {
  std::array<int, D> ncell{};
  std::array<double, D> width{};
  std::array<double, D> length{};
  std::array<bool, D> periodic{};
  double cutoff = 0;
  std::size_t n = 0;
  std::vector<std::uint32_t> start;  // first sorted slot of each cell, plus the end
  std::vector<std::uint32_t> perm;   // sorted slot -> the caller's index
  std::vector<T> pos;                // sorted positions, pos[d * n + slot]
  std::vector<std::vector<int>> neighbours;

  int cells() const {
    int c = 1;
    for (int d = 0; d < D; ++d) c *= ncell[d];
    return c;
  }
};

// One compute of a kernel as the library's threads call it: `call` is the kernel with
// its inputs and outputs (a KernelPairs), the functions its work on a cell or on a range
// of particles. Sums are blocks of outputs * n values, sums[k * n + slot].
template <class T, int D>
struct HostPairWork {
  const void* call;
  int outputs;  // the kernel's outputs per particle
  // Half shell: adds the pairs of cell c's particles with the later particles of their
  // neighbourhood (each pair once) to `sums`, the calling thread's block.
  void (*half_shell_cell)(const void* call, const HostPairCells<T, D>& cells, int c, T* sums);
  // Full shell: writes the outputs of cell c's particles, each from all its pairs.
  void (*full_shell_cell)(const void* call, const HostPairCells<T, D>& cells, int c);
  // Half shell: the outputs of sorted slots [begin, end), the sum of `blocks` blocks of
  // sums in block order, finished.
  void (*finish)(const void* call, const HostPairCells<T, D>& cells, std::size_t begin, std::size_t end,
                 const T* sums, int blocks);
};

// The CPU pair backend's traversal (null on the CUDA backend): runs the work on every
// cell, on the plan's threads, the half or the full shell as the plan's options say, and
// times it (PairPlan::last_timings).
template <class T, int D>
class HostPairs {
 public:
  virtual ~HostPairs() = default;
  virtual void traverse(const HostPairWork<T, D>& work) = 0;
};

// The neighbourhood of cell c: its neighbour cells, the periodic image shift of each, and
// the separation of two sorted slots within the cutoff.
template <class T, int D>
class CellNeighbourhood {
 public:
  CellNeighbourhood(const HostPairCells<T, D>& cl, int c)
      : cl_(cl), around_(cl.neighbours[static_cast<std::size_t>(c)]),
        rc2_(static_cast<T>(cl.cutoff * cl.cutoff)) {
    // With three or more cells on every periodic axis, each neighbour cell is one periodic
    // image, whose shift is known per pair of cells: no division and rounding per pair.
    // Fewer cells (a neighbour may be two images at once): the minimum image per pair.
    for (int d = 0; d < D; ++d) {
      length_[d] = static_cast<T>(cl.length[d]);
      cell_shifts_ = cell_shifts_ && (!cl.periodic[d] || cl.ncell[d] >= 3);
    }
    // shift_[o][d]: a particle b of the o-th neighbour is seen at x_b + shift_[o] from c.
    for (std::size_t o = 0; o < around_.size(); ++o)
      for (int d = 0, rest_c = c, rest_o = around_[o]; d < D; ++d) {
        const int kc = rest_c % cl.ncell[d], ko = rest_o % cl.ncell[d];
        rest_c /= cl.ncell[d];
        rest_o /= cl.ncell[d];
        shift_[o][d] = 0;
        if (cell_shifts_ && cl.periodic[d]) shift_[o][d] = ko - kc > 1 ? -length_[d] : kc - ko > 1 ? length_[d] : T(0);
      }
  }

  const std::vector<int>& around() const { return around_; }

  // Separation r = x_a - x_b (b of the o-th neighbour cell) and r2 = |r|^2; false at or
  // beyond the cutoff.
  bool separation(std::size_t a, std::size_t b, std::size_t o, T (&r)[D], T& r2) const {
    const std::size_t n = cl_.n;
    r2 = 0;
    for (int d = 0; d < D; ++d) {
      T v = cl_.pos[d * n + a] - cl_.pos[d * n + b] - shift_[o][d];
      if (!cell_shifts_ && cl_.periodic[d]) v -= length_[d] * std::round(v / length_[d]);
      r[d] = v;
      r2 += v * v;
    }
    return r2 < rc2_;
  }

 private:
  const HostPairCells<T, D>& cl_;
  const std::vector<int>& around_;
  T rc2_;
  std::array<T, D> length_{};
  bool cell_shifts_ = true;
  T shift_[D == 3 ? 27 : 9][D];
};

// A kernel's work per cell, with the inputs and outputs of one compute.
template <class T, int D, class Kernel>
class KernelPairs {
 public:
  KernelPairs(const Kernel& kernel, Span<View<const T>> inputs, Span<View<T>> outputs)
      : kernel_(kernel), inputs_(inputs), outputs_(outputs) {}

  HostPairWork<T, D> work() const { return {this, kOut, &half_shell_cell, &full_shell_cell, &finish}; }

 private:
  static constexpr int kIn = Kernel::inputs > 0 ? Kernel::inputs : 1;
  static constexpr int kOut = Kernel::outputs;

  void load_inputs(const HostPairCells<T, D>& cl, std::size_t slot, T (&in)[kIn]) const {
    for (int k = 0; k < Kernel::inputs; ++k) in[k] = inputs_[k][cl.perm[slot]];
  }

  static void half_shell_cell(const void* call, const HostPairCells<T, D>& cl, int c, T* sums) {
    const KernelPairs& self = *static_cast<const KernelPairs*>(call);
    const CellNeighbourhood<T, D> hood(cl, c);
    const std::vector<int>& around = hood.around();
    const std::size_t n = cl.n;
    for (std::uint32_t a = cl.start[c]; a < cl.start[c + 1]; ++a) {
      T in_a[kIn] = {}, out_a[kOut] = {};
      self.load_inputs(cl, a, in_a);
      for (std::size_t o = 0; o < around.size(); ++o) {
        const int other = around[o];
        if (other < c) continue;  // each unordered pair of cells once
        const std::uint32_t first = other == c ? a + 1 : cl.start[other];
        for (std::uint32_t b = first; b < cl.start[other + 1]; ++b) {
          T r[D], r2;
          if (!hood.separation(a, b, o, r, r2)) continue;
          T in_b[kIn] = {}, out_b[kOut] = {};
          self.load_inputs(cl, b, in_b);
          self.kernel_(r, r2, in_a, in_b, out_a, out_b);
          for (int k = 0; k < kOut; ++k) sums[k * n + b] += out_b[k];
        }
      }
      for (int k = 0; k < kOut; ++k) sums[k * n + a] += out_a[k];
    }
  }

  // Every particle gathers its own outputs: race-free without buffers.
  static void full_shell_cell(const void* call, const HostPairCells<T, D>& cl, int c) {
    const KernelPairs& self = *static_cast<const KernelPairs*>(call);
    const CellNeighbourhood<T, D> hood(cl, c);
    const std::vector<int>& around = hood.around();
    for (std::uint32_t a = cl.start[c]; a < cl.start[c + 1]; ++a) {
      T in_a[kIn] = {}, out_a[kOut] = {};
      self.load_inputs(cl, a, in_a);
      for (std::size_t o = 0; o < around.size(); ++o)
        for (std::uint32_t b = cl.start[around[o]]; b < cl.start[around[o] + 1]; ++b) {
          T r[D], r2;
          if (b == a || !hood.separation(a, b, o, r, r2)) continue;
          T in_b[kIn] = {}, discard[kOut] = {};
          self.load_inputs(cl, b, in_b);
          self.kernel_(r, r2, in_a, in_b, out_a, discard);
        }
      finish_outputs(self.kernel_, out_a);
      for (int k = 0; k < kOut; ++k) self.outputs_[k][cl.perm[a]] = out_a[k];
    }
  }

  static void finish(const void* call, const HostPairCells<T, D>& cl, std::size_t begin, std::size_t end,
                     const T* sums, int blocks) {
    const KernelPairs& self = *static_cast<const KernelPairs*>(call);
    const std::size_t n = cl.n, block = n * kOut;
    for (std::size_t s = begin; s < end; ++s) {
      T out[kOut] = {};
      for (int k = 0; k < kOut; ++k)
        for (int t = 0; t < blocks; ++t) out[k] += sums[block * t + k * n + s];
      finish_outputs(self.kernel_, out);
      for (int k = 0; k < kOut; ++k) self.outputs_[k][cl.perm[s]] = out[k];
    }
  }

  const Kernel& kernel_;
  Span<View<const T>> inputs_;
  Span<View<T>> outputs_;
};

}  // namespace pmkit::detail
