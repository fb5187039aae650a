#pragma once
// The Ewald sum of point charges in a periodic orthorhombic box, in double, apart from
// the library's PME: real-space images, the reciprocal sum over wave vectors, the self
// term and the neutralising background, each converged to rounding. O(N^2 images + N
// k-vectors): for systems of about a thousand charges. The reference of the PME tests and
// of `pmkit pme`.
#include <array>
#include <cstddef>
#include <vector>

namespace pmkit::verify {

struct ChargeSystem {
  std::array<double, 3> box{};
  std::array<std::vector<double>, 3> x;
  std::vector<double> q;
  std::size_t size() const { return q.size(); }
};

struct CoulombResult {
  double energy = 0;
  std::array<std::vector<double>, 3> force;
  std::vector<double> potential;  // dE/dq_i
  // W = -dE/d(strain) (PmePlan's virial), Voigt order xx, yy, zz, yz, xz, xy.
  std::array<double, 6> virial{};
};

// Zero forces and potentials for n charges.
CoulombResult zero_result(std::size_t n);

// The real-space part of the Ewald sum with splitting alpha: q_i q_j erfc(alpha r) / r
// over the pairs of distinct particles closer than rc, in every image within `images`
// boxes of the minimum image along each axis (0: the minimum image alone). Adds to out
// (sized) and returns the energy.
double real_space_sum(const ChargeSystem& s, double alpha, double rc, int images, CoulombResult& out);

// The Coulomb energy, forces and potentials (Gaussian units: E = sum over pairs and
// images of q_i q_j / r, with a uniform background cancelling a net charge). The
// splitting is chosen for convergence, not speed: erfc(alpha r_c) and the largest
// omitted exp(-pi^2 m^2 / alpha^2) are both below 1e-16.
CoulombResult ewald_sum(const ChargeSystem& s);

// The rock-salt crystal: `cells`^3 conventional cubic cells of edge a = 2 (nearest
// neighbours at distance 1), alternating charges +1 and -1. Its Coulomb energy is
// -N M / 2 with M the Madelung constant (N ions, nearest-neighbour distance 1).
ChargeSystem rock_salt(int cells);

// The Madelung constant of rock salt at unit nearest-neighbour distance.
constexpr double kRockSaltMadelung = 1.747564594633182;

}  // namespace pmkit::verify
