#pragma once
// The mesh plan's CUDA kernels, one header per job:
//   records.cuh         the binned record, tile geometry, chunks, a launch's arrays
//   binning.cuh         set_points' one-pass scatter, the cut into chunks, update_points
//   partition.cuh       set_points' scatter of unsorted input in coalesced passes
//   tiles.cuh           the tile window and order that spread and interp share
//   spread_tiles.cuh    P2M by shared-memory tiles in fixed point (fast, deterministic)
//   spread_cells.cuh    P2M by cell moments (SpreadMethod::CudaCellMoments)
//   spread_atomics.cuh  P2M by one thread a particle with global atomics
//   props_moves.cuh     a spread's properties moved into binned order
//   interp.cuh          M2P by tiles or one thread a particle, and the unbin pass
//   gradient.cuh        interp_gradient and spread_gradient: the tile kernels' gradient
//                       steps, and their one-thread-per-particle kernels
//   away_warps.cuh      update_points' away particles of large stencils, one warp each
//   fixed_point.cuh, mesh_rows.cuh: the integer accumulation and the vector row atomics
// The per-particle stencil is the one shared with the CPU backend (pmkit/detail/stencil.hpp).
// Launches and memory are in src/cuda/plan/.
#include "cuda/kernels/away_warps.cuh"
#include "cuda/kernels/binning.cuh"
#include "cuda/kernels/gradient.cuh"
#include "cuda/kernels/interp.cuh"
#include "cuda/kernels/partition.cuh"
#include "cuda/kernels/props_moves.cuh"
#include "cuda/kernels/small_binning.cuh"
#include "cuda/kernels/spread_atomics.cuh"
#include "cuda/kernels/spread_cells.cuh"
#include "cuda/kernels/spread_tiles.cuh"
#include "cuda/kernels/tiles.cuh"
