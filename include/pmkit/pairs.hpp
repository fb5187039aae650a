#pragma once
// Particle-particle interactions within a cutoff radius, on cell lists (cells at least
// as wide as the cutoff). CPU backend; the CUDA variants are a later step.
//
//   pmkit::PairPlan<double, 3> pairs(pmkit::Box<3>::periodic({L, L, L}), cutoff);
//   pairs.set_points({x, y, z});
//   pmkit::pair_kernels::LennardJones<3> lj{epsilon, sigma, cutoff};
//   pairs.compute(lj, {}, {fx, fy, fz, energy});   // outputs in the caller's order
//
// A pair kernel is a functor with
//   static constexpr int inputs;    // per-particle properties it reads (e.g. charge)
//   static constexpr int outputs;   // per-particle values it accumulates
//   template <class T> PMKIT_HD void operator()(const T* r, T r2, const T* in_i,
//       const T* in_j, T* out_i, T* out_j) const;
// called once per unordered pair {i, j} of distinct particles with |r| < cutoff (r = x_i - x_j, minimum
// image on periodic axes, r2 = |r|^2); it adds the pair's share to out_i and out_j.
// Both shells call it the same way: the half shell visits each pair once (Newton's third
// law), the full shell twice, discarding out_j; results agree to rounding.
#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <vector>

#include "pmkit/config.hpp"
#include "pmkit/error.hpp"
#include "pmkit/grid.hpp"
#include "pmkit/view.hpp"

namespace pmkit {

template <int D>
struct Box {
  static_assert(D == 2 || D == 3, "pmkit boxes are 2D or 3D");
  std::array<double, D> origin{};
  std::array<double, D> length{};
  std::array<Boundary, D> boundary{};  // value-initialised: Periodic

  static Box periodic(std::array<double, D> length, double origin = 0.0) {
    Box b;
    b.length = length;
    b.origin.fill(origin);
    return b;
  }
  static Box bounded(std::array<double, D> length, double origin = 0.0) {
    Box b = periodic(length, origin);
    b.boundary.fill(Boundary::Bounded);
    return b;
  }
};

struct PairOptions {
  int num_threads = 0;     // 0 = OpenMP's default
  bool half_shell = true;  // Newton's third law: each pair once (per-thread output buffers)
};

namespace pair_kernels {

// Lennard-Jones, truncated at the cutoff and shifted so the energy is continuous there;
// `softening` is added to r^2 so that overlapping particles give finite values.
// Outputs: the force on the particle (D components), then its potential energy (half
// of each pair's energy goes to each particle, so the outputs sum to the total).
template <int D>
struct LennardJones {
  static constexpr int inputs = 0;
  static constexpr int outputs = D + 1;
  double epsilon = 1.0;
  double sigma = 1.0;
  double cutoff = 2.5;
  double softening = 0.0;

  template <class T>
  PMKIT_HD T energy(T r2) const {
    const T s2 = T(sigma * sigma) / (r2 + T(softening * softening));
    const T s6 = s2 * s2 * s2;
    return T(4 * epsilon) * (s6 * s6 - s6);
  }
  template <class T>
  PMKIT_HD void operator()(const T* r, T r2, const T*, const T*, T* out_i, T* out_j) const {
    const T soft2 = r2 + T(softening * softening);
    const T s2 = T(sigma * sigma) / soft2;
    const T s6 = s2 * s2 * s2;
    // F_i = -dU/dr r_hat = 24 eps (2 s^12 - s^6) / (r^2 + soft^2) * r
    const T f = T(24 * epsilon) * (T(2) * s6 * s6 - s6) / soft2;
    for (int d = 0; d < D; ++d) {
      out_i[d] += f * r[d];
      out_j[d] -= f * r[d];
    }
    const T u = T(0.5) * (energy(r2) - energy(T(cutoff * cutoff)));
    out_i[D] += u;
    out_j[D] += u;
  }
};

// Synthetic kernels for benchmarking the traversal: a cheap one (a few flops) and an
// expensive one (transcendental functions), both symmetric sums.
struct CheapSynthetic {
  static constexpr int inputs = 0;
  static constexpr int outputs = 1;
  double cutoff = 1.0;
  template <class T>
  PMKIT_HD void operator()(const T*, T r2, const T*, const T*, T* out_i, T* out_j) const {
    const T w = T(cutoff * cutoff) - r2;
    out_i[0] += w;
    out_j[0] += w;
  }
};
struct ExpensiveSynthetic {
  static constexpr int inputs = 1;  // a weight per particle
  static constexpr int outputs = 1;
  double cutoff = 1.0;
  template <class T>
  PMKIT_HD void operator()(const T*, T r2, const T* in_i, const T* in_j, T* out_i, T* out_j) const {
    using std::exp;
    using std::sqrt;
    using std::cos;
    const T r = sqrt(r2);
    const T w = exp(-r2) * cos(r) / (T(1) + r);
    out_i[0] += w * in_j[0];
    out_j[0] += w * in_i[0];
  }
};

}  // namespace pair_kernels

namespace detail {
template <class T, int D>
struct CellList;
}

template <class T, int D>
class PairPlan {
 public:
  using Positions = std::array<View<const T>, D>;

  PairPlan(const Box<D>& box, double cutoff, PairOptions options = {});
  ~PairPlan();
  PairPlan(PairPlan&&) noexcept;
  PairPlan& operator=(PairPlan&&) noexcept;

  // Validates (finite, inside bounded axes) and bins the positions. A failed call keeps
  // the previous points.
  void set_points(const Positions& positions);

  // Overwrites outputs[k][p] with particle p's accumulated output k of the kernel;
  // inputs[k][p] is its input k. Nothing the caller owns is written if a check fails.
  template <class Kernel>
  void compute(const Kernel& kernel, Span<View<const T>> inputs, Span<View<T>> outputs);

  std::size_t num_points() const;
  bool has_points() const;
  std::array<int, D> cells() const;
  double cutoff() const { return cutoff_; }
  const Box<D>& box() const { return box_; }

 private:
  void check_compute(std::size_t inputs, std::size_t outputs, Span<View<const T>> in, Span<View<T>> out) const;
  Box<D> box_;
  double cutoff_;
  PairOptions options_;
  std::unique_ptr<detail::CellList<T, D>> cells_;
};

}  // namespace pmkit

#include "pmkit/pairs_impl.hpp"
