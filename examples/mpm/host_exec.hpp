#pragma once
// The MLS-MPM example's host execution (simulation.hpp's Exec): the plan's arrays are
// vectors, pmkit::step runs on the host, the grid update in loops over the particles
// (the box they reach) and the box's nodes.
#include <cstdint>
#include <vector>

#include "mpm.hpp"
#include "pmkit/plan.hpp"

namespace mpm {

struct HostExec {
  template <class T>
  using Array = std::vector<T>;
  static const char* name() { return "cpu"; }
  static pmkit::Options options() { return pmkit::Options{}; }
  template <class T>
  static std::vector<T> upload(const std::vector<T>& a) { return a; }
  template <class T>
  static std::vector<T> download(const std::vector<T>& a) { return a; }
  template <class T, int D, class Update>
  static void step(pmkit::Particles<T, D>& particles, const Update& update, const pmkit::StepMeshes<T>& meshes) {
    pmkit::step<pmkit::kernels::TSC>(particles, update, meshes);  // the quadratic B-spline, the plan's
  }
  template <class T, int D>
  static void grid_update(const GridUpdate<T, D>& g, std::vector<int>&) {
    int lo[D], hi[D];
    for (int d = 0; d < D; ++d) lo[d] = hi[d] = g.first_node(0, d);
    for (std::size_t k = 1; k < g.particles; ++k)
      for (int d = 0; d < D; ++d) {
        const int first = g.first_node(k, d);
        lo[d] = first < lo[d] ? first : lo[d];
        hi[d] = first > hi[d] ? first : hi[d];
      }
    g.finish_box(lo, hi);
    const std::int64_t nodes = GridUpdate<T, D>::box_size(lo, hi);
    for (std::int64_t j = 0; j < nodes; ++j) g.update(lo, hi, j);
  }
  template <class T, int D>
  static void synchronize(pmkit::Particles<T, D>&) {}
};

}  // namespace mpm
