#pragma once
// The gradient at the particles (M2P, interp_gradient) and its adjoint (P2M,
// spread_gradient): the tile kernels of interp and spread with another per-particle step
// (GradientGather, GradientDeposit), the one-thread-per-particle kernels on
// detail::for_each_node_gradient, and the deterministic mode's bound.
//
// A pass is one mesh and its D components: pass.meshes[0]; interp writes component d to
// pass.values[d], spread reads it from pass.props[d] (pass.count = D). The components are
// derivatives with respect to the position x_d, so the grid's derivatives (with respect
// to u_d = x_d / h_d) are scaled by 1 / h_d (InverseSpacing).
#include <cstdint>

#include "cuda/kernels/interp.cuh"
#include "cuda/kernels/spread_tiles.cuh"

namespace pmkit::cuda {

// 1 / h_d per axis, in T (interp scales its sums) and in double (spread's fixed-point
// scale and the deterministic bound).
template <class T, int D>
struct InverseSpacing {
  T t[D];
  double d[D];
};

// A particle's 1D weights and their derivatives along each axis (kernels::weights_1d,
// kernels::weight_derivatives_1d), in grid units.
template <class K, int D, class T>
struct GradientWeights {
  T w[D][K::support], dw[D][K::support];
  __device__ __forceinline__ explicit GradientWeights(const T (&s)[D]) {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      kernels::weights_1d<K>(s[d], w[d]);
      kernels::weight_derivatives_1d<K>(s[d], dw[d]);
    }
  }
};

// for_each_window_row with the derivatives: f(row, w, dw, wx, dwx) with w the row's
// weight (w_y, or w_z w_y), dw[e] (e >= 1) its derivative along axis e (dw[0] unused),
// and the S x-weights and their derivatives. A node's gradient is then (w dwx[a],
// dw[1] wx[a], dw[2] wx[a]).
template <class K, int D, class T, class F>
__device__ __forceinline__ void for_each_window_row_gradient(int origin, const T (&s)[D], F&& f) {
  constexpr int S = K::support;
  constexpr int kWidth = TileWindow<K, D>::kWidth;
  const GradientWeights<K, D, T> g(s);
  if constexpr (D == 2) {
    PMKIT_UNROLL
    for (int b = 0; b < S; ++b) {
      const T dw[2] = {T(0), g.dw[1][b]};
      f(origin + b * kWidth, g.w[1][b], dw, g.w[0], g.dw[0]);
    }
  } else {
    PMKIT_UNROLL
    for (int c = 0; c < S; ++c)
      PMKIT_UNROLL
      for (int b = 0; b < S; ++b) {
        const T dw[3] = {T(0), g.w[2][c] * g.dw[1][b], g.dw[2][c] * g.w[1][b]};
        f(origin + (c * kWidth + b) * kWidth, g.w[2][c] * g.w[1][b], dw, g.w[0], g.dw[0]);
      }
  }
}

// ---------------------------------------------------------------------------------
// interp_gradient

// Where interp_gradient puts a particle's D components: at its binned slot, the D
// together (slot-major, padded to a power of two: one aligned vector store here and one
// vector load of one sector in unbin_gradient_kernel, instead of D scattered values), or,
// with `direct.perm`, straight to the caller's order (InterpOutput's direct stores).
template <class T, int D>
struct GradientOutput {
  static constexpr int kSlotWidth = D == 3 ? 4 : D;  // values a binned slot holds
  struct alignas(kSlotWidth * sizeof(T)) Slot {
    T v[kSlotWidth];
  };
  InterpOutput<T> direct;  // its binned pointer is the slot-major buffer: Slot[n]

  template <bool kDirect, int N>
  __device__ __forceinline__ void store_as(const PropPass<T>& pass, int count, std::size_t slot,
                                           const T (&acc)[N]) const {
    static_assert(N == D, "D components a particle");
    if constexpr (kDirect) {
      direct.template store_as<true>(pass, count, slot, acc);
    } else {
      Slot out{};
      PMKIT_UNROLL
      for (int e = 0; e < D; ++e) out.v[e] = acc[e];
      reinterpret_cast<Slot*>(direct.binned)[slot] = out;
    }
  }
  __device__ __forceinline__ void store(const PropPass<T>& pass, std::size_t slot, const T (&acc)[D]) const {
    if (direct.perm)
      store_as<true>(pass, D, slot, acc);
    else
      store_as<false>(pass, D, slot, acc);
  }
};

// The caller's order from GradientOutput's slots: each caller's particle loads its slot
// (one vector, one sector) and stores its D components. kInterleaved: the D outputs are
// the D strided views of one array (values[d] = values[0] + d, stride D); a block's
// components then pass through shared memory and leave as whole consecutive words,
// instead of D stores of every D-th word each.
template <class T, int D, bool kInterleaved>
__global__ void __launch_bounds__(tuning::kPointThreads)
    unbin_gradient_kernel(PropPass<T> pass, const T* binned, std::size_t n, const std::uint32_t* slot) {
  using Slot = typename GradientOutput<T, D>::Slot;
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x);
  const std::size_t i = first + threadIdx.x;
  const Slot v = i < n ? reinterpret_cast<const Slot*>(binned)[slot[i]] : Slot{};
  if constexpr (kInterleaved) {
    __shared__ T staged[tuning::kPointThreads * D];
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) staged[threadIdx.x * D + e] = v.v[e];
    __syncthreads();
    const std::size_t count = (n - first < blockDim.x ? n - first : blockDim.x) * D;
    for (std::size_t k = threadIdx.x; k < count; k += blockDim.x) pass.values[0][first * D + k] = staged[k];
  } else {
    if (i >= n) return;
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) pass.values[e][static_cast<std::ptrdiff_t>(i) * pass.value_stride[e]] = v.v[e];
  }
}

// interp_tiles_block's step for the gradient of one mesh: per x-row the sums of w_x f
// and of w_x' f over one read of the row; in 3D a z-plane's rows summed with their y
// weights first (x and z take w_y, y takes w_y'), then the plane's sums with its z
// weight (x and y take w_z, z takes w_z'): 2S + 3 FMAs a row, no product for a row's own weights.
template <class T, int D>
struct GradientGather {
  static constexpr int kMeshes = 1;
  static constexpr int kOutputs = D;
  InverseSpacing<T, D> inverse;
  template <class K, int kDims, class Window>
  __device__ __forceinline__ void operator()(const Window& window, int origin, const T (&s)[D], T (&acc)[D]) const {
    static_assert(kDims == D, "the gather's dimensions");
    constexpr int S = K::support;
    constexpr int kWidth = TileWindow<K, D>::kWidth;
    const GradientWeights<K, D, T> g(s);
    // One plane (2D: the whole stencil) of S rows from window offset `first`, its sums
    // along y: t[0] = sum w_y (w_x' f), t[1] = sum w_y' (w_x f), t[2] = sum w_y (w_x f).
    auto plane = [&](int first, T (&t)[3]) {
      PMKIT_UNROLL
      for (int b = 0; b < S; ++b) {
        const auto values = window.row(0, first + b * kWidth);
        T sum = 0, dsum = 0;
        PMKIT_UNROLL
        for (int a = 0; a < S; ++a) {
          const T v = values[a];
          sum += g.w[0][a] * v;
          dsum += g.dw[0][a] * v;
        }
        t[0] += g.w[1][b] * dsum;
        t[1] += g.dw[1][b] * sum;
        if constexpr (D == 3) t[2] += g.w[1][b] * sum;
      }
    };
    if constexpr (D == 2) {
      T t[3] = {};
      plane(origin, t);
      acc[0] = t[0];
      acc[1] = t[1];
    } else {
      PMKIT_UNROLL
      for (int c = 0; c < S; ++c) {
        T t[3] = {};
        plane(origin + c * kWidth * kWidth, t);
        acc[0] += g.w[2][c] * t[0];
        acc[1] += g.w[2][c] * t[1];
        acc[2] += g.dw[2][c] * t[2];
      }
    }
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) acc[e] *= inverse.t[e];
  }
};

// Resident blocks an SM the gradient's tile kernel is compiled for: interp's budget for
// one mesh and D outputs (tuning::interp_tile_blocks_per_sm: its D outputs hold about as
// many registers as D meshes' sums).
template <class K, int D, class T, bool kDirect>
__global__ void __launch_bounds__(tuning::kSpreadThreads, tuning::interp_tile_blocks_per_sm(sizeof(T), D, K::support, D))
    interp_gradient_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                                 const Packed<T>* particles, const std::uint16_t* order, PropPass<T> pass,
                                 GradientOutput<T, D> out, InverseSpacing<T, D> inverse) {
  extern __shared__ __align__(16) unsigned char interp_shared[];
  __shared__ typename TileWindow<K, D>::IndexTables tables;
  interp_tiles_block<K, D, T, kDirect>(layout, geo, chunks, particles, order, pass, out,
                                       GradientGather<T, D>{inverse}, interp_shared, tables);
}

// One thread a particle (the non-tile case, and update_points' away list: slots).
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    interp_gradient_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                           const std::uint32_t* slots, ItemCount items, PropPass<T> pass, GradientOutput<T, D> out,
                           InverseSpacing<T, D> inverse) {
  with_own_record<K, D>(geo, particles, items, [&](std::size_t i, const int (&base)[D], const T (&s)[D]) {
    T acc[D] = {};
    detail::for_each_node_gradient<K, D>(layout, base, s, [&](std::int64_t node, const T (&dw)[D]) {
      const T f = __ldg(pass.meshes[0] + node);
      PMKIT_UNROLL
      for (int e = 0; e < D; ++e) acc[e] += dw[e] * f;
    });
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) acc[e] *= inverse.t[e];
    out.store(pass, slots ? slots[i] : i, acc);
  });
}

// ---------------------------------------------------------------------------------
// spread_gradient

// A particle's weight on the fixed-point scale: the largest |contribution| a node takes
// from it is at most sum_d |v_d| / h_d times the plan's peak gradient (peak_weight.hpp),
// which the scales take in place of |q| times the peak weight.
template <class T, int D>
__device__ __forceinline__ double gradient_magnitude(const Values<T, D>& v, const InverseSpacing<T, D>& inverse) {
  double m = 0;
  PMKIT_UNROLL
  for (int e = 0; e < D; ++e) m += fabs(static_cast<double>(v.v[e])) * inverse.d[e];
  return m;
}

// accumulate_chunk's step for spread_gradient: one accumulator (the mesh), a node's
// contribution sum_d v_d dW/dx_d formed per x-row as c1 w_x' + c2 w_x (c1 = the row's
// weight times v_x, c2 = the sum over y (and z) of v_d times the row's derivative along
// d), so one fixed-point add a node, as spread's.
template <class K, int D, class T, int W>
struct GradientDeposit {
  static constexpr int kValues = D;
  static constexpr int kMeshes = 1;
  double peak_gradient;
  InverseSpacing<T, D> inverse;

  template <bool kDeterministic>
  __device__ __forceinline__ void scales(const Values<T, D> (&v)[kSlots], const PropPass<T>& pass, std::size_t n,
                                         double* scale) const {
    Values<T, 1> magnitude[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) magnitude[r].v[0] = static_cast<T>(gradient_magnitude(v[r], inverse));
    block_scales<W, 1, kDeterministic>(magnitude, pass, peak_gradient, n, scale);
  }

  __device__ __forceinline__ void operator()(int* accumulator, int origin, const T (&s)[D], const Values<T, D>& v,
                                             const double* scale) const {
    using Window = TileWindow<K, D>;
    constexpr int S = K::support;
    T vs[D];  // v_d / h_d on the block's scale (in double, as spread's q)
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) vs[e] = static_cast<T>(static_cast<double>(v.v[e]) * inverse.d[e] * scale[0]);
    for_each_window_row_gradient<K, D>(origin, s, [&](int row, T w, const T (&dw)[D], const T (&wx)[S],
                                                      const T (&dwx)[S]) {
      const T c1 = w * vs[0];
      T c2 = 0;
      PMKIT_UNROLL
      for (int e = 1; e < D; ++e) c2 += dw[e] * vs[e];
      int* words = accumulator + row;
#pragma unroll
      for (int a = 0; a < S; ++a) FixedPoint<W>::add(words + a, Window::kNodes, fixed_of<W>(c1 * dwx[a] + c2 * wx[a]));
    });
  }
};

// The tile spread of the gradient: spread_tile_block with GradientDeposit, one
// mesh, the same flush.
template <class K, int D, class T, int W, bool kDeterministic>
__global__ void __launch_bounds__(tuning::kSpreadThreads)
    spread_gradient_tiles_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Chunk* chunks,
                                 const Packed<T>* particles, const std::uint16_t* order, const std::uint32_t* perm,
                                 std::size_t n, PropPass<T> pass, double peak_gradient, InverseSpacing<T, D> inverse) {
  spread_tile_block<K, D, T, W, kDeterministic>(layout, geo, chunks, particles, order, perm, n, pass,
                                                GradientDeposit<K, D, T, W>{peak_gradient, inverse});
}

// One thread a particle, global atomics (the global-atomics method, and update_points'
// away list: slots).
template <class K, int D, class T>
__global__ void __launch_bounds__(tuning::kPointThreads)
    spread_gradient_atomics_kernel(detail::Layout<D> layout, BinGeometry<D> geo, const Packed<T>* particles,
                                   const std::uint32_t* slots, const std::uint32_t* perm, ItemCount items,
                                   PropPass<T> pass, InverseSpacing<T, D> inverse) {
  with_own_record<K, D>(geo, particles, items, [&](std::size_t i, const int (&base)[D], const T (&s)[D]) {
    const std::uint32_t p = perm[slots ? slots[i] : i];
    T v[D];
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) v[e] = load_prop(pass, e, p) * inverse.t[e];
    detail::for_each_node_gradient<K, D>(layout, base, s, [&](std::int64_t node, const T (&dw)[D]) {
      T sum = 0;
      PMKIT_UNROLL
      for (int e = 0; e < D; ++e) sum += v[e] * dw[e];
      atomicAdd(pass.meshes[0] + node, sum);
    });
  });
}

// Deterministic mode: max over the particles of sum_d |v_d| / h_d (gradient_magnitude),
// into max_abs_bits[0] (non-negative doubles order like their bits), the bound
// finalize_exact_kernel and the blocks' global scale take.
template <class T, int D>
__global__ void max_gradient_magnitude_kernel(PropPass<T> pass, std::size_t n, InverseSpacing<T, D> inverse,
                                              unsigned long long* max_abs_bits) {
  double local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    Values<T, D> v;
    PMKIT_UNROLL
    for (int e = 0; e < D; ++e) v.v[e] = load_prop(pass, e, static_cast<std::uint32_t>(i));
    const double m = gradient_magnitude(v, inverse);
    local = isnan(m) ? HUGE_VAL : fmax(local, m);  // NaN as inf, as max_abs_kernel
  }
  for (int o = 16; o > 0; o /= 2) local = fmax(local, __shfl_xor_sync(0xffffffffu, local, o));
  if ((threadIdx.x & 31) == 0) atomicMax(max_abs_bits, static_cast<unsigned long long>(__double_as_longlong(local)));
}

}  // namespace pmkit::cuda
