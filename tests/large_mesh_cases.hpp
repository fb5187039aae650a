#pragma once
// Meshes past 2^32 nodes (periodic 2048^3): particles from a counter-based generator
// (any share of them computed by any thread, the same values), and the float64 value of
// a spread at a few sample nodes from the closed-form kernel, without a mesh.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "pmkit/pmkit.hpp"
#include "pmkit/reference.hpp"

namespace pmkit::test::large {

constexpr std::int64_t kEdge = 2048;  // 2^33 nodes: node offsets pass 2^32 on the last 1536 planes

inline Grid<3> periodic_grid() { return Grid<3>::periodic({kEdge, kEdge, kEdge}); }

inline std::size_t team_size() { return std::max(1u, std::thread::hardware_concurrency()); }

// f(t, lo, hi) for share t of [0, n), one a hardware thread (team_size shares).
template <class F>
void in_parallel(std::size_t n, F&& f) {
  const std::size_t threads = team_size();
  std::vector<std::thread> team;
  for (std::size_t t = 0; t < threads; ++t)
    team.emplace_back([&, t] { f(t, n * t / threads, n * (t + 1) / threads); });
  for (auto& th : team) th.join();
}

// Value k of stream `stream` in [0, 1): splitmix64 of (seed, stream, k).
inline double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t k) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (4 * k + stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1p-53;
}

// n particles: the first `corner` of them in [2046, 2048.5) on every axis (wrapped past
// 2048: their stencils take the last offsets, near 2^33, and cross the seams), the rest
// uniform over the box; charges in [0.5, 1.5).
struct Particles {
  std::array<std::vector<float>, 3> x;
  std::vector<float> q;

  Particles(std::size_t n, std::size_t corner, std::uint64_t seed) {
    for (auto& c : x) c.resize(n);
    q.resize(n);
    in_parallel(n, [&](std::size_t, std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) {
        for (int d = 0; d < 3; ++d) {
          const double u = uniform(seed, d, i);
          x[d][i] = static_cast<float>(i < corner ? kEdge - 2 + 2.5 * u : kEdge * u);  // past kEdge: wraps
        }
        q[i] = static_cast<float>(0.5 + uniform(seed, 3, i));
      }
    });
  }
  std::size_t size() const { return q.size(); }
};

// The signed distance from node m to coordinate x on the periodic axis of kEdge cells
// (spacing 1, origin 0), in [-kEdge/2, kEdge/2).
inline double periodic_distance(double x, std::int64_t m) {
  double r = x - static_cast<double>(m);
  r -= kEdge * std::floor(r / kEdge + 0.5);
  return r;
}

// A node's float64 value: the sum over particles of q times the kernel's weights, and
// the sum of their magnitudes (the scale of its rounding).
struct NodeSum {
  double value = 0, magnitude = 0;
};

// The spread at nodes `nodes` ({x, y, z} each) in float64: only the particles whose
// (y, z) cell row lies near a node's are weighed (a bitmap of rows), so 2^30 particles
// take about a second on a few cores.
inline std::vector<NodeSum> spread_at(const Particles& p, const Kernel& kernel,
                                      const std::vector<std::array<std::int64_t, 3>>& nodes) {
  const int reach = kernel.support() / 2 + 1;  // cells a particle's floor lies from a node it reaches
  std::vector<std::uint8_t> rows(static_cast<std::size_t>(kEdge * kEdge), 0);
  auto wrap = [](std::int64_t m) { return ((m % kEdge) + kEdge) % kEdge; };
  for (const auto& m : nodes)
    for (std::int64_t b = -reach; b <= reach; ++b)
      for (std::int64_t a = -reach; a <= reach; ++a) rows[static_cast<std::size_t>(wrap(m[2] + b) * kEdge + wrap(m[1] + a))] = 1;
  std::vector<std::vector<NodeSum>> partial(team_size(), std::vector<NodeSum>(nodes.size()));
  in_parallel(p.size(), [&](std::size_t t, std::size_t lo, std::size_t hi) {
    std::vector<NodeSum>& mine = partial[t];
    for (std::size_t i = lo; i < hi; ++i) {
      const double y = p.x[1][i], z = p.x[2][i];
      const auto row =
          wrap(static_cast<std::int64_t>(std::floor(z))) * kEdge + wrap(static_cast<std::int64_t>(std::floor(y)));
      if (!rows[static_cast<std::size_t>(row)]) continue;
      for (std::size_t k = 0; k < nodes.size(); ++k) {
        double w = p.q[i];
        for (int d = 0; d < 3 && w != 0.0; ++d) w *= reference::weight(kernel, periodic_distance(p.x[d][i], nodes[k][d]));
        mine[k].value += w;
        mine[k].magnitude += std::fabs(w);
      }
    }
  });
  std::vector<NodeSum> sums(nodes.size());
  for (const auto& mine : partial)
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      sums[k].value += mine[k].value;
      sums[k].magnitude += mine[k].magnitude;
    }
  return sums;
}

// Storage offset of node m on the periodic 2048^3 grid (x fastest): up to 2^33 - 1.
inline std::int64_t offset_of(const std::array<std::int64_t, 3>& m) { return (m[2] * kEdge + m[1]) * kEdge + m[0]; }

// The sample nodes: the corners of the box (the last node at offset 2^33 - 1), nodes on
// the seams, and `random` more.
inline std::vector<std::array<std::int64_t, 3>> sample_nodes(int random, std::uint64_t seed) {
  std::vector<std::array<std::int64_t, 3>> nodes;
  for (std::int64_t a : {std::int64_t(0), kEdge - 1})
    for (std::int64_t b : {std::int64_t(0), kEdge - 1})
      for (std::int64_t c : {std::int64_t(0), kEdge - 2, kEdge - 1}) nodes.push_back({a, b, c});
  nodes.push_back({kEdge / 2, kEdge - 1, 0});
  nodes.push_back({0, kEdge / 2, kEdge - 1});
  for (int k = 0; k < random; ++k) {
    std::array<std::int64_t, 3> m;
    for (int d = 0; d < 3; ++d) m[d] = static_cast<std::int64_t>(uniform(~seed, d, static_cast<std::uint64_t>(k)) * kEdge);
    nodes.push_back(m);
  }
  return nodes;
}

}  // namespace pmkit::test::large
