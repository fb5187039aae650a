#pragma once
// The initial electrons of each problem, on the host. Landau and two-stream are problems
// along x, loaded quietly: particle i of N sits at the (i + 1/2)/N quantile of the
// perturbed density along x, its vx is the Maxwellian's quantile at the base-2 radical
// inverse of i + 1 (so (x, vx) is a Hammersley set), its y and z are radical inverses in
// bases 3 and 5, and its transverse velocities are zero: the modes along x do not depend
// on them, and a thermal spread there would stir the quiet start's transverse order into
// noise on the field energy. The thermal problem (and quiet = false) draws every
// coordinate at random instead. Each particle depends on its index alone, so that a rank
// loads its share of the indices, and any split of them loads the same electrons.
#include <array>
#include <cstdint>
#include <vector>

#include "pic.hpp"

namespace pmkit::pic {

template <class T, int D>
struct Loaded {
  std::array<std::vector<T>, D> x, v;
};

// Particles [first, first + count) of the config.particles.
template <class T, int D>
Loaded<T, D> load_particles(const Config& config, const std::array<double, 3>& box, std::int64_t first,
                            std::int64_t count);

// Helpers of the loading, exposed for their tests.
double radical_inverse(unsigned base, std::uint64_t i);
// The standard normal quantile: z with Phi(z) = u, for u in (0, 1).
double normal_quantile(double u);

}  // namespace pmkit::pic
