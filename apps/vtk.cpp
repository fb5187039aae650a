#include "vtk.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace pmkit::cli {

template <int D>
VtkImage vtk_image(const Grid<D>& grid, int ghost_width) {
  VtkImage img;
  const auto shape = mesh_shape(grid, ghost_width);
  for (int d = 0; d < D; ++d) {
    img.dims[d] = shape[d];
    img.spacing[d] = grid.spacing[d];
    const bool kept_ghosts = grid.boundary[d] == Boundary::Bounded && grid.ghosts == Ghosts::Keep;
    img.origin[d] = grid.origin[d] - (kept_ghosts ? ghost_width * grid.spacing[d] : 0.0);
  }
  return img;
}
template VtkImage vtk_image(const Grid<2>&, int);
template VtkImage vtk_image(const Grid<3>&, int);

template <class T>
void write_vtk(std::ostream& out, const VtkImage& image, const std::string& field, const T* values) {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value);
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const std::int64_t n = image.dims[0] * image.dims[1] * image.dims[2];
  out.precision(17);
  out << "# vtk DataFile Version 3.0\n"
      << "pmkit mesh\n"
      << "BINARY\n"
      << "DATASET STRUCTURED_POINTS\n"
      << "DIMENSIONS " << image.dims[0] << ' ' << image.dims[1] << ' ' << image.dims[2] << '\n'
      << "ORIGIN " << image.origin[0] << ' ' << image.origin[1] << ' ' << image.origin[2] << '\n'
      << "SPACING " << image.spacing[0] << ' ' << image.spacing[1] << ' ' << image.spacing[2]
      << '\n'
      << "POINT_DATA " << n << '\n'
      << "SCALARS " << field << ' ' << (sizeof(T) == 4 ? "float" : "double") << " 1\n"
      << "LOOKUP_TABLE default\n";
  // Big-endian whatever the host order: bytes written from the most significant down.
  std::vector<unsigned char> buf;
  const std::int64_t chunk = 1 << 16;
  for (std::int64_t lo = 0; lo < n; lo += chunk) {
    const std::int64_t hi = std::min(n, lo + chunk);
    buf.resize(static_cast<std::size_t>(hi - lo) * sizeof(T));
    unsigned char* p = buf.data();
    for (std::int64_t i = lo; i < hi; ++i) {
      Bits b;
      std::memcpy(&b, &values[i], sizeof(T));
      for (int k = static_cast<int>(sizeof(T)) - 1; k >= 0; --k) *p++ = static_cast<unsigned char>(b >> (8 * k));
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  out << '\n';
}
template void write_vtk(std::ostream&, const VtkImage&, const std::string&, const float*);
template void write_vtk(std::ostream&, const VtkImage&, const std::string&, const double*);

}  // namespace pmkit::cli
