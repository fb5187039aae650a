#pragma once
// Every run-time decision of the CUDA mesh plan, as plain functions of the case (sizes,
// the device's L2 cache and shared memory, the kernel): which scatter set_points takes,
// which method spread runs, whether spread moves its properties into binned order first,
// and how interp writes its outputs and whether it stages the mesh in tiles. The
// constants they compare against, and the compile-time shapes of the kernels, are in
// tuning.hpp; docs/tuning.md gives the measurements behind each.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/tuning/tuning.hpp"
#include "pmkit/plan.hpp"

namespace pmkit::cuda {

// The partition's pass-1 groups (a kernel parameter, kernels/partition.cuh): tile >> bits;
// count of them; key_bits: the block sorts' bits, enough for the key `count` that marks a
// block's unused items.
struct Groups {
  int bits;
  std::uint32_t count;
  int key_bits;
};

namespace tuning {

// ---------------------------------------------------------------------------------
// set_points

// The fewest tiles a group (a power of two) that keep the groups within
// kPartitionGroups; one tile a group where tiles are few. Fixed by the grid.
inline Groups partition_groups(std::uint32_t num_tiles) {
  Groups g{0, num_tiles, 0};
  while (g.count > kPartitionGroups) {
    ++g.bits;
    g.count = static_cast<std::uint32_t>((std::uint64_t(num_tiles) + (1u << g.bits) - 1) >> g.bits);
  }
  while ((g.count >> g.key_bits) != 0) ++g.key_bits;  // room for the key `count` (unused items)
  return g;
}

// Whether set_points may scatter by partition: enough particles (at least a block's
// items and kPartitionMinParticles), groups of at most 2^kMaxGroupBits tiles, and the
// pass-2 blocks' shared memory (`block_shared` bytes) available on the device. Where it
// may, a probe still sends input already in binned order to the one-pass scatter
// (caller_order_binned).
inline bool partition_fits(std::size_t n, std::size_t block_items, Groups groups, std::size_t block_shared,
                           std::size_t shared_optin) {
  static_assert(kPartitionGroups <= kMaxPartitionKeys, "partition_groups() keeps count within");
  return n >= std::max<std::size_t>(block_items, kPartitionMinParticles) && groups.bits <= kMaxGroupBits &&
         block_shared <= shared_optin;
}

// Whether the probe's count of same-tile neighbour pairs (out of kBinnedProbePairs)
// shows the caller's particles in binned order.
inline bool caller_order_binned(std::uint32_t same_tile_pairs) {
  return same_tile_pairs >= kBinnedPairFraction * kBinnedProbePairs;
}

// ---------------------------------------------------------------------------------
// spread and interp

// Stencil nodes a block's particles touch per node of its tile's window: particles a
// block (n / chunks) x S^D / window nodes. The tile methods pay for their window (a
// flush, a load) once a block; this says how much work shares that cost.
inline double window_use(std::size_t n, std::size_t num_chunks, double stencil_per_window_node) {
  const double per_block = num_chunks ? double(n) / num_chunks : 0.0;
  return per_block * stencil_per_window_node;
}

// The method spread runs: the one asked for, or for Auto shared tiles (always in
// deterministic mode) unless their blocks touch too few nodes of their window to repay
// its flush, with a lower bar where one property's mesh is larger than L2 (every global
// atomic of the one-thread method may then go to DRAM). Auto never takes cell moments.
inline SpreadMethod spread_method(SpreadMethod requested, bool deterministic, bool tiles_fit, double window_use,
                                  double mesh_bytes, double l2_bytes) {
  if (requested != SpreadMethod::Auto) return requested;
  const double min_use =
      mesh_bytes > l2_bytes ? kSpreadTileMinNodesPerWindowNodeBeyondL2 : kSpreadTileMinNodesPerWindowNode;
  return (deterministic || (tiles_fit && window_use >= min_use)) ? SpreadMethod::CudaSharedTiles
                                                                 : SpreadMethod::CudaGlobalAtomics;
}

// Whether the tile spread moves a pass's properties into binned order first (the
// partition's moves replayed) instead of reading them through perm: float arrays larger
// than L2 (where each gathered value costs a DRAM burst); with the partition's one level
// always, with two levels only where the gather costs more than both moves (support 2,
// or several properties a pass) (docs/tuning.md#props_by_moves).
constexpr bool props_by_moves(std::size_t value_bytes, double prop_array_bytes, double l2_bytes, int levels,
                              int support, int props_per_pass) {
  return value_bytes == 4 && prop_array_bytes > l2_bytes &&
         (levels == 1 || (levels == 2 && (support <= 2 || props_per_pass >= 2)));
}
// props_by_moves where the moves exist: the partition ran (levels > 0) on input not in
// binned order already, and not in deterministic mode (its kernel hides the gather).
inline bool spread_moves_props(bool caller_order_binned, bool deterministic, std::size_t value_bytes,
                               std::size_t n, double l2_bytes, int levels, int support, int props_per_pass) {
  return !caller_order_binned && !deterministic &&
         props_by_moves(value_bytes, static_cast<double>(n) * value_bytes, l2_bytes, levels, support, props_per_pass);
}

// Whether interp writes its outputs straight to the caller's order (scattered stores)
// instead of to binned slots and then the unbin pass: where the outputs and the meshes
// read fit in kInterpDirectL2Share of L2 (the stores merge there), or where the caller's
// order is the binned one (perm then keeps a block's stores in whole sectors).
constexpr bool interp_direct_pays(double outputs_bytes, double meshes_bytes, double l2_bytes,
                                  bool caller_order_binned) {
  return caller_order_binned || outputs_bytes + meshes_bytes <= kInterpDirectL2Share * l2_bytes;
}

// Whether interp stages the mesh in tiles (the window in shared memory) rather than
// gathering one thread a particle: blocks touch enough of their window to repay its load,
// and the smallest window (one value a node, `scalar_window_bytes`) fits in shared memory.
inline bool interp_by_tiles(double window_use, std::size_t scalar_window_bytes, std::size_t shared_optin) {
  return window_use >= kInterpTileMinNodesPerWindowNode && scalar_window_bytes <= shared_optin;
}

}  // namespace tuning
}  // namespace pmkit::cuda
