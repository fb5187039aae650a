# CTest build.library_build: `cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DSHARED=... -DWORK_DIR=...
# -P test_library_build.cmake`. Configures the Python extension alone, as pip's build does
# (PMKIT_PYTHON=ON), on the libpmkit of a build folder (PMKIT_BUILD_DIR): a folder without
# a build of pmkit is refused naming the variable; BUILD_DIR, the build running this test,
# is taken (its static libpmkit linked, nothing else configured) or, where it is a shared
# library, refused. Python's development files or nanobind may be missing: the checks read
# what the configure says before it looks for them.
include(${CMAKE_CURRENT_LIST_DIR}/configure_test.cmake)
require_defined(test_library_build.cmake SOURCE_DIR BUILD_DIR SHARED WORK_DIR)

file(MAKE_DIRECTORY "${WORK_DIR}/empty")
configure_in(refused out result ENV "PMKIT_BUILD_DIR=${WORK_DIR}/empty" ARGS -DPMKIT_PYTHON=ON)
if(result EQUAL 0 OR NOT out MATCHES "PMKIT_BUILD_DIR=[^ ]*/empty: [^ ]*/empty holds no CMake build of pmkit")
  message(FATAL_ERROR "PMKIT_BUILD_DIR naming a folder without a build must be refused:\n${out}")
endif()

configure_in(this_build out result ENV "PMKIT_BUILD_DIR=${BUILD_DIR}" ARGS -DPMKIT_PYTHON=ON)
if(out MATCHES "pmkit: CUDA backend")
  message(FATAL_ERROR "with PMKIT_BUILD_DIR the library's own configure must not run:\n${out}")
endif()
if(SHARED)
  if(result EQUAL 0 OR NOT out MATCHES "its libpmkit is a shared library")
    message(FATAL_ERROR "a shared libpmkit must be refused:\n${out}")
  endif()
elseif(NOT out MATCHES "pmkit: the Python extension links [^ ]*libpmkit.a \\(PMKIT_BUILD_DIR=")
  message(FATAL_ERROR "the extension must link the libpmkit of ${BUILD_DIR}:\n${out}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
