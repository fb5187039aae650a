#pragma once
// A particle's stencil row (its S consecutive x-nodes, detail::StencilRows) added with
// vector atomics, for the one-thread-per-particle spread: Hopper's float2 atomic is one
// operation in L2 (as the tile flush's float4), so a row of 2 nodes costs 1 or 2 of
// them instead of 2, a row of 4 costs 2 or 3 instead of 4. The one-thread interp reads
// its rows as scalars: vector loads gain nothing there.
#include <cstdint>
#include <type_traits>

namespace pmkit::cuda {

// Whether a row's storage indices are consecutive: not across a periodic seam or a fold.
template <int S>
__device__ __forceinline__ bool consecutive(const std::int64_t (&x)[S]) {
  bool yes = true;
#pragma unroll
  for (int a = 1; a < S; ++a) yes = yes && x[a] == x[a - 1] + 1;
  return yes;
}

// mesh[row + x[a]] += v[a], atomically. Float rows that are consecutive go as 8-byte
// pairs (one float2 atomic), starting at the row's first 8-byte boundary; the nodes
// outside a pair one at a time. No node outside the row is touched.
template <class T, int S>
__device__ __forceinline__ void add_row(T* mesh, std::int64_t row, const std::int64_t (&x)[S], const T (&v)[S]) {
#if __CUDA_ARCH__ >= 900  // vector float atomics from Hopper on
  if constexpr (std::is_same<T, float>::value && S >= 2) {
    if (consecutive(x)) {
      float* first = mesh + row + x[0];
      const int lead = reinterpret_cast<std::uintptr_t>(first) % 8 == 0 ? 0 : 1;  // a node alone first
      if (lead == 1) atomicAdd(first, v[0]);
#pragma unroll
      for (int a = 0; a + 1 < S; ++a) {
        // Pair (a, a + 1) where it starts on the boundary: a even for lead 0, odd for 1.
        if ((a & 1) == lead) atomicAdd(reinterpret_cast<float2*>(first + a), make_float2(v[a], v[a + 1]));
      }
      if (((S - 1) & 1) == lead) atomicAdd(first + S - 1, v[S - 1]);  // the last node, unpaired
      return;
    }
  }
#endif
#pragma unroll
  for (int a = 0; a < S; ++a) atomicAdd(mesh + row + x[a], v[a]);
}

}  // namespace pmkit::cuda
