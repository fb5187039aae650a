#pragma once
// Exact integer accumulation in shared memory.
//
// On Hopper only the 32-bit integer add is a native shared-memory atomic (ATOMS.ADD);
// float and 64-bit adds compile to compare-and-swap loops (ATOMS.CAST.SPIN in the SASS,
// as `cuobjdump --dump-sass` shows). So contributions are
// scaled by a power of two, rounded to an integer v, and added as W 32-bit words of
// kBits bits each (the top word signed): v = sum_w word_w * 2^(kBits*w).
//
// Headroom: a block takes at most 1024 particles (tuning::kChunkParticles), so any word
// receives at most 1024 additions. A low word adds < 2^21 each (sum < 2^31); the top
// word adds |v| / 2^(kBits*(W-1)) < 2^20 each, so its sum stays below 2^30 as long as
// every |v| < 2^(kBits*(W-1)+20). The scales below guarantee that. One word (W = 1) holds
// a node's whole sum: the fast mode's one_word_scale keeps it below 2^31.
//
// The bounds use |q| * peak weight (the kernel's largest node weight to the power D),
// not |q|: for wide kernels (B-spline 8 in 3D: 0.48^3 = 0.11) that is 3 more bits.
//
// Integer sums do not depend on the order of the additions, which is what makes the
// deterministic mode bit-for-bit reproducible.
#include <cmath>
#include <cstdint>

#include "pmkit/detail/cuda/one_word_scale.cuh"

namespace pmkit::cuda {

constexpr int kBits = 21;

template <int W>
struct FixedPoint {
  static_assert(W >= 1 && W <= 3, "1 to 3 words");
  // Largest |v| of a single contribution.
  static constexpr int kContributionBits = W == 1 ? 30 : kBits * (W - 1) + 20;

  __device__ __forceinline__ static void add(int* word0, int word_stride, long long v) {
    if constexpr (W == 1) {
      atomicAdd(word0, static_cast<int>(v));
    } else {
#pragma unroll
      for (int w = 0; w < W - 1; ++w)
        atomicAdd(word0 + w * word_stride, static_cast<int>((v >> (kBits * w)) & ((1 << kBits) - 1)));
      atomicAdd(word0 + (W - 1) * word_stride, static_cast<int>(v >> (kBits * (W - 1))));
    }
  }

  __device__ __forceinline__ static long long combine(const int* word0, int word_stride) {
    long long v = word0[(W - 1) * word_stride];
#pragma unroll
    for (int w = W - 2; w >= 0; --w) v = v * (1ll << kBits) + word0[w * word_stride];
    return v;
  }
};

// 2^e with e the largest integer such that bound * 2^e <= 2^target_bits, capped at
// 2^1023 (1 for bound 0; NaN for a non-finite bound, so that non-finite inputs come out
// as NaN, not garbage). The cap bites only for bounds below ~2^(target_bits - 1023), that
// is double values of ~1e-290 and less: they keep fewer bits, where an infinite scale
// would have turned them into zeros. Always a power of two: the flush and the
// deterministic finalize multiply by 1 / scale instead of dividing, which gives the same
// bits only for a power of two (tests/test_bin_geometry.cu checks both).
__host__ __device__ __forceinline__ double pow2_scale(double bound, int target_bits) {
  if (!isfinite(bound)) return bound - bound;  // NaN
  if (!(bound > 0)) return 1.0;
  int exponent;
  frexp(bound, &exponent);  // bound <= 2^exponent
  const int e = target_bits - exponent;
  return ldexp(1.0, e < 1023 ? e : 1023);
}

// The fast mode's scale for one word (float, W = 1): detail::one_word_scale.
using detail::one_word_scale;

// A block's bound on sum |q| (the fast mode's scale comes from it), over at most
// kMaxTerms values. Double values are summed in units of 2^kShift > kMaxTerms, so that
// kMaxTerms values of up to DBL_MAX sum to at most about DBL_MAX / 2, rounding included
// (the unscaled sum overflowed from ~2e305 and the block spread NaN); scaling by a power
// of two is exact, and pow2_scale(sum, target - kShift) is then the scale the unscaled
// sum gives. Float values cannot overflow a double: no shift.
template <class T, int kMaxTerms>
struct AbsSum {
  static constexpr int kShift = [] {
    int bits = 0;
    if (sizeof(T) == 8)
      while ((1 << bits) <= kMaxTerms) ++bits;
    return bits;
  }();
  static_assert(kShift < 31, "a shift of at most 30 bits");
  __host__ __device__ __forceinline__ static double term(T q) {
    if constexpr (kShift > 0) return fabs(static_cast<double>(q)) * (1.0 / (1 << kShift));
    else return fabs(static_cast<double>(q));
  }
  __host__ __device__ __forceinline__ static double scale(double sum, double peak_weight, int target_bits) {
    return pow2_scale(sum * peak_weight, target_bits - kShift);
  }
};

// The deterministic mode's scale: one for all blocks and runs, from max |q| (times the
// kernel's peak weight) and the particle count n, so that no 64-bit node sum overflows.
template <int W>
__host__ __device__ __forceinline__ double deterministic_scale(double max_abs, std::size_t n) {
  int log2n = 1;
  while ((std::size_t(1) << log2n) < n) ++log2n;
  const int target = FixedPoint<W>::kContributionBits < 62 - log2n ? FixedPoint<W>::kContributionBits : 62 - log2n;
  return pow2_scale(max_abs, target);
}

}  // namespace pmkit::cuda
