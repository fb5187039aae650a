#pragma once
// OpenMP helpers that also compile (serially) without OpenMP: the CPU backends', the
// distributed plan's and the applications'. No public header includes it, so that a
// consumer of pmkit needs no OpenMP.
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace pmkit::detail {

// Threads to use: `asked` if positive, else OpenMP's default (1 without OpenMP).
inline int openmp_threads(int asked = 0) {
#if defined(_OPENMP)
  return asked > 0 ? asked : omp_get_max_threads();
#else
  (void)asked;
  return 1;
#endif
}
// Threads in the current team (1 outside a parallel region or without OpenMP).
inline int openmp_team_size() {
#if defined(_OPENMP)
  return omp_get_num_threads();
#else
  return 1;
#endif
}
inline int openmp_thread_id() {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

}  // namespace pmkit::detail

namespace pmkit::cpu {
inline int default_threads() { return detail::openmp_threads(); }
inline int thread_id() { return detail::openmp_thread_id(); }
}  // namespace pmkit::cpu
