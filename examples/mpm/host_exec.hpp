#pragma once
// The MLS-MPM example's host execution (simulation.hpp's Exec): the plan's arrays are
// vectors, pmkit::step runs on the host, the grid update in a loop over the nodes.
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
    pmkit::step(particles, update, meshes);
  }
  template <class T, int D>
  static void grid_update(const mpm::Parameters<T>& par, const std::int64_t (&shape)[D], bool walls, const T* mass,
                          const T* const* momentum, T* const* velocity, std::int64_t nodes) {
    for (std::int64_t node = 0; node < nodes; ++node)
      mpm::grid_node_update<T, D>(par, shape, walls, node, mass, momentum, velocity);
  }
  template <class T, int D>
  static void synchronize(pmkit::Particles<T, D>&) {}
};

}  // namespace mpm
