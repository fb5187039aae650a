#pragma once
// Internal: the scale of a block's one-word fixed-point sums, shared by the plan's tiled
// spread and the particle step's deposit boxes (pmkit/detail/cuda/step_deposit.cuh).
// Installed because that header includes it; not an API of its own.
#include <cmath>

namespace pmkit::detail {

// The fast mode's scale for one 32-bit word a node from the block's bound on any node's
// sum (sum |q| x peak weight): the largest that keeps every such sum inside 32 bits, with
// room below 2^31 for the roundings (at most 1024 halves of a unit) and for the float
// products (a relative 2^-20). Not a power of two: pow2_scale's rounding down costs up to
// a bit, and the bit it keeps in reserve another, of the resolution that the rounding of
// small contributions (biased where they are all of one sign) and charges of both signs
// depend on. The flush's 1 / scale is then inexact by one double rounding, far below a
// float's. NaN for a non-finite bound, 1 for 0, at most 2^1023.
__host__ __device__ __forceinline__ double one_word_scale(double bound) {
  if (!isfinite(bound)) return bound - bound;  // NaN
  if (!(bound > 0)) return 1.0;
  const double scale = (0x1p31 - 0x1p12) / (bound * (1 + 0x1p-20));
  return scale < 0x1p1023 ? scale : 0x1p1023;
}

}  // namespace pmkit::detail
