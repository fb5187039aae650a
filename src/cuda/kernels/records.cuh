#pragma once
// The binned particle as every kernel reads it: the packed record, the geometry of tiles
// and cells, chunks, the caller's arrays of a launch, and the binning of one position.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cell_code.hpp"
#include "pmkit/detail/layout.hpp"
#include "core/split.hpp"
#include "pmkit/detail/stencil.hpp"
#include "cuda/tuning/tuning.hpp"

namespace pmkit::cuda {

// One binned particle, in tile order: local coordinates and the linear index of its
// home node (floor(u + shift), wrapped) over the key extents. 16 bytes in float.
template <class T>
struct alignas(4 * sizeof(T)) Packed {
  T s[3];
  std::uint32_t cell;
};

// A record's local coordinate s[d] lies in [0, 1); on wide grids its sign bit is one of
// the home node's high bits (detail::CellCode), so kernels read |s|: an operand modifier
// of the first floating-point instruction that takes it.
template <class T>
__host__ __device__ __forceinline__ T local_coordinate(const Packed<T>& p, int d) {
#if defined(__CUDA_ARCH__)
  return fabs(p.s[d]);
#else
  return std::fabs(p.s[d]);
#endif
}
template <class T>
__host__ __device__ __forceinline__ bool sign_bit(T v) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) return (__float_as_uint(v) >> 31) != 0u;
  else return __double2hiint(v) < 0;
#else
  return std::signbit(v);
#endif
}

// Stores a record as whole 16-byte vectors: one in float, two in double, where a plain
// struct copy of Packed<double> compiles to three stores (16 + 8 + 4 bytes). A scattered
// store costs one L2 request per lane and instruction, so three stores a double record
// would cost update_points 3x float's write requests.
template <class T>
__device__ __forceinline__ void store_record(Packed<T>* to, const Packed<T>& p) {
  static_assert(sizeof(Packed<T>) == 4 * sizeof(T), "a record is four values wide");
  uint4* dst = reinterpret_cast<uint4*>(to);
  if constexpr (sizeof(T) == 4) {
    dst[0] = make_uint4(__float_as_uint(p.s[0]), __float_as_uint(p.s[1]), __float_as_uint(p.s[2]), p.cell);
  } else {
    dst[0] = make_uint4(__double2loint(p.s[0]), __double2hiint(p.s[0]), __double2loint(p.s[1]),
                        __double2hiint(p.s[1]));
    dst[1] = make_uint4(__double2loint(p.s[2]), __double2hiint(p.s[2]), p.cell, 0u);
  }
}

// Geometry of binning: key extents per dimension (nodes a home node can be) and the
// cell encoding (detail::CellCode), tiles.
template <int D>
struct BinGeometry : detail::CellCode<D> {
  using Code = detail::CellCode<D>;
  using Code::decode;
  static constexpr int kEdge = tuning::tile_edge(D);  // cells per tile edge
  static_assert((kEdge & (kEdge - 1)) == 0, "tile edges are powers of two");
  int tiles[D];  // ceil(keys / kEdge)
  int support;
  std::uint32_t num_tiles;
  double peak_weight;  // largest weight one node gets from one particle (kernel peak ^ D)
  // A record's cell is its home node's number (CellCode): bit fields decode by shifts,
  // the mixed radix by two run-time divisions, ~20 instructions each with an XU
  // reciprocal, in every kernel that reads a record; a wide grid's number by two
  // 64-bit multiply-highs and their corrections.

  // Sets the encoding from keys; false where the grid has too many home nodes to number.
  __host__ bool choose_cell_encoding() { return Code::choose(); }

  // The home node of a record: its cell word, and on wide grids the high bits in the
  // sign bits of its local coordinates.
  template <class T>
  __host__ __device__ void decode(const Packed<T>& p, int (&home)[D]) const {
    if (this->wide)
      this->decode_wide(p.cell, high_bits(p), home);
    else
      decode(p.cell, home);
  }
  template <class T>
  __host__ __device__ static std::uint32_t high_bits(const Packed<T>& p) {
    std::uint32_t high = 0;
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) high |= static_cast<std::uint32_t>(sign_bit(p.s[d])) << d;
    return high;
  }
  // Sets the record's cell word (and, on wide grids, the high bits) for the home node
  // whose 32-bit number is `cell` (grids not wide) or whose 64-bit number is `number`
  // (wide grids); the record's local coordinates are set before.
  template <class T>
  __host__ __device__ void set_cell(std::uint32_t cell, std::uint64_t number, Packed<T>& p) const {
    if (!this->wide) {
      p.cell = cell;
      return;
    }
    std::uint32_t high;
    Code::split(number, p.cell, high);
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      const T s = local_coordinate(p, d);
      p.s[d] = (high >> d) & 1u ? -s : s;
    }
  }

  // The place of the home node of a record (or of a cell word, on grids not wide) in its
  // tile's window of `width` nodes an edge (x fastest), the tile's first node at 0:
  // TileWindow::origin, and the interleave's bank.
  template <class Record>
  __host__ __device__ int window_offset(const Record& cell, int width) const {
    int home[D];
    decode(cell, home);
    int offset = 0;
    PMKIT_UNROLL
    for (int d = D - 1; d >= 0; --d) offset = offset * width + (home[d] & (kEdge - 1));  // home - tile * kEdge
    return offset;
  }
  __host__ __device__ void tile_coords(std::uint32_t tile, int (&t)[D]) const {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) {
      t[d] = static_cast<int>(tile % tiles[d]);
      tile /= tiles[d];
    }
  }
};

// A block's share of one tile: at most tuning::kChunkParticles particles.
// Where a launch covers more chunks than a binning has (a grid sized on the host for the
// most chunks there can be, so that nothing waits for the count), the entries past the
// count are empty chunks: count 0, and a block that takes one returns at once.
struct Chunk {
  std::uint32_t tile, begin, count;
};

// The counts of one binning that the device decides (a row of the plan's status block,
// cuda/plan/status.cuh); the launches that read them are sized on the host by bounds.
enum BinCount : int { kChunkCount, kHeavyCount, kSpanCount, kPieceCount, kAwayCount, kBinCounts };

// How many items a kernel over particles takes: `bound`, known on the host, or, with
// `counter` (a number decided on the device, such as update_points' away list), the
// smaller of the two. The kernels walk the items in grid-stride loops, so the grid is
// sized for speed, not for the count, and no launch waits for a count to come back.
struct ItemCount {
  std::size_t bound = 0;
  const std::uint32_t* counter = nullptr;
  __device__ std::size_t value() const {
    return counter ? min(bound, static_cast<std::size_t>(*counter)) : bound;
  }
};

template <class T, int D>
struct PositionArrays {
  const T* data[D];
  std::ptrdiff_t stride[D];
  __device__ void load(std::size_t i, T (&x)[D]) const {
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) x[d] = data[d][static_cast<std::ptrdiff_t>(i) * stride[d]];
  }
};

// A block's kPerThread particles' positions (items local(k) of Block, below n), loaded
// all at once before any is binned: loaded item by item, each thread would wait on one
// particle's loads at a time, and the passes that read positions would run well below
// the memory's bandwidth.
template <class Block, class T, int D>
__device__ __forceinline__ void load_block_positions(const PositionArrays<T, D>& pos, std::size_t base,
                                                     std::size_t n, T (&x)[Block::kPerThread][D]) {
#pragma unroll
  for (int k = 0; k < Block::kPerThread; ++k) {
    const std::size_t i = base + Block::local(k);
    if (i < n) pos.load(i, x[k]);
  }
}

// The tiles a tile kernel's blocks take (a distributed plan's split, core/split.hpp): all,
// or those whose tile coordinates lie in [lo, hi) on every axis (Part::Interior: their
// stencils stay inside the split's box), or the others (Part::Boundary).
struct TileParts {
  detail::Part part = detail::Part::All;
  int lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};

  template <int D>
  __device__ __forceinline__ bool takes(const BinGeometry<D>& geo, std::uint32_t tile) const {
    if (part == detail::Part::All) return true;
    int t[D];
    geo.tile_coords(tile, t);
    bool inside = true;
    PMKIT_UNROLL
    for (int d = 0; d < D; ++d) inside = inside && t[d] >= lo[d] && t[d] < hi[d];
    return detail::in_part(part, inside);
  }
};

// Up to kPropsPerPass particle arrays and meshes handled by one launch.
template <class T>
struct PropPass {
  const T* props[tuning::kPropsPerPass];
  std::ptrdiff_t prop_stride[tuning::kPropsPerPass];
  T* meshes[tuning::kPropsPerPass];                        // spread targets / interp sources (read only)
  T* values[tuning::kPropsPerPass];                        // interp outputs, caller's order
  std::ptrdiff_t value_stride[tuning::kPropsPerPass];
  unsigned long long* exact[tuning::kPropsPerPass];        // deterministic: integer meshes
  const unsigned long long* max_abs_bits;                  // deterministic: max |q| per prop
  int count;
  bool quad_flush;  // float meshes take float4 atomics along x (TileWindow::kQuads, flush_quads)
  // Fast float tile spread with heavy tiles (tuning::kHeavyTileChunks; null where none):
  // each tile's double window in heavy_windows, or kLightTile.
  const std::uint32_t* heavy_slot;
  double* heavy_windows;  // [heavy tile][tuning::kPropsPerPass][window nodes]
  TileParts parts;        // the tiles the tile kernels take (all but under a split)
};

// A tile whose blocks flush to the mesh (PropPass::heavy_slot).
constexpr std::uint32_t kLightTile = 0xffffffffu;

// ---------------------------------------------------------------------------------
// Binning

// A binned slot whose particle has left its tile since the last full binning
// (update_points): the binned kernels skip it, the away list holds its new record.
// Cell words are < 2^32 - 1 on every grid (detail::CellCode), so the value is free.
constexpr std::uint32_t kAwayCell = 0xffffffffu;

// A particle's packed record (local coordinates, home node) and tile, from its position
// x; false where the position is not valid (non-finite, or outside a bounded axis).
// kMayBeWide false: a caller that never runs on a wide grid (the partition, which
// set_points takes only on grids far below 2^32 cells), spared the 64-bit number's
// registers.
template <class T, int D, bool kMayBeWide = true>
__device__ __forceinline__ bool bin_position(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                             const T (&x)[D], Packed<T>& p, std::uint32_t& tile) {
  std::uint32_t cell = 0;
  std::uint64_t number = 0;  // wide grids only
  tile = 0;
  PMKIT_UNROLL
  for (int d = D - 1; d >= 0; --d) {
    double u;
    if (!layout.axis[d].coordinate(static_cast<double>(x[d]), u)) return false;
    int base;
    double s;
    kernels::locate(geo.support, u, base, s);
    int home = base + (geo.support - 1) / 2;
    if (home >= geo.keys[d]) home -= geo.keys[d];  // periodic: u + 1/2 rounded onto the seam
    if (kMayBeWide && geo.wide)
      number = geo.encode_axis_wide(number, d, home);
    else
      cell = geo.encode_axis(cell, d, home);
    tile = tile * geo.tiles[d] + home / BinGeometry<D>::kEdge;  // a power of two: a shift
    p.s[d] = static_cast<T>(s);
  }
  if constexpr (kMayBeWide)
    geo.set_cell(cell, number, p);
  else
    p.cell = cell;
  return true;
}

// bin_position of particle i.
template <class T, int D, bool kMayBeWide = true>
__device__ __forceinline__ bool bin_particle(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                             const PositionArrays<T, D>& pos, std::size_t i, Packed<T>& p,
                                             std::uint32_t& tile) {
  T x[D];
  pos.load(i, x);
  return bin_position<T, D, kMayBeWide>(layout, geo, x, p, tile);
}

// bin_particle, or, for an invalid position, the particle's index offered to first_bad
// (the smallest wins, so the error names the first bad particle in the caller's order).
template <class T, int D, bool kMayBeWide = true>
__device__ __forceinline__ bool bin_or_reject(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                              const T (&x)[D], std::size_t i, Packed<T>& p, std::uint32_t& tile,
                                              unsigned long long* first_bad) {
  if (bin_position<T, D, kMayBeWide>(layout, geo, x, p, tile)) return true;
  atomicMin(first_bad, static_cast<unsigned long long>(i));
  return false;
}
template <class T, int D>
__device__ __forceinline__ bool bin_or_reject(const detail::Layout<D>& layout, const BinGeometry<D>& geo,
                                              const PositionArrays<T, D>& pos, std::size_t i, Packed<T>& p,
                                              std::uint32_t& tile, unsigned long long* first_bad) {
  T x[D];
  pos.load(i, x);
  return bin_or_reject(layout, geo, x, i, p, tile, first_bad);
}

// The shared-memory bank (window offset mod 32) of each binned particle's home node,
// a byte a particle, stored by place_kernel beside the record for the interleave
// (tiles.cuh), which otherwise reads each 16-byte record's sector for its 4-byte cell
// (docs/tuning.md#interleave_threads). out null: not stored.
template <int D>
struct WindowBanks {
  std::uint8_t* out;
  BinGeometry<D> geo;
  int width;  // the window's nodes an edge (TileWindow::kWidth)
  template <class T>
  __device__ __forceinline__ std::uint8_t of(const Packed<T>& record) const {
    return static_cast<std::uint8_t>(geo.window_offset(record, width) % 32);
  }
};

}  // namespace pmkit::cuda
