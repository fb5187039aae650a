#pragma once
// OpenMP helpers that also compile (serially) without OpenMP: the CPU backends', the
// distributed plan's and the applications'. No public header includes it, so that a
// consumer of pmkit needs no OpenMP.
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace pmkit::detail {

// Threads to use: `asked` if positive, else OpenMP's default; the threads of the current
// team (1 outside a parallel region); this thread's number in it. Without OpenMP: one
// thread, number 0.
#if defined(_OPENMP)
inline int openmp_threads(int asked = 0) { return asked > 0 ? asked : omp_get_max_threads(); }
inline int openmp_team_size() { return omp_get_num_threads(); }
inline int openmp_thread_id() { return omp_get_thread_num(); }
#else
inline int openmp_threads(int = 0) { return 1; }
inline int openmp_team_size() { return 1; }
inline int openmp_thread_id() { return 0; }
#endif

}  // namespace pmkit::detail

namespace pmkit::cpu {
inline int default_threads() { return detail::openmp_threads(); }
inline int thread_id() { return detail::openmp_thread_id(); }
}  // namespace pmkit::cpu
