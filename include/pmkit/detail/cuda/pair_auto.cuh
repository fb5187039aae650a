#pragma once
// The traversal of one compute for a kernel type: its arguments, and the method it runs,
// resolved by PairMethod::Auto's one-time timing of every candidate.
#include <algorithm>
#include <typeindex>

#include "pmkit/detail/cuda/pair_launch.cuh"

namespace pmkit::detail {
namespace pair_traversal {

// A method and launch variant of the traversal.
struct Candidate {
  PairMethod method;
  Variant variant;
};

// What Auto times, once each (the x-pencil with three block sizes, the half shell with
// two, each of the first sizes also with fewer registers in float; the compacted x-pencil
// with two, and the row split): any of them may be the method a plan then runs, so each
// must give the same sums.
constexpr Candidate kAutoCandidates[] = {{PairMethod::CudaThreadPerParticle, {kPencilTargets[0], false}},
                                         {PairMethod::CudaThreeThreadsPerParticle, {kPencilTargets[0], false}},
                                         {PairMethod::CudaBlockPerCell, {kPencilTargets[0], false}},
                                         {PairMethod::CudaXPencil, {kPencilTargets[0], false}},
                                         {PairMethod::CudaXPencil, {kPencilTargets[1], false}},
                                         {PairMethod::CudaXPencil, {kPencilTargets[2], false}},
                                         {PairMethod::CudaXPencil, {kPencilTargets[0], true}},
                                         {PairMethod::CudaHalfShell, {kPencilTargets[0], false}},
                                         {PairMethod::CudaHalfShell, {kPencilTargets[1], false}},
                                         {PairMethod::CudaHalfShell, {kPencilTargets[0], true}},
                                         {PairMethod::CudaCompactPencil, {kPencilTargets[0], false}},
                                         {PairMethod::CudaCompactPencil, {kPencilTargets[1], false}},
                                         {PairMethod::CudaRowSplit, {kPencilTargets[0], false}}};

// The traversal's arguments for one compute: the plan's cells, the outputs, and the
// kernel's inputs gathered into sorted order (on the plan's stream).
template <class Kernel, class T, int D>
Args<T, D, inputs_of<Kernel>(), Kernel::outputs> make_args(DevicePairs<T, D>& dev, const DevicePairView<T, D>& cells,
                                                           Span<View<const T>> inputs, Span<View<T>> outputs) {
  Args<T, D, inputs_of<Kernel>(), Kernel::outputs> args;
  args.g = cells.geometry;
  args.pos = cells.pos;
  args.start = cells.start;
  args.perm = cells.perm;
  args.corner_index = cells.corner_index;
  args.corner_start = cells.corner_start;
  args.n = static_cast<std::uint32_t>(cells.n);
  for (int k = 0; k < Kernel::outputs; ++k) args.out[k] = outputs[k];
  args.inputs = dev.gather_inputs(inputs, Kernel::inputs);
  return args;
}

}  // namespace pair_traversal

template <class T, int D, class Kernel>
void device_pair_compute(DevicePairs<T, D>& dev, const Kernel& kernel, PairMethod method, Span<View<const T>> inputs,
                         Span<View<T>> outputs) {
  namespace pt = pair_traversal;
  constexpr int kOut = Kernel::outputs;
  static_assert(Kernel::inputs <= 4, "the CUDA pair traversal takes at most 4 inputs per particle");
  const DevicePairView<T, D> cells = dev.view();
  const cuda::DeviceScope on_device(cells.device);
  for (std::size_t k = 0; k < inputs.size(); ++k) dev.require_device(inputs[k].data, "inputs", k);
  for (std::size_t k = 0; k < outputs.size(); ++k) dev.require_device(outputs[k].data, "outputs", k);

  const auto args = pt::make_args<Kernel>(dev, cells, inputs, outputs);

  // One launch between the plan's two events, not waited for; dev.traversal_seconds()
  // reads its device time (waiting then).
  auto launch_between_events = [&](PairMethod m, pt::Variant v) {
    dev.start_timer();
    pt::launch(dev, cells, kernel, m, v, args);
    dev.stop_timer();
  };
  auto timed_launch = [&](PairMethod m, pt::Variant v) {
    launch_between_events(m, v);
    return dev.traversal_seconds();
  };

  pt::Variant variant{pt::kPencilTargets[0], false};
  const std::type_index kernel_type(typeid(Kernel));
  const PairChoice* found = dev.choice(kernel_type);
  if (found) variant = {found->pencil_targets, false};
  if (method == PairMethod::Auto) {
    const double per_cell = cells.mean_per_cell();
    if (found && per_cell <= 2 * found->per_cell && 2 * per_cell >= found->per_cell) {
      method = found->method;
      variant.few_registers = found->few_registers;
    } else {
      // One-time timing of each candidate: once untimed (it loads the kernel and
      // allocates scratch), then the best of three timed runs. The half shell is timed
      // with its zeroing and scatter.
      double best = 0;
      for (const pt::Candidate& c : pt::kAutoCandidates) {
        if (c.variant.few_registers && !pt::kHasFewRegisters<T>) continue;  // not compiled: the default's twin
        pt::launch(dev, cells, kernel, c.method, c.variant, args);
        const double seconds = std::min(
            {timed_launch(c.method, c.variant), timed_launch(c.method, c.variant), timed_launch(c.method, c.variant)});
        if (method == PairMethod::Auto || seconds < best) {
          method = c.method;
          variant = c.variant;
          best = seconds;
        }
      }
      dev.remember(kernel_type, {method, variant.pencil_targets, variant.few_registers, per_cell});
    }
  }
  // Scratch allocated outside the timed launch (it synchronises).
  if (method == PairMethod::CudaHalfShell) dev.reserve_sums(kOut);
  // The call's launch, not waited for: compute is asynchronous on the plan's stream;
  // last_timings() reads its device time.
  launch_between_events(method, variant);
  dev.set_last_method(method);
}

}  // namespace pmkit::detail
