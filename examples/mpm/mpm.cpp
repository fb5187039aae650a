// The MLS-MPM example on a CPU plan (driver.hpp gives the command line): pmkit::step on
// the host, the grid update in a loop over the nodes.
#include <cstdio>
#include <vector>

#include "driver.hpp"

namespace {

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

}  // namespace

int main(int argc, char** argv) { return mpm::main_for<HostExec>(argc, argv); }
