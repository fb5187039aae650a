#pragma once
// Spread and interp of fresh random particles against the float64 reference, on any
// options: the cases shared by the backend matrix (test_reference.cpp) and the CUDA
// white-box tests of particular paths (sizes, densities and scales that pick them).
#include <algorithm>
#include <vector>

#include "matrix_plan.hpp"
#include "test_support.hpp"

namespace pmkit::test {

// One case: particles (uniform, clustered, on the seam or faces) at `per_cell` a cell, at
// least `min_particles` of them (also under PMKIT_TEST_SMALL: a path chosen by size),
// `nprops` properties of about `prop_scale` spread in one call and the reference meshes
// interpolated back in one call (MatrixPlan: device pointers where the options take them).
template <class T, int D>
void check_against_reference(const Options& options, const Kernel& kernel, std::array<std::int64_t, D> cells,
                             BoundaryKind boundary, double per_cell, Distribution dist, int nprops,
                             std::size_t min_particles = 0, double prop_scale = 1.0,
                             double spread_tolerance = tolerance<T>()) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Grid<D> grid = make_grid<D>(cells, boundary);
  double volume_cells = 1;
  for (int d = 0; d < D; ++d) volume_cells *= static_cast<double>(cells[d]);
  const std::size_t n = std::max(min_particles, scaled(static_cast<std::size_t>(per_cell * volume_cells) + 1));
  const Positions<T, D> pos = make_positions<T, D>(grid, dist, n, rng);

  MatrixPlan<T, D> plan(grid, kernel, options);
  plan.set_points(views_of<T, D>(pos));
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
  std::vector<std::vector<T>> props(nprops), meshes(nprops, std::vector<T>(size));
  std::vector<std::vector<double>> props_d(nprops), ref(nprops, std::vector<double>(size));
  std::vector<const double*> qp;
  std::vector<double*> mp;
  for (int j = 0; j < nprops; ++j) {
    props[j] = random_values<T>(n, rng, -prop_scale, prop_scale);
    props_d[j] = to_double<T>(View<const T>(props[j]));
    qp.push_back(props_d[j].data());
    mp.push_back(ref[j].data());
  }
  plan.spread(std::vector<View<const T>>(props.begin(), props.end()), std::vector<View<T>>(meshes.begin(), meshes.end()));
  const auto xd = positions_as_double<T, D>(views_of<T, D>(pos));
  reference::spread<D>(grid, kernel, n, pointers<D>(xd), nprops, qp.data(), mp.data());
  for (int j = 0; j < nprops; ++j)
    EXPECT_LE(rel_l2<T>(View<const T>(meshes[j]), ref[j]), spread_tolerance)
        << "spread, property " << j << ", " << plan.spread_method_name() << ", " << kernel.name() << ", "
        << name(boundary) << ", " << name(dist) << ", n = " << n;

  // Interp of each property's reference mesh (as T) back to the particles, all in one
  // call, as the spread took them (several properties a pass: CUDA's tile interp kernel
  // is compiled per property count, the one-thread one reads the count at run time).
  std::vector<std::vector<T>> fields(nprops), values(nprops, std::vector<T>(n));
  for (int j = 0; j < nprops; ++j) fields[j].assign(ref[j].begin(), ref[j].end());
  plan.interp(std::vector<View<const T>>(fields.begin(), fields.end()), std::vector<View<T>>(values.begin(), values.end()));
  for (int j = 0; j < nprops; ++j) {
    const std::vector<double> want =
        reference_interp<D>(grid, kernel, pointers<D>(xd), n, std::vector<double>(fields[j].begin(), fields[j].end()));
    EXPECT_LE(rel_l2<T>(View<const T>(values[j]), want), tolerance<T>())
        << "interp, property " << j << ", " << kernel.name() << ", n = " << n;
  }
}

// Densities from nearly empty to `densest` a cell, uniform, clustered and on the periodic
// seam, periodic and mixed boundaries: M'4 in 3D and linear in 2D.
inline void check_densities(const Options& options, double densest) {
  for (double per_cell : {0.01, 1.0, 20.0, densest})
    for (auto dist : {Distribution::Uniform, Distribution::Clustered, Distribution::Seam})
      for (auto boundary : {BoundaryKind::Periodic, BoundaryKind::MixedKeep}) {
        check_against_reference<float, 3>(options, Kernel::mp4(), {16, 9, 13}, boundary, per_cell, dist, 1);
        check_against_reference<float, 2>(options, Kernel::linear(), {40, 37}, boundary, per_cell, dist, 1);
      }
}

// Several properties at once: 3 (one pass on CUDA) and 5 (two passes), in a float M'4
// and a clustered double TSC case.
inline void check_several_properties(const Options& options) {
  for (int nprops : {3, 5}) {
    check_against_reference<float, 3>(options, Kernel::mp4(), {24, 24, 24}, BoundaryKind::Periodic, 8.0,
                                      Distribution::Uniform, nprops);
    check_against_reference<double, 3>(options, Kernel::tsc(), {12, 20, 16}, BoundaryKind::Fold, 30.0,
                                       Distribution::Clustered, nprops);
  }
}

}  // namespace pmkit::test
