#pragma once
// Index arithmetic shared by every backend (host and device): where a position lies on
// the grid and where a logical node is stored. Kernels receive a Layout by value.
#include <cmath>
#include <cstdint>

#include "pmkit/detail/wrap.hpp"
#include "pmkit/config.hpp"
#include "pmkit/grid.hpp"

namespace pmkit::detail {

enum class AxisKind : int { Periodic, Fold, Keep };

struct Axis {
  AxisKind kind;
  int cells;     // n
  int nodes;     // stored nodes: n (periodic), n+1 (fold), n+1+2g (keep)
  int ghost;     // g: nodes a kernel reaches past either end
  double origin;
  double spacing;
  // 1 / spacing where multiplying by it gives the division's result to the bit (spacing a
  // power of two, h = 1 included), else 0. A double division is a dozen FP64 and XU
  // instructions, and binning does one a coordinate: much of the GPU set_points' work.
  double exact_inverse = 0.0;

  // Grid coordinate (x - origin) / h, not wrapped.
  PMKIT_HD double unwrapped_coordinate(double x) const {
    return exact_inverse != 0.0 ? (x - origin) * exact_inverse : (x - origin) / spacing;
  }

  // Grid coordinate u = (x - origin) / h, wrapped into [0, n) on periodic axes.
  // False for a non-finite x, or an x outside [0, n] on a bounded axis.
  PMKIT_HD bool coordinate(double x, double& u) const {
    u = unwrapped_coordinate(x);
    return wrap_coordinate(u, cells, kind == AxisKind::Periodic);
  }

  // The inverse of coordinate, relative to the origin: (x - origin) for a grid coordinate
  // u, wrapped again into [0, n h) on periodic axes (u may come back from a stencil's base
  // and local coordinate a rounding outside [0, n)); on a bounded axis clamped to [0, n h].
  PMKIT_HD double offset(double u) const {
    if (kind == AxisKind::Periodic) {
      if (u < 0.0) u += cells;
      if (u >= cells) u -= cells;
      if (u < 0.0 || u >= cells) u = 0.0;  // the seam
    } else {
      u = u < 0.0 ? 0.0 : u > cells ? double(cells) : u;
    }
    return u * spacing;
  }

  // Storage index of logical node m (m may lie up to `ghost` past either end).
  PMKIT_HD int node(int m) const {
    switch (kind) {
      case AxisKind::Periodic:  // m is within a few supports of [0, n): no division
        while (m < 0) m += cells;
        while (m >= cells) m -= cells;
        return m;
      case AxisKind::Fold:
        m = m < 0 ? -m : m;
        return m > cells ? 2 * cells - m : m;
      default:
        return m + ghost;
    }
  }
};

template <int D>
struct Layout {
  Axis axis[D];
  std::int64_t stride[D];  // stride[0] = 1 (x fastest)
  std::int64_t size;
};

template <int D>
Layout<D> make_layout(const Grid<D>& grid, int ghost_width);

}  // namespace pmkit::detail
