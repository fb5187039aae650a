#pragma once
// The CUDA kernels of the backend, one header per stage: binning.cuh (records, tiles,
// set_points and update_points), tiles.cuh (the window and order the tile kernels
// share), spread.cuh (P2M: shared tiles with fixed-point accumulation, cell moments,
// global atomics; the deterministic-mode helpers) and interp.cuh (M2P). Each kernel is
// small; the per-particle stencil is the one shared with the CPU backend
// (core/stencil.hpp). Launches and memory live in cuda_backend.cuh.
#include "cuda/binning.cuh"
#include "cuda/interp.cuh"
#include "cuda/spread.cuh"
#include "cuda/tiles.cuh"
