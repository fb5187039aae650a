# CTest build.cuda_choice: `cmake -DSOURCE_DIR=... -DWORK_DIR=... -P test_cuda_choice.cmake`.
# Configures pmkit (tests, benchmarks and optional libraries off, so that it is quick)
# as a machine without a GPU sees it (nvidia-smi fails), and checks what the configure
# decides: without the environment variable PMKIT_CUDA the CUDA backend stays off, even
# where nvcc is found; with PMKIT_CUDA=ON it is asked for (checked by name only, without
# compiling anything: a bad value must be refused naming the variable).
include(${CMAKE_CURRENT_LIST_DIR}/configure_test.cmake)
require_defined(test_cuda_choice.cmake SOURCE_DIR WORK_DIR)

function(configure_case name env_value out_var result_var)
  if(env_value STREQUAL "")
    set(env_arg --unset=PMKIT_CUDA)
  else()
    set(env_arg "PMKIT_CUDA=${env_value}")
  endif()
  configure_in(${name} out result ENV ${env_arg} --unset=CUDAARCHS
    ARGS -DPMKIT_NVIDIA_SMI=/bin/false -DPMKIT_TESTS=OFF -DPMKIT_BENCH=OFF -DPMKIT_MPI=OFF -DPMKIT_FFTW=OFF
         -DPMKIT_OPENMP=OFF)
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${result_var} "${result}" PARENT_SCOPE)
endfunction()

configure_case(no_request "" out result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configure without a GPU failed:\n${out}")
endif()
if(NOT out MATCHES "pmkit: CUDA backend OFF: PMKIT_CUDA=AUTO and (no GPU is present|no CUDA compiler)")
  message(FATAL_ERROR "without a GPU and without PMKIT_CUDA the CUDA backend must stay off:\n${out}")
endif()

configure_case(bad_request "maybe" out result)
if(result EQUAL 0 OR NOT out MATCHES "the environment variable PMKIT_CUDA=maybe: PMKIT_CUDA accepts ON, OFF or AUTO")
  message(FATAL_ERROR "PMKIT_CUDA=maybe in the environment must be refused:\n${out}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
