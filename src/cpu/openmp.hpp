#pragma once
// OpenMP helpers that also compile (serially) in a build without OpenMP.
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace pmkit::cpu {

inline int default_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}
inline int thread_id() {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

}  // namespace pmkit::cpu
