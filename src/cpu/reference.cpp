// The float64 reference. Deliberately independent of the backends: the kernels come
// from their closed forms, nodes are found by scanning a window around the particle,
// and ghost nodes are mapped by their own small function.
#include "pmkit/reference.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "cpu/openmp.hpp"

namespace pmkit::reference {

namespace {
double binomial(int n, int k) {
  double r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}
double factorial(int n) { return n <= 1 ? 1.0 : n * factorial(n - 1); }

// Cardinal B-spline of order p centred at 0: M_p(r + p/2), by the truncated-power sum.
// Evaluated on the left half only (x <= p/2, by symmetry), which keeps the cancellation
// of the alternating sum near 1e-14 even at p = 8.
double bspline(int p, double r) {
  const double x = 0.5 * p - std::fabs(r);
  if (x <= 0) return 0.0;
  double sum = 0;
  for (int k = 0; k <= p; ++k) {
    const double t = x - k;
    if (t > 0) sum += ((k % 2) ? -1.0 : 1.0) * binomial(p, k) * std::pow(t, p - 1);
  }
  return sum / factorial(p - 1);
}

// dW/dr of M'4 at signed distance r.
double mp4_derivative(double r) {
  const double a = std::fabs(r), sign = r < 0 ? -1.0 : 1.0;
  if (a < 1) return sign * (-5 * a + 4.5 * a * a);
  if (a < 2) return sign * (-(2 - a) * (1 - a) - 0.5 * (2 - a) * (2 - a));
  return 0.0;
}

// M_{p-1} one step to either side, halved where r + 1/2 or r - 1/2 falls on a knot of
// the order-1 spline (the box's ends), so that the linear kernel's kinks get the mean.
double bspline_derivative(int p, double r) {
  auto lower = [p](double x) {
    if (p - 1 == 1 && std::fabs(std::fabs(x) - 0.5) == 0.0) return 0.5;
    return bspline(p - 1, x);
  };
  return lower(r + 0.5) - lower(r - 0.5);
}

double mp4(double r) {
  r = std::fabs(r);
  if (r < 1) return 1 - 2.5 * r * r + 1.5 * r * r * r;
  if (r < 2) return 0.5 * (2 - r) * (2 - r) * (1 - r);
  return 0.0;
}

// Grid coordinate of x and the storage index of node m, or -1 where no node stores it.
struct AxisRef {
  Boundary boundary;
  Ghosts ghosts;
  long long cells;
  int ghost;
  double origin, spacing;

  double coordinate(double x) const {
    double u = (x - origin) / spacing;
    if (boundary == Boundary::Periodic) u = u - cells * std::floor(u / cells);
    return u;
  }
  long long node(long long m) const {
    if (boundary == Boundary::Periodic) return ((m % cells) + cells) % cells;
    if (ghosts == Ghosts::Keep) return m + ghost;
    if (m < 0) return -m;
    if (m > cells) return 2 * cells - m;
    return m;
  }
};

template <int D>
struct Visit {
  std::array<AxisRef, D> axes;
  std::array<long long, D> strides;
  long long rows;  // storage extent of the last axis
  const Kernel& kernel;

  Visit(const Grid<D>& grid, const Kernel& k) : kernel(k) {
    const auto shape = mesh_shape(grid, k.ghost_width());
    long long stride = 1;
    for (int d = 0; d < D; ++d) {
      axes[d] = AxisRef{grid.boundary[d], grid.ghosts, grid.cells[d], k.ghost_width(),
                        grid.origin[d], grid.spacing[d]};
      strides[d] = stride;
      stride *= shape[d];
    }
    rows = shape[D - 1];
  }

  // The window scanned around a particle: support / 2 + 1 nodes either side of its cell
  // (Kernel makes none wider than Kernel::kMaxSupport).
  static constexpr int kMaxWindow = 2 * (Kernel::kMaxSupport / 2 + 1) + 1;

  // One node along one axis: its storage offset, the weight and the weight's derivative
  // with respect to the particle's coordinate on that axis (per unit of length).
  struct Tap {
    long long offset;
    double weight, derivative;
  };
  // Fixed arrays, not vectors: the tests run this over 2^23+ particles.
  struct Taps {
    std::array<Tap, kMaxWindow> tap;
    int count = 0;
    const Tap* begin() const { return tap.data(); }
    const Tap* end() const { return tap.data() + count; }
  };

  // Per axis the nodes of particle p whose storage row along the last axis is in
  // [row_lo, row_hi), in a fixed order: those of non-zero weight, or with `derivatives`
  // those of non-zero weight or derivative. False when an axis has none.
  bool taps_of(const std::array<const double*, D>& pos, std::size_t p, long long row_lo, long long row_hi,
               bool derivatives, std::array<Taps, D>& taps) const {
    const int reach = kernel.support() / 2 + 1;
    for (int d = D - 1; d >= 0; --d) {  // the last axis first: a particle outside the band stops there
      const double u = axes[d].coordinate(pos[d][p]);
      const long long c = static_cast<long long>(std::floor(u));
      for (long long m = c - reach; m <= c + reach; ++m) {
        const double w = weight(kernel, u - m);
        const double dw = derivatives ? derivative_from_above(u - m) / axes[d].spacing : 0.0;
        if (w == 0.0 && dw == 0.0) continue;
        const long long node = axes[d].node(m);
        if (d == D - 1 && (node < row_lo || node >= row_hi)) continue;
        taps[d].tap[taps[d].count++] = {node * strides[d], w, dw};
      }
      if (taps[d].count == 0) return false;
    }
    return true;
  }

  // dW/dr at r approached from above: the derivative of the weight as the particle's
  // coordinate increases through r. It differs from weight_derivative only at the
  // linear kernel's kinks (r = -1, 0, 1), where the backends take the slope of the cell
  // the particle lies in, [r, r + 1): there the slope at r + 1/2.
  double derivative_from_above(double r) const {
    const bool kink = kernel.support() == 2 && r == std::floor(r);
    return weight_derivative(kernel, kink ? r + 0.5 : r);
  }

  // Calls f(index, t) for every node of the tensor product of the axes' taps, t[d] the
  // node's tap along axis d.
  template <class F>
  static void for_each_product(const std::array<Taps, D>& taps, F&& f) {
    std::array<const Tap*, D> t{};
    if constexpr (D == 2) {
      for (auto& b : taps[1])
        for (auto& a : taps[0]) {
          t = {&a, &b};
          f(a.offset + b.offset, t);
        }
    } else {
      for (auto& c : taps[2])
        for (auto& b : taps[1])
          for (auto& a : taps[0]) {
            t = {&a, &b, &c};
            f(a.offset + b.offset + c.offset, t);
          }
    }
  }

  // Calls f(index, weight) for every node of non-zero weight around particle p whose
  // storage row along the last axis is in [row_lo, row_hi), in a fixed order.
  template <class F>
  void operator()(const std::array<const double*, D>& pos, std::size_t p, long long row_lo, long long row_hi,
                  F&& f) const {
    std::array<Taps, D> taps;
    if (!taps_of(pos, p, row_lo, row_hi, false, taps)) return;
    for_each_product(taps, [&](long long index, const std::array<const Tap*, D>& t) {
      double w = t[0]->weight;
      for (int d = 1; d < D; ++d) w *= t[d]->weight;
      f(index, w);
    });
  }
  template <class F>
  void operator()(const std::array<const double*, D>& pos, std::size_t p, F&& f) const {
    (*this)(pos, p, 0, rows, f);
  }

  // Calls f(index, gradient) for every node of non-zero weight or derivative: gradient[d]
  // the derivative of the node's weight with respect to the particle's x_d.
  template <class F>
  void gradient(const std::array<const double*, D>& pos, std::size_t p, long long row_lo, long long row_hi,
                F&& f) const {
    std::array<Taps, D> taps;
    if (!taps_of(pos, p, row_lo, row_hi, true, taps)) return;
    for_each_product(taps, [&](long long index, const std::array<const Tap*, D>& t) {
      double g[D];
      for (int d = 0; d < D; ++d) {
        g[d] = d == 0 ? t[0]->derivative : t[0]->weight;
        for (int e = 1; e < D; ++e) g[d] *= d == e ? t[e]->derivative : t[e]->weight;
      }
      f(index, g);
    });
  }
};
}  // namespace

double weight(const Kernel& kernel, double r) {
  return kernel.family() == KernelFamily::MP4 ? mp4(r) : bspline(kernel.order(), r);
}

double weight_derivative(const Kernel& kernel, double r) {
  return kernel.family() == KernelFamily::MP4 ? mp4_derivative(r) : bspline_derivative(kernel.order(), r);
}

namespace {
// Calls deposit(p, lo, hi) for every particle p, in order, on every thread with the band
// [lo, hi) of storage rows of the last axis it owns. A deposit that adds only to its
// band gives every node its contributions in particle order, as one serial loop would,
// so the result does not depend on the thread count (to the bit). In parallel because
// the tests build references of 2^23 particles and more.
template <int D, class F>
void deposit_in_row_bands(const Visit<D>& visit, std::size_t n, F&& deposit) {
#pragma omp parallel
  {
    const long long threads = detail::openmp_team_size(), t = detail::openmp_thread_id();
    const long long lo = visit.rows * t / threads, hi = visit.rows * (t + 1) / threads;
    for (std::size_t p = 0; p < n && lo < hi; ++p) deposit(p, lo, hi);
  }
}
}  // namespace

template <int D>
void spread(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
            const std::array<const double*, D>& positions, int nprops,
            const double* const* props, double* const* meshes) {
  validate(grid, kernel.ghost_width());
  const long long size = mesh_size(grid, kernel.ghost_width());
  for (int j = 0; j < nprops; ++j) std::fill(meshes[j], meshes[j] + size, 0.0);
  const Visit<D> visit(grid, kernel);
  deposit_in_row_bands(visit, n, [&](std::size_t p, long long lo, long long hi) {
    visit(positions, p, lo, hi, [&](long long idx, double w) {
      for (int j = 0; j < nprops; ++j) meshes[j][idx] += props[j][p] * w;
    });
  });
}

template <int D>
void interp(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
            const std::array<const double*, D>& positions, int nprops,
            const double* const* meshes, double* const* values) {
  validate(grid, kernel.ghost_width());
  const Visit<D> visit(grid, kernel);
  // One particle's values depend on nothing else: the same bits at any thread count.
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t p = 0; p < count; ++p) {
    for (int j = 0; j < nprops; ++j) values[j][p] = 0.0;
    visit(positions, p, [&](long long idx, double w) {
      for (int j = 0; j < nprops; ++j) values[j][p] += meshes[j][idx] * w;
    });
  }
}

template <int D>
void interp_gradient(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
                     const std::array<const double*, D>& positions, int nmeshes, const double* const* meshes,
                     double* const* gradients) {
  validate(grid, kernel.ghost_width());
  const Visit<D> visit(grid, kernel);
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t p = 0; p < count; ++p) {
    for (int k = 0; k < D * nmeshes; ++k) gradients[k][p] = 0.0;
    visit.gradient(positions, p, 0, visit.rows, [&](long long idx, const double (&g)[D]) {
      for (int j = 0; j < nmeshes; ++j)
        for (int d = 0; d < D; ++d) gradients[D * j + d][p] += meshes[j][idx] * g[d];
    });
  }
}

template <int D>
void spread_gradient(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
                     const std::array<const double*, D>& positions, int nmeshes, const double* const* vectors,
                     double* const* meshes) {
  validate(grid, kernel.ghost_width());
  const long long size = mesh_size(grid, kernel.ghost_width());
  for (int j = 0; j < nmeshes; ++j) std::fill(meshes[j], meshes[j] + size, 0.0);
  const Visit<D> visit(grid, kernel);
  deposit_in_row_bands(visit, n, [&](std::size_t p, long long lo, long long hi) {
    visit.gradient(positions, p, lo, hi, [&](long long idx, const double (&g)[D]) {
      for (int j = 0; j < nmeshes; ++j)
        for (int d = 0; d < D; ++d) meshes[j][idx] += vectors[D * j + d][p] * g[d];
    });
  });
}

template void spread<2>(const Grid<2>&, const Kernel&, std::size_t, const std::array<const double*, 2>&,
                        int, const double* const*, double* const*);
template void spread<3>(const Grid<3>&, const Kernel&, std::size_t, const std::array<const double*, 3>&,
                        int, const double* const*, double* const*);
template void interp<2>(const Grid<2>&, const Kernel&, std::size_t, const std::array<const double*, 2>&,
                        int, const double* const*, double* const*);
template void interp<3>(const Grid<3>&, const Kernel&, std::size_t, const std::array<const double*, 3>&,
                        int, const double* const*, double* const*);
template void interp_gradient<2>(const Grid<2>&, const Kernel&, std::size_t, const std::array<const double*, 2>&,
                                 int, const double* const*, double* const*);
template void interp_gradient<3>(const Grid<3>&, const Kernel&, std::size_t, const std::array<const double*, 3>&,
                                 int, const double* const*, double* const*);
template void spread_gradient<2>(const Grid<2>&, const Kernel&, std::size_t, const std::array<const double*, 2>&,
                                 int, const double* const*, double* const*);
template void spread_gradient<3>(const Grid<3>&, const Kernel&, std::size_t, const std::array<const double*, 3>&,
                                 int, const double* const*, double* const*);

}  // namespace pmkit::reference
