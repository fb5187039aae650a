# The Python extension on the libpmkit of a CMake build folder of these sources
# (PMKIT_BUILD_DIR, a path from the source folder): finds that folder's package, checks
# that it is a static libpmkit of this source tree, built, and of this version, and takes
# the CUDA backend's choice from it (PMKIT_CUDA). Gives pmkit::pmkit.
get_filename_component(_pmkit_build "${PMKIT_BUILD_DIR}" ABSOLUTE BASE_DIR "${PROJECT_SOURCE_DIR}")
set(_pmkit_asked "PMKIT_BUILD_DIR=${PMKIT_BUILD_DIR}")
set(_pmkit_else "or leave PMKIT_BUILD_DIR unset to compile the library in this build")
find_package(pmkit ${PROJECT_VERSION} EXACT CONFIG QUIET PATHS "${_pmkit_build}" NO_DEFAULT_PATH
  OPTIONAL_COMPONENTS distributed)
if(NOT pmkit_FOUND)
  message(FATAL_ERROR "${_pmkit_asked}: ${_pmkit_build} holds no CMake build of pmkit ${PROJECT_VERSION} "
    "(pmkitConfig.cmake); configure and build one (cmake -S . -B build && cmake --build build), ${_pmkit_else}")
endif()
get_target_property(_pmkit_type pmkit::pmkit TYPE)
if(NOT _pmkit_type STREQUAL "STATIC_LIBRARY")
  message(FATAL_ERROR "${_pmkit_asked}: its libpmkit is a shared library, which the package would "
    "load from that folder; give a build without BUILD_SHARED_LIBS, ${_pmkit_else}")
endif()
get_target_property(_pmkit_includes pmkit::pmkit INTERFACE_INCLUDE_DIRECTORIES)
list(GET _pmkit_includes 0 _pmkit_include)
file(REAL_PATH "${_pmkit_include}" _pmkit_include)
file(REAL_PATH "${PROJECT_SOURCE_DIR}/include" _pmkit_own_include)
if(NOT _pmkit_include STREQUAL _pmkit_own_include)
  message(FATAL_ERROR "${_pmkit_asked}: ${_pmkit_build} builds the sources of ${_pmkit_include}, "
    "not of this tree (${_pmkit_own_include}); ${_pmkit_else}")
endif()
get_target_property(_pmkit_configs pmkit::pmkit IMPORTED_CONFIGURATIONS)
list(GET _pmkit_configs 0 _pmkit_config)
get_target_property(_pmkit_library pmkit::pmkit IMPORTED_LOCATION_${_pmkit_config})
if(NOT EXISTS "${_pmkit_library}")
  message(FATAL_ERROR "${_pmkit_asked}: ${_pmkit_library} is not built yet; build it first "
    "(cmake --build ${PMKIT_BUILD_DIR}), ${_pmkit_else}")
endif()
message(STATUS "pmkit: the Python extension links ${_pmkit_library} (${_pmkit_asked}; "
  "CUDA backend ${PMKIT_CUDA} as built there)")
