#pragma once
// Tuning constants of the CUDA backend, as plain data. Each value says where it came
// from; change them only with a benchmark run (bench/device.sh) that shows why.
#include <cstddef>

namespace pmkit::cuda::tuning {

// Cells per tile edge. A block accumulates one tile plus the kernel's halo in shared
// memory: 8^3 cells in 3D gives an 11^3 accumulator for M'4 (5.3 KB per property and
// word), the configuration measured in shared/BENCHMARKS.md; 32^2 in 2D is the same
// ~1,000-cell tile.
constexpr int kTileEdge3D = 8;
constexpr int kTileEdge2D = 32;
constexpr int tile_edge(int dims) { return dims == 3 ? kTileEdge3D : kTileEdge2D; }

// The one-pass scatter of set_points (binned input, small inputs) splits each tile's
// counter into sub-buckets by warp (binning.cuh, Buckets), so that where tiles are few
// and full the counter atomics do not queue on one address (64 per cell: 3.80 -> 1.80
// ms, bench/NOTES.md 11), while tiles x sub-buckets stays within this many open write
// fronts (2^16 lines: 8 MB of the 50 MB L2; NOTES 17 later showed that the fronts' count
// matters little, 0.58 ms at 512 against 0.76 at 2^16). Up to 32 sub-buckets a tile.
constexpr unsigned kMaxWriteFronts = 1u << 16;
constexpr int kMaxSubBucketBits = 5;

// set_points' scatter by partition (binning.cuh, "Partition"): unsorted input in passes
// that sort each block locally and store runs with consecutive lanes, because a
// scattered store costs one L2 request per lane (bench/NOTES.md 17: the one-pass scatter,
// 1.34 ms at 2^24 / 256^3, is its store pattern; 80850e8's partition, ranked with shared
// atomics and stored lane by lane, was as slow: 13). The one-pass scatter stays for
// input already in binned order (its stores are then consecutive: 0.88 ms), which a
// probe of neighbour pairs detects, and for small inputs (kPartitionMinParticles, below
// the partition's own constants). Measured (NOTES 18):
// 2^24 / 256^3 2.02 -> 1.67 ms, 64 per cell 1.79 -> 1.09, double 3.51 -> 2.17.
constexpr int kPartitionThreads = 512;
// Below this many particles set_points takes the one-pass scatter for every input (and
// skips the probe). There the partition's passes are latency-bound (64 blocks at 2^18,
// fewer than the SMs) and its ~15 launches cost more than the scattered stores, which
// then stay in L2. Measured (bench/NOTES.md 32), set_points in ms, partition -> one-pass:
// 2D 2^16 0.170-0.184 -> 0.074-0.082, 2D 2^18 0.158-0.165 -> 0.084, 3D 2^18 (256^3)
// 0.228 -> 0.148-0.161; at 2^20 mixed (sparse 0.27 -> 0.24, 64 a cell the same,
// clustered 0.20 -> 0.27), so the switch sits between. The binned order is then that of
// the classify's atomics, not the caller's.
constexpr std::size_t kPartitionMinParticles = std::size_t(1) << 19;

// Items a thread holds: float records stage 4096 a block in 64 KB of shared memory,
// double (32-byte records) 2048 in the same 64 KB.
constexpr int partition_items_per_thread(std::size_t value_bytes) { return value_bytes == 4 ? 8 : 4; }
// Groups of pass 1: as few tiles a group (a power of two) as keep the groups within
// this many, so that a block of 4096 particles has ~8 a group (one 128-byte line of
// float records a run); at most 2^kMaxGroupBits tiles a group (pass 2's sort key), so
// past 512 x 512 tiles (a 645^3 mesh) set_points keeps the one-pass scatter. Shared
// counters and run tables hold kMaxPartitionKeys entries.
constexpr unsigned kPartitionGroups = 512;
constexpr int kMaxGroupBits = 9;
constexpr unsigned kMaxPartitionKeys =
    kPartitionGroups > (1u << kMaxGroupBits) ? kPartitionGroups : (1u << kMaxGroupBits);
// Digit bits of the block sorts (cub::BlockRadixSort): 10-bit group keys take 3 passes,
// 7-bit tile keys 2. Measured (bench/NOTES.md 23): 5 or 6 bits (2 passes) made the
// partition kernel 609 -> 950-980 us (larger counters, fewer blocks); 4 stays. 256 or
// 128 groups instead of 512: 2% faster at 1 a cell, up to 60% slower at 64 a cell (the
// groups are no longer the tiles).
constexpr int kPartitionRadixBits = 4;
// The probe: this many neighbour pairs (i, i + 1) spread over the caller's order;
// binned input has nearly all in one tile (at 1 per cell, 511 of 512), random input
// almost none (1 / tiles).
constexpr unsigned kBinnedProbePairs = 1u << 16;
constexpr double kBinnedPairFraction = 0.5;

// set_points orders each chunk so that a warp's particles start in different shared-
// memory banks (tiles.cuh, interleave_kernel) where a particle has at least this many
// stencil nodes. Measured (bench/NOTES.md 11): it pays for M'4 and wider in 3D (B-spline
// 6 spread 1.69 -> 1.16 ms, double M'4 1.68 -> 1.25); with 8 (linear, 3D) or 16 (M'4,
// 2D) nodes the indirection cost more than the conflicts (linear 3D spread 0.588 ->
// 0.615 ms; M'4 2D 0.102 -> 0.113-0.121).
constexpr int kInterleaveMinNodes = 27;
constexpr bool interleave_pays(int support, int dims) {
  int nodes = 1;
  for (int d = 0; d < dims; ++d) nodes *= support;
  return nodes >= kInterleaveMinNodes;
}

// The spread tile kernel rounds float contributions to fixed point with one DFMA instead
// of a float-to-int conversion (tiles.cuh, to_fixed) where that pays. Measured A/B
// (bench/NOTES.md 16): B-spline 6 (216 nodes a particle), one property, 1.148 -> 1.021
// ms; M'4 (64 nodes) unchanged with one property (0.707 -> 0.708) and slower with three
// (2.03 -> 2.14). So only for supports of 5 and more, one property a pass (wider
// kernels with several properties: not measured, left on the conversion).
constexpr bool fma_rounding_pays(int support, int props_per_pass) { return support >= 5 && props_per_pass == 1; }

// Particles one block takes from a tile at most. Bounds the contributions any shared
// accumulator word receives to 1024, which the fixed-point headroom relies on
// (fixed_point.cuh): never raise it above 1024.
constexpr int kChunkParticles = 1024;
constexpr int kSpreadThreads = 256;
constexpr int kPointThreads = 256;  // one-thread-per-particle kernels
// Threads of set_points' interleave (tiles.cuh, interleave_kernel), a block a chunk,
// by where it reads the particles' banks. From the records (32-byte sectors for a 4-byte
// cell) it is bound by their bytes: in blocks of 64 (~21 an SM) it read 269 MB in 122 us
// at 2^24 on 256^3, and set_points was 0.01-0.04 ms slower than in blocks of 256 at 1, 8
// and 64 a cell (bench/NOTES.md 76). From the byte a particle that place_kernel stores,
// in blocks of 64: 86 us there (NOTES 77).
constexpr int interleave_threads(bool from_banks) { return from_banks ? 64 : 256; }

// Cell moments (spread.cuh, spread_cells_kernel; SpreadMethod::CudaCellMoments): a
// block takes up to this many particles of one tile (a span; tiles with more are split
// evenly), sorts them by cell in shared memory (16-bit indices, so at most 65536) and
// reduces each cell in registers. Larger spans mean more particles a cell per block.
// 5120: a float 3D block's shared memory (coordinates, values, indices: 18 bytes a
// particle) stays near 100 KB, two blocks an SM; and a tile of 8^3 cells at 8 a cell
// (4096 +- 64 particles) stays one span, where 4096 would halve about half of them.
constexpr int kCellSpanParticles = 5120;
constexpr int kCellThreads = 256;
// Moments a cell holds in registers (S^D): up to M'4 and B-spline 4 in 3D.
constexpr int kCellMaxNodes = 64;
constexpr bool cell_moments_fit(int support, int dims) {
  int nodes = 1;
  for (int d = 0; d < dims; ++d) nodes *= support;
  return nodes <= kCellMaxNodes;
}
// Auto never takes cell moments: measured slower than tiles in every case but one
// (bench/NOTES.md 31, e2adec2, spread ms tiles / cells: M'4 128^3 0.579 / 0.838, 64^3
// 0.541 / 0.777, linear 128^3 0.512 / 0.551, 2D M'4 512^2 0.471 / 0.497; only M'4 with
// 2^20 clustered at 256 a cell 0.046 / 0.041, and linear clustered was slower there). A
// span holds at most 10 particles a cell of a full tile, too few to repay its sort.

// Properties accumulated together per pass of the tile kernels, which are compiled per
// count (1, 2 or 3): a 3-vector in one pass; more properties take more passes.
constexpr int kPropsPerPass = 3;

// Resident blocks per SM the interp tile kernel is compiled for. Its particles are
// loaded into registers ahead of the window (58 registers in float, 50% occupancy);
// capping float at 48 registers gives 5 blocks (62.5%) without spills. Measured A/Bs
// (bench/NOTES.md 50-51) with one float property: support 2 or 4 at 40 registers (6
// blocks; no spill by ptxas, support 3 spills 36 bytes): 3D M'4 256^3 0.572 -> 0.564 ms,
// linear 0.400 -> 0.386; 3D linear at 32 registers (8 blocks, an 8-byte spill): 0.380 ->
// 0.370 at 256^3, 0.321 -> 0.307 at 128^3, while 2D linear at 8 blocks was no faster
// than at 6 (0.101-0.103 both). Double needs its registers (it spills at 48).
constexpr int interp_tile_blocks_per_sm(std::size_t value_bytes, int dims, int support, int props_per_pass) {
  if (value_bytes != 4) return 2;
  if (props_per_pass != 1) return 5;
  if (support == 2) return dims == 3 ? 8 : 6;
  return support == 4 ? 6 : 5;
}
// Interp writes its outputs straight to the caller's order (scattered 4- or 8-byte
// stores) instead of to binned slots plus the unbin pass where the outputs and the meshes
// read fit in this share of L2: the scattered stores then merge in L2. Beyond it, each is
// a sector's read-modify-write in DRAM (bench/NOTES.md 8: 2^24 in float, 3-4x the floor).
// Measured A/B: bench/NOTES.md 52. Where set_points' probe found the caller's particles
// in binned order, perm keeps a slot's caller index near the slot, so a block's stores
// fill whole sectors at any size and the unbin pass (a launch, the binned values written
// and read again, slot read) is pure overhead: direct there too (bench/NOTES.md 66).
constexpr double kInterpDirectL2Share = 0.75;
constexpr bool interp_direct_pays(double outputs_bytes, double meshes_bytes, double l2_bytes,
                                  bool caller_order_binned) {
  return caller_order_binned || outputs_bytes + meshes_bytes <= kInterpDirectL2Share * l2_bytes;
}
// The interp tile kernel holds its window as row spans (interp.cuh, RowSpan: S values
// padded to 2, 4 or 8, one vector load a stencil row) in 3D float, where they take at
// most this much shared memory a block (M'4: 1 or 2 properties, 21 KB each; 5 blocks an
// SM still fit). Measured A/B (bench/NOTES.md 20): 3D float M'4 and B-spline 4 2-4%
// faster (256^3 0.627 -> 0.611 ms), linear unchanged; double M'4 1.28 -> 1.46 and 2D
// M'4 at 64 a cell 0.325 -> 0.347 slower, so those keep one value a node.
constexpr std::size_t kInterpRowSpanBytes = 48 * 1024;
constexpr bool interp_row_spans_pay(int dims, std::size_t value_bytes) { return dims == 3 && value_bytes == 4; }

// Tiles or one thread a particle, by the stencil nodes a block's particles touch per node
// of its window (particles a block x S^D / window nodes): a tile pays for its window (a
// flush in spread, a load in interp) only when that is high enough. Measured at e1221f4
// (results 2026-11-23-h100-e1221f4-*.txt, bench/NOTES.md 24), against the naive sorted
// kernels that the one-thread methods resemble:
// - spread: tiles 1.7x faster at 1.5 (M'4, 3D, 32 a tile), 2x slower at 0.24 (linear, 2D,
//   64 a tile);
// - interp: tiles 4x slower at 1.5; faster at 5.6 (linear, 3D, 1 a cell) and above
//   (NOTES 12: the gather was slower at 5.6 and 13).
// The switches lie between those points; an earlier rule (32 particles a block, from a
// model) put 2D linear at 64 a tile on the slower side of both. Interp's moved from 3.0
// to 2.0 when 2D linear at 1 a cell (~2.5: tiles of 1024 cut at 1024) measured 5-9%
// faster by tiles (bench/NOTES.md 68).
constexpr double kSpreadTileMinNodesPerWindowNode = 1.0;
constexpr double kInterpTileMinNodesPerWindowNode = 2.0;
// Where one property's mesh is larger than the device's L2 cache, a global atomic on a
// line not in L2 goes to DRAM, and one thread a particle pays for every one of its
// particle's nodes that way; a tile's flush adds each node once. Forced methods at 19ec341
// (bench/NOTES.md 37), tiles against atomics, ms: beyond L2 (64 MB meshes), M'4 3D on
// 256^3 at window use 0.38 0.194 / 0.286 and at 0.19 0.184 / 0.205, 2D linear on 4096^2
// at 0.235 0.106 / 0.118; in L2 (2048^2, 16 MB) at 0.21 and 0.24, 0.027-0.028 /
// 0.026-0.027. A block's fixed costs (~0.18 ms for 32768 blocks on 256^3) against the
// atomics' 0.12 ms + 0.08 per 2^17 particles put the switch near 0.13. Since the atomics
// add rows as float2 pairs (mesh_rows.cuh; forced methods at cfe5c86, NOTES 62): M'4 3D
// on 256^3 at 0.38 0.202 / 0.197, at 0.19 0.194 / 0.146, at 0.10 0.176 / 0.101; 2D linear
// on 4096^2 at 0.235 0.105 / 0.108; 2D M'4 on 4096^2 at 0.84 0.123 / 0.192. The switch
// sits between 0.19 (atomics 25% faster) and 0.235 (tiles 3% faster).
constexpr double kSpreadTileMinNodesPerWindowNodeBeyondL2 = 0.22;

// The spread tile kernels read each property in the caller's order through perm: one
// random 4-byte read a particle, which costs a 64-byte DRAM burst where the array is
// larger than L2 (bench/NOTES.md 46: the binned-input rows, perm the identity, are 0.30
// ms faster for linear at 2^24 on 256^3, 0.18 for M'4, 0.26 a property for three). There
// the properties can first be moved into binned order the way set_points' partition
// moved the records (spread.cuh, props_to_places_kernel): one pass a level, ~0.14 ms
// (pass 1) and ~0.08 (pass 2) at 2^24 (NOTES 70). Measured, spread ms, gather -> moves
// (67c's passes, then 70's): one level (<= 512 tiles) always pays, 3D M'4 64^3 0.54 ->
// 0.52 -> 0.51, 2D M'4 512^2 0.45 -> 0.33 -> 0.31; two levels pay where the gather costs
// more than both passes, linear 256^3 0.57 -> 0.53 -> 0.48 and three M'4 properties 2.05
// -> 1.90 -> 1.87, and not where the kernel hides most of the gather: one M'4 property
// (256^3 0.66 -> 0.74 -> 0.68), B-spline 6 (128^3 0.95 -> 1.11 with 70's) and
// deterministic mode (1.27 -> 1.44 with 67c's), so support 2 or several properties a
// pass there.
// Double left out: its binned rows gain only 0.08 ms, less than the moves' bytes.
constexpr bool props_by_moves(std::size_t value_bytes, double prop_array_bytes, double l2_bytes, int levels,
                              int support, int props_per_pass) {
  return value_bytes == 4 && prop_array_bytes > l2_bytes &&
         (levels == 1 || (levels == 2 && (support <= 2 || props_per_pass >= 2)));
}

}  // namespace pmkit::cuda::tuning
