# FFTW for RealFft on the CPU: fftw3 (double) and fftw3f (float), and their threaded
# library where present: FFTW's OpenMP one with PMKIT_OPENMP, else its POSIX-threads one.
# Sets FFTW3_INCLUDE_DIR, PMKIT_FFTW_LIBRARIES and PMKIT_FFTW_THREADS. Without FFTW the
# build goes on with a warning and PMKIT_FFTW off: RealFft on the CPU (and `pmkit pic`
# on the CPU) then throws Unsupported, and their tests skip (a GPU machine's image may
# have the CUDA toolkit and no FFTW).
find_path(FFTW3_INCLUDE_DIR fftw3.h)
find_library(FFTW3_LIBRARY fftw3)
find_library(FFTW3F_LIBRARY fftw3f)
if(NOT FFTW3_INCLUDE_DIR OR NOT FFTW3_LIBRARY OR NOT FFTW3F_LIBRARY)
  message(WARNING "pmkit: FFTW (fftw3.h, libfftw3, libfftw3f) not found: RealFft has no CPU "
                  "backend in this build. Install it (Debian: apt-get install libfftw3-dev) for one.")
  set(PMKIT_FFTW OFF)
  return()
endif()
if(PMKIT_OPENMP)
  set(_pmkit_fftw_threads omp)
else()
  set(_pmkit_fftw_threads threads)
endif()
find_library(FFTW3_THREADS_LIBRARY fftw3_${_pmkit_fftw_threads})
find_library(FFTW3F_THREADS_LIBRARY fftw3f_${_pmkit_fftw_threads})
set(PMKIT_FFTW_LIBRARIES)
set(PMKIT_FFTW_THREADS OFF)
if(FFTW3_THREADS_LIBRARY AND FFTW3F_THREADS_LIBRARY)
  set(PMKIT_FFTW_THREADS ON)
  list(APPEND PMKIT_FFTW_LIBRARIES ${FFTW3F_THREADS_LIBRARY} ${FFTW3_THREADS_LIBRARY})
  if(NOT PMKIT_OPENMP)
    find_package(Threads REQUIRED)
    list(APPEND PMKIT_FFTW_LIBRARIES Threads::Threads)
  endif()
endif()
list(APPEND PMKIT_FFTW_LIBRARIES ${FFTW3F_LIBRARY} ${FFTW3_LIBRARY})
message(STATUS "pmkit: FFTW ${FFTW3_LIBRARY}, threads: ${PMKIT_FFTW_THREADS} (${_pmkit_fftw_threads})")
unset(_pmkit_fftw_threads)
