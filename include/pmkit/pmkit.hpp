#pragma once
// pmkit: particle <-> mesh interpolation and cutoff pair interactions on CPUs (OpenMP)
// and GPUs (CUDA). Plain C++: no CUDA header (pmkit/cuda/ holds the headers for nvcc).
#include "pmkit/error.hpp"
#include "pmkit/fft.hpp"
#include "pmkit/grid.hpp"
#include "pmkit/kernels.hpp"
#include "pmkit/pair_kernels.hpp"
#include "pmkit/pairs.hpp"
#include "pmkit/plan.hpp"
#include "pmkit/pme.hpp"
#include "pmkit/view.hpp"
#include "pmkit/version.hpp"
