#pragma once
// The gradients' checks of `pmkit verify`, next to the convergence study: on a periodic,
// a folding and a Keep grid with random particles and random fields, in double,
//  * interp_gradient and spread_gradient against the float64 reference (relative L2);
//  * adjointness: |<spread_gradient(v), f> - <v, interp_gradient(f)>| relative to the
//    sum of the magnitudes of both sides' terms.
// Each must stay within kGradientTolerance: rounding only.
#include <cstdint>
#include <string>
#include <vector>

#include "pmkit/kernels.hpp"

namespace pmkit::verify {

constexpr double kGradientTolerance = 1e-12;

struct GradientCheck {
  Kernel kernel;
  int dim;
  double interp_error;   // interp_gradient against the reference, the largest over the grids
  double spread_error;   // spread_gradient against the reference, likewise
  double adjoint_error;  // the adjointness defect, likewise
};

// Runs the checks of one kernel; dim is 2 or 3 (throws pmkit::Error otherwise).
GradientCheck check_gradients(const Kernel& kernel, int dim, std::uint64_t seed, int num_threads);

// True when every error of the check is within kGradientTolerance (a NaN fails).
bool passes(const GradientCheck& check);

// A table: per check the three errors, the tolerance and ok/FAIL.
std::string format_gradient_table(const std::vector<GradientCheck>& checks);

}  // namespace pmkit::verify
