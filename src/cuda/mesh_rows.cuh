#pragma once
// A particle's stencil row (its S consecutive x-nodes, detail::for_each_row) read or
// added with vector accesses, for the one-thread-per-particle kernels. Their cost is the
// L2's requests, not bytes: the meshes they serve sit in L2, and a warp's lanes land on
// different sectors (a tile's particles in the caller's order), so each lane's access is
// a request of its own. ncu on 2D linear interp (bench/NOTES.md 59): four 4-byte gathers,
// a record and a scattered store a particle, 1.17x the naive gather's requests and time.
// A row read as the aligned 16-byte vectors that hold it takes 1-2 requests where S
// scalar loads take S; a row added as 8-byte pairs (Hopper's vector float atomics, done
// in L2 as one operation each, as the tile flush's float4) takes S/2-S/2+1.
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

// Zeros that RowFetch reads in place of a vector it does not need (16-byte vectors: up
// to 5 a row, double B-spline 8).
static __device__ __align__(16) const unsigned char kSpareVectors[5 * 16] = {};

// A row read in two steps, so that a kernel can issue several rows' loads before it
// waits on any (a wait between rows makes each row a round trip of its own):
// RowFetch::fetch issues the loads, pick_row gives v[a] = mesh[row + x[a]]. Where the
// row is consecutive and every 16-byte vector that may hold it lies inside the mesh's
// `size` values, it comes through those vectors (read-only cache, no branch: the picks
// are selects); else, rarely (a seam, a fold, the mesh's ends), pick_row loads it a
// node at a time.
template <class T, int S>
struct RowFetch {
  using Vector = std::conditional_t<sizeof(T) == 4, float4, double2>;
  static constexpr int kLanes = 16 / sizeof(T);                   // values a vector
  static constexpr int kVectors = (S + 2 * kLanes - 2) / kLanes;  // at the worst alignment
  static constexpr int kRegisters = kVectors * 4;                 // at most, held

  // The loads of row `row` into q; lead = values before the row's first in q[0].
  __device__ __forceinline__ static void fetch(const T* mesh, std::int64_t size, std::int64_t row,
                                               const std::int64_t (&x)[S], Vector (&q)[kVectors], int& lead,
                                               bool& by_vectors) {
    const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(mesh);
    const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(mesh + row + x[0]);
    const std::uintptr_t aligned = first & ~std::uintptr_t(15);
    by_vectors = consecutive(x) && aligned >= begin && aligned + kVectors * 16 <= begin + size * sizeof(T);
    lead = static_cast<int>((first - aligned) / sizeof(T));
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      // A vector the row does not need is read from kSpareVectors instead (it stays in
      // L1): a load under a branch cannot be speculated, and the compiler then waits on
      // it inside the branch.
      const bool needed = by_vectors && (k == 0 || k * kLanes < lead + S);
      q[k] = __ldg(needed ? reinterpret_cast<const Vector*>(aligned) + k
                          : reinterpret_cast<const Vector*>(kSpareVectors) + k);
    }
  }
  __device__ __forceinline__ static void pick(const T* mesh, std::int64_t row, const std::int64_t (&x)[S],
                                              const Vector (&q)[kVectors], int lead, bool by_vectors, T (&v)[S]) {
    T held[kVectors * kLanes];
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const T* parts = reinterpret_cast<const T*>(&q[k]);
#pragma unroll
      for (int e = 0; e < kLanes; ++e) held[k * kLanes + e] = parts[e];
    }
    // held[lead + a] with lead a run-time value, as selects (an indexed register array
    // would go to local memory).
#pragma unroll
    for (int a = 0; a < S; ++a) {
      T value = held[a];
#pragma unroll
      for (int l = 1; l < kLanes; ++l)
        if (lead == l) value = held[l + a];
      v[a] = value;
    }
    if (!by_vectors) {
#pragma unroll
      for (int a = 0; a < S; ++a) v[a] = __ldg(mesh + row + x[a]);
    }
  }
};

// v[a] = mesh[row + x[a]], one row alone.
template <class T, int S>
__device__ __forceinline__ void load_row(const T* mesh, std::int64_t size, std::int64_t row,
                                         const std::int64_t (&x)[S], T (&v)[S]) {
  using Fetch = RowFetch<T, S>;
  typename Fetch::Vector q[Fetch::kVectors];
  int lead;
  bool by_vectors;
  Fetch::fetch(mesh, size, row, x, q, lead, by_vectors);
  Fetch::pick(mesh, row, x, q, lead, by_vectors, v);
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
