#pragma once
// Atomic additions into mesh nodes on a CUDA rank: a floating-point value natively, a
// 128-bit fixed-point sum (exact_spread.hpp) exactly with two 64-bit atomics. Shared by
// the ghost sums (halo.cu) and the deterministic spread (exact_spread.cu).
#include "distributed/exact_spread.hpp"

namespace pmkit::distributed {

template <class T>
__device__ void add_atomically(T* node, T value) {
  atomicAdd(node, value);
}

// A 128-bit integer added exactly with two native 64-bit atomics: the low words, then
// the high words with the carry out of the low word's addition (seen from the value the
// atomic found). Sums modulo 2^128 do not depend on the order of the additions.
__device__ inline void add_atomically(ExactWords* node, ExactWords value) {
  unsigned long long carry = 0;
  if (value.low != 0) {
    const unsigned long long old = atomicAdd(&node->low, value.low);
    carry = old + value.low < old ? 1ull : 0ull;
  }
  const unsigned long long high = static_cast<unsigned long long>(value.high) + carry;
  if (high != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&node->high), high);
}

}  // namespace pmkit::distributed
