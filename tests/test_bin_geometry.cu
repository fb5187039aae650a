// The CUDA backend's cell encoding (BinGeometry, src/cuda/kernels/records.cuh), tested on the
// host: both forms must give back every home node they encode, stay below the away
// marker, and be chosen as documented. The bit-field form runs end to end in every CUDA
// test; the mixed-radix fallback needs grids of 2^29 nodes and more, so its arithmetic is
// checked here, where no GPU is needed. Also on the host: the fixed-point scales
// (src/cuda/kernels/fixed_point.cuh) are powers of two, for which the kernels' multiplication by
// 1 / scale gives the bits of a division, at every magnitude a double holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/kernels/records.cuh"
#include "cuda/kernels/fixed_point.cuh"

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

// The place of a home node in its tile's window (TileWindow::origin, and the bank that
// place_kernel stores for the interleave): its offset from the tile's first node, rows of
// `width` nodes, for either cell encoding.
template <int D>
void expect_window_offsets(const pmkit::cuda::BinGeometry<D>& g, int width, std::mt19937_64& rng) {
  constexpr int kEdge = pmkit::cuda::BinGeometry<D>::kEdge;
  for (int trial = 0; trial < 20000; ++trial) {
    int home[D];
    for (int d = 0; d < D; ++d) home[d] = static_cast<int>(rng() % g.keys[d]);
    std::int64_t want = 0;
    for (int d = D - 1; d >= 0; --d) want = want * width + (home[d] - (home[d] / kEdge) * kEdge);
    ASSERT_EQ(g.window_offset(g.encode(home), width), want) << "cell " << g.encode(home);
  }
}

TEST(BinGeometry, WindowOffsetIsTheHomeNodesPlaceInItsTile) {
  std::mt19937_64 rng(std::random_device{}());
  for (int width : {9, 11, 15}) {
    for (const auto& keys : {std::array<int, 3>{256, 256, 256}, std::array<int, 3>{257, 120, 33},
                             std::array<int, 3>{3, 5, 7}, std::array<int, 3>{1025, 1025, 1025}})
      expect_window_offsets<3>(geometry<3>(keys), width, rng);
    for (const auto& keys : {std::array<int, 2>{2048, 2048}, std::array<int, 2>{4097, 31}, std::array<int, 2>{40000, 40000}})
      expect_window_offsets<2>(geometry<2>(keys), width + 24, rng);
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

// Wide grids (2^32 - 1 home nodes and more, periodic 2048^3 on): a record keeps its
// number's high bits in the sign bits of its local coordinates, and gives back the home
// node, the window offset and the coordinates (0 included) as they were.
template <class T>
void expect_wide_records(const pmkit::cuda::BinGeometry<3>& g, std::mt19937_64& rng) {
  using pmkit::cuda::Packed;
  constexpr int kEdge = pmkit::cuda::BinGeometry<3>::kEdge;
  const int width = 11;
  for (int trial = 0; trial < 20000; ++trial) {
    int home[3], back[3];
    Packed<T> p{};
    for (int d = 0; d < 3; ++d) {
      home[d] = trial % 3 == 0 ? std::max(0, g.keys[d] - 1 - static_cast<int>(rng() % 2))
                               : static_cast<int>(rng() % g.keys[d]);
      p.s[d] = trial % 5 == 0 ? T(0) : static_cast<T>(static_cast<double>(rng() >> 11) * 0x1p-53);
    }
    const Packed<T> before = p;
    g.set_cell(0u, g.encode_wide(home), p);
    ASSERT_NE(p.cell, pmkit::cuda::kAwayCell);
    g.decode(p, back);
    std::int64_t want = 0;
    for (int d = 2; d >= 0; --d) want = want * width + home[d] % kEdge;
    for (int d = 0; d < 3; ++d) {
      ASSERT_EQ(back[d], home[d]) << "axis " << d;
      ASSERT_EQ(pmkit::cuda::local_coordinate(p, d), before.s[d]) << "axis " << d;
    }
    ASSERT_EQ(g.window_offset(p, width), want);
  }
}

TEST(BinGeometry, WideRecordsKeepTheirHomeNodeAndCoordinates) {
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& keys : {std::array<int, 3>{2048, 2048, 2048}, std::array<int, 3>{2049, 2049, 2049},
                           std::array<int, 3>{1, 65536, 65536}, std::array<int, 3>{3250, 3250, 3250}}) {
    const auto g = geometry<3>(keys);
    SCOPED_TRACE(testing::Message() << keys[0] << " x " << keys[1] << " x " << keys[2]);
    ASSERT_TRUE(g.wide);
    expect_wide_records<float>(g, rng);
    expect_wide_records<double>(g, rng);
  }
}

// v / scale and v * (1 / scale) as bits: the same for a power of two, where 1 / scale is
// exact (subnormal included) and both round the same exact quotient once.
void expect_multiply_divides(double scale, std::mt19937_64& rng) {
  const double unscale = 1.0 / scale;
  for (int trial = 0; trial < 2000; ++trial) {
    const int bits = 1 + static_cast<int>(rng() % 62);  // |v| < 2^62: every 64-bit node sum
    long long v = static_cast<long long>(rng() & ((std::uint64_t(1) << bits) - 1));
    if (rng() & 1) v = -v;
    const double quotient = static_cast<double>(v) / scale, product = static_cast<double>(v) * unscale;
    ASSERT_EQ(std::memcmp(&quotient, &product, sizeof(double)), 0)
        << "v = " << v << ", scale = " << scale << ": " << quotient << " against " << product;
  }
}

// The fast mode's one-word scale: a block's bound on a node's sum, times the scale, with
// the roundings' and products' room, stays inside 32 bits, and takes nearly all of them.
TEST(FixedPointScale, OneWordScaleFillsButKeepsThirtyTwoBits) {
  using pmkit::cuda::one_word_scale;
  std::mt19937_64 rng(std::random_device{}());
  EXPECT_EQ(one_word_scale(0.0), 1.0);
  EXPECT_TRUE(std::isnan(one_word_scale(std::numeric_limits<double>::infinity())));
  EXPECT_TRUE(std::isnan(one_word_scale(std::nan(""))));
  // Float blocks' bounds: from a subnormal float's to 1024 x FLT_MAX.
  for (int e = -149; e <= 138; ++e) {
    const double bound = std::ldexp(1.0 + static_cast<double>(rng() % 1000) / 1000.0, e);
    const double scale = one_word_scale(bound);
    SCOPED_TRACE(testing::Message() << "bound " << bound << ", scale " << scale);
    ASSERT_TRUE(std::isfinite(scale));
    EXPECT_LT(bound * scale * (1 + 0x1p-20) + 512, 0x1p31);
    EXPECT_GT(bound * scale, 0x1p31 * (1 - 0x1p-18));
  }
}

TEST(FixedPointScale, PowersOfTwoWhoseReciprocalMultipliesExactly) {
  using pmkit::cuda::deterministic_scale;
  using pmkit::cuda::pow2_scale;
  std::mt19937_64 rng(std::random_device{}());
  EXPECT_EQ(pow2_scale(0.0, 30), 1.0);
  EXPECT_TRUE(std::isnan(pow2_scale(std::numeric_limits<double>::infinity(), 30)));
  EXPECT_TRUE(std::isnan(pow2_scale(std::nan(""), 30)));
  // Bounds from the smallest subnormal to the largest double, as the block sums and max
  // |q| of float and double properties can be. Each exponent twice: an exact power of two
  // (frexp's edge, where the scaled bound is exactly half the target) and a random
  // mantissa above it.
  std::vector<double> bounds;
  for (int e = -1074; e <= 1023; e += 1 + static_cast<int>(rng() % 7)) {
    bounds.push_back(std::ldexp(1.0, e));
    bounds.push_back(std::ldexp(1.0 + 0.999 * static_cast<double>(rng() % 1000) / 1000.0, e));
  }
  for (double bound : bounds) {
    if (!std::isfinite(bound)) continue;
    for (double scale : {pow2_scale(bound, 30), pow2_scale(bound, 62), deterministic_scale<2>(bound, 1 << 24),
                         deterministic_scale<3>(bound, 3)}) {
      SCOPED_TRACE(testing::Message() << "bound " << bound << ", scale " << scale);
      ASSERT_TRUE(std::isfinite(scale));  // an infinite scale turned tiny values into zeros
      int exponent = 0;
      ASSERT_EQ(std::frexp(scale, &exponent), 0.5) << "not a power of two";
      expect_multiply_divides(scale, rng);
    }
    // The scale's promise: bound * scale stays within 2^target_bits, and reaches at least
    // half of it unless the scale is at its cap (bounds below ~1e-290).
    for (int target : {30, 41, 62}) {
      const double scale = pow2_scale(bound, target), scaled = bound * scale;
      EXPECT_LE(scaled, std::ldexp(1.0, target)) << "target " << target;
      if (scale < std::ldexp(1.0, 1023)) EXPECT_GE(scaled, std::ldexp(1.0, target - 1)) << "target " << target;
    }
  }
}

// AbsSum (the fast mode's block bound): double values summed in units of 2^kShift give
// the scale of the unscaled sum wherever that sum is finite, and a finite scale that
// keeps 1024 (or 5120) values of DBL_MAX within the target where the unscaled sum is inf.
TEST(FixedPointScale, AbsSumKeepsTheScaleOfTheUnscaledSum) {
  using Chunk = pmkit::cuda::AbsSum<double, 1024>;
  using Span = pmkit::cuda::AbsSum<double, 5120>;
  static_assert(Chunk::kShift == 11 && Span::kShift == 13, "2^kShift holds the block's values");
  static_assert(pmkit::cuda::AbsSum<float, 1024>::kShift == 0, "float sums are not shifted");
  std::mt19937_64 rng(std::random_device{}());
  const double peak = 0.296;  // M'4 in 3D: (2/3)^3
  for (int e = -1000; e <= 1023; e += 1 + static_cast<int>(rng() % 13)) {
    double unscaled = 0, scaled = 0;
    for (int k = 0; k < 1024; ++k) {
      const double q = std::ldexp(0.5 + 0.5 * static_cast<double>(rng() % 4096) / 4096.0, e) * ((k & 1) ? -1 : 1);
      unscaled += std::fabs(q);
      scaled += Chunk::term(q);
    }
    SCOPED_TRACE(testing::Message() << "values near 2^" << e);
    for (int target : {30, 62}) {
      const double scale = Chunk::scale(scaled, peak, target);
      ASSERT_TRUE(std::isfinite(scale) && scale > 0);
      if (std::isfinite(unscaled)) {
        EXPECT_EQ(scale, pmkit::cuda::pow2_scale(unscaled * peak, target));
      } else {  // the old bound: NaN, and a NaN block
        EXPECT_TRUE(std::isnan(pmkit::cuda::pow2_scale(unscaled * peak, target)));
        // The true bound, 2^kShift * scaled, times the scale stays within the target.
        EXPECT_LE(std::ldexp(scaled * peak * scale, Chunk::kShift), std::ldexp(1.0, target));
      }
    }
  }
  double top = 0;
  for (int k = 0; k < 5120; ++k) top += Span::term(std::numeric_limits<double>::max());
  EXPECT_TRUE(std::isfinite(top));
  EXPECT_LE(std::ldexp(top * peak * Span::scale(top, peak, 62), Span::kShift), std::ldexp(1.0, 62));
}

}  // namespace
