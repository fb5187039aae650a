// The number by which the CUDA backend's binned records name a home node
// (src/core/cell_code.hpp), tested on the host at the sizes where 32 bits stop holding
// it: 2048^3 periodic (2^33 home nodes), bounded 2048^3, 3250^3, 2D 65536^2 and
// 131072^2. Every home node must come back from its number, no cell word may take the
// away marker, and grids beyond the record's 32 + D bits must be refused.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

#include "core/cell_code.hpp"

namespace {

using pmkit::detail::CellCode;

template <int D>
CellCode<D> code_for(const std::array<int, D>& keys, bool* fits = nullptr) {
  CellCode<D> c{};
  for (int d = 0; d < D; ++d) c.keys[d] = keys[d];
  const bool ok = c.choose();
  if (fits) *fits = ok;
  return c;
}

// A home node, its corners and the last nodes as often as the interior.
template <int D>
void random_home(const CellCode<D>& c, std::mt19937_64& rng, int (&home)[D]) {
  for (int d = 0; d < D; ++d) {
    const int pick = static_cast<int>(rng() % 4);
    home[d] = pick == 0 ? 0 : pick == 1 ? c.keys[d] - 1 : static_cast<int>(rng() % c.keys[d]);
  }
}

// The record's view: the cell word (and the high bits on wide grids) back to the node.
template <int D>
void expect_round_trip(const CellCode<D>& c, const int (&home)[D]) {
  std::uint32_t cell, high = 0;
  if (c.wide) {
    const std::uint64_t number = c.encode_wide(home);
    CellCode<D>::split(number, cell, high);
    ASSERT_LT(high, 1u << D) << "number " << number;
    ASSERT_EQ(CellCode<D>::join(cell, high), number);
  } else {
    cell = c.encode(home);
  }
  ASSERT_NE(cell, 0xffffffffu) << "the away marker";
  int back[D];
  c.decode(cell, high, back);
  for (int d = 0; d < D; ++d) ASSERT_EQ(back[d], home[d]) << "axis " << d << ", cell " << cell << ", high " << high;
}

template <int D>
void expect_round_trips(const CellCode<D>& c, std::mt19937_64& rng) {
  for (int trial = 0; trial < 20000; ++trial) {
    int home[D];
    random_home(c, rng, home);
    expect_round_trip(c, home);
  }
  int last[D];
  for (int d = 0; d < D; ++d) last[d] = c.keys[d] - 1;
  expect_round_trip(c, last);
}

TEST(CellCode, WideFromTwoToTheThirtyTwoHomeNodes) {
  EXPECT_FALSE(code_for<3>({1024, 1024, 1024}).wide);  // bit fields, 30 bits
  EXPECT_FALSE(code_for<3>({1625, 1625, 1625}).wide);  // mixed radix below 2^32 - 1
  EXPECT_TRUE(code_for<3>({1626, 1626, 1626}).wide);
  EXPECT_TRUE(code_for<3>({2048, 2048, 2048}).wide);  // periodic 2048^3: 2^33
  EXPECT_FALSE(code_for<2>({65535, 65537}).wide);      // 2^32 - 1 nodes: numbers up to 2^32 - 2
  EXPECT_TRUE(code_for<2>({65536, 65536}).wide);
}

TEST(CellCode, RefusesGridsBeyondThirtyTwoPlusDBits) {
  bool fits = false;
  code_for<3>({3250, 3250, 3250}, &fits);
  EXPECT_TRUE(fits);
  code_for<3>({4096, 4096, 4096}, &fits);  // 2^36 home nodes
  EXPECT_FALSE(fits);
  code_for<3>({2147483647, 2147483647, 2147483647}, &fits);  // the product overflows 64 bits
  EXPECT_FALSE(fits);
  code_for<2>({131072, 131072}, &fits);  // 2^34 > 4 (2^32 - 1)
  EXPECT_FALSE(fits);
  code_for<2>({131071, 131071}, &fits);
  EXPECT_TRUE(fits);
}

TEST(CellCode, EveryHomeNodeOfAWideGridComesBack) {
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& keys : {std::array<int, 3>{2048, 2048, 2048}, std::array<int, 3>{2049, 2049, 2049},
                           std::array<int, 3>{3250, 3250, 3250}, std::array<int, 3>{1, 65536, 65536},
                           std::array<int, 3>{3, 2048, 2000000}, std::array<int, 3>{1626, 1626, 1626},
                           std::array<int, 3>{256, 256, 256}, std::array<int, 3>{1025, 1025, 1025}}) {
    const auto c = code_for<3>(keys);
    SCOPED_TRACE(testing::Message() << keys[0] << " x " << keys[1] << " x " << keys[2]
                                    << (c.wide ? " (wide)" : c.bit_fields() ? " (bit fields)" : " (mixed radix)"));
    expect_round_trips(c, rng);
  }
  for (const auto& keys : {std::array<int, 2>{65536, 65536}, std::array<int, 2>{131071, 131071},
                           std::array<int, 2>{7, 2000000000}, std::array<int, 2>{40000, 40000}}) {
    const auto c = code_for<2>(keys);
    SCOPED_TRACE(testing::Message() << keys[0] << " x " << keys[1] << (c.wide ? " (wide)" : ""));
    expect_round_trips(c, rng);
  }
}

// The division by keys[d] that wide grids decode with, at every number a grid can hold.
TEST(CellCode, MultiplyHighDividesEveryNumber) {
  std::mt19937_64 rng(std::random_device{}());
  CellCode<3> c{};
  for (int k : {1, 2, 3, 7, 2047, 2048, 2049, 3250, 65535, 65536, 1 << 20, 2147483647}) {
    c.keys[0] = k;
    c.keys[1] = c.keys[2] = 1;
    c.choose();
    for (int trial = 0; trial < 20000; ++trial) {
      std::uint64_t v = rng() % CellCode<3>::kMaxNodes;
      if (trial < 64) v = CellCode<3>::kMaxNodes - 1 - static_cast<std::uint64_t>(trial);
      if (trial >= 64 && trial < 128) v = static_cast<std::uint64_t>(k) * (rng() % (CellCode<3>::kMaxNodes / k)) - (trial & 1);
      if (v >= CellCode<3>::kMaxNodes) continue;
      ASSERT_EQ(c.divide(v, 0), v / static_cast<std::uint64_t>(k)) << v << " / " << k;
    }
  }
}

}  // namespace
