// The float64 Ewald sum (ewald.hpp).
#include "verify/ewald.hpp"

#include <algorithm>
#include <cmath>
#include <complex>

namespace pmkit::verify {

namespace {
// The axes (a, b) of each Voigt component.
constexpr int kVoigt[6][2] = {{0, 0}, {1, 1}, {2, 2}, {1, 2}, {0, 2}, {0, 1}};
}  // namespace

double real_space_sum(const ChargeSystem& s, double alpha, double rc, int images, CoulombResult& out) {
  constexpr double pi = 3.14159265358979323846;
  const std::size_t n = s.size();
  double energy = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      double r0[3];
      for (int d = 0; d < 3; ++d) {
        r0[d] = s.x[d][i] - s.x[d][j];
        r0[d] -= s.box[d] * std::round(r0[d] / s.box[d]);
      }
      for (int a = -images; a <= images; ++a)
        for (int b = -images; b <= images; ++b)
          for (int c = -images; c <= images; ++c) {
            const double r[3] = {r0[0] + a * s.box[0], r0[1] + b * s.box[1], r0[2] + c * s.box[2]};
            const double rr = std::sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]);
            if (rr >= rc) continue;
            const double e = std::erfc(alpha * rr) / rr;
            const double g = (e + 2 * alpha / std::sqrt(pi) * std::exp(-alpha * alpha * rr * rr)) / (rr * rr);
            energy += s.q[i] * s.q[j] * e;
            out.potential[i] += s.q[j] * e;
            out.potential[j] += s.q[i] * e;
            for (int d = 0; d < 3; ++d) {
              out.force[d][i] += s.q[i] * s.q[j] * g * r[d];
              out.force[d][j] -= s.q[i] * s.q[j] * g * r[d];
            }
            // The pair's force on i is f r: W_ab += f r_a r_b.
            for (int v = 0; v < 6; ++v)
              out.virial[v] += s.q[i] * s.q[j] * g * r[kVoigt[v][0]] * r[kVoigt[v][1]];
          }
    }
  return energy;
}

CoulombResult zero_result(std::size_t n) {
  CoulombResult out;
  for (auto& f : out.force) f.assign(n, 0.0);
  out.potential.assign(n, 0.0);
  return out;
}

CoulombResult ewald_sum(const ChargeSystem& s) {
  constexpr double pi = 3.14159265358979323846;
  const std::size_t n = s.size();
  const double lmin = std::min(s.box[0], std::min(s.box[1], s.box[2]));
  // Real space: every image within r_c = the shortest box length, which the 27 nearest
  // images of the minimum image cover (a further image is at least 1.5 lengths away).
  const double rc = lmin, alpha = 6.0 / rc;  // erfc(6) = 2e-17
  const double volume = s.box[0] * s.box[1] * s.box[2];
  CoulombResult out = zero_result(n);
  double energy = real_space_sum(s, alpha, rc, 1, out);
  // Reciprocal space: wave vectors m = (k0/L0, k1/L1, k2/L2) with pi^2 m^2 / alpha^2 up to
  // 38 (exp(-38) = 3e-17), from per-particle powers of exp(2 pi i x_d / L_d).
  const double m2max = 38.0 * alpha * alpha / (pi * pi);
  int kmax[3];
  std::array<std::vector<std::complex<double>>, 3> powers;  // [d][(k + kmax) * n + i]
  for (int d = 0; d < 3; ++d) {
    kmax[d] = static_cast<int>(std::ceil(std::sqrt(m2max) * s.box[d]));
    powers[d].resize(static_cast<std::size_t>(2 * kmax[d] + 1) * n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::complex<double> w = std::polar(1.0, 2 * pi * s.x[d][i] / s.box[d]);
      std::complex<double> p = 1.0;
      powers[d][kmax[d] * n + i] = 1.0;
      for (int k = 1; k <= kmax[d]; ++k) {
        p *= w;
        powers[d][(kmax[d] + k) * n + i] = p;
        powers[d][(kmax[d] - k) * n + i] = std::conj(p);
      }
    }
  }
  std::vector<std::complex<double>> e(n);
  for (int k0 = -kmax[0]; k0 <= kmax[0]; ++k0)
    for (int k1 = -kmax[1]; k1 <= kmax[1]; ++k1)
      for (int k2 = -kmax[2]; k2 <= kmax[2]; ++k2) {
        const double m[3] = {k0 / s.box[0], k1 / s.box[1], k2 / s.box[2]};
        const double m2 = m[0] * m[0] + m[1] * m[1] + m[2] * m[2];
        if (m2 == 0 || m2 > m2max) continue;
        const double g = std::exp(-pi * pi * m2 / (alpha * alpha)) / m2 / (pi * volume);
        std::complex<double> structure = 0;  // S(m) = sum_j q_j exp(2 pi i m.x_j)
        for (std::size_t i = 0; i < n; ++i) {
          e[i] = powers[0][(kmax[0] + k0) * n + i] * powers[1][(kmax[1] + k1) * n + i] *
                 powers[2][(kmax[2] + k2) * n + i];
          structure += s.q[i] * e[i];
        }
        // E = 1/2 sum_m g |S|^2; dE/dq_i = sum_m g Re(conj(S) e_i);
        // F_i = -dE/dx_i = 2 pi q_i sum_m g m Im(conj(S) e_i).
        energy += 0.5 * g * std::norm(structure);
        // Under a strain e, m -> (1 - e) m and V -> (1 + tr e) V: W_ab = -dE_m/de_ab =
        // E_m (delta_ab - 2 (1 + pi^2 m^2 / alpha^2) m_a m_b / m^2).
        for (int v = 0; v < 6; ++v) {
          const int a = kVoigt[v][0], b = kVoigt[v][1];
          out.virial[v] += 0.5 * g * std::norm(structure) *
                           ((a == b ? 1.0 : 0.0) - 2 * (1 + pi * pi * m2 / (alpha * alpha)) * m[a] * m[b] / m2);
        }
        for (std::size_t i = 0; i < n; ++i) {
          const std::complex<double> c = std::conj(structure) * e[i];
          out.potential[i] += g * c.real();
          for (int d = 0; d < 3; ++d) out.force[d][i] += 2 * pi * s.q[i] * g * m[d] * c.imag();
        }
      }
  // Self term and the background that neutralises a net charge Q.
  double total = 0, squares = 0;
  for (double qi : s.q) {
    total += qi;
    squares += qi * qi;
  }
  energy += -alpha / std::sqrt(pi) * squares - pi * total * total / (2 * volume * alpha * alpha);
  // The background's energy is proportional to 1 / V: W_aa = E_background.
  for (int a = 0; a < 3; ++a) out.virial[a] += -pi * total * total / (2 * volume * alpha * alpha);
  for (std::size_t i = 0; i < n; ++i)
    out.potential[i] += -2 * alpha / std::sqrt(pi) * s.q[i] - pi * total / (volume * alpha * alpha);
  out.energy = energy;
  return out;
}

ChargeSystem rock_salt(int cells) {
  ChargeSystem s;
  const int sites = 2 * cells;
  s.box = {double(sites), double(sites), double(sites)};
  for (int i = 0; i < sites; ++i)
    for (int j = 0; j < sites; ++j)
      for (int k = 0; k < sites; ++k) {
        s.x[0].push_back(i);
        s.x[1].push_back(j);
        s.x[2].push_back(k);
        s.q.push_back((i + j + k) % 2 == 0 ? 1.0 : -1.0);
      }
  return s;
}

}  // namespace pmkit::verify
