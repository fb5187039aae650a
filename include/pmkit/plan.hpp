#pragma once
// Plan<T, D>: particle <-> mesh interpolation on one grid with one kernel.
//
//   pmkit::Plan<float, 3> plan(grid, pmkit::Kernel::mp4());
//   plan.set_points({x, y, z});           // bins the particles once
//   plan.spread({q}, {rho});              // P2M, as often as needed
//   plan.interp({phi}, {phi_at_particles}); // M2P, results in the caller's order
//   plan.update_points({x, y, z});        // the same particles, moved a little
//
// set_points validates and bins the positions (a counting sort kept in the plan);
// every later spread/interp reuses that binning and allocates nothing. A failed call
// throws pmkit::Error and leaves both the plan and the caller's arrays as they were
// (on CUDA device arrays, a rejected position is reported later: see below).
// The outputs of spread, interp and the gradients share no element with their inputs
// (InvalidArgument naming both; device pointers are compared as addresses).
//
// On the CUDA backend every kernel, copy and event of a plan runs on Options::stream, in
// the order of the calls, after the work already queued there. On device arrays no call
// waits for the host: set_points, update_points, spread, interp, the gradients,
// binned_positions and binned_order into device memory return as soon as their work is
// queued (the caller synchronises the stream, or queues more work on it, before reading
// results). The binning's sizes are decided on the device, in buffers sized by bounds
// known from the particle count, so a steady loop allocates nothing and reads nothing
// back. The exceptions: set_points of 2^20 particles or more in binned order (as
// permute_to_binned leaves them) or on a grid too large for the partition sort (about
// 2^32 cells and up) waits once for a count, where that costs less than sorting its
// bound (not under stream capture); num_away and last_timings wait for the value they
// return; with host_arrays every call waits for its copies back.
//
// Positions are checked on the device. A rejected position (NaN, inf, outside a bounded
// axis, too far to wrap) is reported by the next call into the plan whose check has come
// back, or at the latest by synchronize(), which waits: the same pmkit::Error the CPU
// backend throws at once, naming the particle. The outputs of calls queued after the
// rejected one and before the report are unspecified, and the plan needs set_points
// again (NotReady until then). With host_arrays, set_points and update_points report
// it before they return.
//
// CUDA graphs: after one eager step of the same sizes (so that the buffers exist), the
// calls above can be captured on the plan's stream (cudaStreamBeginCapture) and replayed.
// A replay repeats the captured calls as they were decided at capture: update_points
// keeps the binning and handles every particle that has left its tile apart, however
// many (correct, but slower as they grow: an eager set_points or update_points between
// replays re-bins, and a new capture takes the new binning). A rejected position in a
// replay is reported by synchronize(). A call that grows the plan's device buffers (the
// first set_points, a larger one) frees and allocates device memory, which the CUDA
// runtime may synchronise device-wide; it cannot be captured.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pmkit/backend.hpp"
#include "pmkit/error.hpp"
#include "pmkit/grid.hpp"
#include "pmkit/kernels.hpp"
#include "pmkit/view.hpp"

namespace pmkit {

enum class Accumulate { Overwrite, Add };

// How spread resolves the write conflicts between particles. Auto picks per backend
// and case; an explicit method that cannot run on a case is an error.
enum class SpreadMethod {
  Auto,
  // CPU: particles sorted by mesh row; slabs of planes of two colours, each slab owned
  // by one thread, so no two threads ever write the same node at the same time.
  CpuSlabs,
  // CUDA: global atomics on sorted particles; shared-memory tiles with 32-bit fixed-point
  // accumulation.
  CudaGlobalAtomics,
  CudaSharedTiles,
  // CPU: every thread spreads its share of the sorted particles into a private copy of
  // the mesh, then the copies are summed node by node (threads x mesh of memory).
  CpuPrivateMeshes,
  // CUDA, for dense cells: a block sorts its share of a tile by cell in shared memory;
  // a thread sums its cell's particles into the S^D polynomial moments of the kernel's
  // pieces, in registers, and adds the cell's S^D node values to the tile once. One
  // shared atomic per cell and node instead of per particle and node. Kernels of up to
  // 64 nodes a particle (linear, TSC, M'4 and B-spline 4 in 3D; all in 2D); not in
  // deterministic mode (the sums' order within a cell varies between runs). Auto does
  // not take it: its sort by cell costs more than the atomics it saves in the cases
  // measured (docs/tuning.md#kcellspanparticles).
  CudaCellMoments,
};

// The mesh plan's options: where it runs (ExecutionOptions; which calls wait for the
// stream: see Plan) and how it spreads.
struct Options : ExecutionOptions {
  SpreadMethod spread_method = SpreadMethod::Auto;
  bool deterministic = false;  // CUDA: bit-for-bit identical spread across runs
  bool host_arrays = false;    // CUDA: views point to host memory; the plan copies
  // CUDA update_points: re-bin in full at the update after one that found more than
  // this fraction of the particles away from their tile (the count comes back without a
  // wait, so the decision is a step late; the late step stays right, its away particles
  // handled apart): an away particle costs spread and interp much more than a binned
  // one, a full binning a few spreads (docs/tuning.md#max_away_fraction).
  double max_away_fraction = 0.005;
};

namespace detail {
template <class T, int D>
class Backend;
template <class T, int D>
struct PlanAccess;
}

template <class T, int D>
class Plan {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "pmkit plans are float or double");

 public:
  using Positions = std::array<View<const T>, D>;

  Plan(const Grid<D>& grid, Kernel kernel, Options options = {});
  ~Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Positions as structure of arrays, any order; all D views of one length (0 is valid).
  void set_points(const Positions& positions);
  // The same particles (same count, same order) at new positions, after small moves:
  // the result of every later spread/interp is that of set_points(positions), but the
  // CUDA backend keeps its binning and handles the particles that left their tile apart
  // (num_away()), re-binning in full at the update after one that found more than
  // Options::max_away_fraction of them away. The CPU backend and the deterministic mode
  // always re-bin in full.
  void update_points(const Positions& positions);
  // P2M: props[i] (one value per particle) is spread onto meshes[i] (mesh_size() values).
  // A vector property is one view per component.
  void spread(Span<View<const T>> props, Span<View<T>> meshes,
              Accumulate mode = Accumulate::Overwrite);
  // M2P: values[i][p] = sum over nodes of weight * meshes[i], in the caller's order.
  void interp(Span<View<const T>> meshes, Span<View<T>> values);
  // M2P of the gradient: gradients[D*i + d][p] = the derivative of interp's result for
  // meshes[i] with respect to particle p's coordinate d, sum over nodes n of
  // dW/dx_d(x_p - x_n) * meshes[i][n] (the weights' derivatives divided by the spacing).
  // D outputs per mesh: D arrays, or D strided views of one interleaved array (stride D,
  // data offset by d). With Ghosts::Fold a ghost node reads its mirrored interior value,
  // as in interp, so the result is the exact derivative of interp's (zero across a face
  // for a particle on it, for every kernel but the linear one, whose derivative jumps at
  // the nodes: a particle on a node takes the slope of the cell above it); with
  // Ghosts::Keep the ghost values are read as given.
  void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients);
  // The adjoint of interp_gradient (a dipole or divergence spread): meshes[i][n] = sum
  // over particles p and axes d of vectors[D*i + d][p] * dW/dx_d(x_p - x_n), so that
  // <spread_gradient(v), f> = <v, interp_gradient(f)>. D components per mesh, as
  // interp_gradient's outputs. Conflicts are resolved as in spread, deterministic mode
  // included.
  void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode = Accumulate::Overwrite);

  const Grid<D>& grid() const { return grid_; }
  const Kernel& kernel() const { return kernel_; }
  const Options& options() const { return options_; }
  // CUDA: later calls run on `stream` (options().stream becomes it), in order after the
  // work queued so far on the previous stream: an event recorded there and waited on by
  // the new one, no host wait. Lets a caller follow its framework's current stream (as
  // the Python package does with torch's and CuPy's). The CPU backend keeps the handle
  // and has nothing to order.
  void set_stream(StreamHandle stream);
  std::array<std::int64_t, D> mesh_shape() const { return pmkit::mesh_shape(grid_, kernel_.ghost_width()); }
  std::int64_t mesh_size() const { return pmkit::mesh_size(grid_, kernel_.ghost_width()); }
  bool has_points() const { return has_points_; }
  // Particles handled outside their bin since the last full binning (update_points).
  std::size_t num_away() const;
  // Whether the last update_points kept the binning of the full binning before it (the
  // CUDA backend's update after small moves), so that binned_order is unchanged by it.
  // False after set_points, and always on the CPU backend and in deterministic mode.
  // Decided on the host: no wait.
  bool binning_kept() const;
  // order[k] = the caller's index of the k-th particle in the plan's binned order (that
  // of the last full binning). Keeping the particle arrays in this order (x'[k] =
  // x[order[k]], the same for every property) makes spread's property reads and interp's
  // writes local instead of scattered, and set_points, spread and interp faster where the
  // arrays are larger than the caches. `order` is device memory on the CUDA backend
  // unless options.host_arrays.
  void binned_order(View<std::uint32_t> order) const;
  // Puts the caller's particle arrays into the plan's binned order on the plan's
  // device: arrays[i][k] becomes the old arrays[i][order[k]] (order: binned_order's),
  // every array by the same permutation, so that positions, velocities, charges, ...
  // stay together. Any number of arrays, strided views of T (a component of an array of
  // structures too), each of num_points() values and none starting where another does.
  // Device memory on the CUDA backend unless options.host_arrays; the arrays never pass
  // through the host there, and the call returns once its work is queued (with
  // host_arrays, once the arrays are back). The permutation is that of the binning, a
  // stable sort on both backends: the particles of one bin (CPU) or tile (CUDA) keep
  // their relative order, so the same positions give the same order in every run, and
  // positions already in binned order keep theirs. The plan's binning refers to the old order, so the
  // plan needs set_points (of the permuted positions) before its next spread or interp
  // (NotReady until then). A rejected call (a length, a null or repeated array, before
  // set_points) writes nothing.
  void permute_to_binned(Span<View<T>> arrays);
  // The same out of place: to[i][k] = from[i][order[k]], the `from` arrays left as they
  // were. No copy back into the caller's arrays, so about half the memory traffic of the
  // in-place call: a caller with a second set of arrays swaps the sets afterwards. Each
  // to[i] apart from every from[j] and to[j] (to[i] = from[i] is the in-place case).
  void permute_to_binned(Span<View<const T>> from, Span<View<T>> to);
  // offsets[d][k] = the k-th binned particle's position relative to the grid origin (x -
  // origin, wrapped into [0, cells h) on periodic axes), as the plan holds it since the
  // last set_points or update_points: within a rounding of the caller's position (the
  // plan keeps a stencil base and a local coordinate in T). With binned_order, what
  // PairPlan::set_points(plan) bins from. Device memory on the CUDA backend unless
  // options.host_arrays.
  void binned_positions(const std::array<View<T>, D>& offsets) const;
  std::size_t num_points() const { return num_points_; }
  // The method spread runs with (Auto resolved), for logs and benchmarks.
  std::string spread_method_name() const;
  Timings last_timings() const;
  // CUDA: waits for the work queued on the plan's stream, then throws the error of a
  // position that a binning call (eager or replayed from a graph) rejected on the
  // device. CPU: returns at once (its calls check before they return).
  void synchronize() const;

 private:
  // The library's own entry points (src/core/backend.hpp): the distributed plan's split,
  // the particle step's adopt_binned_order.
  friend struct detail::PlanAccess<T, D>;
  // The caller's particle arrays (positions included) have been put in binned_order's
  // order: the plan's binning takes them as they are, as set_points of the permuted
  // positions would bin them, without binning again (Particles' full re-bin).
  void adopt_binned_order();
  // Reports a rejection the device found in an earlier call (wait: synchronize's), and
  // marks the plan as needing set_points if the backend lost its binning to one.
  void raise_device_errors(bool wait) const;
  template <class F>
  void call_backend(F&& call) const;

  Grid<D> grid_;
  Kernel kernel_;
  Options options_;
  std::unique_ptr<detail::Backend<T, D>> backend_;
  mutable bool has_points_ = false;
  std::size_t num_points_ = 0;
};

}  // namespace pmkit
