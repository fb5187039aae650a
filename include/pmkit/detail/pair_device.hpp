#pragma once
// What the CUDA pair traversal, compiled for a kernel type (pmkit/cuda/pairs.cuh), needs
// of a CUDA pair plan. The library implements it (src/cuda/pairs/backend.cu): the cell
// list's buffers, the inputs gathered into sorted order, the half shell's sums, the
// events around a launch and the Auto choice per kernel type. No CUDA header: a stream is
// the opaque StreamHandle.
#include <cstddef>
#include <cstdint>
#include <typeindex>

#include "pmkit/backend.hpp"
#include "pmkit/detail/pair_geometry.hpp"
#include "pmkit/view.hpp"

namespace pmkit {
enum class PairMethod;
}

namespace pmkit::detail {

// The binned cells, as device pointers (valid until the next set_points).
template <class T, int D>
struct DevicePairView {
  PairGeometry<T, D> geometry;
  const PackedPosition<T, D>* pos;  // sorted, wrapped into the box
  const std::uint32_t* start;       // first slot of each cell, plus the end
  const std::uint32_t* perm;        // sorted slot -> the caller's index
  // Dense 3D cells only: the corner lists (null where the binning built none).
  const std::uint32_t* corner_index;
  const std::uint32_t* corner_start;
  std::size_t n;
  std::size_t cells;
  int device;
  StreamHandle stream;
  double mean_per_cell() const { return cells ? double(n) / double(cells) : 0.0; }
};

// PairMethod::Auto's choice for a kernel type: the method timed fastest, the x-pencil's
// targets per block and the register budget with it, and the mean particles per cell it
// was timed at.
struct PairChoice {
  PairMethod method;
  int pencil_targets;
  bool few_registers;
  double per_cell;
};

template <class T, int D>
class DevicePairs {
 public:
  virtual ~DevicePairs() = default;
  virtual DevicePairView<T, D> view() const = 0;
  // pmkit::Error unless ptr is device memory (array `what`[index]).
  virtual void require_device(const void* ptr, const char* what, std::size_t index) = 0;
  // The kernel's `count` inputs in sorted order (inputs[k * n + slot]), gathered on the
  // plan's stream; null for none.
  virtual const T* gather_inputs(Span<View<const T>> inputs, int count) = 0;
  // Scratch of `count` values per particle: allocated (which synchronises), or allocated
  // and zeroed on the plan's stream.
  virtual void reserve_sums(int count) = 0;
  virtual T* zeroed_sums(int count) = 0;
  // Events around the traversal's launches on the plan's stream; traversal_seconds waits
  // for the stop and returns the device time between.
  virtual void start_timer() = 0;
  virtual void stop_timer() = 0;
  virtual double traversal_seconds() = 0;
  // The Auto choice remembered for a kernel type (null if none) and its record.
  virtual const PairChoice* choice(std::type_index kernel) const = 0;
  virtual void remember(std::type_index kernel, const PairChoice& choice) = 0;
  virtual void set_last_method(PairMethod method) = 0;
};

// The traversal for one kernel type (pmkit/cuda/pairs.cuh, nvcc only; the library
// instantiates it for the built-in kernels).
template <class T, int D, class Kernel>
void device_pair_compute(DevicePairs<T, D>& dev, const Kernel& kernel, PairMethod method, Span<View<const T>> inputs,
                         Span<View<T>> outputs);

}  // namespace pmkit::detail
