#pragma once
// Interpolation kernels: tensor products of 1D weights.
//
// A kernel of support S touches S mesh nodes per dimension. For a particle at grid
// coordinate u (position in units of the spacing, measured from the origin) the nodes
// are base, base+1, ..., base+S-1 with
//     shift = (S odd ? 1/2 : 0),  f = floor(u + shift),  s = u + shift - f in [0, 1),
//     base  = f - (S-1)/2,
// and the weight of node base+k is a polynomial in s of degree S-1 (one polynomial per
// k, evaluated by Horner). The tables of coefficients are computed at compile time
// from the definition of each kernel (the Cox-de Boor recursion for B-splines), so
// the same constexpr data serves the CPU backend and CUDA device code.
#include <cmath>
#include <string>

#include "pmkit/config.hpp"

namespace pmkit {

enum class KernelFamily { BSpline, MP4 };

// Run-time description of a kernel, as chosen by the caller. Linear (cloud-in-cell)
// is the B-spline of order 2, TSC the B-spline of order 3.
class Kernel {
 public:
  static Kernel linear() { return Kernel(KernelFamily::BSpline, 2); }
  static Kernel tsc() { return Kernel(KernelFamily::BSpline, 3); }
  static Kernel mp4() { return Kernel(KernelFamily::MP4, 4); }
  // The widest kernel: nodes per dimension of the highest B-spline order.
  static constexpr int kMaxSupport = 8;
  static Kernel bspline(int order);  // order 2..kMaxSupport; throws pmkit::Error otherwise
  // Parses "linear", "cic", "tsc", "mp4", "bspline4", ... ; throws on unknown names.
  static Kernel from_name(const std::string& name);

  KernelFamily family() const { return family_; }
  int order() const { return order_; }
  int support() const { return order_; }  // nodes per dimension
  // Nodes a particle reaches beyond the last interior node on either side.
  int ghost_width() const { return order_ / 2; }
  std::string name() const;
  // Order of accuracy of interpolation of smooth fields (2 for all but M'4, which is 3).
  int accuracy_order() const { return family_ == KernelFamily::MP4 ? 3 : 2; }

  friend bool operator==(const Kernel& a, const Kernel& b) {
    return a.family_ == b.family_ && a.order_ == b.order_;
  }

 private:
  Kernel(KernelFamily f, int o) : family_(f), order_(o) {}
  KernelFamily family_;
  int order_;
};

namespace kernels {

// Coefficients c[k][j] of s^j in the weight of node base+k.
template <int S>
struct PieceTable {
  double c[S][S];
};

// Pieces of the cardinal B-spline M_P (support [0, P), knots at the integers):
// piece_j(s) = M_P(j + s). Node base+k sits at distance whose M_P argument falls in
// piece P-1-k, hence the reversal at the end.
template <int P>
constexpr PieceTable<P> bspline_pieces() {
  // poly[j][i]: coefficient of s^i of piece j, for the current order q.
  double poly[P][P] = {};
  poly[0][0] = 1.0;  // M_1 = indicator of [0, 1)
  for (int q = 2; q <= P; ++q) {
    double next[P][P] = {};
    // M_q(x) = [x M_{q-1}(x) + (q - x) M_{q-1}(x - 1)] / (q - 1), with x = j + s.
    for (int j = 0; j < q; ++j) {
      for (int i = 0; i < q - 1; ++i) {
        const double a = (j < q - 1) ? poly[j][i] : 0.0;      // M_{q-1} piece j
        const double b = (j >= 1) ? poly[j - 1][i] : 0.0;     // M_{q-1} piece j-1
        next[j][i] += (j * a + (q - j) * b) / (q - 1);         // constant factors
        next[j][i + 1] += (a - b) / (q - 1);                   // factors of s
      }
    }
    for (int j = 0; j < P; ++j)
      for (int i = 0; i < P; ++i) poly[j][i] = next[j][i];
  }
  PieceTable<P> t{};
  for (int k = 0; k < P; ++k)
    for (int i = 0; i < P; ++i) t.c[k][i] = poly[P - 1 - k][i];
  return t;
}

// Monaghan's M'4: W(r) = 1 - 5/2 r^2 + 3/2 r^3 (r < 1), 1/2 (2 - r)^2 (1 - r) (1 <= r < 2),
// written out per node in the local coordinate s (nodes at distances 1+s, s, 1-s, 2-s).
constexpr PieceTable<4> mp4_pieces() {
  return PieceTable<4>{{{0.0, -0.5, 1.0, -0.5},
                        {1.0, 0.0, -2.5, 1.5},
                        {0.0, 0.5, 2.0, -1.5},
                        {0.0, 0.0, -0.5, 0.5}}};
}

// The same pieces as polynomials in t = s - 1/2 (t in [-1/2, 1/2)): c'[k][j] =
// sum_{i >= j} c[k][i] binom(i, j) 2^(j - i). Sums of powers of t over many particles
// (cell moments, the CUDA backend's SpreadMethod::CudaCellMoments) lose less to
// cancellation than sums of powers of s, whose terms all have one sign.
template <int S>
constexpr PieceTable<S> centered_pieces(const PieceTable<S>& p) {
  PieceTable<S> t{};
  for (int k = 0; k < S; ++k)
    for (int j = 0; j < S; ++j) {
      double binom = 1.0, half = 1.0, sum = 0.0;  // binom(i, j), 2^(j - i), from i = j
      for (int i = j; i < S; ++i) {
        sum += p.c[k][i] * binom * half;
        binom = binom * (i + 1) / (i + 1 - j);
        half *= 0.5;
      }
      t.c[k][j] = sum;
    }
  return t;
}

// The derivative d/ds of each node's weight: the pieces differentiated term by term,
// d[k][j] = (j + 1) c[k][j + 1] (degree S - 2; the top coefficient is zero). Their
// columns sum to zero: the weights sum to one at every s.
template <int S>
constexpr PieceTable<S> derivative_pieces(const PieceTable<S>& p) {
  PieceTable<S> d{};
  for (int k = 0; k < S; ++k)
    for (int j = 0; j + 1 < S; ++j) d.c[k][j] = (j + 1) * p.c[k][j + 1];
  return d;
}

// Compile-time kernel functors. Each gives its support and its piece table.
template <int P>
struct BSpline {
  static_assert(P >= 2 && P <= 8, "B-spline order must be 2..8");
  static constexpr int support = P;
  static constexpr PieceTable<P> pieces() { return bspline_pieces<P>(); }
};
struct MP4 {
  static constexpr int support = 4;
  static constexpr PieceTable<4> pieces() { return mp4_pieces(); }
};
using Linear = BSpline<2>;
using TSC = BSpline<3>;

// Where a particle at grid coordinate u lands for a kernel of the given support:
// first node and local coordinate. The run-time form serves code that is not
// specialised per kernel (binning); the template form is the same function.
template <class R>
PMKIT_HD PMKIT_FORCEINLINE void locate(int support, R u, int& base, R& s) {
  const R shifted = (support % 2 == 1) ? u + R(0.5) : u;
  const R f = floor(shifted);
  s = shifted - f;
  base = static_cast<int>(f) - (support - 1) / 2;
}
template <class K, class R>
PMKIT_HD PMKIT_FORCEINLINE void locate(R u, int& base, R& s) {
  locate(K::support, u, base, s);
}
// The inverse of locate: the grid coordinate of a particle with first node `base` and
// local coordinate s (within the rounding of s). Where a plan hands out the positions it
// binned (Plan::binned_positions), so that they come from one formula on every backend.
PMKIT_HD PMKIT_FORCEINLINE double unlocate(int support, int base, double s) {
  return double(base) + double((support - 1) / 2) + s - (support % 2 == 1 ? 0.5 : 0.0);
}

// The S weights of one dimension at local coordinate s, by Horner.
template <class K, class T>
PMKIT_HD PMKIT_FORCEINLINE void weights_1d(T s, T (&w)[K::support]) {
  constexpr int S = K::support;
  constexpr PieceTable<S> tab = K::pieces();
  PMKIT_UNROLL
  for (int k = 0; k < S; ++k) {
    T acc = T(tab.c[k][S - 1]);
  PMKIT_UNROLL
    for (int j = S - 2; j >= 0; --j) acc = acc * s + T(tab.c[k][j]);
    w[k] = acc;
  }
}

// The largest 1D weight of K: the middle node's at a particle on that node (the kernels
// are symmetric and peak there). To the power D, the most one node takes from one
// particle, which bounds a fixed-point sum of a block's contributions.
template <class K>
PMKIT_HD PMKIT_FORCEINLINE double peak_weight_1d() {
  constexpr int S = K::support;
  double w[S];
  weights_1d<K, double>(S % 2 == 1 ? 0.5 : 0.0, w);
  return w[(S - 1) / 2];
}

// Kernel functor K with its pieces differentiated: weights_1d of it gives K's weight
// derivatives.
template <class K>
struct Derivative {
  static constexpr int support = K::support;
  static constexpr PieceTable<support> pieces() { return derivative_pieces<support>(K::pieces()); }
};

// The derivatives of the S weights of one dimension with respect to the local coordinate
// s, by Horner on the differentiated pieces. s moves with the grid coordinate u = (x -
// origin) / h, so dw/dx = dw/ds / h.
template <class K, class T>
PMKIT_HD PMKIT_FORCEINLINE void weight_derivatives_1d(T s, T (&dw)[K::support]) {
  weights_1d<Derivative<K>>(s, dw);
}

// The run-time kernel of a kernel functor.
template <int P>
Kernel kernel_of(BSpline<P>) {
  return Kernel::bspline(P);
}
inline Kernel kernel_of(MP4) { return Kernel::mp4(); }

// Calls f(KernelFunctor{}) for the run-time kernel: the one place where the run-time
// choice becomes a template parameter.
template <class F>
decltype(auto) dispatch(const Kernel& k, F&& f) {
  if (k.family() == KernelFamily::MP4) return f(MP4{});
  switch (k.order()) {
    case 2: return f(BSpline<2>{});
    case 3: return f(BSpline<3>{});
    case 4: return f(BSpline<4>{});
    case 5: return f(BSpline<5>{});
    case 6: return f(BSpline<6>{});
    case 7: return f(BSpline<7>{});
    default: return f(BSpline<8>{});
  }
}

}  // namespace kernels
}  // namespace pmkit
