#pragma once
// The CUDA pair backend's cell list: particles sorted by cell on the device, and the
// entry points between PairPlan (pairs_impl.hpp), the library (src/cuda/pair_cells.cu:
// binning) and the traversal templates compiled for the caller's kernel
// (pmkit/cuda/pairs.cuh). Host code only: g++ and nvcc both include it.
#include <array>
#include <cstdint>
#include <map>
#include <typeindex>
#include <type_traits>

#include "pmkit/config.hpp"
#include "pmkit/cuda/runtime.hpp"
#include "pmkit/view.hpp"

namespace pmkit {
enum class PairMethod;  // pairs.hpp, which includes this file at its end
}

namespace pmkit::detail {

// Sorted positions, packed for one aligned vector load (w is padding).
template <class T, int D>
struct PackedPosition;
template <class T>
struct alignas(4 * sizeof(T)) PackedPosition<T, 3> {
  T x, y, z, w;
};
template <class T>
struct alignas(2 * sizeof(T)) PackedPosition<T, 2> {
  T x, y;
};
template <class T, int D>
PMKIT_HD inline T& component(PackedPosition<T, D>& p, int d) {
  if constexpr (D == 3) return d == 0 ? p.x : d == 1 ? p.y : p.z;
  else return d == 0 ? p.x : p.y;
}
template <class T, int D>
PMKIT_HD inline T component(const PackedPosition<T, D>& p, int d) {
  if constexpr (D == 3) return d == 0 ? p.x : d == 1 ? p.y : p.z;
  else return d == 0 ? p.x : p.y;
}

// What a kernel launch needs to know of the cells (passed by value to the kernels).
template <class T, int D>
struct PairGeometry {
  int ncell[D];
  T length[D];      // box lengths (periodic shifts)
  T origin[D];
  T inv_width[D];   // cells per unit length
  bool periodic[D];
  T cutoff, cutoff2;
  // Inside a cell, particles are sorted by x quantised to 2^x_bits steps (0: not sorted),
  // so that a row of cells is sorted by x up to one step; x_slack covers that disorder
  // and the rounding of the quantisation.
  int x_bits;
  T x_slack;
};

// The quantised x of a particle inside its cell k (0 <= step < 2^x_bits).
template <class T, int D>
PMKIT_HD inline std::uint32_t pair_x_step(const PairGeometry<T, D>& g, T u, int k) {
  const T fraction = u * g.inv_width[0] - T(k);
  const T steps = T(std::uint32_t(1) << g.x_bits);
  const T s = fraction * steps;
  return s <= T(0) ? 0u : s >= steps - T(1) ? (std::uint32_t(1) << g.x_bits) - 1 : static_cast<std::uint32_t>(s);
}

// Which cell a wrapped coordinate u (0 <= u <= length) lies in; the binning and the
// traversal call this same function so that they agree bit for bit.
template <class T, int D>
PMKIT_HD inline int pair_cell_coordinate(const PairGeometry<T, D>& g, int d, T u) {
  const int k = static_cast<int>(u * g.inv_width[d]);
  return k < g.ncell[d] - 1 ? k : g.ncell[d] - 1;
}

// The corner rows of an x-row in 3D: q = 0..3 is the row at (dy, dz) = corner_offset(q),
// both -1 or +1. A source of the row at that offset can be within the cutoff of the x-row
// only if its distance across y and z to the x-row's cells is below the cutoff: a quarter
// disc of the row's cross-section, ~79% of its sources where cells are a cutoff wide.
PMKIT_HD constexpr int corner_q(int dy, int dz) { return (dy > 0 ? 1 : 0) + (dz > 0 ? 2 : 0); }
PMKIT_HD constexpr int corner_dy(int q) { return q & 1 ? 1 : -1; }
PMKIT_HD constexpr int corner_dz(int q) { return q & 2 ? 1 : -1; }

// Whether a source at wrapped position p, in cell row (sy, sz), can be within the cutoff
// of the x-row at minus corner offset q from its own: its distance across y and z to that
// row's cells (the faces of its own cell that face them), with a margin for the rounding
// of positions and cell bounds, so that it only errs towards keeping a source.
template <class T, int D>
PMKIT_HD inline bool corner_source_live(const PairGeometry<T, D>& g, int q, int sy, int sz,
                                        const PackedPosition<T, D>& p) {
  const T w_y = g.length[1] / T(g.ncell[1]), w_z = g.length[D - 1] / T(g.ncell[D - 1]);
  // The x-row lies below (dy = +1: the source row is above it) or above the source's cell.
  const T gap_y = corner_dy(q) > 0 ? p.y - T(sy) * w_y : T(sy + 1) * w_y - p.y;
  const T gap_z = corner_dz(q) > 0 ? component(p, D - 1) - T(sz) * w_z : T(sz + 1) * w_z - component(p, D - 1);
  const T margin = T(1e-3) * g.cutoff + T(1e-5) * (g.length[1] > g.length[D - 1] ? g.length[1] : g.length[D - 1]);
  const T reach = g.cutoff + margin;
  return gap_y < T(0) || gap_z < T(0) || gap_y * gap_y + gap_z * gap_z < reach * reach;
}

template <class T, int D>
struct DevicePairCells {
  PairGeometry<T, D> geometry{};
  int device = 0;
  std::size_t n = 0;
  std::size_t cells = 0;
  std::uint32_t max_per_cell = 0;
  bool ready = false;
  cuda::DeviceBuffer<PackedPosition<T, D>> pos;  // sorted, wrapped into the box
  cuda::DeviceBuffer<std::uint32_t> perm;         // sorted slot -> the caller's index
  cuda::DeviceBuffer<std::uint32_t> start;        // first slot of each cell, plus the end
  // Dense 3D cells only (corner_lists): for each of the 4 corner offsets q (corner_q),
  // the sorted slots of the sources that can be within the cutoff of the x-row at minus
  // that offset, in sorted order, and where each cell's entries start in corner_index
  // (corner_start[q * (cells + 1) + c]; the four lists lie end to end there); the pencil
  // methods stage a corner row from these (bench/NOTES.md P30).
  bool corner_lists = false;
  cuda::DeviceBuffer<std::uint32_t> corner_index, corner_start;
  // set_points builds into these, then swaps (a failed call keeps the previous points).
  cuda::DeviceBuffer<PackedPosition<T, D>> next_pos;
  cuda::DeviceBuffer<std::uint32_t> next_perm, next_start, next_corner_index, next_corner_start;
  // Scratch: keys and unsorted positions for the sort, CUB's temporary storage, the
  // error flag, the inputs gathered into sorted order, and the half shell's sums in
  // sorted order (its atomics then hit consecutive addresses).
  cuda::DeviceBuffer<std::uint32_t> keys, keys_sorted, index;
  cuda::DeviceBuffer<std::uint32_t> corner_counts;  // each cell's count in each corner list
  cuda::DeviceBuffer<PackedPosition<T, D>> unsorted;
  cuda::DeviceBuffer<unsigned char> temp;
  cuda::DeviceBuffer<unsigned long long> status;
  cuda::DeviceBuffer<T> sorted_inputs, sorted_outputs;
  // set_points(mesh plan): the mesh plan's binned offsets (D arrays) and binned order.
  cuda::DeviceBuffer<T> mesh_offsets;
  cuda::DeviceBuffer<std::uint32_t> mesh_order;
  // PairMethod::Auto: the method timed fastest for a kernel type, the x-pencil's
  // targets per block and the register budget with it, and the mean particles per cell
  // it was timed at.
  struct Choice {
    PairMethod method;
    int pencil_targets;
    bool few_registers;
    double per_cell;
  };
  std::map<std::type_index, Choice> chosen;
  PairMethod last_method{};  // PairMethod::Auto until a compute has run
  // Device time of the last traversal, between events[0] and events[1]: recorded without
  // waiting (compute is asynchronous), read on demand by kernel_seconds().
  double last_kernel_s = 0;
  bool kernel_time_pending = false;
  cudaEvent_t events[2] = {nullptr, nullptr};
  cuda::DevicePointerCheck device_pointers;  // pointers already found to be device memory

  DevicePairCells() = default;
  DevicePairCells(const DevicePairCells&) = delete;
  DevicePairCells& operator=(const DevicePairCells&) = delete;
  ~DevicePairCells() {
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
  }
  // Events for timing, made on first use.
  void make_events() {
    for (cudaEvent_t& e : events)
      if (!e) cuda::check(cudaEventCreate(&e), "cudaEventCreate");
  }

  // The last traversal's device time, waiting for it to end if it has not (a kernel
  // failure surfaces here as a pmkit::Error).
  double kernel_seconds() {
    if (kernel_time_pending) {
      kernel_time_pending = false;
      cuda::check(cudaEventSynchronize(events[1]), "PairPlan::compute");
      float ms = 0;
      cuda::check(cudaEventElapsedTime(&ms, events[0], events[1]), "cudaEventElapsedTime");
      last_kernel_s = 1e-3 * ms;
    }
    return last_kernel_s;
  }

  double mean_per_cell() const { return cells ? double(n) / double(cells) : 0.0; }
};

// Library (src/cuda/pair_cells.cu): validates and bins device positions. With `order`
// (device memory), the positions are a mesh plan's binned offsets from the box origin
// (Plan::binned_positions) and order[k] the caller's index of offset k.
template <class T, int D>
void device_pair_bin(DevicePairCells<T, D>& cells, const std::array<View<const T>, D>& positions,
                     const std::uint32_t* order = nullptr);

// The traversal for one kernel type, defined in pmkit/cuda/pairs.cuh (nvcc only); the
// library instantiates it for the built-in kernels.
template <class T, int D, class Kernel>
void device_pair_compute(DevicePairCells<T, D>& cells, const Kernel& kernel, PairMethod method,
                         Span<View<const T>> inputs, Span<View<T>> outputs);

}  // namespace pmkit::detail
