#pragma once
// Tuning constants of the CUDA mesh plan, and the compile-time shapes of its kernels
// that depend on them. Each says what it trades; docs/tuning.md gives the measurement
// behind it. Change one only with a benchmark run (bench/device.sh) that shows why. The
// run-time decisions built on them are in method_choice.hpp.
#include <cstddef>

namespace pmkit::cuda::tuning {

// ---------------------------------------------------------------------------------
// Tiles and blocks

// Cells per tile edge: a block's shared accumulator (tile plus halo) against the blocks a
// tile takes (docs/tuning.md#ktileedge3d).
constexpr int kTileEdge3D = 8;
// The 2D tile of about as many cells as the 3D one (docs/tuning.md#ktileedge2d).
constexpr int kTileEdge2D = 32;
constexpr int tile_edge(int dims) { return dims == 3 ? kTileEdge3D : kTileEdge2D; }

// Particles one block takes from a tile at most: bounds the contributions a shared
// accumulator word receives, which the fixed-point headroom (kernels/fixed_point.cuh)
// relies on; never above 1024 (docs/tuning.md#kchunkparticles).
constexpr int kChunkParticles = 1024;
// Threads of the tile kernels (spread and interp) (docs/tuning.md#kspreadthreads).
constexpr int kSpreadThreads = 256;
// Threads of the one-thread-per-particle kernels (docs/tuning.md#kpointthreads).
constexpr int kPointThreads = 256;
// Properties a tile kernel accumulates in one pass (compiled per count: 1, 2 or 3): a
// 3-vector in one pass against shared memory a block (docs/tuning.md#kpropsperpass).
constexpr int kPropsPerPass = 3;

// ---------------------------------------------------------------------------------
// set_points: the partition (kernels/partition.cuh)

// Threads of the partition's blocks: items staged in shared memory against blocks an SM
// (docs/tuning.md#kpartitionthreads).
constexpr int kPartitionThreads = 512;
// Below this many particles set_points takes the one-pass scatter for every input: the
// partition's ~15 launches against the one-pass scatter's scattered stores
// (docs/tuning.md#kpartitionminparticles).
constexpr std::size_t kPartitionMinParticles = std::size_t(1) << 19;
// Items a thread holds: 4096 float records (2048 double) a block in 64 KB of shared
// memory (docs/tuning.md#partition_items_per_thread).
constexpr int partition_items_per_thread(std::size_t value_bytes) { return value_bytes == 4 ? 8 : 4; }
// Pass-1 groups at most: long runs a block (one 128-byte line of records a group) against
// the groups being the tiles (docs/tuning.md#kpartitiongroups).
constexpr unsigned kPartitionGroups = 512;
// Tiles a group at most 2^9 (pass 2's sort key); beyond, set_points keeps the one-pass
// scatter (docs/tuning.md#kmaxgroupbits).
constexpr int kMaxGroupBits = 9;
// Entries of the partition's shared counters and run tables.
constexpr unsigned kMaxPartitionKeys =
    kPartitionGroups > (1u << kMaxGroupBits) ? kPartitionGroups : (1u << kMaxGroupBits);
// Digit bits of the block radix sorts: sort passes against counter size
// (docs/tuning.md#kpartitionradixbits).
constexpr int kPartitionRadixBits = 4;
// The probe of the caller's order: neighbour pairs sampled, and the share in one tile
// that counts as binned input (docs/tuning.md#kbinnedprobepairs).
constexpr unsigned kBinnedProbePairs = 1u << 16;
constexpr double kBinnedPairFraction = 0.5;

// ---------------------------------------------------------------------------------
// permute_to_binned

// Arrays one permute_to_binned launch moves: the binned order read once for them all and
// their loads in flight together, against the kernel's registers and parameter bytes
// (docs/tuning.md#kpermutearrays).
constexpr int kPermuteArrays = 8;

// ---------------------------------------------------------------------------------
// update_points: the away list

// Stencil nodes a particle from which spread and interp take update_points' away
// particles one warp each (kernels/away_warps.cuh) instead of one thread each: the 3D
// B-splines of order 5 and up, PME's; smaller stencils keep one thread a particle
// (docs/tuning.md#kawaywarpminnodes).
constexpr int kAwayWarpMinNodes = 100;
constexpr int stencil_nodes(int support, int dims) {
  int nodes = 1;
  for (int d = 0; d < dims; ++d) nodes *= support;
  return nodes;
}
constexpr bool away_by_warps(int support, int dims) { return stencil_nodes(support, dims) >= kAwayWarpMinNodes; }

// ---------------------------------------------------------------------------------
// set_points: the tile kernels' order (kernels/tiles.cuh, interleave_kernel)

// Stencil nodes a particle from which set_points interleaves each chunk's particles by
// shared-memory bank: fewer bank conflicts against an indirection a particle
// (docs/tuning.md#kinterleaveminnodes).
constexpr int kInterleaveMinNodes = 27;
constexpr bool interleave_pays(int support, int dims) { return stencil_nodes(support, dims) >= kInterleaveMinNodes; }
// Threads of the interleave, a block a chunk: blocks an SM against the bytes read, by
// where the banks come from (docs/tuning.md#interleave_threads).
constexpr int interleave_threads(bool from_banks) { return from_banks ? 64 : 256; }

// ---------------------------------------------------------------------------------
// spread

// The tile spread rounds float contributions to fixed point with one DFMA instead of a
// conversion: an FP64 operation against an integer conversion a node
// (docs/tuning.md#fma_rounding_pays).
constexpr bool fma_rounding_pays(int support, int props_per_pass) { return support >= 5 && props_per_pass == 1; }

// Chunks a tile must exceed for its blocks (fast float spread) to flush into a double
// window of the tile's own, added to the mesh once (finish_heavy_kernel): the float
// mesh's roundings, one a block, against double atomics and a launch
// (docs/tuning.md#kheavytilechunks).
constexpr unsigned kHeavyTileChunks = 256;

// Particles up to which an eager set_points bins in one kernel of one block
// (small_binning.cuh): one SM's sort against the twenty-odd launches of the other paths,
// which cost more on the host below this; a graph replays those launches for less
// (docs/tuning.md#ksmallbinningparticles).
constexpr int kSmallBinningParticles = 4096;
// Tiles up to which that block also finds the tile starts and cuts the chunks, a thread
// a tile per round: the rounds' cost against the partition's launches.
constexpr unsigned kSmallBinningMaxTiles = 1u << 15;

// Particles from which the one-pass scatter reads its count of runs back (a wait) and
// sorts the runs alone, instead of sorting the bound (a run a particle) padded: the
// wait's few microseconds against the longer sort (docs/tuning.md#kruns_read_back).
constexpr std::size_t kRunsReadBackParticles = std::size_t(1) << 20;

// Stencil nodes a block's particles touch per node of its window (method_choice.hpp,
// window_use) from which spread takes tiles: a window's flush against a global atomic a
// node and particle (docs/tuning.md#kspreadtileminnodesperwindownode).
constexpr double kSpreadTileMinNodesPerWindowNode = 1.0;
// The same where one property's mesh is larger than L2, where the atomics go to DRAM
// (docs/tuning.md#kspreadtileminnodesperwindownodebeyondl2).
constexpr double kSpreadTileMinNodesPerWindowNodeBeyondL2 = 0.22;

// Cell moments (kernels/spread_cells.cuh; SpreadMethod::CudaCellMoments only): particles
// a block (a span of one tile) at most: particles a cell per block against shared memory
// a block (docs/tuning.md#kcellspanparticles).
constexpr int kCellSpanParticles = 5120;
// Threads of the cell-moments blocks (docs/tuning.md#kcellthreads).
constexpr int kCellThreads = 256;
// Moments a cell holds in registers (S^D): up to M'4 and B-spline 4 in 3D; registers
// against the kernels that can take the method (docs/tuning.md#kcellmaxnodes).
constexpr int kCellMaxNodes = 64;
constexpr bool cell_moments_fit(int support, int dims) {
  int nodes = 1;
  for (int d = 0; d < dims; ++d) nodes *= support;
  return nodes <= kCellMaxNodes;
}

// ---------------------------------------------------------------------------------
// interp

// Nodes touched per window node from which interp takes tiles: the window's load against
// a gather a node and particle (docs/tuning.md#kinterptileminnodesperwindownode).
constexpr double kInterpTileMinNodesPerWindowNode = 2.0;
// Resident blocks an SM the interp tile kernel is compiled for: occupancy against
// registers (docs/tuning.md#interp_tile_blocks_per_sm).
constexpr int interp_tile_blocks_per_sm(std::size_t value_bytes, int dims, int support, int props_per_pass) {
  if (value_bytes != 4) return 2;
  if (props_per_pass != 1) return 5;
  if (support == 2) return dims == 3 ? 8 : 6;
  return support == 4 ? 6 : 5;
}
// Share of L2 that the outputs and meshes read must fit in for interp to store straight
// to the caller's order: scattered stores merged in L2 against the unbin pass
// (docs/tuning.md#kinterpdirectl2share).
constexpr double kInterpDirectL2Share = 0.75;
// Shared memory a block the interp window may take as row spans (one vector load a
// stencil row), 3D float only: wider loads against padding
// (docs/tuning.md#kinterprowspanbytes).
constexpr std::size_t kInterpRowSpanBytes = 48 * 1024;
constexpr bool interp_row_spans_pay(int dims, std::size_t value_bytes) { return dims == 3 && value_bytes == 4; }

}  // namespace pmkit::cuda::tuning
