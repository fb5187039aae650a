#pragma once
// FFTW's API of each precision under one name, its planner's lock and its threads: what
// RealFft's CPU backend (fft_fftw.cpp) and DistributedRealFft's CPU ranks
// (src/distributed/host/fft_fftw_mpi.cpp) share.
#include <fftw3.h>

#include <cstdint>
#include <mutex>

#include "cpu/openmp.hpp"

namespace pmkit::detail {

// FFTW's API of each precision under one name.
template <class T>
struct Fftw;

template <>
struct Fftw<double> {
  using Plan = fftw_plan;
  using Complex = fftw_complex;
  static void* malloc(std::size_t bytes) { return fftw_malloc(bytes); }
  static void free(void* p) { fftw_free(p); }
  static Plan r2c(int d, const int* n, double* in, Complex* out, unsigned flags) {
    return fftw_plan_dft_r2c(d, n, in, out, flags);
  }
  static Plan c2r(int d, const int* n, Complex* in, double* out, unsigned flags) {
    return fftw_plan_dft_c2r(d, n, in, out, flags);
  }
  static void execute_r2c(Plan p, double* in, Complex* out) { fftw_execute_dft_r2c(p, in, out); }
  static void execute_c2r(Plan p, Complex* in, double* out) { fftw_execute_dft_c2r(p, in, out); }
  static void destroy(Plan p) { fftw_destroy_plan(p); }
  static int alignment_of(const void* p) { return fftw_alignment_of(static_cast<double*>(const_cast<void*>(p))); }
#if defined(PMKIT_FFTW_THREADS)
  static void init_threads() { fftw_init_threads(); }
  static void plan_with_nthreads(int n) { fftw_plan_with_nthreads(n); }
#endif
};

template <>
struct Fftw<float> {
  using Plan = fftwf_plan;
  using Complex = fftwf_complex;
  static void* malloc(std::size_t bytes) { return fftwf_malloc(bytes); }
  static void free(void* p) { fftwf_free(p); }
  static Plan r2c(int d, const int* n, float* in, Complex* out, unsigned flags) {
    return fftwf_plan_dft_r2c(d, n, in, out, flags);
  }
  static Plan c2r(int d, const int* n, Complex* in, float* out, unsigned flags) {
    return fftwf_plan_dft_c2r(d, n, in, out, flags);
  }
  static void execute_r2c(Plan p, float* in, Complex* out) { fftwf_execute_dft_r2c(p, in, out); }
  static void execute_c2r(Plan p, Complex* in, float* out) { fftwf_execute_dft_c2r(p, in, out); }
  static void destroy(Plan p) { fftwf_destroy_plan(p); }
  static int alignment_of(const void* p) { return fftwf_alignment_of(static_cast<float*>(const_cast<void*>(p))); }
#if defined(PMKIT_FFTW_THREADS)
  static void init_threads() { fftwf_init_threads(); }
  static void plan_with_nthreads(int n) { fftwf_plan_with_nthreads(n); }
#endif
};

// FFTW's planner (creating and destroying plans) is not thread-safe; execution is. One
// lock for every FFTW plan of the process (defined in fft_fftw.cpp).
std::mutex& fftw_planner_mutex();

#if defined(PMKIT_FFTW_THREADS)
// Meshes of fewer real values than this transform on one thread: there FFTW's threads
// cost more to start and join than they save, and a thread that waits for a busy core
// can stall a small transform by milliseconds (docs/tuning.md#kfftwthreadedminvalues).
constexpr std::int64_t kFftwThreadedMinValues = std::int64_t(1) << 16;

inline int fftw_threads(std::int64_t real_size, int requested) {
  return real_size < kFftwThreadedMinValues ? 1 : openmp_threads(requested);
}
#endif

}  // namespace pmkit::detail
