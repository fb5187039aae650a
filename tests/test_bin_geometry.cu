// The CUDA backend's cell encoding (BinGeometry, src/cuda/binning.cuh), tested on the
// host: both forms must give back every home node they encode, stay below the away
// marker, and be chosen as documented. The bit-field form runs end to end in every CUDA
// test; the mixed-radix fallback needs grids of 2^29 nodes and more, so its arithmetic is
// checked here, where no GPU is needed.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

#include "cuda/binning.cuh"

namespace {

template <int D>
pmkit::cuda::BinGeometry<D> geometry(const std::array<int, D>& keys) {
  pmkit::cuda::BinGeometry<D> g{};
  for (int d = 0; d < D; ++d) g.keys[d] = keys[d];
  g.choose_cell_encoding();
  return g;
}

template <int D>
void expect_round_trips(const pmkit::cuda::BinGeometry<D>& g, std::mt19937_64& rng) {
  for (int trial = 0; trial < 20000; ++trial) {
    int home[D], back[D];
    for (int d = 0; d < D; ++d) {
      // Corners as well as the interior.
      const int pick = static_cast<int>(rng() % 4);
      home[d] = pick == 0 ? 0 : pick == 1 ? g.keys[d] - 1 : static_cast<int>(rng() % g.keys[d]);
    }
    const std::uint32_t cell = g.encode(home);
    ASSERT_NE(cell, pmkit::cuda::kAwayCell);
    g.decode(cell, back);
    for (int d = 0; d < D; ++d) ASSERT_EQ(back[d], home[d]) << "axis " << d << ", cell " << cell;
  }
}

TEST(BinGeometry, BitFieldsWhereTheyFitMixedRadixElse) {
  EXPECT_TRUE(geometry<3>({256, 256, 256}).bit_fields());
  EXPECT_TRUE(geometry<3>({1024, 1024, 1024}).bit_fields());  // periodic 1024^3: 30 bits
  EXPECT_FALSE(geometry<3>({1025, 1025, 1025}).bit_fields());  // bounded 1024^3: 33 bits
  EXPECT_TRUE(geometry<3>({1025, 1025, 512}).bit_fields());    // 11 + 11 + 9 = 31 bits
  EXPECT_FALSE(geometry<3>({1025, 1025, 513}).bit_fields());   // 32 bits
  EXPECT_TRUE(geometry<2>({32768, 65536}).bit_fields());       // 31 bits
  EXPECT_FALSE(geometry<2>({32769, 65536}).bit_fields());
}

TEST(BinGeometry, EveryHomeNodeComesBack) {
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& keys : {std::array<int, 3>{256, 256, 256}, std::array<int, 3>{257, 120, 33},
                           std::array<int, 3>{1, 7, 1000}, std::array<int, 3>{1025, 1025, 1025},
                           std::array<int, 3>{1200, 1100, 3000}, std::array<int, 3>{1025, 1025, 513}}) {
    const auto g = geometry<3>(keys);
    SCOPED_TRACE(testing::Message() << keys[0] << " x " << keys[1] << " x " << keys[2]
                                    << (g.bit_fields() ? " (bit fields)" : " (mixed radix)"));
    expect_round_trips(g, rng);
  }
  for (const auto& keys : {std::array<int, 2>{2048, 2048}, std::array<int, 2>{3, 65537},
                           std::array<int, 2>{40000, 40000}, std::array<int, 2>{32768, 65536}}) {
    const auto g = geometry<2>(keys);
    SCOPED_TRACE(testing::Message() << keys[0] << " x " << keys[1]
                                    << (g.bit_fields() ? " (bit fields)" : " (mixed radix)"));
    expect_round_trips(g, rng);
  }
}

}  // namespace
