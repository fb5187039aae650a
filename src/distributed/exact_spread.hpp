#pragma once
// The deterministic distributed spread: every particle's contributions in 128-bit fixed
// point, so that a node's sum does not depend on which rank adds which contribution, in
// which order, nor on whether a CPU or a GPU adds it.
//
// A contribution q * w is formed in double from the particle's stencil (grid coordinate,
// base node and local coordinate in T, weights in double by Horner with fused
// multiply-adds, which round the same on host and device), scaled by 2^e and rounded to
// an integer. The scale is common to all ranks: from the largest |q| of the property over
// all ranks and the total particle count, so that no node's sum can overflow (a node takes
// at most S^D contributions per particle, the weights are at most 1, hence |sum| < n S^D
// max|q| 2^e <= 2^126). A contribution of magnitude above 2^(e - 53) max|q| is an integer
// once scaled: it is kept exactly.
//
// Every function here is shared by the CPU ranks and the CUDA ranks' kernels
// (cuda/exact_spread.cu), so that both compute the same integers and the same rounding.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "pmkit/detail/layout.hpp"
#include "pmkit/detail/stencil.hpp"
#include "pmkit/error.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::distributed {

// Bits of a node sum: 126 of the 127 of a signed 128-bit integer, one kept free.
constexpr int kExactSumBits = 126;

// A 128-bit two's complement integer as two 64-bit words, low + 2^64 high: the layout the
// CUDA ranks add with two 64-bit atomics.
struct ExactWords {
  unsigned long long low = 0;
  long long high = 0;
};

// The CPU ranks' sums: 128-bit integers, and their words.
using Exact = __int128;
inline Exact to_exact(ExactWords w) {
  return static_cast<Exact>((static_cast<unsigned __int128>(static_cast<unsigned long long>(w.high)) << 64) | w.low);
}
inline ExactWords words_of(Exact sum) {
  ExactWords w;
  w.low = static_cast<unsigned long long>(sum);
  w.high = static_cast<long long>(sum >> 64);
  return w;
}

// The error of a value the deterministic spread cannot take: props[j][i] = v.
[[noreturn]] inline void fail_not_finite(std::size_t j, std::size_t i, double v) {
  detail::fail(ErrorCode::InvalidArgument, "props[", j, "][", i, "] = ", v,
               ": the deterministic spread takes finite values");
}

// The scale 2^e for a property of largest |q| `max_abs` over `count` particles of a
// kernel of `support` nodes per dimension in D dimensions. 1 for max_abs = 0.
inline double exact_scale(double max_abs, std::uint64_t count, int support, int dims) {
  if (!(max_abs > 0)) return 1.0;
  int bits = kExactSumBits;
  for (std::uint64_t c = 1; c < count; c *= 2) --bits;
  for (std::uint64_t s = 1, all = static_cast<std::uint64_t>(std::pow(support, dims)); s < all; s *= 2) --bits;
  int exponent;
  std::frexp(max_abs, &exponent);  // max_abs < 2^exponent
  // At most 2^1022, so that 1 / scale stays a normal double (max_abs below ~1e-270).
  return std::ldexp(1.0, std::min(bits - exponent, 1022));
}

// a * b + c rounded once, on host and device alike.
PMKIT_HD PMKIT_FORCEINLINE double fused_multiply_add(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// kernels::weights_1d with every Horner step one fused multiply-add: the compilers may
// not choose which steps to fuse, so host and device weights agree to the bit.
struct FusedHornerWeights {
  template <class K>
  PMKIT_HD PMKIT_FORCEINLINE static void apply(double s, double (&w)[K::support]) {
    constexpr int S = K::support;
    constexpr kernels::PieceTable<S> tab = K::pieces();
    PMKIT_UNROLL
    for (int k = 0; k < S; ++k) {
      double acc = tab.c[k][S - 1];
      PMKIT_UNROLL
      for (int j = S - 2; j >= 0; --j) acc = fused_multiply_add(acc, s, tab.c[k][j]);
      w[k] = acc;
    }
  }
};

// A particle's stencil in the local mesh from its global grid coordinates u: the base in
// the local mesh's logical nodes (the local grid starts one cell below the block's first
// cell) and the local coordinate in T, as the single-rank plan keeps it.
template <class K, class T, int D>
PMKIT_HD PMKIT_FORCEINLINE void exact_stencil(const double (&u)[D], const std::int64_t (&first_cell)[D],
                                              int (&base)[D], T (&s)[D]) {
  detail::locate_particle<K, D>(u, base, s);
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) base[d] -= static_cast<int>(first_cell[d] - 1);
}

// The two's complement negation of a pair of words.
PMKIT_HD PMKIT_FORCEINLINE ExactWords negated(ExactWords w) {
  ExactWords r;
  r.low = ~w.low + 1ull;
  r.high = static_cast<long long>(~static_cast<unsigned long long>(w.high) + (r.low == 0 ? 1ull : 0ull));
  return r;
}

// An integral double (|v| < 2^127) as 128-bit words, exactly: |v| splits into 2^64 h + l
// with both parts exact doubles, then the sign.
PMKIT_HD PMKIT_FORCEINLINE ExactWords exact_words(double v) {
  const double two64 = 18446744073709551616.0;
  const double magnitude = fabs(v);
  const double high = floor(magnitude / two64);
  ExactWords w;
  w.low = static_cast<unsigned long long>(magnitude - high * two64);
  w.high = static_cast<long long>(high);
  return v < 0 ? negated(w) : w;
}

// The sum's words rounded to the nearest double (ties to even) once: the magnitude's
// leading 64 bits with a sticky bit for the rest, converted, then scaled by a power of two.
PMKIT_HD PMKIT_FORCEINLINE double exact_to_double(ExactWords w) {
  const bool negative = w.high < 0;
  const ExactWords m = negative ? negated(w) : w;
  const unsigned long long low = m.low, high = static_cast<unsigned long long>(m.high);
  double magnitude;
  if (high == 0) {
    magnitude = static_cast<double>(low);
  } else {
#if defined(__CUDA_ARCH__)
    const int leading = __clzll(static_cast<long long>(high));
#else
    const int leading = __builtin_clzll(high);
#endif
    const unsigned long long top = leading == 0 ? high : (high << leading) | (low >> (64 - leading));
    const unsigned long long rest = low << leading;
    magnitude = ldexp(static_cast<double>(top | (rest != 0 ? 1ull : 0ull)), 64 - leading);
  }
  return negative ? -magnitude : magnitude;
}

// The block node's value from its fixed-point sum: rounded to double once, unscaled by
// the power of two (exact), then written, or added to the block's value in double.
template <class T>
PMKIT_HD PMKIT_FORCEINLINE void round_exact(ExactWords sum, double inverse_scale, bool add, T& out) {
  const double v = exact_to_double(sum) * inverse_scale;
  out = add ? static_cast<T>(static_cast<double>(out) + v) : static_cast<T>(v);
}

// Particle contributions to the fixed-point meshes of `count` properties: calls
// add(j, node, words) for each property j and stencil node. base, s: exact_stencil's.
template <class K, class T, int D, class Add>
PMKIT_HD PMKIT_FORCEINLINE void deposit_exact(const detail::Layout<D>& local, const int (&base)[D], const T (&s)[D],
                                              const double* q, const double* scale, int count, Add&& add) {
  double sd[D];
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) sd[d] = static_cast<double>(s[d]);
  detail::for_each_node<K, D, FusedHornerWeights>(local, base, sd, [&](std::int64_t node, double w) {
    for (int j = 0; j < count; ++j) add(j, node, exact_words(rint(q[j] * w * scale[j])));
  });
}

}  // namespace pmkit::distributed
