#pragma once
// Writes a mesh as a legacy VTK file (STRUCTURED_POINTS, binary, big-endian), which
// ParaView and VisIt open directly. Node (i, j, k) of the file sits at
// origin + (i, j, k) * spacing, x fastest: the storage order of pmkit meshes.
#include <array>
#include <cstdint>
#include <ostream>
#include <string>

#include "pmkit/grid.hpp"

namespace pmkit::cli {

// Shape, origin and spacing of the stored nodes of a mesh in 3D form (a 2D mesh gets
// one layer in z). With Ghosts::Keep the stored ghost layers are included, so the
// origin moves back by ghost_width nodes on bounded axes.
struct VtkImage {
  std::array<std::int64_t, 3> dims{1, 1, 1};
  std::array<double, 3> origin{0, 0, 0};
  std::array<double, 3> spacing{1, 1, 1};
};

template <int D>
VtkImage vtk_image(const Grid<D>& grid, int ghost_width);

// Writes the file's contents to `out` (an OutputFile's stream, opened in binary).
template <class T>
void write_vtk(std::ostream& out, const VtkImage& image, const std::string& field, const T* values);

}  // namespace pmkit::cli
