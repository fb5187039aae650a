#pragma once
// PairPlan::set_points(mesh plan) cases shared by the CPU tests (test_pairs_from_mesh.cpp)
// and the CUDA tests of kernels outside the library (test_pairs_user_kernel.cu): a pair
// plan fed from a mesh plan on the same Grid against the float64 brute force.
#include "pair_cases.hpp"

namespace pmkit::test {
// Internal linkage: a file compiled by nvcc instantiates these helpers with
// pmkit::cuda::compute for the same kernel types that a plain C++ file instantiates with
// PairPlan::compute; each file keeps its own copy instead of the linker picking one.
namespace {

// The positions a mesh plan holds (binned_positions, offsets from the grid origin), in the
// caller's order (binned_order): what a pair plan fed from it bins.
template <class T, int D>
std::array<std::vector<double>, D> held_positions(const Plan<T, D>& mesh, bool on_device) {
  const std::size_t n = mesh.num_points();
  std::array<std::vector<T>, D> offsets;
  std::vector<std::uint32_t> order(n);
  for (auto& axis : offsets) axis.assign(n, T(0));
  if (n > 0 && !on_device) {
    std::array<View<T>, D> views;
    for (int d = 0; d < D; ++d) views[d] = View<T>(offsets[d]);
    mesh.binned_positions(views);
    mesh.binned_order(View<std::uint32_t>(order));
  }
#if defined(PMKIT_WITH_CUDA)
  if (n > 0 && on_device) {
    std::vector<std::unique_ptr<cuda::DeviceBuffer<T>>> device;
    std::array<View<T>, D> views;
    for (int d = 0; d < D; ++d) {
      device.push_back(std::make_unique<cuda::DeviceBuffer<T>>(n, "held_positions"));
      views[d] = device_view(*device.back());
    }
    cuda::DeviceBuffer<std::uint32_t> device_order(n, "held_positions");
    mesh.binned_positions(views);
    mesh.binned_order(device_view(device_order));
    for (int d = 0; d < D; ++d) offsets[d] = device[d]->download();
    order = device_order.download();
  }
#endif
  std::array<std::vector<double>, D> x;
  for (int d = 0; d < D; ++d) {
    x[d].assign(n, 0.0);
    for (std::size_t k = 0; k < n; ++k) x[d][order[k]] = offsets[d][k];
  }
  return x;
}

// A pair plan fed from a mesh plan on the caller's positions (moved with update_points
// when `moves` > 0, in mesh cells) against the brute force on the positions the mesh plan
// holds (within a rounding of T of the caller's, checked above).
template <class T, int D, class PairKernel>
void check_from_mesh(const Grid<D>& grid, const Kernel& kernel, const PairKernel& pair_kernel, double cutoff,
                     Distribution dist, std::size_t n, const Options& mesh_options, const PairOptions& pair_options,
                     double moves = 0) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const bool on_device = mesh_options.backend == Backend::Cuda;
  SCOPED_TRACE(seed_note(seed) + " " + kernel.name() + " " + name(dist) + " n = " + std::to_string(n) +
               (on_device ? " CUDA " + std::string(to_string(pair_options.method)) : " CPU") +
               (moves > 0 ? " after update_points" : ""));
  Positions<T, D> pos = make_positions<T, D>(grid, dist, n, rng);
  Options options = mesh_options;
  if (moves > 0) options.max_away_fraction = 1.0;  // keep the away list, however long
  Plan<T, D> mesh(grid, kernel, options);
  {
    const PositionsOn<T, D> first(pos, on_device);
    mesh.set_points(first.views);
  }
  if (moves > 0) {  // every particle a random step of up to `moves` cells, kept inside bounded axes
    std::uniform_real_distribution<double> step(-moves, moves);
    for (int d = 0; d < D; ++d)
      for (T& x : pos[d]) {
        double moved = x + step(rng) * grid.spacing[d];
        if (grid.boundary[d] == Boundary::Bounded)
          moved = std::min(std::max(moved, grid.origin[d]), grid.origin[d] + box_length(grid, d));
        x = static_cast<T>(moved);
      }
    const PositionsOn<T, D> second(pos, on_device);
    mesh.update_points(second.views);
    if (on_device) {
      EXPECT_GT(mesh.num_away(), 0u) << "the moves left no particle away from its tile";
    }
  }
  // Both plans take the one Grid: the pair plan its domain (Box<D>::of(grid)).
  PairPlan<T, D> pairs(grid, cutoff, pair_options);
  const Box<D> box = Box<D>::of(grid);
  pairs.set_points(mesh);
  ASSERT_EQ(pairs.num_points(), n);

  // Not the caller's positions: a pair near the softened core amplifies their rounding ~13
  // r_c / r, and with a few hundred particles one such pair can carry the whole norm.
  const std::array<std::vector<double>, D> xd = held_positions(mesh, on_device);
  std::vector<std::vector<double>> in(PairKernel::inputs, std::vector<double>(n));
  std::vector<std::vector<T>> in_t(PairKernel::inputs, std::vector<T>(n));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int k = 0; k < PairKernel::inputs; ++k)
    for (std::size_t i = 0; i < n; ++i) in[k][i] = in_t[k][i] = static_cast<T>(unit(rng));

  const std::vector<std::vector<T>> out = compute_pairs(pairs, pair_kernel, in_t);
  // The traversal's arithmetic in T only (in float without the pairs at the cutoff).
  expect_brute_force<T, D>(box, cutoff, pair_kernel, xd, in, out, std::is_same<T, float>::value ? 2e-4 : 1e-11);
}

// The grids: cells of 0.5, 0.25, 0.75 (make_grid); cutoff 1.3 is no sum of squares of
// those steps, so particles on cell faces never sit exactly at the cutoff.
constexpr double kCutoff = 1.3;

#if defined(PMKIT_WITH_CUDA)
// The CUDA cases from a mesh plan: f(kernel, grid3, grid2, mesh_options, pair_options) for
// the TSC and M'4 mesh kernels on periodic, mixed and folding grids (3D: 12 x 10 x 12 pair
// cells, tiles of 8^3 mesh cells), both plans on the CUDA backend.
template <class F>
void for_each_cuda_mesh_case(F&& f) {
  Options mesh_options;
  mesh_options.backend = Backend::Cuda;
  PairOptions pair_options;
  pair_options.backend = Backend::Cuda;
  for (const Kernel& kernel : {Kernel::tsc(), Kernel::mp4()})
    for (BoundaryKind boundary : {BoundaryKind::Periodic, BoundaryKind::MixedFold, BoundaryKind::Fold})
      f(kernel, make_grid<3>({24, 40, 16}, boundary), make_grid<2>({40, 80}, boundary), mesh_options, pair_options);
}
#endif

}  // namespace
}  // namespace pmkit::test
