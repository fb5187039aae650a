# Whether this build compiles the CUDA backend, and for which GPUs.
#
# PMKIT_CUDA is ON, OFF or AUTO. AUTO builds the backend where nvcc is found and a GPU
# is present (`nvidia-smi -L` lists one): without a GPU the CUDA tests skip, and the
# backend's device code is most of a build's time. A build folder's first configure
# takes its default from the environment variable PMKIT_CUDA where set (so CI asks for
# the backend without changing the README's commands), AUTO otherwise; -DPMKIT_CUDA
# beats both. The configure output says what was chosen and why.
#
# CMAKE_CUDA_ARCHITECTURES (or the environment variable CUDAARCHS) defaults to `native`,
# the GPUs of the build machine, where one is present, and to PMKIT_CUDA_ARCHITECTURES_ALL
# (the list that packages and distributed wheels are built for) where none is.
#
# Sets PMKIT_CUDA (a normal variable, ON or OFF, over the cache entry) and
# PMKIT_CUDA_REASON.

set(PMKIT_CUDA_ARCHITECTURES_ALL "80-real;90")

if(NOT DEFINED CACHE{PMKIT_CUDA})
  if(NOT "$ENV{PMKIT_CUDA}" STREQUAL "")
    set(PMKIT_CUDA "$ENV{PMKIT_CUDA}" CACHE STRING
        "Build the CUDA backend: ON, OFF or AUTO (where nvcc and a GPU are found)")
    set(PMKIT_CUDA_FROM_ENV "$ENV{PMKIT_CUDA}" CACHE INTERNAL "PMKIT_CUDA as the environment gave it")
  else()
    set(PMKIT_CUDA AUTO CACHE STRING
        "Build the CUDA backend: ON, OFF or AUTO (where nvcc and a GPU are found)")
  endif()
endif()
set_property(CACHE PMKIT_CUDA PROPERTY STRINGS AUTO ON OFF)
set(_pmkit_cuda_request "$CACHE{PMKIT_CUDA}")
if(DEFINED PMKIT_CUDA_FROM_ENV AND _pmkit_cuda_request STREQUAL PMKIT_CUDA_FROM_ENV)
  set(_pmkit_cuda_asker "the environment variable PMKIT_CUDA=${_pmkit_cuda_request}")
else()
  set(_pmkit_cuda_asker "PMKIT_CUDA=${_pmkit_cuda_request}")
endif()

# nvidia-smi -L lists the GPUs; PMKIT_NVIDIA_SMI names another program that answers the
# same way (the configure test points it at one that fails).
find_program(PMKIT_NVIDIA_SMI nvidia-smi DOC "nvidia-smi, which tells whether a GPU is present")
set(_pmkit_gpu "")
if(PMKIT_NVIDIA_SMI)
  execute_process(COMMAND "${PMKIT_NVIDIA_SMI}" -L
    RESULT_VARIABLE _pmkit_smi_result OUTPUT_VARIABLE _pmkit_smi_out ERROR_QUIET TIMEOUT 30)
  if(_pmkit_smi_result EQUAL 0 AND _pmkit_smi_out MATCHES "GPU [0-9]+: ([^\n(]*[^\n( ])")
    set(_pmkit_gpu "${CMAKE_MATCH_1}")
  endif()
endif()
if(_pmkit_gpu)
  set(_pmkit_gpu_text "a GPU is present (${_pmkit_gpu})")
elseif(PMKIT_NVIDIA_SMI)
  set(_pmkit_gpu_text "no GPU is present (`${PMKIT_NVIDIA_SMI} -L` lists none)")
else()
  set(_pmkit_gpu_text "no GPU is present (no nvidia-smi)")
endif()

string(TOUPPER "${_pmkit_cuda_request}" _pmkit_cuda_upper)
if(_pmkit_cuda_upper STREQUAL "AUTO")
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(PMKIT_CUDA OFF)
    set(PMKIT_CUDA_REASON "PMKIT_CUDA=AUTO and no CUDA compiler (nvcc) is found")
  elseif(NOT _pmkit_gpu)
    set(PMKIT_CUDA OFF)
    set(PMKIT_CUDA_REASON "PMKIT_CUDA=AUTO and ${_pmkit_gpu_text}; -DPMKIT_CUDA=ON builds it")
  else()
    set(PMKIT_CUDA ON)
    set(PMKIT_CUDA_REASON "PMKIT_CUDA=AUTO, nvcc is found and ${_pmkit_gpu_text}")
  endif()
elseif(_pmkit_cuda_upper MATCHES "^(ON|YES|TRUE|Y|1)$")
  set(PMKIT_CUDA ON)
  set(PMKIT_CUDA_REASON "asked for by ${_pmkit_cuda_asker}")
elseif(_pmkit_cuda_upper MATCHES "^(OFF|NO|FALSE|N|0)$")
  set(PMKIT_CUDA OFF)
  set(PMKIT_CUDA_REASON "turned off by ${_pmkit_cuda_asker}")
else()
  message(FATAL_ERROR "${_pmkit_cuda_asker}: PMKIT_CUDA accepts ON, OFF or AUTO")
endif()
message(STATUS "pmkit: CUDA backend ${PMKIT_CUDA}: ${PMKIT_CUDA_REASON}")

if(PMKIT_CUDA AND NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  if(_pmkit_gpu)
    set(CMAKE_CUDA_ARCHITECTURES native CACHE STRING "CUDA architectures to compile for")
  else()
    set(CMAKE_CUDA_ARCHITECTURES "${PMKIT_CUDA_ARCHITECTURES_ALL}" CACHE STRING
        "CUDA architectures to compile for")
  endif()
endif()
