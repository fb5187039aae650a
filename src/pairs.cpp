// The PairPlan front end: argument and state checks common to both backends, then the
// backend call.
#include <algorithm>
#include <cmath>

#include "core/arguments.hpp"
#include "core/make_backend.hpp"
#include "core/pair_backend.hpp"
#include "pmkit/pairs.hpp"

namespace pmkit {

using detail::fail;

namespace {

const char* boundary_name(Boundary b) { return b == Boundary::Periodic ? "periodic" : "bounded"; }
const char* backend_name(Backend b) { return b == Backend::Cuda ? "CUDA" : "CPU"; }

template <int D>
detail::PairCellGrid<D> cell_grid(const Box<D>& box, double cutoff) {
  detail::PairCellGrid<D> grid;
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
    grid.ncell[d] = std::max(1, static_cast<int>(cells));
    grid.width[d] = box.length[d] / grid.ncell[d];
    total *= grid.ncell[d];
  }
  if (total > (std::int64_t(1) << 31)) fail(ErrorCode::InvalidArgument, "cutoff = ", cutoff, ": too many cells");
  grid.cells = static_cast<std::size_t>(total);
  return grid;
}

}  // namespace

template <class T, int D>
PairPlan<T, D>::PairPlan(const Box<D>& box, double cutoff, PairOptions options)
    : box_(box), cutoff_(cutoff), options_(options) {
  if (!(cutoff > 0) || !std::isfinite(cutoff))
    fail(ErrorCode::InvalidArgument, "cutoff = ", cutoff, ": the cutoff radius must be positive and finite");
  if (options.backend == Backend::Cpu && options.method != PairMethod::Auto)
    fail(ErrorCode::InvalidArgument, "options.method = ", to_string(options.method),
         " is a CUDA method; the CPU backend takes PairMethod::Auto");
  const detail::PairCellGrid<D> grid = cell_grid(box, cutoff);
  backend_ = detail::make_backend(
      options, "options", [&] { return detail::make_cpu_pair_backend<T, D>(box, cutoff, grid, options); },
      [&] { return detail::make_cuda_pair_backend<T, D>(box, cutoff, grid, options); });
}

template <class T, int D>
PairPlan<T, D>::PairPlan(const Grid<D>& grid, double cutoff, PairOptions options)
    : PairPlan(Box<D>::of(grid), cutoff, options) {}

template <class T, int D>
PairPlan<T, D>::~PairPlan() = default;
template <class T, int D>
PairPlan<T, D>::PairPlan(PairPlan&&) noexcept = default;
template <class T, int D>
PairPlan<T, D>& PairPlan<T, D>::operator=(PairPlan&&) noexcept = default;

template <class T, int D>
std::size_t PairPlan<T, D>::num_points() const {
  return backend_->num_points();
}
template <class T, int D>
bool PairPlan<T, D>::has_points() const {
  return backend_->has_points();
}
template <class T, int D>
PairMethod PairPlan<T, D>::last_method() const {
  return backend_->last_method();
}
template <class T, int D>
Timings PairPlan<T, D>::last_timings() const {
  return backend_->last_timings();
}
template <class T, int D>
void PairPlan<T, D>::set_stream(StreamHandle stream) {
  backend_->set_stream(stream);
  options_.stream = stream;
}
template <class T, int D>
std::array<int, D> PairPlan<T, D>::cells() const {
  return cell_grid(box_, cutoff_).ncell;
}

template <class T, int D>
void PairPlan<T, D>::synchronize() {
  backend_->report_errors(true);
}

template <class T, int D>
void PairPlan<T, D>::set_points(const Positions& positions) {
  detail::check_positions<T, D>(positions);
  backend_->set_points(positions);
}

template <class T, int D>
void PairPlan<T, D>::set_points(const Plan<T, D>& mesh) {
  if (!mesh.has_points())
    fail(ErrorCode::NotReady, "PairPlan::set_points(mesh plan): the mesh plan has no points (call its set_points first)");
  const Grid<D>& grid = mesh.grid();
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
  detail::check_point_count(mesh.num_points());
  if (options_.backend == Backend::Cuda) {
    if (mesh.options().device != options_.device)
      fail(ErrorCode::InvalidArgument, "PairPlan::set_points(mesh plan): the mesh plan is on device ",
           mesh.options().device, ", the pair plan on device ", options_.device);
    if (mesh.options().host_arrays)
      fail(ErrorCode::Unsupported, "PairPlan::set_points(mesh plan): the mesh plan takes host arrays "
           "(Options::host_arrays), the CUDA pair plan device memory; pass the positions instead");
  }
  backend_->set_points(mesh);
}

template <class T, int D>
void PairPlan<T, D>::check_compute(std::size_t inputs, std::size_t outputs, Span<View<const T>> in,
                                   Span<View<T>> out) const {
  backend_->report_errors(false);
  if (!has_points()) fail(ErrorCode::NotReady, "compute called before set_points");
  if (in.size() != inputs)
    fail(ErrorCode::SizeMismatch, "the pair kernel reads ", inputs, " inputs but ", in.size(), " were given");
  if (out.size() != outputs)
    fail(ErrorCode::SizeMismatch, "the pair kernel writes ", outputs, " outputs but ", out.size(), " were given");
  detail::check_particle_arrays("inputs", in, num_points());
  detail::check_particle_arrays("outputs", out, num_points());
}

template <class T, int D>
detail::HostPairs<T, D>& PairPlan<T, D>::host_pairs() {
  detail::HostPairs<T, D>* pairs = backend_->host_pairs();
  if (!pairs)
    fail(ErrorCode::Unsupported, "PairPlan::compute: a pair kernel of the caller's runs on the CUDA backend "
         "through pmkit::cuda::compute(plan, kernel, inputs, outputs), in a file compiled by nvcc that includes "
         "pmkit/cuda/pairs.cuh (PairPlan::compute runs the built-in kernels on CUDA)");
  return *pairs;
}

template <class T, int D>
detail::DevicePairs<T, D>* PairPlan<T, D>::device_pairs() {
  return backend_->device_pairs();
}

template <class T, int D>
template <class Kernel>
void PairPlan<T, D>::run_builtin(const Kernel& kernel, Span<View<const T>> in, Span<View<T>> out) {
  check_compute(Kernel::inputs, Kernel::outputs, in, out);
  backend_->compute(kernel, in, out);
}

template <class T, int D>
void PairPlan<T, D>::compute_builtin(const pair_kernels::LennardJones<D>& kernel, Span<View<const T>> in,
                                     Span<View<T>> out) {
  if (!std::isfinite(kernel.epsilon))
    fail(ErrorCode::InvalidArgument, "LennardJones epsilon = ", kernel.epsilon, ": the well depth must be finite");
  if (!(kernel.sigma > 0) || !std::isfinite(kernel.sigma))
    fail(ErrorCode::InvalidArgument, "LennardJones sigma = ", kernel.sigma,
         ": the length scale must be positive and finite");
  if (!(kernel.softening >= 0) || !std::isfinite(kernel.softening))
    fail(ErrorCode::InvalidArgument, "LennardJones softening = ", kernel.softening,
         ": the softening length must be zero or positive, and finite");
  // The plan visits the pairs closer than its own cutoff; the kernel shifts the energy to
  // zero at its cutoff. Any other value than the plan's truncates at one and shifts at
  // the other (a larger one drops the pairs beyond the plan's cutoff).
  if (!(std::abs(kernel.cutoff - cutoff_) <= 1e-12 * cutoff_))
    fail(ErrorCode::InvalidArgument, "LennardJones cutoff = ", kernel.cutoff, ": the kernel's cutoff must be the "
         "plan's cutoff ", cutoff_, " (the plan visits the pairs closer than it; the kernel shifts the energy to zero "
         "there)");
  run_builtin(kernel, in, out);
}

template <class T, int D>
void PairPlan<T, D>::compute_builtin(const pair_kernels::NeighbourCount& kernel, Span<View<const T>> in,
                                     Span<View<T>> out) {
  run_builtin(kernel, in, out);
}

template <class T, int D>
void PairPlan<T, D>::compute_builtin(const pair_kernels::EwaldRealSpace<D>& kernel, Span<View<const T>> in,
                                     Span<View<T>> out) {
  run_builtin(kernel, in, out);
}

template class PairPlan<float, 2>;
template class PairPlan<float, 3>;
template class PairPlan<double, 2>;
template class PairPlan<double, 3>;

}  // namespace pmkit
