#pragma once
// The interface every pair backend implements behind pmkit::PairPlan (src/pairs.cpp has
// checked the arguments and the plan's state when these are called).
#include <array>
#include <cstdint>
#include <memory>

#include "pmkit/pairs.hpp"

namespace pmkit::detail {

// The cell grid of a pair plan: cells at least a cutoff wide.
template <int D>
struct PairCellGrid {
  std::array<int, D> ncell{};
  std::array<double, D> width{};
  std::size_t cells = 1;
};

template <class T, int D>
class PairBackend {
 public:
  using Positions = std::array<View<const T>, D>;
  virtual ~PairBackend() = default;
  // Validates and bins n positions (caller's memory of the backend). CPU: throws at once
  // and keeps the previous points on error. CUDA: queued without a host wait; a rejected
  // position is thrown by report_errors (the plan then has no points).
  virtual void set_points(const Positions& positions) = 0;
  // Bins the particles of a mesh plan of the same domain as that plan binned them.
  virtual void set_points(const Plan<T, D>& mesh) = 0;
  virtual std::size_t num_points() const = 0;
  virtual bool has_points() const = 0;
  virtual void compute(const pair_kernels::LennardJones<D>& kernel, Span<View<const T>> in, Span<View<T>> out) = 0;
  virtual void compute(const pair_kernels::NeighbourCount& kernel, Span<View<const T>> in, Span<View<T>> out) = 0;
  virtual void compute(const pair_kernels::EwaldRealSpace<D>& kernel, Span<View<const T>> in, Span<View<T>> out) = 0;
  virtual HostPairs<T, D>* host_pairs() { return nullptr; }
  virtual DevicePairs<T, D>* device_pairs() { return nullptr; }
  virtual PairMethod last_method() const { return PairMethod::Auto; }
  // CUDA: throws the error of a rejected position that a binning has recorded by now;
  // with `wait`, first waits for the plan's stream, so that every binning queued so far
  // has. CPU: set_points reported its errors itself; nothing to wait for.
  virtual void report_errors(bool /*wait*/) {}
  virtual Timings last_timings() const = 0;
  // CUDA: later calls run on `stream`, after the work queued so far on the previous one
  // (PairPlan::set_stream). The CPU backend has no stream.
  virtual void set_stream(StreamHandle) {}
};

// A mesh plan's binned particles as positions to bin: its offsets from the domain origin
// into offsets[d * n + k] and its binned order into order (memory of the mesh plan's
// backend).
template <class T, int D>
std::array<View<const T>, D> binned_points(const Plan<T, D>& mesh, T* offsets, std::uint32_t* order) {
  const std::size_t n = mesh.num_points();
  std::array<View<T>, D> out;
  std::array<View<const T>, D> positions;
  for (int d = 0; d < D; ++d) positions[d] = out[d] = View<T>(offsets + d * n, n);
  mesh.binned_positions(out);
  mesh.binned_order(View<std::uint32_t>(order, n));
  return positions;
}

template <class T, int D>
std::unique_ptr<PairBackend<T, D>> make_cpu_pair_backend(const Box<D>& box, double cutoff,
                                                         const PairCellGrid<D>& grid, const PairOptions& options);
template <class T, int D>
std::unique_ptr<PairBackend<T, D>> make_cuda_pair_backend(const Box<D>& box, double cutoff,
                                                          const PairCellGrid<D>& grid, const PairOptions& options);

// Instantiates a backend's factory (make_cpu_pair_backend, make_cuda_pair_backend) for the
// four plans, in the backend's source file.
#define PMKIT_INSTANTIATE_PAIR_BACKEND(make)                                                                  \
  template std::unique_ptr<PairBackend<float, 2>> make<float, 2>(const Box<2>&, double, const PairCellGrid<2>&, \
                                                                  const PairOptions&);                        \
  template std::unique_ptr<PairBackend<float, 3>> make<float, 3>(const Box<3>&, double, const PairCellGrid<3>&, \
                                                                  const PairOptions&);                        \
  template std::unique_ptr<PairBackend<double, 2>> make<double, 2>(const Box<2>&, double,                      \
                                                                    const PairCellGrid<2>&, const PairOptions&); \
  template std::unique_ptr<PairBackend<double, 3>> make<double, 3>(const Box<3>&, double,                      \
                                                                    const PairCellGrid<3>&, const PairOptions&);

}  // namespace pmkit::detail
