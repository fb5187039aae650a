#pragma once
// The split of a plan's particles into a boundary part and an interior part, by a box of
// the mesh's stored nodes: a particle whose stencil lies inside the box is interior, any
// other is boundary. A distributed plan (src/distributed/) sets the box to its block's
// owned nodes, so that the interior particles neither write nor read a ghost node: its
// spread runs the boundary part, starts the ghost exchange and runs the interior part
// while the messages travel; its interp runs the interior part while the ghost fill
// travels. Written once for host and device.
#include <array>
#include <cstdint>
#include <limits>

#include "pmkit/detail/layout.hpp"
#include "pmkit/config.hpp"

namespace pmkit::detail {

// The particles a spread, interp or gradient call takes. A backend may put interior
// particles into the boundary part (where splitting them costs more than it saves), never
// the reverse: every particle whose stencil reaches outside the box is in Boundary.
enum class Part { All, Boundary, Interior };

// Stored nodes [lo[d], hi[d]) per axis. An axis whose range covers all its stored nodes
// (NodeBox::whole) puts no particle on the boundary, wrapped stencils included.
template <int D>
struct NodeBox {
  std::int64_t lo[D];
  std::int64_t hi[D];

  static constexpr std::int64_t whole_lo() { return std::numeric_limits<std::int64_t>::min(); }
  static constexpr std::int64_t whole_hi() { return std::numeric_limits<std::int64_t>::max(); }
};

// Whether the stencil of `support` nodes per axis starting at logical node base[d] lies
// inside the box. The box's axes that are not whole are those of a Ghosts::Keep or
// bounded local mesh, where stored node = layout's node(m), increasing in m.
template <int D>
PMKIT_HD PMKIT_FORCEINLINE bool stencil_inside(const NodeBox<D>& box, const Layout<D>& layout, const int (&base)[D],
                                               int support) {
  bool inside = true;
  PMKIT_UNROLL
  for (int d = 0; d < D; ++d) {
    if (box.lo[d] == NodeBox<D>::whole_lo()) continue;
    const std::int64_t first = layout.axis[d].node(base[d]), last = layout.axis[d].node(base[d] + support - 1);
    inside = inside && first >= box.lo[d] && last < box.hi[d] && first <= last;
  }
  return inside;
}

// Whether a particle inside (stencil_inside) belongs to `part`.
PMKIT_HD PMKIT_FORCEINLINE bool in_part(Part part, bool inside) {
  return part == Part::All || (part == Part::Interior) == inside;
}

}  // namespace pmkit::detail
