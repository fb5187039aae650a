#pragma once
// How many threads an FFTW plan of pmkit takes (RealFft's and DistributedRealFft's CPU
// backends), where the build has FFTW's threaded library (PMKIT_FFTW_THREADS).
#include <cstdint>

#include "cpu/openmp.hpp"

namespace pmkit::detail {

// Meshes of fewer real values than this transform on one thread: there FFTW's threads
// cost more to start and join than they save, and a thread that waits for a busy core
// can stall a small transform by milliseconds (docs/tuning.md#kfftwthreadedminvalues).
constexpr std::int64_t kFftwThreadedMinValues = std::int64_t(1) << 16;

inline int fftw_threads(std::int64_t real_size, int requested) {
  return real_size < kFftwThreadedMinValues ? 1 : openmp_threads(requested);
}

}  // namespace pmkit::detail
