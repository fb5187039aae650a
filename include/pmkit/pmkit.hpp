#pragma once
// pmkit: particle <-> mesh interpolation on CPUs (OpenMP) and GPUs (CUDA).
#include "pmkit/error.hpp"
#include "pmkit/grid.hpp"
#include "pmkit/kernels.hpp"
#include "pmkit/pairs.hpp"
#include "pmkit/plan.hpp"
#include "pmkit/view.hpp"
#include "pmkit/version.hpp"
