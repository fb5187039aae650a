#pragma once
// Helpers of the CUDA white-box tests (test_cuda_*.cpp): options for one spread method,
// input put in a plan's binned order, a stream of the test's own, and the float64
// reference cases of reference_cases.hpp. Only in builds with the CUDA backend.
#include <memory>
#include <numeric>
#include <vector>

#include "cuda_support.hpp"
#include "reference_cases.hpp"

namespace pmkit::test {

// The CUDA backend with device pointers, by `method`, in the fast or deterministic mode.
inline Options cuda_method(SpreadMethod method = SpreadMethod::Auto, bool deterministic = false) {
  Options opt;
  opt.backend = Backend::Cuda;
  opt.spread_method = method;
  opt.deterministic = deterministic;
  return opt;
}
inline Options cuda_options() { return cuda_method(); }

// The caller's arrays put in the plan's binned order (binned_order after a set_points
// on them): input that set_points' probe sends to the one-pass scatter.
template <class T, int D>
void put_in_binned_order(Plan<T, D>& plan, const std::array<std::vector<T>*, D>& arrays) {
  const std::size_t n = arrays[0]->size();
  std::vector<std::unique_ptr<DeviceBuffer<T>>> device;
  typename Plan<T, D>::Positions views;
  for (int d = 0; d < D; ++d) {
    device.emplace_back(new DeviceBuffer<T>(*arrays[d]));
    views[d] = device_cview(*device.back());
  }
  plan.set_points(views);
  DeviceBuffer<std::uint32_t> dorder(n);
  plan.binned_order(device_view(dorder));
  const auto order = dorder.download();
  for (int d = 0; d < D; ++d) {
    std::vector<T> sorted(n);
    for (std::size_t k = 0; k < n; ++k) sorted[k] = (*arrays[d])[order[k]];
    arrays[d]->swap(sorted);
  }
}

// After a rejected set_points: the plan still holds its n valid points, so spreading
// q = 1 conserves their mass.
inline void expect_points_kept(Plan<float, 3>& plan, std::size_t n, double tolerance) {
  std::vector<float> ones(n, 1.0f);
  DeviceBuffer<float> dq(ones), dmesh(static_cast<std::size_t>(plan.mesh_size()));
  plan.spread({device_cview(dq)}, {device_view(dmesh)});
  const auto mesh = dmesh.download();
  EXPECT_NEAR(std::accumulate(mesh.begin(), mesh.end(), 0.0), static_cast<double>(n), tolerance);
}

}  // namespace pmkit::test
