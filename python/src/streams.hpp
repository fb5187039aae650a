#pragma once
// The caller's stream. Python code queues its work on its framework's current stream
// (torch's or CuPy's); a CUDA plan's call runs on that same stream: the plan moves to it
// first where it differs (Plan::set_stream, which orders the move with one event and no
// host wait), so the results follow the caller's work in stream order with nothing
// recorded per call. A library with no current stream (NumPy on host_arrays plans, JAX)
// passes none, and the plan stays on the stream it is on.
#include <cstdint>
#include <optional>

#include "pmkit/backend.hpp"

namespace pmkit::python {

// Moves a plan (Plan or PairPlan) that takes device arrays to the caller's stream.
template <class AnyPlan>
void follow_stream(AnyPlan& plan, bool device_arrays, std::optional<std::uintptr_t> stream) {
  if (device_arrays && stream) plan.set_stream(reinterpret_cast<StreamHandle>(*stream));
}

}  // namespace pmkit::python
